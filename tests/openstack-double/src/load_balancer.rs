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

use crate::state::{HealthMonitor, Listener, LoadBalancer, Member, Pool, Port, State};
use crate::{Shared, reply};

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

fn not_found(kind: &str, id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("{kind} {id} could not be found."),
    )
}

fn parse(bytes: &[u8], key: &str) -> Result<Value, Response> {
    let body = crate::body(bytes, error)?;
    match body.get(key) {
        Some(v) if v.is_object() => Ok(v.clone()),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid input: missing {key}"),
        )),
    }
}

/// The load balancer `id` when it is `ACTIVE` (409 while an operation runs).
fn mutable(s: &State, id: &str) -> Result<(), Response> {
    match s.load_balancers.get(id) {
        None => Err(not_found("Load Balancer", id)),
        Some(lb) if lb.provisioning_status != "ACTIVE" => Err(error(
            StatusCode::CONFLICT,
            &format!("Load Balancer {id} is immutable and cannot be updated."),
        )),
        Some(_) => Ok(()),
    }
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_owned()
}

fn tags(v: &Value) -> Vec<String> {
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
fn filtered(items: Vec<Value>, query: &HashMap<String, String>) -> Vec<Value> {
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

/// `POST /lbaas/loadbalancers`: a VIP port on `vip_subnet_id`'s (or
/// `vip_network_id`'s) network, `PENDING_CREATE`.
async fn create_lb(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "loadbalancer") {
        Ok(r) => r,
        Err(e) => return e,
    };
    if request.get("listeners").is_some() || request.get("pools").is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "Fully populated load balancer creation is not supported by this double",
        );
    }
    shared.with(|s| {
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
        let id = s.id();
        let port = s.id();
        let address = s.free_ip(&network);
        s.ports.insert(
            port.clone(),
            Port {
                id: port.clone(),
                network_id: network.clone(),
                device_id: format!("lb-{id}"),
                device_owner: "Octavia".into(),
                mac_address: "fa:16:3e:ff:00:01".into(),
                fixed_ips: vec![(subnet.clone(), address.clone())],
                allowed_address_pairs: Vec::new(),
            },
        );
        let lb = LoadBalancer {
            id: id.clone(),
            name: text(&request, "name"),
            description: text(&request, "description"),
            vip_address: address,
            vip_port_id: port,
            vip_subnet_id: subnet,
            vip_network_id: network,
            tags: tags(&request),
            provider: request["provider"].as_str().unwrap_or("amphora").to_owned(),
            provisioning_status: "ACTIVE".into(),
            busy_until: None,
        };
        s.load_balancers.insert(id.clone(), lb);
        s.start_operation(&id, "CREATE");
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
        if let Err(e) = mutable(s, &id) {
            return e;
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

fn listener_json(l: &Listener) -> Value {
    let mut v = json!({
        "id": l.id, "name": l.name, "protocol": l.protocol, "protocol_port": l.protocol_port,
        "loadbalancers": [{"id": l.loadbalancer_id}], "default_pool_id": l.default_pool_id,
        "allowed_cidrs": if l.allowed_cidrs.is_empty() { Value::Null } else { json!(l.allowed_cidrs) },
        "provisioning_status": "ACTIVE", "operating_status": "ONLINE", "admin_state_up": true,
        "connection_limit": -1, "tags": [], "project_id": "project",
        "timeout_client_data": 50000, "timeout_member_connect": 5000,
        "timeout_member_data": 50000, "timeout_tcp_inspect": 0,
    });
    for (key, value) in &l.settings {
        v[key] = json!(value);
    }
    v
}

const LISTENER_SETTINGS: [&str; 5] = [
    "timeout_client_data",
    "timeout_member_connect",
    "timeout_member_data",
    "timeout_tcp_inspect",
    "connection_limit",
];

fn apply_listener(l: &mut Listener, request: &Value) {
    if let Some(name) = request["name"].as_str() {
        l.name = name.to_owned();
    }
    if request.get("default_pool_id").is_some() {
        l.default_pool_id = request["default_pool_id"].as_str().map(str::to_owned);
    }
    if let Some(cidrs) = request["allowed_cidrs"].as_array() {
        l.allowed_cidrs = cidrs
            .iter()
            .filter_map(|c| c.as_str().map(str::to_owned))
            .collect();
    } else if request.get("allowed_cidrs").is_some_and(Value::is_null) {
        l.allowed_cidrs.clear();
    }
    for key in LISTENER_SETTINGS {
        if let Some(n) = request[key].as_i64() {
            l.settings.insert(key.into(), n);
        }
    }
}

async fn list_listeners(
    Extract(shared): Extract<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    shared.with(|s| {
        let all = s
            .listeners
            .values()
            .map(|l| {
                let mut v = listener_json(l);
                v["loadbalancer_id"] = json!(l.loadbalancer_id);
                v
            })
            .collect();
        let mut list = filtered(all, &query);
        for v in &mut list {
            v.as_object_mut().map(|o| o.remove("loadbalancer_id"));
        }
        reply(
            StatusCode::OK,
            json!({"listeners": list, "listeners_links": []}),
        )
    })
}

async fn show_listener(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.listeners.get(&id) {
        Some(l) => reply(StatusCode::OK, json!({"listener": listener_json(l)})),
        None => not_found("Listener", &id),
    })
}

async fn create_listener(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "listener") {
        Ok(r) => r,
        Err(e) => return e,
    };
    let lb = text(&request, "loadbalancer_id");
    let (Some(protocol), Some(port)) = (
        request["protocol"].as_str(),
        request["protocol_port"].as_u64(),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute listener: protocol and protocol_port are required",
        );
    };
    if ![
        "TCP",
        "UDP",
        "HTTP",
        "HTTPS",
        "TERMINATED_HTTPS",
        "SCTP",
        "PROMETHEUS",
    ]
    .contains(&protocol)
    {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid input for field/attribute protocol. Value: '{protocol}'."),
        );
    }
    shared.with(|s| {
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        if s.listeners.values().any(|l| {
            l.loadbalancer_id == lb && u64::from(l.protocol_port) == port && l.protocol == protocol
        }) {
            return error(
                StatusCode::CONFLICT,
                &format!(
                    "Another Listener on this Load Balancer is already using protocol_port {port}"
                ),
            );
        }
        let id = s.id();
        let mut listener = Listener {
            id: id.clone(),
            name: String::new(),
            loadbalancer_id: lb.clone(),
            protocol: protocol.to_owned(),
            protocol_port: port as u16,
            default_pool_id: None,
            allowed_cidrs: Vec::new(),
            settings: Default::default(),
        };
        apply_listener(&mut listener, &request);
        let answer = json!({"listener": listener_json(&listener)});
        s.listeners.insert(id, listener);
        s.start_operation(&lb, "UPDATE");
        reply(StatusCode::CREATED, answer)
    })
}

