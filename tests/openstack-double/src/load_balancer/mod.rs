//! Octavia (load-balancer API v2): load balancers, listeners, pools, members and health
//! monitors. Creating a load balancer gives it a VIP port; every change puts it in
//! `PENDING_CREATE`/`PENDING_UPDATE`/`PENDING_DELETE` for the state's
//! `provisioning_time`, during which it and its children are immutable (409, as
//! Octavia answers). Deleting a load balancer with children needs `cascade=true`.

use std::collections::HashMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

mod listeners;
mod monitors;
mod pools;
mod populated;

use crate::state::{LoadBalancer, State};
use crate::{Shared, reply};
use listeners::*;
use monitors::*;
use pools::*;

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/lbaas/loadbalancers", get(list_lbs).post(create_lb))
        .route(
            "/lbaas/loadbalancers/{id}",
            get(show_lb).put(update_lb).delete(delete_lb),
        )
        .route(
            "/lbaas/listeners",
            get(list_listeners).post(create_listener),
        )
        .route(
            "/lbaas/listeners/{id}",
            get(show_listener)
                .put(update_listener)
                .delete(delete_listener),
        )
        .route("/lbaas/pools", get(list_pools).post(create_pool))
        .route(
            "/lbaas/pools/{id}",
            get(show_pool).put(update_pool).delete(delete_pool),
        )
        .route(
            "/lbaas/pools/{id}/members",
            get(list_members).post(create_member).put(replace_members),
        )
        .route(
            "/lbaas/pools/{pool}/members/{id}",
            get(show_member).delete(delete_member),
        )
        .route(
            "/lbaas/healthmonitors",
            get(list_monitors).post(create_monitor),
        )
        .route(
            "/lbaas/healthmonitors/{id}",
            get(show_monitor).put(update_monitor).delete(delete_monitor),
        )
}

/// Octavia's error body.
pub fn error(status: StatusCode, message: &str) -> Response {
    let fault = if status.is_server_error() {
        "Server"
    } else {
        "Client"
    };
    (
        status,
        axum::Json(json!({"faultcode": fault, "faultstring": message, "debuginfo": null})),
    )
        .into_response()
}

pub(super) fn not_found(kind: &str, id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("{kind} {id} could not be found."),
    )
}

pub(super) fn parse(bytes: &[u8], key: &str) -> Result<Value, Response> {
    let body = crate::body(bytes, error)?;
    match body.get(key) {
        Some(v) if v.is_object() => Ok(v.clone()),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid input: missing {key}"),
        )),
    }
}

/// A change under load balancer `lb` (the parent of `kind` `id`): 404 without it, 409
/// while it is busy; otherwise `change` runs, and a successful change makes the load
/// balancer `PENDING_UPDATE`.
pub(super) fn change_child(
    s: &mut State,
    lb: Option<String>,
    kind: &str,
    id: &str,
    change: impl FnOnce(&mut State) -> Response,
) -> Response {
    let Some(lb) = lb else {
        return not_found(kind, id);
    };
    if let Err(e) = mutable(s, &lb) {
        return e;
    }
    let answer = change(s);
    if answer.status().is_success() {
        s.start_operation(&lb, "UPDATE");
    }
    answer
}

/// Octavia's 501 for an option the load balancer's provider lacks.
pub(super) fn not_supported(option: &str) -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        &format!(
            "Provider 'ovn' does not support a requested option: OVN provider does not support {option}"
        ),
    )
}

/// Octavia's 501 when load balancer `lb`'s provider is one of
/// [`State::serial_providers`], which implement no batch calls (occm's
/// `provider-requires-serial-api-calls` is for them).
pub(super) fn serial_refuses(s: &State, lb: &str) -> Option<Response> {
    let provider = &s.load_balancers.get(lb)?.provider;
    s.serial_providers
        .contains(provider)
        .then(|| not_implemented(provider))
}

/// Octavia's 501 for an action `provider`'s driver does not implement.
fn not_implemented(provider: &str) -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        &format!(
            "Provider '{provider}' does not support a requested action: This feature is not \
             implemented by the provider."
        ),
    )
}

/// What the OVN provider refuses in `request` (a listener's, a monitor's or a load
/// balancer's), as Octavia's OVN driver answers: 501.
pub(super) fn ovn_refuses(s: &State, lb: &str, request: &Value) -> Option<Response> {
    if s.load_balancers
        .get(lb)
        .is_none_or(|lb| lb.provider != "ovn")
    {
        return None;
    }
    let set = |k: &str| !request[k].is_null();
    if request["allowed_cidrs"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        return Some(not_supported("allowed_cidrs"));
    }
    for key in [
        "timeout_client_data",
        "timeout_member_connect",
        "timeout_member_data",
        "timeout_tcp_inspect",
    ] {
        if set(key) {
            return Some(not_supported(key));
        }
    }
    if matches!(request["type"].as_str(), Some("HTTP" | "HTTPS")) {
        return Some(not_supported("HTTP health monitors"));
    }
    None
}

