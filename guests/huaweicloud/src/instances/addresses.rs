//! An ECS's Node addresses, as upstream's `EcsClient.BuildAddresses`
//! (`pkg/cloudprovider/huaweicloud/wrapper/ecs.go`) builds them, and IP comparison.

use std::net::IpAddr;

use wasm_ccm_guest::types::{NodeAddress, NodeAddressType};

use super::{InterfaceAttachment, Server};
use crate::config::NetworkingOptions;

/// The address `text` as an IP, IPv4-mapped IPv6 (`::ffff:10.0.0.1`) as IPv4.
fn canonical(text: &str) -> Option<IpAddr> {
    match text.trim().parse::<IpAddr>().ok()? {
        IpAddr::V6(v6) => Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)),
        v4 => Some(v4),
    }
}

/// Whether two addresses are the same IP (`10.0.0.1` and `::ffff:10.0.0.1`, `fd00::1`
/// and `fd00:0::1`); text that is not an IP only equals itself.
pub fn same_ip(a: &str, b: &str) -> bool {
    match (canonical(a), canonical(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

/// Whether `text` is an IPv4 address as Go's `net.ParseIP(text).To4() != nil` says
/// (IPv4-mapped IPv6 included).
pub fn is_ipv4(text: &str) -> bool {
    matches!(canonical(text), Some(IpAddr::V4(_)))
}

/// upstream's `addToNodeAddresses`: added unless the same address of the same type is
/// there.
fn add(addresses: &mut Vec<NodeAddress>, address_type: NodeAddressType, address: &str) {
    if !addresses
        .iter()
        .any(|a| a.address_type == address_type && same_ip(&a.address, address))
    {
        addresses.push(NodeAddress {
            address_type,
            address: address.to_owned(),
        });
    }
}

/// upstream's `removeFromNodeAddresses` without a type: the address, of any type.
fn remove(addresses: &mut Vec<NodeAddress>, address: &str) {
    addresses.retain(|a| !same_ip(&a.address, address));
}

/// The Node addresses of `server`, as upstream's `BuildAddresses`:
/// 1. the IPv4 fixed IPs of its `ACTIVE` interfaces (ECS's `os-interface`), in order:
///    internal;
/// 2. its `accessIPv4`: external;
/// 3. its `addresses`, by NIC key (the VPC) in sorted order: floating ones external;
///    those under a `public-network-name` external (and no longer internal); the others
///    internal when `internal-network-name` is unset or names their key, else dropped
///    (and removed if listed before); IPv4 only.
///
/// No hostname: upstream gives none, and the host keeps the kubelet's `Hostname`
/// address when the provider gives none, as upstream's node controller does. Where
/// upstream adds an `accessIPv4` that is not an IP, it is left out here (the host
/// refuses a Node address that is not one).
pub fn node_addresses(
    server: &Server,
    interfaces: &[InterfaceAttachment],
    networking: &NetworkingOptions,
) -> Vec<NodeAddress> {
    let mut addresses = Vec::new();
    for interface in interfaces.iter().filter(|i| i.port_state == "ACTIVE") {
        for fixed in &interface.fixed_ips {
            if is_ipv4(&fixed.ip_address) {
                add(
                    &mut addresses,
                    NodeAddressType::InternalIp,
                    &fixed.ip_address,
                );
            }
        }
    }
    if canonical(&server.access_ipv4).is_some() {
        add(
            &mut addresses,
            NodeAddressType::ExternalIp,
            &server.access_ipv4,
        );
    }
    // A BTreeMap: its keys in sorted order, as upstream's `sort.Strings(nicIDs)`.
    for (nic, list) in &server.addresses {
        for entry in list {
            let address_type = if entry.kind == "floating" {
                NodeAddressType::ExternalIp
            } else if networking.public_network_name.contains(nic) {
                remove(&mut addresses, &entry.addr);
                NodeAddressType::ExternalIp
            } else if networking.internal_network_name.is_empty()
                || networking.internal_network_name.contains(nic)
            {
                NodeAddressType::InternalIp
            } else {
                remove(&mut addresses, &entry.addr);
                continue;
            };
            if is_ipv4(&entry.addr) {
                add(&mut addresses, address_type, &entry.addr);
            }
        }
    }
    addresses
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn addr(address_type: NodeAddressType, address: &str) -> NodeAddress {
        NodeAddress {
            address_type,
            address: address.into(),
        }
    }

    fn server(value: serde_json::Value) -> Server {
        serde_json::from_value(value).unwrap()
    }

    fn interfaces(value: serde_json::Value) -> Vec<InterfaceAttachment> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn ips_compare_as_ips() {
        assert!(same_ip("10.0.0.1", "::ffff:10.0.0.1"));
        assert!(same_ip("fd00::1", "fd00:0:0::1"));
        assert!(!same_ip("10.0.0.1", "10.0.0.10"));
        assert!(same_ip("node-1", "node-1"));
        assert!(is_ipv4("192.168.0.5") && is_ipv4("::ffff:192.168.0.5"));
        assert!(!is_ipv4("fd00::5") && !is_ipv4("node-1"));
    }

    /// upstream's order: active interfaces' fixed IPv4s, accessIPv4, then the NICs'
    /// addresses by sorted key (floating external), IPv6 and down ports' IPs left out
    /// of the first step.
    #[test]
    fn addresses_in_upstreams_order() {
        use NodeAddressType::{ExternalIp, InternalIp};
        let server = server(json!({
            "id": "s1", "accessIPv4": "203.0.113.1",
            "addresses": {
                "vpc-b": [{"addr": "10.1.0.9", "OS-EXT-IPS:type": "fixed"}],
                "vpc-a": [{"addr": "192.168.0.5", "OS-EXT-IPS:type": "fixed"},
                          {"addr": "fd00::5", "OS-EXT-IPS:type": "fixed"},
                          {"addr": "198.51.100.7", "OS-EXT-IPS:type": "floating"}]}}));
        let nics = interfaces(json!([
            {"port_state": "ACTIVE", "fixed_ips": [
                {"ip_address": "10.1.0.9", "subnet_id": "sub-b"},
                {"ip_address": "fd00::9", "subnet_id": "sub-b6"}]},
            {"port_state": "DOWN", "fixed_ips": [{"ip_address": "192.168.0.5", "subnet_id": "sub-a"}]}
        ]));
        assert_eq!(
            node_addresses(&server, &nics, &NetworkingOptions::default()),
            vec![
                addr(InternalIp, "10.1.0.9"),
                addr(ExternalIp, "203.0.113.1"),
                addr(InternalIp, "192.168.0.5"),
                addr(ExternalIp, "198.51.100.7"),
            ]
        );
    }

    /// `public-network-name` makes a NIC's addresses external (removing them as
    /// internal); with `internal-network-name`, other NICs' addresses are dropped.
    #[test]
    fn networking_options_as_upstream() {
        use NodeAddressType::{ExternalIp, InternalIp};
        let server = server(json!({
            "id": "s1",
            "addresses": {
                "vpc-a": [{"addr": "192.168.0.5", "OS-EXT-IPS:type": "fixed"}],
                "vpc-b": [{"addr": "10.1.0.9", "OS-EXT-IPS:type": "fixed"}],
                "vpc-c": [{"addr": "172.16.0.3", "OS-EXT-IPS:type": "fixed"}]}}));
        let nics = interfaces(json!([
            {"port_state": "ACTIVE", "fixed_ips": [{"ip_address": "10.1.0.9"}]},
            {"port_state": "ACTIVE", "fixed_ips": [{"ip_address": "172.16.0.3"}]}
        ]));
        let networking = NetworkingOptions {
            public_network_name: vec!["vpc-b".into()],
            internal_network_name: vec!["vpc-a".into()],
        };
        assert_eq!(
            node_addresses(&server, &nics, &networking),
            vec![
                addr(InternalIp, "192.168.0.5"),
                addr(ExternalIp, "10.1.0.9")
            ]
        );
    }

    /// What a listing gives as `null` reads as empty; a bad accessIPv4 is left out.
    #[test]
    fn nulls_read_as_empty() {
        let server = server(json!({"id": "s1", "accessIPv4": "", "addresses": null,
                                   "flavor": null, "status": null}));
        assert!(node_addresses(&server, &[], &NetworkingOptions::default()).is_empty());
        let nics = interfaces(json!([{"port_state": null, "fixed_ips": null}]));
        assert!(node_addresses(&server, &nics, &NetworkingOptions::default()).is_empty());
    }
}
