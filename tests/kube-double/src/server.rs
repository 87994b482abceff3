//! The HTTP front of the double: discovery, CRUD, patch and watch under the real
//! API paths, with Status error bodies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::wrappers::ReceiverStream;

use crate::convert;
use crate::errors::ApiError;
use crate::openapi;
use crate::resources::{self, RESOURCES, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType, PatchType, Store, Target};
use crate::table;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Require `Authorization: Bearer <token>` when set.
    pub token: Option<String>,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
}

pub(crate) struct AppState {
    pub store: Arc<Store>,
    pub settings: ServerSettings,
    pub address: String,
    /// Bumped to end every open watch (clients must reconnect).
    pub disconnect: tokio::sync::watch::Sender<u64>,
    /// Every (group, resource, verb, namespace) requested, for RBAC checks.
    pub accesses: std::sync::Mutex<std::collections::BTreeMap<crate::Access, u64>>,
    /// Injected errors ([`crate::ApiServer::inject_conflicts`],
    /// [`crate::ApiServer::inject_not_found`]).
    pub faults: std::sync::Mutex<Vec<crate::InjectedFault>>,
    /// Users and grants for `TokenReview` and `SubjectAccessReview`.
    pub reviews: std::sync::Mutex<crate::reviews::Reviews>,
}

type Shared = Arc<AppState>;

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(status, &self.status())
    }
}

/// The single entry point: authentication, then routing by path.
pub(crate) async fn handle(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/').to_owned();
    if matches!(path.as_str(), "/healthz" | "/readyz" | "/livez") {
        return "ok".into_response();
    }
    if let Some(token) = &state.settings.token {
        let expected = format!("Bearer {token}");
        if headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            != Some(expected.as_str())
        {
            return ApiError::unauthorized().into_response();
        }
    }
    match route(&state, &method, &path, &query, &headers, &body).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

/// What a path names.
struct Target2<'a> {
    resource: &'static Resource,
    namespace: String,
    name: Option<String>,
    subresource: Option<&'a str>,
}