/// Fields of `request` newer than the double's Octavia version
/// ([`State::octavia_version`]), refused as Octavia refuses an unknown attribute: 400.
/// `udp_pool`: the request is a health monitor of a UDP pool.
pub(super) fn too_new(s: &State, request: &Value, udp_pool: bool) -> Option<Response> {
    let fields: [(&str, u32); 8] = [
        ("timeout_client_data", 1),
        ("timeout_member_connect", 1),
        ("timeout_member_data", 1),
        ("timeout_tcp_inspect", 1),
        ("tags", 5),
        ("flavor_id", 6),
        ("allowed_cidrs", 12),
        ("availability_zone", 14),
    ];
    let (major, minor) = s.octavia_version;
    let newer = |needs: u32| major == 2 && minor < needs;
    for (field, needs) in fields {
        if !request[field].is_null() && newer(needs) {
            return Some(error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "Invalid input for field/attribute {field}. Value: '{}'. unknown attribute",
                    request[field]
                ),
            ));
        }
    }
    if udp_pool && matches!(request["type"].as_str(), Some("HTTP" | "HTTPS")) && newer(16) {
        return Some(error(
            StatusCode::BAD_REQUEST,
            "Validation failure: The associated pool protocol \"UDP\" is not compatible with this health monitor type.",
        ));
    }
    None
}

/// The load balancer `id` when it is `ACTIVE` (409 while an operation runs).
pub(super) fn mutable(s: &State, id: &str) -> Result<(), Response> {
    match s.load_balancers.get(id) {
        None => Err(not_found("Load Balancer", id)),
        Some(lb) if lb.provisioning_status != "ACTIVE" => Err(error(
            StatusCode::CONFLICT,
            &format!("Load Balancer {id} is immutable and cannot be updated."),
        )),
        Some(_) => Ok(()),
    }
}

pub(super) fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_owned()
}

pub(super) fn tags(v: &Value) -> Vec<String> {
    v["tags"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Keeps the objects whose fields equal the query's (`tags`: all of the listed tags).
pub(super) fn filtered(items: Vec<Value>, query: &HashMap<String, String>) -> Vec<Value> {
    items
        .into_iter()
        .filter(|item| {
            query.iter().all(|(key, wanted)| match key.as_str() {
                "fields" | "limit" | "marker" | "page_reverse" => true,
                "tags" => wanted.split(',').all(|t| {
                    item["tags"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x == t))
                }),
                _ => match &item[key] {
                    Value::String(s) => s == wanted,
                    Value::Number(n) => n.to_string() == *wanted,
                    Value::Bool(b) => b.to_string() == *wanted,
                    _ => false,
                },
            })
        })
        .collect()
}

fn lb_json(s: &State, lb: &LoadBalancer) -> Value {
    let listeners: Vec<Value> = s
        .listeners
        .values()
        .filter(|l| l.loadbalancer_id == lb.id)
        .map(|l| json!({"id": l.id}))
        .collect();
    let pools: Vec<Value> = s
        .pools
        .values()
        .filter(|p| p.loadbalancer_id == lb.id)
        .map(|p| json!({"id": p.id}))
        .collect();
    json!({
        "id": lb.id, "name": lb.name, "description": lb.description,
        "vip_address": lb.vip_address, "vip_port_id": lb.vip_port_id,
        "vip_subnet_id": lb.vip_subnet_id, "vip_network_id": lb.vip_network_id,
        "provisioning_status": lb.provisioning_status,
        "operating_status": if lb.provisioning_status == "ACTIVE" { "ONLINE" } else { "OFFLINE" },
        "admin_state_up": true, "provider": lb.provider, "tags": lb.tags,
        "listeners": listeners, "pools": pools, "flavor_id": null, "availability_zone": null,
        "project_id": "project", "tenant_id": "project",
    })
}

async fn list_lbs(
    Extract(shared): Extract<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    shared.with(|s| {
        let all = s.load_balancers.values().map(|lb| lb_json(s, lb)).collect();
        reply(
            StatusCode::OK,
            json!({"loadbalancers": filtered(all, &query), "loadbalancers_links": []}),
        )
    })
}

async fn show_lb(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.load_balancers.get(&id) {
        Some(lb) => reply(StatusCode::OK, json!({"loadbalancer": lb_json(s, lb)})),
        None => not_found("Load Balancer", &id),
    })
}

