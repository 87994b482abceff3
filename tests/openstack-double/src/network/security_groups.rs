//! Security groups and their rules (Neutron's `security-group` extension): listed with
//! filters, made, shown and deleted as Neutron does. A new group comes with Neutron's
//! two egress rules; a rule's `remote_ip_prefix` is stored as its network
//! (`10.0.0.5/24` is `10.0.0.0/24`) and must be of its `ethertype`; a rule that is
//! already in the group is refused with 409 `SecurityGroupRuleExists`; a group a port
//! is in is refused deletion with 409 `SecurityGroupInUse`, and the project's
//! `default` group cannot be deleted (409 `SecurityGroupCannotRemoveDefault`).

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Filters, bad_request, error};
use crate::compute::iso8601;
use crate::state::{SecurityGroup, SecurityGroupRule};
use crate::{Shared, State, reply};

/// The protocol names Neutron takes (besides numbers 0 to 255).
const PROTOCOLS: [&str; 24] = [
    "ah",
    "dccp",
    "egp",
    "esp",
    "gre",
    "hopopt",
    "icmp",
    "igmp",
    "ipip",
    "ipv6-encap",
    "ipv6-frag",
    "ipv6-icmp",
    "icmpv6",
    "ipv6-nonxt",
    "ipv6-opts",
    "ipv6-route",
    "ospf",
    "pgm",
    "rsvp",
    "sctp",
    "tcp",
    "udp",
    "udplite",
    "vrrp",
];

/// The protocols whose rules take a port range (as Neutron checks them).
const PORT_PROTOCOLS: [&str; 9] = [
    "tcp", "udp", "sctp", "udplite", "dccp", "6", "17", "132", "136",
];

fn rule_json(r: &SecurityGroupRule) -> Value {
    json!({"id": r.id, "security_group_id": r.security_group_id, "direction": r.direction,
           "ethertype": r.ethertype, "protocol": r.protocol,
           "port_range_min": r.port_range_min, "port_range_max": r.port_range_max,
           "remote_ip_prefix": r.remote_ip_prefix, "remote_group_id": r.remote_group_id,
           "remote_address_group_id": null, "description": "",
           "tenant_id": "project", "project_id": "project", "revision_number": 0,
           "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"})
}

fn group_json(s: &State, g: &SecurityGroup) -> Value {
    let rules: Vec<Value> = s.rules_of(&g.id).iter().map(rule_json).collect();
    let created = iso8601(g.created);
    json!({"id": g.id, "name": g.name, "description": g.description,
           "tenant_id": "project", "project_id": "project", "stateful": true, "shared": false,
           "tags": [], "revision_number": g.revision_number,
           "created_at": created, "updated_at": created, "security_group_rules": rules})
}

fn group_not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "SecurityGroupNotFound",
        &format!("Security group {id} does not exist"),
    )
}

fn rule_not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "SecurityGroupRuleNotFound",
        &format!("Security group rule {id} does not exist"),
    )
}

pub(super) async fn list_security_groups(
    Extract(shared): Extract<Shared>,
    RawQuery(query): RawQuery,
) -> Response {
    shared.with(|s| {
        let all = s
            .security_groups
            .values()
            .map(|g| group_json(s, g))
            .collect();
        reply(
            StatusCode::OK,
            json!({"security_groups": Filters::parse(query).apply(all)}),
        )
    })
}

pub(super) async fn show_security_group(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.security_groups.get(&id) {
        Some(g) => reply(StatusCode::OK, json!({"security_group": group_json(s, g)})),
        None => group_not_found(&id),
    })
}

/// `POST /security-groups`: a group with Neutron's two egress rules.
pub(super) async fn create_security_group(
    Extract(shared): Extract<Shared>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let request = &body["security_group"];
    if !request.is_object() {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "Resource body required: security_group",
        );
    }
    let name = request["name"].as_str().unwrap_or_default();
    let description = request["description"].as_str().unwrap_or_default();
    if name.len() > 255 || description.len() > 255 {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "Invalid input for operation: name or description exceeds 255 characters",
        );
    }
    shared.with(|s| {
        if name == "default" {
            return error(
                StatusCode::CONFLICT,
                "SecurityGroupDefaultAlreadyExists",
                "Default security group already exists.",
            );
        }
        let group = s.add_security_group(name, description);
        reply(
            StatusCode::CREATED,
            json!({"security_group": group_json(s, &group)}),
        )
    })
}

/// `DELETE /security-groups/{id}`: refused while a port is in it, and for `default`.
pub(super) async fn delete_security_group(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| {
        let Some(group) = s.security_groups.get(&id) else {
            return group_not_found(&id);
        };
        if group.name == "default" {
            return error(
                StatusCode::CONFLICT,
                "SecurityGroupCannotRemoveDefault",
                "Insufficient rights for removing default security group.",
            );
        }
        if !s.ports_in_group(&id).is_empty() {
            return error(
                StatusCode::CONFLICT,
                "SecurityGroupInUse",
                &format!("Security Group {id} in use."),
            );
        }
        s.remove_security_group(&id);
        StatusCode::NO_CONTENT.into_response()
    })
}