async fn route(
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

/// A patch without strategic-merge directives, for field validation.
fn patch_fields_only(patch: &Value) -> Value {
    match patch {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if k == "metadata" || k == "spec" {
                            patch_fields_only(v)
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        if let Ok(value) = axum::http::HeaderValue::from_str(&format!("299 - \"{warning}\"")) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

fn apply_patch(
    view: &mut Value,
    patch_type: PatchType,
    patch: &Value,
    resource: &Resource,
    name: &str,
) -> Result<(), ApiError> {
    use crate::patch::{self, PatchError};
    let map = |e: PatchError| match e {
        PatchError::Malformed(m) => ApiError::bad_request(m),
        PatchError::Failed(m) => ApiError::invalid(resource.kind, name, m),
    };
    match patch_type {
        PatchType::Merge => patch::merge_patch(view, patch),
        PatchType::Json => patch::json_patch(view, patch).map_err(map)?,
        PatchType::Strategic => patch::strategic_merge_patch(view, patch, resource).map_err(map)?,
    }
    Ok(())
}

fn check_namespace(store: &Store, ns: &str) -> Result<(), ApiError> {
    let namespaces = resources::find("", "v1", "namespaces").expect("namespaces");
    store.get(namespaces, "", ns).map(drop)
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn is_true(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true" | "1"))
}

fn selectors(
    resource: &Resource,
    query: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let mut field_text = query.get("fieldSelector").cloned().unwrap_or_default();
    let fields = FieldSelector::parse(&field_text, resource).map_err(ApiError::bad_request)?;
    if resource.group == "events.k8s.io" {
        // Selectors are evaluated on the stored core/v1 form.
        field_text = field_text
            .replace("regarding.", "involvedObject.")
            .replace("reportingController", "reportingComponent");
        let core = resources::find("", "v1", "events").expect("core events");
        return Ok((
            labels,
            FieldSelector::parse(&field_text, core).map_err(ApiError::bad_request)?,
        ));
    }
    Ok((labels, fields))
}

fn list(
    store: &Store,
    resource: &Resource,
    storage: &Resource,
    ns: &str,
    (labels, fields): &(LabelSelector, FieldSelector),
    query: &HashMap<String, String>,
    as_table: bool,
) -> Result<Response, ApiError> {
    if resource.namespaced && !ns.is_empty() {
        check_namespace(store, ns)?;
    }
    let (mut items, rv) = store.list(storage, ns, labels, fields);
    if resource.group == "events.k8s.io" {
        items = items.iter().map(convert::core_to_events_v1).collect();
    }
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    let offset: usize = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (token_rv, offset) = token
                .split_once(':')
                .and_then(|(rv, o)| Some((rv.parse::<u64>().ok()?, o.parse().ok()?)))
                .ok_or_else(|| {
                    ApiError::bad_request(format!("invalid continue token {token:?}"))
                })?;
            // As after an etcd compaction: the list the token continues is gone.
            if token_rv < store.oldest_watchable() {
                return Err(ApiError::gone(format!(
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter, or use the continue token \
                     in this response to retrieve the remainder of the results. (token resource version {token_rv})"
                )));
            }
            offset
        }
        None => 0,
    };
    let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let total = items.len();
    let mut items: Vec<Value> = items.into_iter().skip(offset).collect();
    if limit > 0 && items.len() > limit {
        items.truncate(limit);
        metadata["continue"] = json!(format!("{rv}:{}", offset + limit));
        metadata["remainingItemCount"] = json!(total - offset - limit);
    }
    if as_table {
        return Ok(json_response(
            StatusCode::OK,
            &table::render(resource, &items, metadata),
        ));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", resource.kind),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    ))
}

fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn bookmark(resource: &Resource, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    watch_line(
        "BOOKMARK",
        &json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata}),
    )
}

fn watch(
    state: Shared,
    resource: &'static Resource,
    storage: &'static Resource,
    ns: String,
    (labels, fields): (LabelSelector, FieldSelector),
    query: &HashMap<String, String>,
    as_table: bool,
) -> Result<Response, ApiError> {
    let store = state.store.clone();
    let bookmarks = is_true(query.get("allowWatchBookmarks"));
    let send_initial = is_true(query.get("sendInitialEvents"));
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let requested_rv = query.get("resourceVersion").cloned().unwrap_or_default();
    let events_api = resource.group == "events.k8s.io";
    let present = move |obj: &Value| {
        let obj = if events_api {
            convert::core_to_events_v1(obj)
        } else {
            obj.clone()
        };
        // Watched as a Table (kubectl get -w): each event carries a one-row Table.
        if as_table {
            let rv = obj["metadata"]["resourceVersion"].clone();
            table::render(resource, &[obj], json!({"resourceVersion": rv}))
        } else {
            obj
        }
    };
    let matches = {
        let ns = ns.clone();
        move |obj: &Value, namespace: &str| {
            (ns.is_empty() || ns == namespace) && labels.matches(obj) && fields.matches(obj)
        }
    };
    // The starting point: "" / "0" means "from now, with the current state first".
    let (initial, from_rv) = if requested_rv.is_empty() || requested_rv == "0" || send_initial {
        let (items, rv) = store.list(
            storage,
            &ns,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        (Some(items), rv)
    } else {
        let rv: u64 = requested_rv.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid resourceVersion {requested_rv:?}"))
        })?;
        (None, rv)
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let subscription = store.watch_from(from_rv);
    let bookmark_interval = state.settings.bookmark_interval;
    let mut disconnect = state.disconnect.subscribe();
    tokio::spawn(async move {
        let (backlog, mut live) = match subscription {
            Ok(s) => s,
            Err(gone) => {
                // Like the real server: 200, then an ERROR event with the 410 Status.
                let _ = tx.send(Ok(watch_line("ERROR", &gone.status()))).await;
                return;
            }
        };
        if let Some(items) = initial {
            for item in items {
                let namespace = item
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if matches(&item, &namespace)
                    && tx
                        .send(Ok(watch_line("ADDED", &present(&item))))
                        .await
                        .is_err()
                {
                    return;
                }
            }
            if send_initial
                && tx
                    .send(Ok(bookmark(resource, from_rv, true)))
                    .await
                    .is_err()
            {
                return;
            }
        }
        let mut last_rv = from_rv;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        let deliver = |change: &Change, last_rv: &mut u64| -> Option<Bytes> {
            if change.storage != storage.storage || change.rv <= *last_rv {
                return None;
            }
            *last_rv = change.rv;
            let now = matches(&change.object, &change.namespace);
            let before = change
                .old
                .as_ref()
                .is_some_and(|o| matches(o, &change.namespace));
            let kind = match (change.kind, now, before) {
                (EventType::Added, true, _) => "ADDED",
                (EventType::Modified, true, true) => "MODIFIED",
                (EventType::Modified, true, false) => "ADDED",
                (EventType::Modified, false, true) => "DELETED",
                (EventType::Deleted, true, _) => "DELETED",
                _ => return None,
            };
            Some(watch_line(kind, &present(&change.object)))
        };
        for change in backlog {
            if let Some(line) = deliver(&change, &mut last_rv)
                && tx.send(Ok(line)).await.is_err()
            {
                return;
            }
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tx.closed() => return,
                _ = disconnect.changed() => return,
                _ = ticker.tick(), if bookmarks => {
                    let rv = store.resource_version().max(last_rv);
                    if tx.send(Ok(bookmark(resource, rv, false))).await.is_err() {
                        return;
                    }
                }
                received = live.recv() => match received {
                    Ok(change) => {
                        if let Some(line) = deliver(&change, &mut last_rv)
                            && tx.send(Ok(line)).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let gone = ApiError::gone(format!("too old resource version: {last_rv}: the watch fell behind"));
                        let _ = tx.send(Ok(watch_line("ERROR", &gone.status()))).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                },
            }
        }
    });
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .expect("watch response"))
}

fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0+wasm-ccm-api-double",
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "none", "compiler": "none", "platform": "linux/amd64"
    })
}

fn api_versions(address: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]
    })
}

fn api_groups() -> Value {
    let groups: Vec<Value> = resources::groups()
        .into_iter()
        .map(|(group, version)| {
            let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
            json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        resources.push(json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": r.short_names,
        }));
        if r.has_status {
            resources.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// A `TokenReview` or `SubjectAccessReview` create (`resource`), answered from the
/// double's users and grants, counted like any request.
fn answer_review(state: &Shared, resource: &str, headers: &HeaderMap, body: &Bytes) -> Response {
    let group = if resource == "tokenreviews" {
        "authentication.k8s.io"
    } else {
        "authorization.k8s.io"
    };
    let access = crate::Access {
        group: group.into(),
        resource: resource.into(),
        verb: "create".into(),
        namespace: String::new(),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    };
    *state
        .accesses
        .lock()
        .expect("access log lock")
        .entry(access)
        .or_insert(0) += 1;
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return ApiError::bad_request("the review is not JSON").into_response();
    };
    let reviews = state.reviews.lock().expect("reviews lock");
    let answer = if resource == "tokenreviews" {
        reviews.token_review(&review)
    } else {
        reviews.subject_access_review(&review)
    };
    json_response(StatusCode::CREATED, &answer)
}
