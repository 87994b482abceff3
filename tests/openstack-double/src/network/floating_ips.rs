//! Floating IPs: allocated from an external network (or a given subnet or address),
//! bound to a port and unbound.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Filters, bad_request, error};
use crate::state::FloatingIp;
use crate::{Shared, reply};

fn floating_ip_json(f: &FloatingIp) -> Value {
    json!({"id": f.id, "floating_ip_address": f.floating_ip_address,
           "floating_network_id": f.floating_network_id, "port_id": f.port_id,
           "fixed_ip_address": f.fixed_ip_address, "description": f.description,
           "status": if f.port_id.is_some() { "ACTIVE" } else { "DOWN" },
           "router_id": null, "tenant_id": "project", "project_id": "project"})
}

pub(super) async fn list_floating_ips(
    Extract(shared): Extract<Shared>,
    RawQuery(query): RawQuery,
) -> Response {
    shared.with(|s| {
        let all = s.floating_ips.values().map(floating_ip_json).collect();
        reply(
            StatusCode::OK,
            json!({"floatingips": Filters::parse(query).apply(all)}),
        )
    })
}

pub(super) async fn show_floating_ip(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.floating_ips.get(&id) {
        Some(f) => reply(StatusCode::OK, json!({"floatingip": floating_ip_json(f)})),
        None => error(
            StatusCode::NOT_FOUND,
            "FloatingIPNotFound",
            &format!("Floating IP {id} could not be found"),
        ),
    })
}

/// `(port_id, fixed_ip_address)` for binding to `port` (its first fixed IP).
fn binding(s: &crate::State, port: &str) -> Result<(String, String), Response> {
    let Some(p) = s.ports.get(port) else {
        return Err(error(
            StatusCode::NOT_FOUND,
            "PortNotFound",
            &format!("Port {port} could not be found."),
        ));
    };
    let ip = p
        .fixed_ips
        .first()
        .map(|(_, ip)| ip.clone())
        .unwrap_or_default();
    Ok((port.to_owned(), ip))
}

pub(super) async fn create_floating_ip(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let request = &body["floatingip"];
    let Some(network) = request["floating_network_id"].as_str() else {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "Invalid input for floating_network_id",
        );
    };
    shared.with(|s| {
        if !s.networks.get(network).is_some_and(|n| n.external) {
            return error(
                StatusCode::NOT_FOUND,
                "ExternalNetworkNotFound",
                &format!("External network {network} could not be found."),
            );
        }
        let bound = match request["port_id"].as_str() {
            None => None,
            Some(port) => match binding(s, port) {
                Ok(b) => Some(b),
                Err(e) => return e,
            },
        };
        let subnet = match request["subnet_id"].as_str() {
            None => s.subnet_of(network).map(|x| x.id.clone()).unwrap_or_default(),
            Some(id) => match s.subnets.get(id) {
                Some(x) if x.network_id != network => {
                    return bad_request(
                        StatusCode::BAD_REQUEST,
                        &format!("Bad floatingip request: Subnet {id} does not belong to network {network}."),
                    );
                }
                Some(x) if x.exhausted => {
                    return error(
                        StatusCode::CONFLICT,
                        "IpAddressGenerationFailure",
                        &format!("No more IP addresses available on network {network}."),
                    );
                }
                Some(x) => x.id.clone(),
                None => {
                    return error(
                        StatusCode::NOT_FOUND,
                        "SubnetNotFound",
                        &format!("Subnet {id} could not be found."),
                    );
                }
            },
        };
        let address = match request["floating_ip_address"].as_str() {
            Some(wanted)
                if s.floating_ips
                    .values()
                    .any(|f| f.floating_ip_address == wanted) =>
            {
                return error(
                    StatusCode::CONFLICT,
                    "IpAddressAlreadyAllocated",
                    &format!("IP address {wanted} already allocated"),
                );
            }
            Some(wanted) => wanted.to_owned(),
            None => s.free_ip_in(&subnet),
        };
        let id = s.id();
        let fip = FloatingIp {
            id: id.clone(),
            floating_ip_address: address,
            floating_network_id: network.to_owned(),
            port_id: bound.as_ref().map(|b| b.0.clone()),
            fixed_ip_address: bound.map(|b| b.1),
            description: request["description"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            subnet_id: subnet,
        };
        let answer = json!({"floatingip": floating_ip_json(&fip)});
        s.floating_ips.insert(id, fip);
        reply(StatusCode::CREATED, answer)
    })
}

/// `PUT /floatingips/{id}`: binds to `port_id`, or unbinds with `null`.
pub(super) async fn update_floating_ip(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let request = &body["floatingip"];
    shared.with(|s| {
        let bound = match &request["port_id"] {
            Value::Null => None,
            Value::String(port) => match binding(s, port) {
                Ok(b) => Some(b),
                Err(e) => return e,
            },
            _ => return bad_request(StatusCode::BAD_REQUEST, "Invalid input for port_id"),
        };
        match s.floating_ips.get_mut(&id) {
            Some(f) => {
                f.port_id = bound.as_ref().map(|b| b.0.clone());
                f.fixed_ip_address = bound.map(|b| b.1);
                if let Some(d) = request["description"].as_str() {
                    f.description = d.to_owned();
                }
                reply(StatusCode::OK, json!({"floatingip": floating_ip_json(f)}))
            }
            None => error(
                StatusCode::NOT_FOUND,
                "FloatingIPNotFound",
                &format!("Floating IP {id} could not be found"),
            ),
        }
    })
}

pub(super) async fn delete_floating_ip(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.floating_ips.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "FloatingIPNotFound",
            &format!("Floating IP {id} could not be found"),
        ),
    })
}