pub(super) async fn list_security_group_rules(
    Extract(shared): Extract<Shared>,
    RawQuery(query): RawQuery,
) -> Response {
    shared.with(|s| {
        let all = s.security_group_rules.values().map(rule_json).collect();
        reply(
            StatusCode::OK,
            json!({"security_group_rules": Filters::parse(query).apply(all)}),
        )
    })
}

pub(super) async fn show_security_group_rule(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.security_group_rules.get(&id) {
        Some(r) => reply(StatusCode::OK, json!({"security_group_rule": rule_json(r)})),
        None => rule_not_found(&id),
    })
}

/// `POST /security-group-rules`: checked as Neutron checks a rule, then refused with
/// 409 when the group has the same rule.
pub(super) async fn create_security_group_rule(
    Extract(shared): Extract<Shared>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let rule = match parse_rule(&body["security_group_rule"]) {
        Ok(rule) => rule,
        Err(e) => return e,
    };
    shared.with(|s| {
        if !s.security_groups.contains_key(&rule.security_group_id) {
            return group_not_found(&rule.security_group_id);
        }
        if let Some(remote) = &rule.remote_group_id
            && !s.security_groups.contains_key(remote)
        {
            return group_not_found(remote);
        }
        if let Some(existing) = s.duplicate_rule(&rule) {
            return error(
                StatusCode::CONFLICT,
                "SecurityGroupRuleExists",
                &format!("Security group rule already exists. Rule id is {existing}."),
            );
        }
        let id = s.insert_rule(rule);
        reply(
            StatusCode::CREATED,
            json!({"security_group_rule": rule_json(&s.security_group_rules[&id])}),
        )
    })
}

/// `DELETE /security-group-rules/{id}`.
pub(super) async fn delete_security_group_rule(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.security_group_rules.remove(&id) {
        Some(rule) => {
            if let Some(group) = s.security_groups.get_mut(&rule.security_group_id) {
                group.revision_number += 1;
            }
            StatusCode::NO_CONTENT.into_response()
        }
        None => rule_not_found(&id),
    })
}

/// A rule as Neutron's API layer and `_validate_security_group_rule` take it (the
/// group's existence is checked by the caller).
fn parse_rule(request: &Value) -> Result<SecurityGroupRule, Response> {
    let invalid = |message: &str| Err(bad_request(StatusCode::BAD_REQUEST, message));
    if !request.is_object() {
        return invalid("Resource body required: security_group_rule");
    }
    let Some(group) = request["security_group_id"].as_str() else {
        return invalid(
            "Failed to parse request. Required attribute 'security_group_id' not specified",
        );
    };
    let direction = request["direction"].as_str().unwrap_or_default();
    if !matches!(direction, "ingress" | "egress") {
        return invalid(&format!(
            "Invalid input for direction. Reason: {direction} is not in [None, 'ingress', 'egress']."
        ));
    }
    let ethertype = request["ethertype"].as_str().unwrap_or("IPv4");
    if !matches!(ethertype, "IPv4" | "IPv6") {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "SecurityGroupRuleInvalidEtherType",
            &format!(
                "Security group rule for ethertype '{ethertype}' not supported. Allowed values \
                 are ['IPv4', 'IPv6']."
            ),
        ));
    }
    let protocol = protocol(&request["protocol"])?;
    let (min, max) = port_range(request, protocol.as_deref())?;
    let remote_ip_prefix = match request["remote_ip_prefix"].as_str() {
        None | Some("") => None,
        Some(prefix) => Some(network_of(prefix, ethertype)?),
    };
    let remote_group_id = request["remote_group_id"].as_str().map(str::to_owned);
    if remote_ip_prefix.is_some() && remote_group_id.is_some() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "SecurityGroupRemoteGroupAndRemoteIpPrefix",
            "Only remote_ip_prefix or remote_group_id may be provided.",
        ));
    }
    Ok(SecurityGroupRule {
        id: String::new(),
        security_group_id: group.to_owned(),
        direction: direction.to_owned(),
        ethertype: ethertype.to_owned(),
        protocol,
        port_range_min: min,
        port_range_max: max,
        remote_ip_prefix,
        remote_group_id,
    })
}

