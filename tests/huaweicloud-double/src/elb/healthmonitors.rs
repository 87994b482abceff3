//! Health monitors: one per pool, of a type the pool's protocol allows (`UDP_CONNECT`
//! for UDP pools, `TCP` or `HTTP` for the others), with the shared ELB's ranges (delay
//! and timeout 1 to 50 s, 1 to 10 retries) and HTTP checks' `url_path`,
//! `http_method`, `expected_codes` and `domain_name`.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Fields, conflict, invalid, listing, mutable, not_found, parse, refs, select};
use crate::query::Params;
use crate::state::{HealthMonitor, State};
use crate::{Shared, reply};

/// The health check types.
pub const TYPES: [&str; 3] = ["TCP", "UDP_CONNECT", "HTTP"];

/// Whether a monitor of type `kind` suits a pool speaking `protocol`.
fn suits(protocol: &str, kind: &str) -> bool {
    (protocol == "UDP") == (kind == "UDP_CONNECT")
}

/// A health monitor as the API shows it (`HealthmonitorResp`).
pub(super) fn monitor_json(s: &State, h: &HealthMonitor) -> Value {
    json!({
        "id": h.id,
        "project_id": s.project_id(),
        "tenant_id": s.project_id(),
        "name": h.name,
        "admin_state_up": h.admin_state_up,
        "monitor_port": h.monitor_port,
        "timeout": h.timeout,
        "type": h.kind,
        "expected_codes": h.expected_codes,
        "domain_name": h.domain_name,
        "url_path": h.url_path,
        "http_method": h.http_method,
        "delay": h.delay,
        "max_retries": h.max_retries,
        "max_retries_down": 3,
        "pools": refs([&h.pool_id]),
    })
}

/// Applies the changeable fields of `f` to `h` (its pool speaking `protocol`).
fn apply(h: &mut HealthMonitor, f: &Fields<'_>, protocol: &str) -> Result<(), Response> {
    if let Some(kind) = f.one_of("type", &TYPES)? {
        h.kind = kind;
    }
    if !suits(protocol, &h.kind) {
        return Err(invalid(&format!(
            "Invalid input for type. Reason: a {} health monitor cannot check a {protocol} pool.",
            h.kind
        )));
    }
    if let Some(name) = f.text("name")? {
        h.name = name;
    }
    if f.boolean("admin_state_up")? == Some(false) {
        return Err(invalid(
            "Invalid input for admin_state_up. Reason: it can only be true.",
        ));
    }
    if let Some(delay) = f.int_in("delay", 1..=50)? {
        h.delay = delay;
    }
    if let Some(timeout) = f.int_in("timeout", 1..=50)? {
        h.timeout = timeout;
    }
    if let Some(retries) = f.int_in("max_retries", 1..=10)? {
        h.max_retries = retries;
    }
    if f.has("monitor_port") {
        h.monitor_port = f.int_in("monitor_port", 1..=65535)?.map(|p| p as u16);
    }
    if f.has("domain_name") {
        h.domain_name = f.text("domain_name")?;
    }
    let http = h.kind == "HTTP";
    for (key, slot, default) in [
        ("url_path", &mut h.url_path, "/"),
        ("http_method", &mut h.http_method, "GET"),
        ("expected_codes", &mut h.expected_codes, "200"),
    ] {
        if let Some(value) = f.text(key)? {
            *slot = Some(value);
        }
        if http && slot.is_none() {
            *slot = Some(default.to_owned());
        }
    }
    Ok(())
}

pub(super) async fn list(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = Params::parse(raw.as_deref());
    shared.with(|s| {
        let all = s
            .healthmonitors
            .values()
            .map(|h| monitor_json(s, h))
            .collect();
        match select(all, &params, &[]) {
            Ok(page) => listing("healthmonitors", page, &params, &headers, &uri),
            Err(e) => e,
        }
    })
}

pub(super) async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.healthmonitors.get(&id) {
        Some(h) => reply(StatusCode::OK, json!({"healthmonitor": monitor_json(s, h)})),
        None => not_found("healthmonitor", &id),
    })
}

pub(super) async fn create(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let object = match parse(&bytes, "healthmonitor") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "healthmonitor");
    let required = (|| -> Result<_, Response> {
        let pool = f.required_text("pool_id")?;
        f.one_of("type", &TYPES)?.ok_or_else(|| f.missing("type"))?;
        for key in ["delay", "timeout", "max_retries"] {
            f.required_int(key)?;
        }
        Ok(pool)
    })();
    let pool = match required {
        Ok(p) => p,
        Err(e) => return e,
    };
    shared.with(|s| {
        let Some(found) = s.pools.get(&pool).cloned() else {
            return not_found("pool", &pool);
        };
        if let Err(e) = mutable(s, &found.loadbalancer_id) {
            return e;
        }
        if let Some(existing) = &found.healthmonitor_id {
            return conflict(&format!(
                "Only one health monitor per pool allowed. Pool {pool} is already using Health Monitor {existing}."
            ));
        }
        let mut monitor = HealthMonitor {
            id: s.id(),
            pool_id: pool.clone(),
            name: String::new(),
            kind: String::new(),
            delay: 0,
            timeout: 0,
            max_retries: 0,
            monitor_port: None,
            url_path: None,
            http_method: None,
            expected_codes: None,
            domain_name: None,
            admin_state_up: true,
        };
        if let Err(e) = apply(&mut monitor, &f, &found.protocol) {
            return e;
        }
        let id = monitor.id.clone();
        let answer = json!({"healthmonitor": monitor_json(s, &monitor)});
        s.healthmonitors.insert(id.clone(), monitor);
        if let Some(p) = s.pools.get_mut(&pool) {
            p.healthmonitor_id = Some(id);
        }
        s.changed(&found.loadbalancer_id);
        reply(StatusCode::CREATED, answer)
    })
}

pub(super) async fn update(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let object = match parse(&bytes, "healthmonitor") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "healthmonitor");
    shared.with(|s| {
        let Some(mut monitor) = s.healthmonitors.get(&id).cloned() else {
            return not_found("healthmonitor", &id);
        };
        let Some(pool) = s.pools.get(&monitor.pool_id).cloned() else {
            return not_found("pool", &monitor.pool_id);
        };
        if let Err(e) = mutable(s, &pool.loadbalancer_id) {
            return e;
        }
        if let Err(e) = apply(&mut monitor, &f, &pool.protocol) {
            return e;
        }
        let answer = json!({"healthmonitor": monitor_json(s, &monitor)});
        s.healthmonitors.insert(id.clone(), monitor);
        s.changed(&pool.loadbalancer_id);
        reply(StatusCode::OK, answer)
    })
}

pub(super) async fn delete(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| {
        let Some(pool) = s.healthmonitors.get(&id).map(|h| h.pool_id.clone()) else {
            return not_found("healthmonitor", &id);
        };
        let Some(lb) = s.pool_lb(&pool) else {
            return not_found("pool", &pool);
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        s.healthmonitors.remove(&id);
        if let Some(p) = s.pools.get_mut(&pool) {
            p.healthmonitor_id = None;
        }
        s.changed(&lb);
        StatusCode::NO_CONTENT.into_response()
    })
}
