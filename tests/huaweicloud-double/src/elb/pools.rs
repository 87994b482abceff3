//! Pools (backend server groups): on a load balancer, the default pool of at most one
//! listener (whose protocol it must suit: TCP for TCP, UDP for UDP, HTTP for HTTP and
//! TERMINATED_HTTPS), with a session persistence; deleted with their members, but only
//! once their health monitor is.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Fields, conflict, in_use, invalid, listing, mutable, not_found, parse, refs, select};
use crate::query::Params;
use crate::state::{Pool, SessionPersistence, State};
use crate::{Shared, reply};

/// The load balancing algorithms.
pub const ALGORITHMS: [&str; 3] = ["ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP"];

/// Whether a pool speaking `pool` suits a listener speaking `listener`.
pub fn suits(listener: &str, pool: &str) -> bool {
    match listener {
        "HTTP" | "TERMINATED_HTTPS" => pool == "HTTP",
        other => other == pool,
    }
}

fn persistence_json(p: &SessionPersistence) -> Value {
    json!({"type": p.kind, "cookie_name": p.cookie_name,
           "persistence_timeout": p.persistence_timeout})
}

/// A pool as the API shows it (`PoolResp`).
pub(super) fn pool_json(s: &State, p: &Pool) -> Value {
    json!({
        "id": p.id,
        "project_id": s.project_id(),
        "tenant_id": s.project_id(),
        "name": p.name,
        "description": p.description,
        "admin_state_up": p.admin_state_up,
        "loadbalancers": refs([&p.loadbalancer_id]),
        "listeners": refs(p.listener_id.iter()),
        "members": refs(s.members.values().filter(|m| m.pool_id == p.id).map(|m| &m.id)),
        "healthmonitor_id": p.healthmonitor_id,
        "session_persistence": p.session_persistence.as_ref().map(persistence_json),
        "protocol": p.protocol,
        "lb_algorithm": p.lb_algorithm,
        "protection_status": "nonProtection",
        "protection_reason": "",
    })
}

/// The request's session persistence (`Some(None)`: cleared), checked against the
/// pool's protocol.
fn persistence(
    f: &Fields<'_>,
    protocol: &str,
) -> Result<Option<Option<SessionPersistence>>, Response> {
    let object = match f.object.get("session_persistence") {
        None => return Ok(None),
        Some(Value::Null) => return Ok(Some(None)),
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(invalid(&format!(
                "Invalid input for session_persistence. Reason: '{other}' is not an object."
            )));
        }
    };
    let inner = Fields::new(object, "pool");
    let Some(kind) = inner.one_of("type", &["SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE"])? else {
        return Err(super::error(
            StatusCode::BAD_REQUEST,
            "ELB.9805",
            "RequestBody pool[session_persistence][type] is null. when pool[session_persistence] exists, this is a required parameter.",
        ));
    };
    if kind != "SOURCE_IP" && protocol != "HTTP" {
        return Err(invalid(&format!(
            "Session persistence type {kind} is not valid for a {protocol} pool."
        )));
    }
    let cookie_name = inner.text("cookie_name")?;
    if kind == "APP_COOKIE" && cookie_name.is_none() {
        return Err(invalid(
            "Invalid input for session_persistence. Reason: an APP_COOKIE needs a cookie_name.",
        ));
    }
    let timeout = inner.int_in("persistence_timeout", 1..=1440)?;
    let timeout = match kind.as_str() {
        "SOURCE_IP" => Some(timeout.unwrap_or(1)),
        "HTTP_COOKIE" => Some(timeout.unwrap_or(1440)),
        _ => timeout,
    };
    Ok(Some(Some(SessionPersistence {
        kind,
        cookie_name,
        persistence_timeout: timeout,
    })))
}

/// The fields only filters see.
const HIDDEN: [&str; 2] = ["member_address", "member_device_id"];

pub(super) async fn list(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = Params::parse(raw.as_deref());
    shared.with(|s| {
        let state: &State = s;
        let all = state
            .pools
            .values()
            .map(|p| {
                let mut v = pool_json(state, p);
                let members = state.members.values().filter(|m| m.pool_id == p.id);
                v["member_address"] =
                    json!(members.clone().map(|m| &m.address).collect::<Vec<_>>());
                v["member_device_id"] = json!(
                    members
                        .filter_map(|m| state.server_by_ip(&m.address).map(|x| x.id.clone()))
                        .collect::<Vec<_>>()
                );
                v
            })
            .collect();
        match select(all, &params, &HIDDEN) {
            Ok(page) => listing("pools", page, &params, &headers, &uri),
            Err(e) => e,
        }
    })
}

pub(super) async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.pools.get(&id) {
        Some(p) => reply(StatusCode::OK, json!({"pool": pool_json(s, p)})),
        None => not_found("pool", &id),
    })
}