async fn update_listener(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "listener") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        let Some(lb) = s.listeners.get(&id).map(|l| l.loadbalancer_id.clone()) else {
            return not_found("Listener", &id);
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        let listener = s.listeners.get_mut(&id).expect("checked");
        apply_listener(listener, &request);
        let answer = json!({"listener": listener_json(listener)});
        s.start_operation(&lb, "UPDATE");
        reply(StatusCode::OK, answer)
    })
}

async fn delete_listener(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| {
        let Some(lb) = s.listeners.get(&id).map(|l| l.loadbalancer_id.clone()) else {
            return not_found("Listener", &id);
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        s.listeners.remove(&id);
        for pool in s.pools.values_mut() {
            if pool.listener_id.as_deref() == Some(id.as_str()) {
                pool.listener_id = None;
            }
        }
        s.start_operation(&lb, "UPDATE");
        StatusCode::NO_CONTENT.into_response()
    })
}

fn pool_json(s: &State, p: &Pool) -> Value {
    json!({
        "id": p.id, "name": p.name, "protocol": p.protocol, "lb_algorithm": p.lb_algorithm,
        "loadbalancers": [{"id": p.loadbalancer_id}],
        "listeners": p.listener_id.iter().map(|l| json!({"id": l})).collect::<Vec<_>>(),
        "members": s.members.values().filter(|m| m.pool_id == p.id).map(|m| json!({"id": m.id})).collect::<Vec<_>>(),
        "healthmonitor_id": p.healthmonitor_id, "provisioning_status": "ACTIVE",
        "operating_status": "ONLINE", "admin_state_up": true, "session_persistence": null,
        "tags": [], "project_id": "project",
    })
}

