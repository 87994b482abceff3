//! A server's Node addresses, as occm's `nodeAddresses` builds them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;
use wasm_ccm_guest::types::{NodeAddress, NodeAddressType};

use super::{Subports, subport_ids};
use crate::config::NetworkingConfig;

fn add(addresses: &mut Vec<NodeAddress>, address_type: NodeAddressType, address: &str) {
    if !addresses
        .iter()
        .any(|a| a.address == address && a.address_type == address_type)
    {
        addresses.push(NodeAddress {
            address_type,
            address: address.to_owned(),
        });
    }
}

fn is_ipv6(address: &str) -> bool {
    address.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6())
}

/// A server's Node addresses, as occm's `nodeAddresses`: the fixed IPs of its `ACTIVE`
/// ports first (internal); then `accessIPv4`/`accessIPv6` (external); then Nova's
/// addresses by network name in name order, each network's trunk subport addresses
/// after Nova's (occm adds them as `fixed` addresses of their network's name, in the
/// order of the ports' `trunk_details`): floating ones external, those on a
/// `public-network-name` external (and no longer internal), the others internal when
/// `internal-network-name` is unset or names their network (else dropped). IPv6 is
/// left out with `ipv6-support-disabled`; `address-sort-order` puts addresses in the
/// listed CIDRs first, in that order.
pub fn node_addresses(
    server: &Value,
    ports: &[Value],
    subports: &Subports,
    networking: &NetworkingConfig,
) -> Vec<NodeAddress> {
    let ipv6_ok = |a: &str| !(is_ipv6(a) && networking.ipv6_support_disabled);
    let mut addresses = Vec::new();
    for port in ports.iter().filter(|p| p["status"] == "ACTIVE") {
        for fixed in port["fixed_ips"].as_array().into_iter().flatten() {
            if let Some(ip) = fixed["ip_address"].as_str().filter(|ip| ipv6_ok(ip)) {
                add(&mut addresses, NodeAddressType::InternalIp, ip);
            }
        }
    }
    for key in ["accessIPv4", "accessIPv6"] {
        if let Some(ip) = server[key]
            .as_str()
            .filter(|ip| !ip.is_empty() && ipv6_ok(ip))
        {
            add(&mut addresses, NodeAddressType::ExternalIp, ip);
        }
    }
    if let Some(hostname) = server["metadata"]["hostname"]
        .as_str()
        .filter(|h| !h.is_empty())
    {
        add(&mut addresses, NodeAddressType::Hostname, hostname);
    }
    // Nova's addresses by network name (`(address, floating)`), then the subports' (of
    // every port, whatever its status, as occm's subport loop).
    let mut networks: BTreeMap<&str, Vec<(&str, bool)>> = BTreeMap::new();
    for (name, list) in server["addresses"].as_object().into_iter().flatten() {
        let entries = networks.entry(name.as_str()).or_default();
        for entry in list.as_array().into_iter().flatten() {
            if let Some(ip) = entry["addr"].as_str() {
                entries.push((ip, entry["OS-EXT-IPS:type"] == "floating"));
            }
        }
    }
    for id in subport_ids(ports) {
        let Some(subport) = subports.get(id) else {
            continue;
        };
        for ip in subport.addresses.iter().filter(|ip| ipv6_ok(ip.as_str())) {
            networks
                .entry(subport.network.as_str())
                .or_default()
                .push((ip.as_str(), false));
        }
    }
    for (name, entries) in networks {
        for (ip, floating) in entries {
            let address_type = if floating {
                NodeAddressType::ExternalIp
            } else if networking.public_network_names.iter().any(|n| n == name) {
                addresses.retain(|a| a.address != ip);
                NodeAddressType::ExternalIp
            } else if networking.internal_network_names.is_empty()
                || networking.internal_network_names.iter().any(|n| n == name)
            {
                NodeAddressType::InternalIp
            } else {
                addresses.retain(|a| a.address != ip);
                continue;
            };
            if ipv6_ok(ip) {
                add(&mut addresses, address_type, ip);
            }
        }
    }
    if !networking.address_sort_order.is_empty() {
        // occm's sortNodeAddresses: the first CIDR's addresses first, ascending within a
        // CIDR; the others after them, in their order.
        let rank = |a: &NodeAddress| {
            networking
                .address_sort_order
                .iter()
                .position(|cidr| in_cidr(&a.address, cidr))
                .unwrap_or(usize::MAX)
        };
        addresses.sort_by(|a, b| {
            let (ra, rb) = (rank(a), rank(b));
            if ra == rb && ra != usize::MAX {
                ip_bytes(&a.address).cmp(&ip_bytes(&b.address))
            } else {
                ra.cmp(&rb)
            }
        });
    }
    addresses
}

/// An address's bytes as Go's `net.ParseIP` gives them (IPv4 mapped), for ordering.
fn ip_bytes(address: &str) -> Vec<u8> {
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.to_ipv6_mapped().octets().to_vec(),
        Ok(IpAddr::V6(v6)) => v6.octets().to_vec(),
        Err(_) => Vec::new(),
    }
}

/// Whether `address` lies in `cidr`.
fn in_cidr(address: &str, cidr: &str) -> bool {
    let (Ok(ip), Some((net, bits))) = (address.parse::<IpAddr>(), cidr.split_once('/')) else {
        return false;
    };
    let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.parse::<u32>()) else {
        return false;
    };
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}
