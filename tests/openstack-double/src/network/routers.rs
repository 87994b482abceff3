//! The router's extra routes: replaced whole (`extraroute`, with `revision-if-match`)
//! or added and removed (`extraroute-atomic`).

use axum::body::Bytes;
use axum::extract::{Path, State as Extract};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{bad_request, error, has_extension};
use crate::{Shared, reply};

fn router_json(r: &crate::state::Router) -> Value {
    json!({"id": r.id, "name": r.name, "status": "ACTIVE", "admin_state_up": true,
           "tenant_id": "project", "project_id": "project", "revision_number": r.revision_number,
           "routes": r.routes.iter().map(|(d, n)| json!({"destination": d, "nexthop": n})).collect::<Vec<_>>()})
}

pub(super) async fn show_router(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.routers.get(&id) {
        Some(r) => reply(StatusCode::OK, json!({"router": router_json(r)})),
        None => error(
            StatusCode::NOT_FOUND,
            "RouterNotFound",
            &format!("Router {id} could not be found"),
        ),
    })
}

/// Neutron without `extraroute-atomic`: the action is not routed.
fn no_such_action() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "HTTPNotFound",
        "The resource could not be found.",
    )
}

/// `PUT /routers/{id}` with `{"router": {"routes": [...]}}`: the whole list replaced
/// (the `extraroute` extension), refused with 412 when `If-Match:
/// revision_number=N` names another revision (`revision-if-match`).
pub(super) async fn update_router(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    bytes: Bytes,
) -> Response {
    let new = match routes(&bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let expected = headers
        .get("if-match")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("revision_number="))
        .map(|n| n.parse::<u64>().unwrap_or(u64::MAX));
    shared.with(|s| {
        let revision_if_match = has_extension(s, "revision-if-match");
        match s.routers.get_mut(&id) {
            None => error(
                StatusCode::NOT_FOUND,
                "RouterNotFound",
                &format!("Router {id} could not be found"),
            ),
            Some(r) if revision_if_match && expected.is_some_and(|n| n != r.revision_number) => {
                error(
                    StatusCode::PRECONDITION_FAILED,
                    "RevisionNumberConstraintFailed",
                    &format!(
                        "Constrained to {}, but current revision is {}",
                        expected.unwrap_or_default(),
                        r.revision_number
                    ),
                )
            }
            Some(r) => {
                r.routes = new;
                r.revision_number += 1;
                reply(StatusCode::OK, json!({"router": router_json(r)}))
            }
        }
    })
}

/// The `routes` of `{"router": {"routes": [...]}}`.
fn routes(bytes: &[u8]) -> Result<Vec<(String, String)>, Response> {
    let body = crate::body(bytes, bad_request)?;
    let Some(list) = body["router"]["routes"].as_array() else {
        return Err(bad_request(
            StatusCode::BAD_REQUEST,
            "Bad router request: routes is required",
        ));
    };
    list.iter()
        .map(
            |r| match (r["destination"].as_str(), r["nexthop"].as_str()) {
                (Some(d), Some(n)) => Ok((d.to_owned(), n.to_owned())),
                _ => Err(bad_request(
                    StatusCode::BAD_REQUEST,
                    "Invalid input for routes: destination and nexthop are required",
                )),
            },
        )
        .collect()
}

pub(super) async fn add_extraroutes(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let add = match routes(&bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| match s.routers.get_mut(&id) {
        _ if !s
            .network_extensions
            .iter()
            .any(|e| e == "extraroute-atomic") =>
        {
            no_such_action()
        }
        Some(r) => {
            for route in add {
                if !r.routes.contains(&route) {
                    r.routes.push(route);
                }
            }
            r.revision_number += 1;
            reply(StatusCode::OK, json!({"router": router_json(r)}))
        }
        None => error(
            StatusCode::NOT_FOUND,
            "RouterNotFound",
            &format!("Router {id} could not be found"),
        ),
    })
}

pub(super) async fn remove_extraroutes(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let remove = match routes(&bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| match s.routers.get_mut(&id) {
        _ if !s
            .network_extensions
            .iter()
            .any(|e| e == "extraroute-atomic") =>
        {
            no_such_action()
        }
        Some(r) => {
            r.routes.retain(|route| !remove.contains(route));
            r.revision_number += 1;
            reply(StatusCode::OK, json!({"router": router_json(r)}))
        }
        None => error(
            StatusCode::NOT_FOUND,
            "RouterNotFound",
            &format!("Router {id} could not be found"),
        ),
    })
}