async fn list_pools(
    Extract(shared): Extract<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    shared.with(|s| {
        let all = s
            .pools
            .values()
            .map(|p| {
                let mut v = pool_json(s, p);
                v["loadbalancer_id"] = json!(p.loadbalancer_id);
                v["listener_id"] = json!(p.listener_id);
                v
            })
            .collect();
        let mut list = filtered(all, &query);
        for v in &mut list {
            if let Some(o) = v.as_object_mut() {
                o.remove("loadbalancer_id");
                o.remove("listener_id");
            }
        }
        reply(StatusCode::OK, json!({"pools": list, "pools_links": []}))
    })
}

async fn show_pool(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.pools.get(&id) {
        Some(p) => reply(StatusCode::OK, json!({"pool": pool_json(s, p)})),
        None => not_found("Pool", &id),
    })
}

async fn create_pool(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "pool") {
        Ok(r) => r,
        Err(e) => return e,
    };
    let (Some(protocol), Some(algorithm)) = (
        request["protocol"].as_str(),
        request["lb_algorithm"].as_str(),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute pool: protocol and lb_algorithm are required",
        );
    };
    if ![
        "ROUND_ROBIN",
        "LEAST_CONNECTIONS",
        "SOURCE_IP",
        "SOURCE_IP_PORT",
    ]
    .contains(&algorithm)
    {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid input for field/attribute lb_algorithm. Value: '{algorithm}'."),
        );
    }
    shared.with(|s| {
        let listener = request["listener_id"].as_str().map(str::to_owned);
        let lb = match (&listener, request["loadbalancer_id"].as_str()) {
            (Some(l), _) => match s.listeners.get(l) {
                Some(l) => l.loadbalancer_id.clone(),
                None => return not_found("Listener", l),
            },
            (None, Some(lb)) => lb.to_owned(),
            (None, None) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Validation failure: loadbalancer_id or listener_id must be specified.",
                );
            }
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        let id = s.id();
        let pool = Pool {
            id: id.clone(),
            name: text(&request, "name"),
            loadbalancer_id: lb.clone(),
            listener_id: listener.clone(),
            protocol: protocol.to_owned(),
            lb_algorithm: algorithm.to_owned(),
            healthmonitor_id: None,
        };
        if let Some(l) = listener.and_then(|l| s.listeners.get_mut(&l)) {
            l.default_pool_id = Some(id.clone());
        }
        let answer = json!({"pool": pool_json(s, &pool)});
        s.pools.insert(id, pool);
        s.start_operation(&lb, "UPDATE");
        reply(StatusCode::CREATED, answer)
    })
}

async fn update_pool(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "pool") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        let Some(lb) = s.pools.get(&id).map(|p| p.loadbalancer_id.clone()) else {
            return not_found("Pool", &id);
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        let pool = s.pools.get_mut(&id).expect("checked");
        if let Some(name) = request["name"].as_str() {
            pool.name = name.to_owned();
        }
        if let Some(algorithm) = request["lb_algorithm"].as_str() {
            pool.lb_algorithm = algorithm.to_owned();
        }
        let pool = pool.clone();
        s.start_operation(&lb, "UPDATE");
        reply(StatusCode::OK, json!({"pool": pool_json(s, &pool)}))
    })
}

async fn delete_pool(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| {
        let Some(lb) = s.pools.get(&id).map(|p| p.loadbalancer_id.clone()) else {
            return not_found("Pool", &id);
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        s.pools.remove(&id);
        s.members.retain(|_, m| m.pool_id != id);
        s.monitors.retain(|_, h| h.pool_id != id);
        for l in s.listeners.values_mut() {
            if l.default_pool_id.as_deref() == Some(id.as_str()) {
                l.default_pool_id = None;
            }
        }
        s.start_operation(&lb, "UPDATE");
        StatusCode::NO_CONTENT.into_response()
    })
}