/// A rule's protocol: a name Neutron knows (as given, in lower case) or a number from
/// 0 to 255; none or `any` for every protocol.
fn protocol(value: &Value) -> Result<Option<String>, Response> {
    let text = match value {
        Value::Null => return Ok(None),
        Value::String(s) => s.to_ascii_lowercase(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    if text == "any" {
        return Ok(None);
    }
    if PROTOCOLS.contains(&text.as_str()) || text.parse::<u8>().is_ok() {
        return Ok(Some(text));
    }
    Err(error(
        StatusCode::BAD_REQUEST,
        "SecurityGroupRuleInvalidProtocol",
        &format!(
            "Security group rule protocol {text} not supported. Only protocol values \
             {PROTOCOLS:?} and integer representations [0 to 255] are supported."
        ),
    ))
}

/// A rule's port range, as Neutron's `_validate_port_range` checks it.
fn port_range(
    request: &Value,
    protocol: Option<&str>,
) -> Result<(Option<u32>, Option<u32>), Response> {
    let port = |key: &str| request[key].as_u64().map(|p| p as u32);
    let (min, max) = (port("port_range_min"), port("port_range_max"));
    if min.is_none() && max.is_none() {
        return Ok((None, None));
    }
    let Some(protocol) = protocol else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "SecurityGroupProtocolRequiredWithPorts",
            "Must also specify protocol if port range is given.",
        ));
    };
    if PORT_PROTOCOLS.contains(&protocol) {
        for p in [min, max].into_iter().flatten() {
            if p == 0 || p > 65_535 {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "SecurityGroupInvalidPortValue",
                    &format!("Invalid value for port {p}"),
                ));
            }
        }
        if let (Some(min), Some(max)) = (min, max)
            && min > max
        {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "SecurityGroupInvalidPortRange",
                "For TCP/UDP protocols, port_range_min must be <= port_range_max",
            ));
        }
    }
    Ok((min, max))
}

/// The network of `prefix` (`10.0.0.5/24` is `10.0.0.0/24`; an address alone is a
/// host prefix), which must be of `ethertype`.
fn network_of(prefix: &str, ethertype: &str) -> Result<String, Response> {
    let invalid = || {
        bad_request(
            StatusCode::BAD_REQUEST,
            &format!(
                "Invalid input for remote_ip_prefix. Reason: '{prefix}' is not a valid IP subnet."
            ),
        )
    };
    let (address, bits) = prefix.split_once('/').unwrap_or((prefix, ""));
    let address: std::net::IpAddr = address.parse().map_err(|_| invalid())?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    let bits: u32 = if bits.is_empty() {
        max
    } else {
        bits.parse().map_err(|_| invalid())?
    };
    if bits > max {
        return Err(invalid());
    }
    if (ethertype == "IPv4") != address.is_ipv4() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "SecurityGroupRuleParameterConflict",
            &format!("Conflicting value ethertype {ethertype} for CIDR {prefix}"),
        ));
    }
    Ok(match address {
        std::net::IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            format!("{}/{bits}", std::net::Ipv4Addr::from(u32::from(v4) & mask))
        }
        std::net::IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            format!("{}/{bits}", std::net::Ipv6Addr::from(u128::from(v6) & mask))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_prefixes_are_stored_as_their_network() {
        assert_eq!(network_of("10.0.0.5/24", "IPv4").unwrap(), "10.0.0.0/24");
        assert_eq!(network_of("0.0.0.0/0", "IPv4").unwrap(), "0.0.0.0/0");
        assert_eq!(network_of("10.1.2.3", "IPv4").unwrap(), "10.1.2.3/32");
        assert_eq!(network_of("fd00:1::5/64", "IPv6").unwrap(), "fd00:1::/64");
        assert_eq!(network_of("::/0", "IPv6").unwrap(), "::/0");
        assert!(network_of("::/0", "IPv4").is_err());
        assert!(network_of("10.0.0.0/33", "IPv4").is_err());
    }

    #[test]
    fn rules_are_checked_as_neutron_checks_them() {
        let rule = |body: Value| parse_rule(&body).map_err(|e| e.status());
        let ok = rule(json!({"security_group_id": "g", "direction": "ingress",
            "ethertype": "IPv4", "protocol": "TCP", "port_range_min": 30080,
            "port_range_max": 30080, "remote_ip_prefix": "10.0.0.9/16"}))
        .unwrap();
        assert_eq!(ok.protocol.as_deref(), Some("tcp"));
        assert_eq!(ok.remote_ip_prefix.as_deref(), Some("10.0.0.0/16"));
        for bad in [
            json!({"security_group_id": "g", "direction": "in"}),
            json!({"security_group_id": "g", "direction": "ingress", "port_range_min": 80}),
            json!({"security_group_id": "g", "direction": "ingress", "protocol": "tcp",
                   "port_range_min": 90, "port_range_max": 80}),
            json!({"security_group_id": "g", "direction": "ingress", "protocol": "bogus"}),
            json!({"security_group_id": "g", "direction": "ingress", "ethertype": "IPv6",
                   "remote_ip_prefix": "10.0.0.0/8"}),
            json!({"security_group_id": "g", "direction": "ingress",
                   "remote_ip_prefix": "10.0.0.0/8", "remote_group_id": "g"}),
        ] {
            assert_eq!(
                rule(bad.clone()).unwrap_err(),
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
    }
}
