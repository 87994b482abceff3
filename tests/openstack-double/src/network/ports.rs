//! Ports (a trunk's parent with its `trunk_details`), and updates of their allowed
//! address pairs.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{Filters, bad_request, error, has_extension};
use crate::state::Port;
use crate::{Shared, reply};

/// A trunk parent's `trunk_details` (the `trunk-details` extension), as Neutron shows
/// them on the port and in port listings (where a subport's `mac_address` may be left
/// out, as here).
fn trunk_details(s: &crate::State, port: &str) -> Option<Value> {
    if !has_extension(s, "trunk-details") {
        return None;
    }
    let trunk = s.trunks.values().find(|t| t.port_id == port)?;
    let sub_ports: Vec<Value> = trunk
        .sub_ports
        .iter()
        .map(|(id, vlan)| {
            json!({"port_id": id, "segmentation_type": "vlan", "segmentation_id": vlan})
        })
        .collect();
    Some(json!({"trunk_id": trunk.id, "sub_ports": sub_ports}))
}

fn port_json(p: &Port, trunk_details: Option<Value>) -> Value {
    let mut port = json!({
        "id": p.id, "network_id": p.network_id, "device_id": p.device_id,
        "device_owner": p.device_owner, "mac_address": p.mac_address, "status": "ACTIVE",
        "admin_state_up": true, "tenant_id": "project", "project_id": "project", "name": "",
        "port_security_enabled": p.port_security_enabled,
        "fixed_ips": p.fixed_ips.iter().map(|(subnet, ip)| json!({"subnet_id": subnet, "ip_address": ip})).collect::<Vec<_>>(),
        "allowed_address_pairs": p.allowed_address_pairs.iter().map(|(ip, mac)| json!({"ip_address": ip, "mac_address": mac})).collect::<Vec<_>>(),
        "security_groups": [],
    });
    if let Some(details) = trunk_details {
        port["trunk_details"] = details;
    }
    port
}

pub(super) async fn list_ports(
    Extract(shared): Extract<Shared>,
    RawQuery(query): RawQuery,
) -> Response {
    shared.with(|s| {
        let all = s
            .ports
            .values()
            .map(|p| port_json(p, trunk_details(s, &p.id)))
            .collect();
        reply(
            StatusCode::OK,
            json!({"ports": Filters::parse(query).apply(all)}),
        )
    })
}

pub(super) async fn show_port(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.ports.get(&id) {
        Some(p) => reply(
            StatusCode::OK,
            json!({"port": port_json(p, trunk_details(s, &id))}),
        ),
        None => error(
            StatusCode::NOT_FOUND,
            "PortNotFound",
            &format!("Port {id} could not be found."),
        ),
    })
}

/// `PUT /ports/{id}`: only `allowed_address_pairs` (and `name`, ignored) may change,
/// and only with the `allowed-address-pairs` extension.
pub(super) async fn update_port(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(pairs) = body["port"]["allowed_address_pairs"].as_array() else {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "Only allowed_address_pairs can be updated here",
        );
    };
    let mut parsed = Vec::new();
    for pair in pairs {
        let Some(ip) = pair["ip_address"].as_str() else {
            return bad_request(
                StatusCode::BAD_REQUEST,
                "Invalid input for allowed_address_pairs: ip_address is required",
            );
        };
        parsed.push((
            ip.to_owned(),
            pair["mac_address"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    shared.with(|s| {
        let trunk = trunk_details(s, &id);
        match s.ports.get_mut(&id) {
            _ if !s.network_extensions.iter().any(|e| e == "allowed-address-pairs") => bad_request(
                StatusCode::BAD_REQUEST,
                "Unrecognized attribute(s) 'allowed_address_pairs'",
            ),
            Some(p) if !p.port_security_enabled && !parsed.is_empty() => bad_request(
                StatusCode::CONFLICT,
                &format!(
                    "Port Security must be enabled in order to have allowed address pairs on a port {id}"
                ),
            ),
            Some(p) => {
                for pair in &mut parsed {
                    if pair.1.is_empty() {
                        pair.1 = p.mac_address.clone();
                    }
                }
                p.allowed_address_pairs = parsed;
                reply(StatusCode::OK, json!({"port": port_json(p, trunk)}))
            }
            None => error(
                StatusCode::NOT_FOUND,
                "PortNotFound",
                &format!("Port {id} could not be found."),
            ),
        }
    })
}
