//! Ports (a trunk's parent with its `trunk_details`), updates of their allowed
//! address pairs and security groups, and their tags' removal.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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
        "security_groups": p.security_groups, "tags": p.tags,
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

/// `PUT /ports/{id}`: only `allowed_address_pairs` (with the `allowed-address-pairs`
/// extension) and `security_groups` (groups that exist, on a port with port security)
/// may change (and `name`, ignored); both are checked before either changes.
pub(super) async fn update_port(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let pairs = match body["port"].get("allowed_address_pairs") {
        None => None,
        Some(pairs) => match address_pairs(pairs) {
            Ok(parsed) => Some(parsed),
            Err(e) => return e,
        },
    };
    let groups = match body["port"].get("security_groups") {
        None => None,
        Some(groups) => match group_ids(groups) {
            Ok(parsed) => Some(parsed),
            Err(e) => return e,
        },
    };
    if pairs.is_none() && groups.is_none() {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "Only allowed_address_pairs and security_groups can be updated here",
        );
    }
    shared.with(|s| {
        let trunk = trunk_details(s, &id);
        if let Err(e) = check_update(s, &id, pairs.as_deref(), groups.as_deref()) {
            return e;
        }
        let p = s.ports.get_mut(&id).expect("checked");
        if let Some(mut pairs) = pairs {
            for pair in &mut pairs {
                if pair.1.is_empty() {
                    pair.1 = p.mac_address.clone();
                }
            }
            p.allowed_address_pairs = pairs;
        }
        if let Some(groups) = groups {
            p.security_groups = groups;
        }
        reply(StatusCode::OK, json!({"port": port_json(p, trunk)}))
    })
}

/// `allowed_address_pairs` as `(ip_address, mac_address)`.
fn address_pairs(pairs: &Value) -> Result<Vec<(String, String)>, Response> {
    let Some(pairs) = pairs.as_array() else {
        return Err(bad_request(
            StatusCode::BAD_REQUEST,
            "Invalid input for allowed_address_pairs",
        ));
    };
    let mut parsed = Vec::new();
    for pair in pairs {
        let Some(ip) = pair["ip_address"].as_str() else {
            return Err(bad_request(
                StatusCode::BAD_REQUEST,
                "Invalid input for allowed_address_pairs: ip_address is required",
            ));
        };
        parsed.push((
            ip.to_owned(),
            pair["mac_address"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    Ok(parsed)
}

/// `security_groups` as IDs, each once (Neutron keeps a set).
fn group_ids(groups: &Value) -> Result<Vec<String>, Response> {
    let invalid = || {
        bad_request(
            StatusCode::BAD_REQUEST,
            "Invalid input for security_groups: not a list of UUIDs",
        )
    };
    let mut ids: Vec<String> = Vec::new();
    for group in groups.as_array().ok_or_else(invalid)? {
        let id = group.as_str().ok_or_else(invalid)?;
        if !ids.iter().any(|g| g == id) {
            ids.push(id.to_owned());
        }
    }
    Ok(ids)
}

/// Neutron's checks of a port update: the port exists; address pairs need the
/// extension and port security; security groups must exist and need port security
/// (`PortSecurityAndIPRequiredForSecurityGroups`).
fn check_update(
    s: &crate::State,
    id: &str,
    pairs: Option<&[(String, String)]>,
    groups: Option<&[String]>,
) -> Result<(), Response> {
    if pairs.is_some() && !has_extension(s, "allowed-address-pairs") {
        return Err(bad_request(
            StatusCode::BAD_REQUEST,
            "Unrecognized attribute(s) 'allowed_address_pairs'",
        ));
    }
    let Some(p) = s.ports.get(id) else {
        return Err(error(
            StatusCode::NOT_FOUND,
            "PortNotFound",
            &format!("Port {id} could not be found."),
        ));
    };
    if let Some(pairs) = pairs
        && !p.port_security_enabled
        && !pairs.is_empty()
    {
        return Err(bad_request(
            StatusCode::CONFLICT,
            &format!(
                "Port Security must be enabled in order to have allowed address pairs on a port {id}"
            ),
        ));
    }
    if let Some(groups) = groups {
        if let Some(missing) = groups.iter().find(|g| !s.security_groups.contains_key(*g)) {
            return Err(error(
                StatusCode::NOT_FOUND,
                "SecurityGroupNotFound",
                &format!("Security group {missing} does not exist"),
            ));
        }
        if !p.port_security_enabled && !groups.is_empty() {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "PortSecurityAndIPRequiredForSecurityGroups",
                "Port security must be enabled and port must have an IP address in order to \
                 use security groups.",
            ));
        }
    }
    Ok(())
}

/// `DELETE /ports/{id}/tags/{tag}` (the `standard-attr-tag` extension): 404 when the
/// port or the tag is not there.
pub(super) async fn delete_port_tag(
    Extract(shared): Extract<Shared>,
    Path((id, tag)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.ports.get_mut(&id) {
        None => error(
            StatusCode::NOT_FOUND,
            "PortNotFound",
            &format!("Port {id} could not be found."),
        ),
        Some(p) if !p.tags.contains(&tag) => error(
            StatusCode::NOT_FOUND,
            "TagNotFound",
            &format!("Tag {tag} could not be found."),
        ),
        Some(p) => {
            p.tags.retain(|t| t != &tag);
            StatusCode::NO_CONTENT.into_response()
        }
    })
}
