//! Routing a request: what its path names (resource, namespace, name, subresource),
//! the verb, access counting and injected faults, then the answer of each method.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::auth_reviews::answer_review;
use super::discovery::{api_groups, api_versions, resource_list, version};
use super::list::{list, selectors};
use super::watch::watch;
use super::writes::{apply_patch, parse_body, patch_fields_only, with_warnings};
use super::{Shared, check_namespace, is_true, json_response};
use crate::convert;
use crate::errors::ApiError;
use crate::openapi;
use crate::resources::{self, RESOURCES, Resource};
use crate::store::{PatchType, Target};
use crate::table;

/// What a path names.
struct Target2<'a> {
    resource: &'static Resource,
    namespace: String,
    name: Option<String>,
    subresource: Option<&'a str>,
}

pub(super) async fn route(
    state: &Shared,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if *method == Method::POST {
        let review = match segments.as_slice() {
            ["apis", "authentication.k8s.io", "v1", "tokenreviews"] => Some("tokenreviews"),
            ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
                Some("subjectaccessreviews")
            }
            _ => None,
        };
        if let Some(resource) = review {
            return Ok(answer_review(state, resource, headers, body));
        }
    }
    match segments.as_slice() {
        ["version"] => return Ok(json_response(StatusCode::OK, &version())),
        ["openapi", "v3"] => return Ok(json_response(StatusCode::OK, &openapi::root())),
        ["openapi", "v3", "api", version] => {
            return openapi::group_version("", version)
                .map(|doc| json_response(StatusCode::OK, &doc))
                .ok_or_else(|| ApiError::not_found("", path));
        }
        ["openapi", "v3", "apis", group, version] => {
            return openapi::group_version(group, version)
                .map(|doc| json_response(StatusCode::OK, &doc))
                .ok_or_else(|| ApiError::not_found("", path));
        }
        ["api"] => return Ok(json_response(StatusCode::OK, &api_versions(&state.address))),
        ["apis"] => return Ok(json_response(StatusCode::OK, &api_groups())),
        ["api", "v1"] => return Ok(json_response(StatusCode::OK, &resource_list("", "v1"))),
        ["apis", group, version]
            if RESOURCES
                .iter()
                .any(|r| r.group == *group && r.version == *version) =>
        {
            return Ok(json_response(
                StatusCode::OK,
                &resource_list(group, version),
            ));
        }
        _ => {}
    }
    let (group, version, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::not_found("", path)),
    };
    let unknown = || ApiError::not_found("", path);
    let target = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if resources::find(group, version, plural).is_some_and(|r| r.namespaced) =>
        {
            let resource = resources::find(group, version, plural).ok_or_else(unknown)?;
            match tail {
                [] => Target2 {
                    resource,
                    namespace: ns.to_string(),
                    name: None,
                    subresource: None,
                },
                [name] => Target2 {
                    resource,
                    namespace: ns.to_string(),
                    name: Some(name.to_string()),
                    subresource: None,
                },
                [name, sub] => Target2 {
                    resource,
                    namespace: ns.to_string(),
                    name: Some(name.to_string()),
                    subresource: Some(sub),
                },
                _ => return Err(unknown()),
            }
        }
        [plural, tail @ ..] => {
            let resource = resources::find(group, version, plural).ok_or_else(unknown)?;
            match tail {
                [] => Target2 {
                    resource,
                    namespace: String::new(),
                    name: None,
                    subresource: None,
                },
                [name] if !resource.namespaced => Target2 {
                    resource,
                    namespace: String::new(),
                    name: Some(name.to_string()),
                    subresource: None,
                },
                [name, sub] if !resource.namespaced => Target2 {
                    resource,
                    namespace: String::new(),
                    name: Some(name.to_string()),
                    subresource: Some(sub),
                },
                _ => return Err(unknown()),
            }
        }
        _ => return Err(unknown()),
    };
    let sub = match target.subresource {
        None => Target::Main,
        Some("status") if target.resource.has_status => Target::Status,
        Some(_) => return Err(unknown()),
    };
    let verb = match (method, &target.name) {
        (&Method::GET, None) if is_true(query.get("watch")) => "watch",
        (&Method::GET, None) => "list",
        (&Method::GET, Some(_)) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        (&Method::DELETE, None) => "deletecollection",
        _ => "unknown",
    };
    let access = crate::Access {
        group: target.resource.group.to_owned(),
        resource: match target.subresource {
            Some(sub) => format!("{}/{sub}", target.resource.plural),
            None => target.resource.plural.to_owned(),
        },
        verb: verb.to_owned(),
        namespace: target.namespace.clone(),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    };
    let injected = {
        let mut faults = state.faults.lock().expect("fault lock");
        let hit = faults
            .iter_mut()
            .find(|f| f.count > 0 && f.resource == access.resource && f.verb == access.verb);
        hit.map(|f| {
            f.count -= 1;
            f.served += 1;
            f.error
        })
    };
    state
        .accesses
        .lock()
        .expect("access log lock")
        .entry(access)
        .and_modify(|n| *n += 1)
        .or_insert(1);
    if let Some(error) = injected {
        let name = target.name.as_deref().unwrap_or_default();
        return Err(match error {
            crate::InjectedError::Conflict => ApiError::conflict(target.resource.plural, name),
            crate::InjectedError::NotFound => ApiError::not_found(target.resource.plural, name),
        });
    }
    if query.get("dryRun").is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by this API server double",
        ));
    }
    let events_api = target.resource.group == "events.k8s.io";
    let storage_resource: &'static Resource = if events_api {
        resources::find("", "v1", "events").expect("core events")
    } else {
        target.resource
    };
    let present = |obj: Value| {
        if events_api {
            convert::core_to_events_v1(&obj)
        } else {
            obj
        }
    };
    let ns = target.namespace.clone();
    let store = &state.store;
    // kubectl get asks for a Table; served for the resources the double renders.
    let as_table = table::supported(target.resource)
        && table::wanted(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let field_validation = query.get("fieldValidation").map(String::as_str);
    match (method.clone(), target.name.clone()) {
        (Method::GET, None) => {
            let selection = selectors(target.resource, query)?;
            if is_true(query.get("watch")) {
                return watch(
                    state.clone(),
                    target.resource,
                    storage_resource,
                    ns,
                    selection,
                    query,
                    as_table,
                );
            }
            list(
                store,
                target.resource,
                storage_resource,
                &ns,
                &selection,
                query,
                as_table,
            )
        }
        (Method::GET, Some(name)) => {
            if target.resource.namespaced {
                check_namespace(store, &ns)?;
            }
            let object = present(store.get(storage_resource, &ns, &name)?);
            if as_table {
                let rv = object["metadata"]["resourceVersion"].clone();
                return Ok(json_response(
                    StatusCode::OK,
                    &table::render(target.resource, &[object], json!({"resourceVersion": rv})),
                ));
            }
            Ok(json_response(StatusCode::OK, &object))
        }
        (Method::POST, None) => {
            let obj = parse_body(body)?;
            let warnings = openapi::validate_fields(target.resource, &obj, field_validation)?;
            let obj = if events_api {
                convert::events_v1_to_core(&obj)
            } else {
                obj
            };
            let created = store.create(storage_resource, &ns, obj)?;
            Ok(with_warnings(
                json_response(StatusCode::CREATED, &present(created)),
                &warnings,
            ))
        }
        (Method::PUT, Some(name)) => {
            let obj = parse_body(body)?;
            let warnings = openapi::validate_fields(target.resource, &obj, field_validation)?;
            let obj = if events_api {
                convert::events_v1_to_core(&obj)
            } else {
                obj
            };
            let updated = store.update(storage_resource, &ns, &name, sub, obj)?;
            Ok(with_warnings(
                json_response(StatusCode::OK, &present(updated)),
                &warnings,
            ))
        }
        (Method::PATCH, Some(name)) => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            let patch_type = match content_type.as_str() {
                "application/merge-patch+json" => PatchType::Merge,
                "application/json-patch+json" => PatchType::Json,
                "application/strategic-merge-patch+json" => PatchType::Strategic,
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let patch = parse_body(body)?;
            if patch_type != PatchType::Json {
                openapi::validate_fields(
                    target.resource,
                    &patch_fields_only(&patch),
                    field_validation,
                )?;
            }
            let patched = if events_api {
                // Patch the events.k8s.io representation, store it as core/v1.
                store.write(storage_resource, &ns, &name, sub, None, |current| {
                    let mut view = convert::core_to_events_v1(current);
                    apply_patch(&mut view, patch_type, &patch, target.resource, &name)?;
                    Ok(convert::events_v1_to_core(&view))
                })?
            } else {
                store.patch(storage_resource, &ns, &name, sub, patch_type, &patch)?
            };
            Ok(json_response(StatusCode::OK, &present(patched)))
        }
        (Method::DELETE, Some(name)) => {
            let options = if body.is_empty() {
                json!({})
            } else {
                parse_body(body)?
            };
            let uid = options
                .pointer("/preconditions/uid")
                .and_then(Value::as_str);
            let rv = options
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str);
            let (obj, gone) = store.delete(storage_resource, &ns, &name, uid, rv)?;
            if gone {
                Ok(json_response(
                    StatusCode::OK,
                    &json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                        "details": {"name": name, "kind": target.resource.plural, "uid": obj["metadata"]["uid"]}
                    }),
                ))
            } else {
                Ok(json_response(StatusCode::OK, &present(obj)))
            }
        }
        (Method::DELETE, None) => Err(ApiError::method_not_allowed(
            "deletecollection is not supported by this API server double",
        )),
        _ => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {path}"
        ))),
    }
}
