//! Nova (compute API v2.1): servers, listed in detail with Nova's filters and
//! pagination, and read one by one. Microversions: `OpenStack-API-Version: compute X`
//! (or `X-OpenStack-Nova-API-Version`) up to 2.96 is answered with the version in
//! the response; from 2.47 a server's `flavor` is embedded (`original_name`, ...),
//! before it is `{"id": ...}`.

use std::collections::HashMap;

use axum::Router;
use axum::extract::{Path, Query, State as Extract};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::Shared;
use crate::state::{Server, State};

/// The highest microversion served.
pub const MAX_MICROVERSION: (u32, u32) = (2, 96);
/// Nova's `osapi_max_limit`: the most servers in one page.
pub const MAX_LIMIT: usize = 1000;

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/servers/detail", get(list_detail))
        .route("/servers/{id}", get(show))
        .route("/flavors", get(flavors))
        .route("/flavors/{id}", get(show_flavor))
}

fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status {
        StatusCode::NOT_FOUND => "itemNotFound",
        StatusCode::NOT_ACCEPTABLE => "notAcceptable",
        _ => "badRequest",
    };
    (
        status,
        axum::Json(json!({ kind: {"code": status.as_u16(), "message": message} })),
    )
        .into_response()
}

/// The request's microversion (2.1 when none is asked for), or a 406.
fn microversion(headers: &HeaderMap) -> Result<(u32, u32), Response> {
    let asked = headers
        .get("openstack-api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("compute "))
        .or_else(|| {
            headers
                .get("x-openstack-nova-api-version")
                .and_then(|v| v.to_str().ok())
        })
        .map(str::trim);
    let Some(asked) = asked else {
        return Ok((2, 1));
    };
    if asked == "latest" {
        return Ok(MAX_MICROVERSION);
    }
    let parsed = asked
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
    match parsed {
        Some(v) if v >= (2, 1) && v <= MAX_MICROVERSION => Ok(v),
        _ => Err(error(
            StatusCode::NOT_ACCEPTABLE,
            &format!(
                "Version {asked} is not supported by the API. Minimum is 2.1 and maximum is 2.96."
            ),
        )),
    }
}

fn versioned(version: (u32, u32), status: StatusCode, body: Value) -> Response {
    let text = format!("compute {}.{}", version.0, version.1);
    (
        status,
        [
            ("openstack-api-version", text.clone()),
            ("x-openstack-nova-api-version", text[8..].to_owned()),
            (
                "vary",
                "OpenStack-API-Version, X-OpenStack-Nova-API-Version".to_owned(),
            ),
        ],
        axum::Json(body),
    )
        .into_response()
}

fn server_json(state: &State, server: &Server, version: (u32, u32)) -> Value {
    let addresses: serde_json::Map<String, Value> = state
        .server_addresses(&server.id)
        .into_iter()
        .map(|(network, list)| {
            let list = list
                .into_iter()
                .map(|(addr, kind, mac)| {
                    json!({"addr": addr, "version": if addr.contains(':') { 6 } else { 4 },
                           "OS-EXT-IPS:type": kind, "OS-EXT-IPS-MAC:mac_addr": mac})
                })
                .collect();
            (network, Value::Array(list))
        })
        .collect();
    let flavor = if version >= (2, 47) {
        json!({"original_name": server.flavor, "vcpus": 2, "ram": 2048, "disk": 20,
               "ephemeral": 0, "swap": 0, "extra_specs": {}})
    } else {
        let id = state
            .flavors
            .iter()
            .find(|(_, name)| **name == server.flavor)
            .map(|(id, _)| id.clone())
            .unwrap_or_default();
        json!({"id": id, "links": []})
    };
    json!({
        "id": server.id,
        "name": server.name,
        "status": server.status,
        "addresses": addresses,
        "flavor": flavor,
        "OS-EXT-AZ:availability_zone": server.zone,
        "OS-EXT-STS:vm_state": match server.status.as_str() {
            "SHUTOFF" => "stopped", "ERROR" => "error", _ => "active" },
        "metadata": server.metadata,
        "tenant_id": "project",
        "links": [],
    })
}

/// `GET /servers/detail`: `name` is a regular expression searched in the name, as
/// Nova's; `status` filters; `limit` (at most [`MAX_LIMIT`]) and `marker` page, with
/// a `servers_links` `next` link while more remain.
async fn list_detail(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let name = match query.get("name").map(|n| regex::Regex::new(n)) {
        None => None,
        Some(Ok(re)) => Some(re),
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Invalid regular expression in name",
            );
        }
    };
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => MAX_LIMIT,
        Some(Ok(l)) => l.min(MAX_LIMIT),
        Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "limit must be an integer"),
    };
    shared.with(|state| {
        let matching: Vec<&Server> = state
            .servers
            .values()
            .filter(|s| name.as_ref().is_none_or(|re| re.is_match(&s.name)))
            .filter(|s| {
                query
                    .get("status")
                    .is_none_or(|st| s.status.eq_ignore_ascii_case(st))
            })
            .collect();
        let start = match query.get("marker") {
            None => 0,
            Some(marker) => match matching.iter().position(|s| &s.id == marker) {
                Some(i) => i + 1,
                None => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &format!("marker [{marker}] not found"),
                    );
                }
            },
        };
        let page: Vec<&Server> = matching.iter().skip(start).take(limit).copied().collect();
        let mut body = json!({
            "servers": page.iter().map(|s| server_json(state, s, version)).collect::<Vec<_>>(),
        });
        if start + page.len() < matching.len()
            && let Some(last) = page.last()
        {
            let host = headers
                .get("host")
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1");
            let mut next = format!(
                "http://{host}/compute/v2.1/servers/detail?limit={limit}&marker={}",
                last.id
            );
            if let Some(name) = query.get("name") {
                next.push_str(&format!("&name={name}"));
            }
            body["servers_links"] = json!([{"rel": "next", "href": next}]);
        }
        versioned(version, StatusCode::OK, body)
    })
}

/// `GET /flavors`: every flavor's `id` and `name` (one page: clouds have few).
async fn flavors(Extract(shared): Extract<Shared>, headers: HeaderMap) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    shared.with(|state| {
        let list: Vec<Value> = state
            .flavors
            .iter()
            .map(|(id, name)| json!({"id": id, "name": name, "links": []}))
            .collect();
        versioned(version, StatusCode::OK, json!({"flavors": list}))
    })
}

/// `GET /flavors/{id}`: the flavor's `id` and `name` (how a client before microversion
/// 2.47 names a server's flavor).
async fn show_flavor(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    shared.with(|state| match state.flavors.get(&id) {
        Some(name) => versioned(
            version,
            StatusCode::OK,
            json!({"flavor": {"id": id, "name": name, "vcpus": 2, "ram": 2048, "disk": 20,
                              "links": []}}),
        ),
        None => error(
            StatusCode::NOT_FOUND,
            &format!("Flavor {id} could not be found."),
        ),
    })
}

/// `GET /servers/{id}`.
async fn show(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    shared.with(|state| match state.servers.get(&id) {
        Some(server) => versioned(
            version,
            StatusCode::OK,
            json!({"server": server_json(state, server, version)}),
        ),
        None => error(
            StatusCode::NOT_FOUND,
            &format!("Instance {id} could not be found."),
        ),
    })
}