fn member_json(m: &Member) -> Value {
    json!({"id": m.id, "name": m.name, "address": m.address, "protocol_port": m.protocol_port,
           "subnet_id": m.subnet_id, "weight": 1, "admin_state_up": true, "backup": false,
           "provisioning_status": "ACTIVE", "operating_status": "ONLINE", "tags": [],
           "project_id": "project"})
}

fn new_member(s: &mut State, pool: &str, request: &Value) -> Result<Member, Response> {
    let (Some(address), Some(port)) = (
        request["address"].as_str(),
        request["protocol_port"].as_u64(),
    ) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute member: address and protocol_port are required",
        ));
    };
    Ok(Member {
        id: s.id(),
        pool_id: pool.to_owned(),
        name: text(request, "name"),
        address: address.to_owned(),
        protocol_port: port as u16,
        subnet_id: request["subnet_id"].as_str().map(str::to_owned),
    })
}

/// The load balancer of `pool`, if it may change now.
fn pool_lb(s: &State, pool: &str) -> Result<String, Response> {
    let Some(lb) = s.pools.get(pool).map(|p| p.loadbalancer_id.clone()) else {
        return Err(not_found("Pool", pool));
    };
    mutable(s, &lb)?;
    Ok(lb)
}

async fn list_members(Extract(shared): Extract<Shared>, Path(pool): Path<String>) -> Response {
    shared.with(|s| {
        if !s.pools.contains_key(&pool) {
            return not_found("Pool", &pool);
        }
        let list: Vec<Value> = s
            .members
            .values()
            .filter(|m| m.pool_id == pool)
            .map(member_json)
            .collect();
        reply(
            StatusCode::OK,
            json!({"members": list, "members_links": []}),
        )
    })
}

async fn show_member(
    Extract(shared): Extract<Shared>,
    Path((pool, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.members.get(&id).filter(|m| m.pool_id == pool) {
        Some(m) => reply(StatusCode::OK, json!({"member": member_json(m)})),
        None => not_found("Member", &id),
    })
}

async fn create_member(
    Extract(shared): Extract<Shared>,
    Path(pool): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "member") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        let member = match new_member(s, &pool, &request) {
            Ok(m) => m,
            Err(e) => return e,
        };
        if s.members.values().any(|m| {
            m.pool_id == pool
                && m.address == member.address
                && m.protocol_port == member.protocol_port
        }) {
            return error(
                StatusCode::CONFLICT,
                &format!(
                    "Duplicate member with IP address {} and protocol_port {}",
                    member.address, member.protocol_port
                ),
            );
        }
        let answer = json!({"member": member_json(&member)});
        s.members.insert(member.id.clone(), member);
        s.start_operation(&lb, "UPDATE");
        reply(StatusCode::CREATED, answer)
    })
}

/// `PUT /lbaas/pools/{id}/members`: the pool's members become the list (batch update;
/// members matched by address and port keep their IDs).
async fn replace_members(
    Extract(shared): Extract<Shared>,
    Path(pool): Path<String>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, error) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(list) = body["members"].as_array() else {
        return error(
            StatusCode::BAD_REQUEST,
            "Invalid input: members is required",
        );
    };
    shared.with(|s| {
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        let mut wanted = Vec::new();
        for request in list {
            match new_member(s, &pool, request) {
                Ok(m) => wanted.push(m),
                Err(e) => return e,
            }
        }
        let old: Vec<Member> = s
            .members
            .values()
            .filter(|m| m.pool_id == pool)
            .cloned()
            .collect();
        s.members.retain(|_, m| m.pool_id != pool);
        for mut member in wanted {
            if let Some(kept) = old
                .iter()
                .find(|o| o.address == member.address && o.protocol_port == member.protocol_port)
            {
                member.id = kept.id.clone();
            }
            s.members.insert(member.id.clone(), member);
        }
        s.start_operation(&lb, "UPDATE");
        StatusCode::ACCEPTED.into_response()
    })
}

