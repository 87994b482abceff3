//! Octavia listeners.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{change_child, error, filtered, mutable, not_found, ovn_refuses, parse, text, too_new};
use crate::state::{Listener, State};
use crate::{Shared, reply};

fn listener_json(l: &Listener) -> Value {
    let mut v = json!({
        "id": l.id, "name": l.name, "protocol": l.protocol, "protocol_port": l.protocol_port,
        "loadbalancers": [{"id": l.loadbalancer_id}], "default_pool_id": l.default_pool_id,
        "allowed_cidrs": if l.allowed_cidrs.is_empty() { Value::Null } else { json!(l.allowed_cidrs) },
        "provisioning_status": "ACTIVE", "operating_status": "ONLINE", "admin_state_up": true,
        "connection_limit": -1, "tags": l.tags, "project_id": "project",
        "insert_headers": l.insert_headers,
        "default_tls_container_ref": l.default_tls_container_ref,
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
    if let Some(headers) = request["insert_headers"].as_object() {
        l.insert_headers = headers
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
    }
    if request.get("default_tls_container_ref").is_some() {
        l.default_tls_container_ref = request["default_tls_container_ref"]
            .as_str()
            .map(str::to_owned);
    }
    if let Some(tags) = request["tags"].as_array() {
        l.tags = tags
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
    }
    for key in LISTENER_SETTINGS {
        if let Some(n) = request[key].as_i64() {
            l.settings.insert(key.into(), n);
        }
    }
}

pub(super) async fn list_listeners(
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

pub(super) async fn show_listener(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.listeners.get(&id) {
        Some(l) => reply(StatusCode::OK, json!({"listener": listener_json(l)})),
        None => not_found("Listener", &id),
    })
}

pub(super) async fn create_listener(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let request = match parse(&bytes, "listener") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| match insert_listener(s, &request) {
        Ok((lb, answer)) => {
            s.start_operation(&lb, "UPDATE");
            reply(StatusCode::CREATED, json!({"listener": answer}))
        }
        Err(e) => e,
    })
}

/// Validates and adds the listener `request` asks for: its load balancer and the
/// listener as answered; the load balancer's operation is the caller's.
pub(super) fn insert_listener(s: &mut State, request: &Value) -> Result<(String, Value), Response> {
    let lb = text(request, "loadbalancer_id");
    let (Some(protocol), Some(port)) = (
        request["protocol"].as_str(),
        request["protocol_port"].as_u64(),
    ) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute listener: protocol and protocol_port are required",
        ));
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
        return Err(error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid input for field/attribute protocol. Value: '{protocol}'."),
        ));
    }
    mutable(s, &lb)?;
    if let Some(e) = ovn_refuses(s, &lb, request).or_else(|| too_new(s, request, false)) {
        return Err(e);
    }
    // Octavia's _validate_create_listener: one listener per port and transport.
    let transport = |p: &str| {
        if matches!(p, "UDP" | "SCTP") {
            p.to_owned()
        } else {
            "TCP".to_owned()
        }
    };
    if s.listeners.values().any(|l| {
        l.loadbalancer_id == lb
            && u64::from(l.protocol_port) == port
            && transport(&l.protocol) == transport(protocol)
    }) {
        return Err(error(
            StatusCode::CONFLICT,
            &format!(
                "Another Listener on this Load Balancer is already using protocol_port {port}"
            ),
        ));
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
        tags: Vec::new(),
        insert_headers: Default::default(),
        default_tls_container_ref: None,
        settings: Default::default(),
    };
    apply_listener(&mut listener, request);
    let answer = listener_json(&listener);
    s.listeners.insert(id, listener);
    Ok((lb, answer))
}

pub(super) async fn update_listener(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request = match parse(&bytes, "listener") {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        let lb = s.listeners.get(&id).map(|l| l.loadbalancer_id.clone());
        if let Some(e) = lb
            .as_ref()
            .and_then(|lb| ovn_refuses(s, lb, &request))
            .or_else(|| too_new(s, &request, false))
        {
            return e;
        }
        change_child(s, lb, "Listener", &id, |s| {
            let listener = s.listeners.get_mut(&id).expect("checked");
            apply_listener(listener, &request);
            reply(StatusCode::OK, json!({"listener": listener_json(listener)}))
        })
    })
}

pub(super) async fn delete_listener(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| {
        let lb = s.listeners.get(&id).map(|l| l.loadbalancer_id.clone());
        change_child(s, lb, "Listener", &id, |s| {
            s.listeners.remove(&id);
            for pool in s.pools.values_mut() {
                if pool.listener_id.as_deref() == Some(id.as_str()) {
                    pool.listener_id = None;
                }
            }
            StatusCode::NO_CONTENT.into_response()
        })
    })
}
