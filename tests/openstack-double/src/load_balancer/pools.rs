//! Octavia pools and their members.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{change_child, error, filtered, mutable, not_found, parse, serial_refuses, text};
use crate::state::{Member, Pool, State};
use crate::{Shared, reply};

fn pool_json(s: &State, p: &Pool) -> Value {
    json!({
        "id": p.id, "name": p.name, "protocol": p.protocol, "lb_algorithm": p.lb_algorithm,
        "loadbalancers": [{"id": p.loadbalancer_id}],
        "listeners": p.listener_id.iter().map(|l| json!({"id": l})).collect::<Vec<_>>(),
        "members": s.members.values().filter(|m| m.pool_id == p.id).map(|m| json!({"id": m.id})).collect::<Vec<_>>(),
        "healthmonitor_id": p.healthmonitor_id, "provisioning_status": "ACTIVE",
        "operating_status": "ONLINE", "admin_state_up": true, "session_persistence": p.session_persistence.as_ref().map(|t| json!({"type": t})),
        "tags": [], "project_id": "project",
    })
}

pub(super) async fn list_pools(
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

pub(super) async fn show_pool(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.pools.get(&id) {
        Some(p) => reply(StatusCode::OK, json!({"pool": pool_json(s, p)})),
        None => not_found("Pool", &id),
    })
}

/// The request's `session_persistence` type (null: none), or Octavia's 400.
fn persistence(request: &Value) -> Result<Option<String>, Response> {
    match &request["session_persistence"] {
        Value::Null => Ok(None),
        p => match p["type"].as_str() {
            Some(t @ ("SOURCE_IP" | "HTTP_COOKIE" | "APP_COOKIE")) => Ok(Some(t.to_owned())),
            _ => Err(error(
                StatusCode::BAD_REQUEST,
                &format!("Invalid input for field/attribute session_persistence. Value: '{p}'."),
            )),
        },
    }
}

pub(super) async fn create_pool(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "pool") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| match insert_pool(s, &request) {
        Ok((lb, id)) => {
            s.start_operation(&lb, "UPDATE");
            reply(
                StatusCode::CREATED,
                json!({"pool": pool_json(s, &s.pools[&id])}),
            )
        }
        Err(e) => e,
    })
}

/// Validates and adds the pool `request` asks for: its load balancer and the pool's ID;
/// the load balancer's operation is the caller's.
pub(super) fn insert_pool(s: &mut State, request: &Value) -> Result<(String, String), Response> {
    let (Some(protocol), Some(algorithm)) = (
        request["protocol"].as_str(),
        request["lb_algorithm"].as_str(),
    ) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute pool: protocol and lb_algorithm are required",
        ));
    };
    if ![
        "ROUND_ROBIN",
        "LEAST_CONNECTIONS",
        "SOURCE_IP",
        "SOURCE_IP_PORT",
    ]
    .contains(&algorithm)
    {
        return Err(error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid input for field/attribute lb_algorithm. Value: '{algorithm}'."),
        ));
    }
    let persistence = persistence(request)?;
    let listener = request["listener_id"].as_str().map(str::to_owned);
    let lb = match (&listener, request["loadbalancer_id"].as_str()) {
        (Some(l), _) => match s.listeners.get(l) {
            // Octavia: a listener has one default pool.
            Some(l) if l.default_pool_id.is_some() => {
                return Err(error(
                    StatusCode::CONFLICT,
                    &format!(
                        "Listener {} is already using default pool {}.",
                        l.id,
                        l.default_pool_id.as_deref().unwrap_or_default()
                    ),
                ));
            }
            Some(l) => l.loadbalancer_id.clone(),
            None => return Err(not_found("Listener", l)),
        },
        (None, Some(lb)) => lb.to_owned(),
        (None, None) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "Validation failure: loadbalancer_id or listener_id must be specified.",
            ));
        }
    };
    mutable(s, &lb)?;
    let id = s.id();
    let pool = Pool {
        id: id.clone(),
        name: text(request, "name"),
        loadbalancer_id: lb.clone(),
        listener_id: listener.clone(),
        protocol: protocol.to_owned(),
        lb_algorithm: algorithm.to_owned(),
        healthmonitor_id: None,
        session_persistence: persistence,
    };
    if let Some(l) = listener.and_then(|l| s.listeners.get_mut(&l)) {
        l.default_pool_id = Some(id.clone());
    }
    s.pools.insert(id.clone(), pool);
    Ok((lb, id))
}

