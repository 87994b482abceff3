//! Octavia health monitors.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{change_child, error, filtered, not_found, ovn_refuses, parse, pool_lb, text, too_new};
use crate::state::{HealthMonitor, State};
use crate::{Shared, reply};

fn monitor_json(h: &HealthMonitor) -> Value {
    json!({"id": h.id, "name": h.name, "pools": [{"id": h.pool_id}], "type": h.kind,
           "delay": h.delay, "timeout": h.timeout, "max_retries": h.max_retries,
           "max_retries_down": h.max_retries_down, "admin_state_up": true,
           "url_path": h.url_path, "http_method": h.http_method,
           "expected_codes": h.expected_codes,
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

pub(super) async fn list_monitors(
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

pub(super) async fn show_monitor(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.monitors.get(&id) {
        Some(h) => reply(StatusCode::OK, json!({"healthmonitor": monitor_json(h)})),
        None => not_found("Health Monitor", &id),
    })
}

pub(super) async fn create_monitor(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "healthmonitor") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| match insert_monitor(s, &request) {
        Ok((lb, answer)) => {
            s.start_operation(&lb, "UPDATE");
            reply(StatusCode::CREATED, json!({"healthmonitor": answer}))
        }
        Err(e) => e,
    })
}

/// Validates and adds the health monitor `request` asks for: its load balancer and the
/// monitor as answered; the load balancer's operation is the caller's.
pub(super) fn insert_monitor(s: &mut State, request: &Value) -> Result<(String, Value), Response> {
    let pool = text(request, "pool_id");
    let (Some(kind), Some(_), Some(_), Some(_)) = (
        request["type"].as_str(),
        request["delay"].as_i64(),
        request["timeout"].as_i64(),
        request["max_retries"].as_i64(),
    ) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute healthmonitor: type, delay, timeout and max_retries are required",
        ));
    };
    let lb = pool_lb(s, &pool)?;
    let udp = s.pools[&pool].protocol == "UDP";
    if let Some(e) = ovn_refuses(s, &lb, request).or_else(|| too_new(s, request, udp)) {
        return Err(e);
    }
    if s.pools[&pool].healthmonitor_id.is_some() {
        return Err(error(
            StatusCode::CONFLICT,
            &format!("This pool {pool} already has a health monitor"),
        ));
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
        url_path: request["url_path"].as_str().map(str::to_owned),
        http_method: request["http_method"].as_str().map(str::to_owned),
        expected_codes: request["expected_codes"].as_str().map(str::to_owned),
    };
    apply_monitor(&mut monitor, request);
    let answer = monitor_json(&monitor);
    s.monitors.insert(id.clone(), monitor);
    if let Some(p) = s.pools.get_mut(&pool) {
        p.healthmonitor_id = Some(id);
    }
    Ok((lb, answer))
}

pub(super) async fn update_monitor(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "healthmonitor") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        let lb = monitor_lb(s, &id);
        change_child(s, lb, "Health Monitor", &id, |s| {
            let monitor = s.monitors.get_mut(&id).expect("checked");
            apply_monitor(monitor, &request);
            reply(
                StatusCode::OK,
                json!({"healthmonitor": monitor_json(monitor)}),
            )
        })
    })
}

pub(super) async fn delete_monitor(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| {
        let lb = monitor_lb(s, &id);
        change_child(s, lb, "Health Monitor", &id, |s| {
            if let Some(pool) = s.monitors.remove(&id).map(|h| h.pool_id)
                && let Some(p) = s.pools.get_mut(&pool)
            {
                p.healthmonitor_id = None;
            }
            StatusCode::NO_CONTENT.into_response()
        })
    })
}

/// The load balancer of health monitor `id`.
fn monitor_lb(s: &State, id: &str) -> Option<String> {
    let pool = &s.monitors.get(id)?.pool_id;
    Some(s.pools.get(pool)?.loadbalancer_id.clone())
}