async fn delete_member(
    Extract(shared): Extract<Shared>,
    Path((pool, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| {
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        if s.members.remove(&id).is_none() {
            return not_found("Member", &id);
        }
        s.start_operation(&lb, "UPDATE");
        StatusCode::NO_CONTENT.into_response()
    })
}

fn monitor_json(h: &HealthMonitor) -> Value {
    json!({"id": h.id, "name": h.name, "pools": [{"id": h.pool_id}], "type": h.kind,
           "delay": h.delay, "timeout": h.timeout, "max_retries": h.max_retries,
           "max_retries_down": h.max_retries_down, "admin_state_up": true,
           "provisioning_status": "ACTIVE", "operating_status": "ONLINE", "tags": [],
           "project_id": "project"})
}

fn apply_monitor(h: &mut HealthMonitor, request: &Value) {
    if let Some(name) = request["name"].as_str() {
        h.name = name.to_owned();
    }
    for (key, field) in [
        ("delay", &mut h.delay),
        ("timeout", &mut h.timeout),
        ("max_retries", &mut h.max_retries),
        ("max_retries_down", &mut h.max_retries_down),
    ] {
        if let Some(n) = request[key].as_i64() {
            *field = n;
        }
    }
}

async fn list_monitors(
    Extract(shared): Extract<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    shared.with(|s| {
        let all = s.monitors.values().map(monitor_json).collect();
        reply(
            StatusCode::OK,
            json!({"healthmonitors": filtered(all, &query), "healthmonitors_links": []}),
        )
    })
}

async fn show_monitor(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.monitors.get(&id) {
        Some(h) => reply(StatusCode::OK, json!({"healthmonitor": monitor_json(h)})),
        None => not_found("Health Monitor", &id),
    })
}

async fn create_monitor(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "healthmonitor") {
        Ok(r) => r,
        Err(e) => return e,
    };
    let pool = text(&request, "pool_id");
    let (Some(kind), Some(_), Some(_), Some(_)) = (
        request["type"].as_str(),
        request["delay"].as_i64(),
        request["timeout"].as_i64(),
        request["max_retries"].as_i64(),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute healthmonitor: type, delay, timeout and max_retries are required",
        );
    };
    shared.with(|s| {
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        if s.pools[&pool].healthmonitor_id.is_some() {
            return error(
                StatusCode::CONFLICT,
                &format!("This pool {pool} already has a health monitor"),
            );
        }
        let id = s.id();
        let mut monitor = HealthMonitor {
            id: id.clone(),
            name: String::new(),
            pool_id: pool.clone(),
            kind: kind.to_owned(),
            delay: 0,
            timeout: 0,
            max_retries: 0,
            max_retries_down: 3,
        };
        apply_monitor(&mut monitor, &request);
        let answer = json!({"healthmonitor": monitor_json(&monitor)});
        s.monitors.insert(id.clone(), monitor);
        if let Some(p) = s.pools.get_mut(&pool) {
            p.healthmonitor_id = Some(id);
        }
        s.start_operation(&lb, "UPDATE");
        reply(StatusCode::CREATED, answer)
    })
}

async fn update_monitor(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "healthmonitor") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        let Some(pool) = s.monitors.get(&id).map(|h| h.pool_id.clone()) else {
            return not_found("Health Monitor", &id);
        };
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        let monitor = s.monitors.get_mut(&id).expect("checked");
        apply_monitor(monitor, &request);
        let answer = json!({"healthmonitor": monitor_json(monitor)});
        s.start_operation(&lb, "UPDATE");
        reply(StatusCode::OK, answer)
    })
}

async fn delete_monitor(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| {
        let Some(pool) = s.monitors.get(&id).map(|h| h.pool_id.clone()) else {
            return not_found("Health Monitor", &id);
        };
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        s.monitors.remove(&id);
        if let Some(p) = s.pools.get_mut(&pool) {
            p.healthmonitor_id = None;
        }
        s.start_operation(&lb, "UPDATE");
        StatusCode::NO_CONTENT.into_response()
    })
}