pub(super) async fn update_pool(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "pool") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        let lb = s.pools.get(&id).map(|p| p.loadbalancer_id.clone());
        change_child(s, lb, "Pool", &id, |s| {
            let pool = s.pools.get_mut(&id).expect("checked");
            if let Some(name) = request["name"].as_str() {
                pool.name = name.to_owned();
            }
            if let Some(algorithm) = request["lb_algorithm"].as_str() {
                pool.lb_algorithm = algorithm.to_owned();
            }
            if request.get("session_persistence").is_some() {
                match persistence(&request) {
                    Ok(p) => pool.session_persistence = p,
                    Err(e) => return e,
                }
            }
            let pool = pool.clone();
            reply(StatusCode::OK, json!({"pool": pool_json(s, &pool)}))
        })
    })
}

pub(super) async fn delete_pool(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| {
        let lb = s.pools.get(&id).map(|p| p.loadbalancer_id.clone());
        change_child(s, lb, "Pool", &id, |s| {
            s.pools.remove(&id);
            s.members.retain(|_, m| m.pool_id != id);
            s.monitors.retain(|_, h| h.pool_id != id);
            for l in s.listeners.values_mut() {
                if l.default_pool_id.as_deref() == Some(id.as_str()) {
                    l.default_pool_id = None;
                }
            }
            StatusCode::NO_CONTENT.into_response()
        })
    })
}

fn member_json(m: &Member) -> Value {
    json!({"id": m.id, "name": m.name, "address": m.address, "protocol_port": m.protocol_port,
           "subnet_id": m.subnet_id, "monitor_port": m.monitor_port, "weight": 1, "admin_state_up": true, "backup": false,
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
        monitor_port: request["monitor_port"].as_u64().map(|p| p as u16),
    })
}

/// The load balancer of `pool`, if it may change now.
pub(super) fn pool_lb(s: &State, pool: &str) -> Result<String, Response> {
    let Some(lb) = s.pools.get(pool).map(|p| p.loadbalancer_id.clone()) else {
        return Err(not_found("Pool", pool));
    };
    mutable(s, &lb)?;
    Ok(lb)
}

pub(super) async fn list_members(
    Extract(shared): Extract<Shared>,
    Path(pool): Path<String>,
) -> Response {
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

pub(super) async fn show_member(
    Extract(shared): Extract<Shared>,
    Path((pool, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.members.get(&id).filter(|m| m.pool_id == pool) {
        Some(m) => reply(StatusCode::OK, json!({"member": member_json(m)})),
        None => not_found("Member", &id),
    })
}

pub(super) async fn create_member(
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
        match insert_member(s, &pool, &request) {
            Ok(answer) => {
                s.start_operation(&lb, "UPDATE");
                reply(StatusCode::CREATED, json!({"member": answer}))
            }
            Err(e) => e,
        }
    })
}

/// Validates and adds the member `request` asks for to `pool`: the member as answered.
pub(super) fn insert_member(s: &mut State, pool: &str, request: &Value) -> Result<Value, Response> {
    let member = new_member(s, pool, request)?;
    if s.members.values().any(|m| {
        m.pool_id == pool && m.address == member.address && m.protocol_port == member.protocol_port
    }) {
        return Err(error(
            StatusCode::CONFLICT,
            &format!(
                "Duplicate member with IP address {} and protocol_port {}",
                member.address, member.protocol_port
            ),
        ));
    }
    let answer = member_json(&member);
    s.members.insert(member.id.clone(), member);
    Ok(answer)
}

/// `PUT /lbaas/pools/{id}/members`: the pool's members become the list (batch update;
/// members matched by address and port keep their IDs). A provider of
/// [`State::serial_providers`] has no batch update: 501.
pub(super) async fn replace_members(
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
        if let Some(e) = serial_refuses(s, &lb) {
            return e;
        }
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

pub(super) async fn delete_member(
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