/// `POST /lbaas/loadbalancers`: the given `vip_port_id`, else a VIP port on
/// `vip_subnet_id`'s (or `vip_network_id`'s) network, `PENDING_CREATE`.
async fn create_lb(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "loadbalancer") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        // Without one, Octavia's `[api_settings] default_provider_driver`.
        let provider = request["provider"]
            .as_str()
            .unwrap_or(s.default_provider.as_str())
            .to_owned();
        if provider == "ovn" {
            for key in ["flavor_id", "availability_zone"] {
                if !request[key].is_null() {
                    return not_supported(key);
                }
            }
        }
        if let Some(e) = too_new(s, &request, false) {
            return e;
        }
        // A fully populated creation is all or nothing.
        let before = populated::is_populated(&request).then(|| s.clone());
        let lb = LoadBalancer {
            name: text(&request, "name"),
            description: text(&request, "description"),
            tags: tags(&request),
            provider,
            ..LoadBalancer::default()
        };
        if before.is_some() && s.serial_providers.contains(&lb.provider) {
            return not_implemented(&lb.provider);
        }
        let id = if let Some(port) = request["vip_port_id"].as_str() {
            match s.insert_load_balancer_on_port(port, lb) {
                Ok(id) => id,
                Err(e) => return error(StatusCode::BAD_REQUEST, &e),
            }
        } else {
            let (subnet, network) = if let Some(subnet) = request["vip_subnet_id"].as_str() {
                match s.subnets.get(subnet) {
                    Some(x) => (x.id.clone(), x.network_id.clone()),
                    None => return error(StatusCode::BAD_REQUEST, &format!("Validation failure: Subnet {subnet} not found.")),
                }
            } else if let Some(network) = request["vip_network_id"].as_str() {
                match s.subnet_of(network) {
                    Some(x) => (x.id.clone(), network.to_owned()),
                    None => return error(StatusCode::BAD_REQUEST, &format!("Validation failure: Network {network} not found.")),
                }
            } else {
                return error(StatusCode::BAD_REQUEST, "Validation failure: VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.");
            };
            s.insert_load_balancer(&subnet, &network, request["vip_address"].as_str(), lb)
        };
        if let Some(before) = before
            && let Err(e) = populated::populate(s, &id, &request)
        {
            // The request log is not part of the undo.
            let requests = std::mem::take(&mut s.requests);
            *s = before;
            s.requests = requests;
            return e;
        }
        s.start_operation(&id, "CREATE");
        if s.failing_creations > 0 {
            s.failing_creations -= 1;
            if let Some(lb) = s.load_balancers.get_mut(&id) {
                lb.creation_fails = true;
            }
        }
        reply(StatusCode::CREATED, json!({"loadbalancer": lb_json(s, &s.load_balancers[&id])}))
    })
}

async fn update_lb(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "loadbalancer") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        if let Err(e) = mutable(s, &id) {
            return e;
        }
        let lb = s.load_balancers.get_mut(&id).expect("checked");
        if let Some(name) = request["name"].as_str() {
            lb.name = name.to_owned();
        }
        if let Some(description) = request["description"].as_str() {
            lb.description = description.to_owned();
        }
        if request.get("tags").is_some() {
            lb.tags = tags(&request);
        }
        s.start_operation(&id, "UPDATE");
        reply(
            StatusCode::OK,
            json!({"loadbalancer": lb_json(s, &s.load_balancers[&id])}),
        )
    })
}

async fn delete_lb(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    shared.with(|s| {
        // Octavia deletes a load balancer in ERROR too; only a running operation blocks.
        match s.load_balancers.get(&id) {
            None => return not_found("Load Balancer", &id),
            Some(lb) if lb.provisioning_status.starts_with("PENDING_") => {
                return error(
                    StatusCode::CONFLICT,
                    &format!("Load Balancer {id} is immutable and cannot be updated."),
                );
            }
            Some(_) => {}
        }
        let children = s.listeners.values().any(|l| l.loadbalancer_id == id)
            || s.pools.values().any(|p| p.loadbalancer_id == id);
        if children && query.get("cascade").map(String::as_str) != Some("true") {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("Cannot delete Load Balancer {id} - it has children"),
            );
        }
        s.start_operation(&id, "DELETE");
        StatusCode::NO_CONTENT.into_response()
    })
}