pub(super) async fn create(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let object = match parse(&bytes, "pool") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "pool");
    let fields = (|| -> Result<_, Response> {
        let protocol = f
            .one_of("protocol", &["TCP", "UDP", "HTTP"])?
            .ok_or_else(|| f.missing("protocol"))?;
        let algorithm = f
            .one_of("lb_algorithm", &ALGORITHMS)?
            .ok_or_else(|| f.missing("lb_algorithm"))?;
        let persistence = persistence(&f, &protocol)?.flatten();
        if f.boolean("admin_state_up")? == Some(false) {
            return Err(invalid(
                "Invalid input for admin_state_up. Reason: it can only be true.",
            ));
        }
        Ok((
            protocol,
            algorithm,
            persistence,
            f.text("listener_id")?,
            f.text("loadbalancer_id")?,
            f.text("name")?.unwrap_or_default(),
            f.text("description")?.unwrap_or_default(),
        ))
    })();
    let (protocol, algorithm, persistence, listener, lb, name, description) = match fields {
        Ok(f) => f,
        Err(e) => return e,
    };
    shared.with(|s| {
        let lb = match (&listener, lb) {
            (None, None) => {
                return super::error(
                    StatusCode::BAD_REQUEST,
                    "ELB.9805",
                    "RequestBody pool[loadbalancer_id] and pool[listener_id] both are null, this has at least one parameter.",
                );
            }
            (None, Some(lb)) => lb,
            (Some(l), lb) => match s.listeners.get(l) {
                None => return not_found("listener", l),
                Some(found) => {
                    if lb.as_ref().is_some_and(|lb| *lb != found.loadbalancer_id) {
                        return invalid(&format!(
                            "Listener {l} is not on loadbalancer {}.",
                            lb.unwrap_or_default()
                        ));
                    }
                    if let Some(pool) = &found.default_pool_id {
                        return conflict(&format!("Listener {l} already has default pool {pool}."));
                    }
                    if !suits(&found.protocol, &protocol) {
                        return conflict(&format!(
                            "Listener protocol {} and pool protocol {protocol} are not compatible.",
                            found.protocol
                        ));
                    }
                    found.loadbalancer_id.clone()
                }
            },
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        let id = s.id();
        s.pools.insert(
            id.clone(),
            Pool {
                id: id.clone(),
                name,
                description,
                loadbalancer_id: lb.clone(),
                listener_id: listener.clone(),
                protocol,
                lb_algorithm: algorithm,
                session_persistence: persistence,
                healthmonitor_id: None,
                admin_state_up: true,
            },
        );
        if let Some(l) = &listener
            && let Some(found) = s.listeners.get_mut(l)
        {
            found.default_pool_id = Some(id.clone());
        }
        s.changed(&lb);
        reply(StatusCode::CREATED, json!({"pool": pool_json(s, &s.pools[&id])}))
    })
}

pub(super) async fn update(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let object = match parse(&bytes, "pool") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "pool");
    shared.with(|s| {
        let Some(mut pool) = s.pools.get(&id).cloned() else {
            return not_found("pool", &id);
        };
        if let Err(e) = mutable(s, &pool.loadbalancer_id) {
            return e;
        }
        let changes = (|| -> Result<(), Response> {
            if let Some(name) = f.text("name")? {
                pool.name = name;
            }
            if let Some(description) = f.text("description")? {
                pool.description = description;
            }
            if let Some(algorithm) = f.one_of("lb_algorithm", &ALGORITHMS)? {
                pool.lb_algorithm = algorithm;
            }
            if f.boolean("admin_state_up")? == Some(false) {
                return Err(invalid(
                    "Invalid input for admin_state_up. Reason: it can only be true.",
                ));
            }
            if let Some(persistence) = persistence(&f, &pool.protocol)? {
                pool.session_persistence = persistence;
            }
            Ok(())
        })();
        if let Err(e) = changes {
            return e;
        }
        let lb = pool.loadbalancer_id.clone();
        s.pools.insert(id.clone(), pool);
        s.changed(&lb);
        reply(StatusCode::OK, json!({"pool": pool_json(s, &s.pools[&id])}))
    })
}

pub(super) async fn delete(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| {
        let Some(pool) = s.pools.get(&id).cloned() else {
            return not_found("pool", &id);
        };
        if let Err(e) = mutable(s, &pool.loadbalancer_id) {
            return e;
        }
        if let Some(monitor) = &pool.healthmonitor_id {
            return in_use("healthmonitor", monitor, "pool");
        }
        s.members.retain(|_, m| m.pool_id != id);
        s.pools.remove(&id);
        for l in s.listeners.values_mut() {
            if l.default_pool_id.as_deref() == Some(id.as_str()) {
                l.default_pool_id = None;
            }
        }
        s.changed(&pool.loadbalancer_id);
        StatusCode::NO_CONTENT.into_response()
    })
}
