//! `instances-v2`: EC2 instances behind Nodes, as cloud-provider-aws sees them.
//!
//! - Provider IDs are `aws:///<zone>/<instance-id>`; `aws:////<id>` and a bare
//!   `i-...` are read too ([`instance_id`]).
//! - A Node without a provider ID is found by name: an `i-...` name is the instance
//!   ID, any other name is the instance's private DNS name among alive instances.
//! - Exists is false only for a terminated instance or one EC2 says does not exist
//!   (`InvalidInstanceID.NotFound`, by provider ID). A Node found by name has no
//!   proof of absence: no match is `instance-not-found`, an error, so the Node is
//!   never deleted for it (upstream does the same). Shutdown is `stopped`; addresses
//!   are upstream's (`node_addresses`).

use crate::api::Params;
use crate::config::Config;
use crate::ec2::{self, Instance};
use crate::{Aws, PROVIDER_NAME};
use wasm_ccm_guest::InstancesV2;
use wasm_ccm_guest::types::{CloudError, InstanceInfo, Node, NodeAddress, NodeAddressType};

/// The label upstream sets from the zone's ID (e.g. `use1-az1`).
pub const ZONE_ID_LABEL: &str = "topology.k8s.aws/zone-id";

/// The instance ID in a provider ID, as upstream's `MapToAWSInstanceID`: the last
/// path segment of `aws://[host]/<zone>/<id>` (or a bare ID), which must be `i-...`.
pub fn instance_id(provider_id: &str) -> Result<String, CloudError> {
    let bad = || {
        CloudError::Other(format!(
            "provider ID {provider_id:?} is not an AWS instance (aws:///<zone>/i-...)"
        ))
    };
    let full = if provider_id.starts_with("aws://") {
        provider_id.to_owned()
    } else if provider_id.contains("://") {
        return Err(bad());
    } else {
        format!("aws:///{provider_id}")
    };
    let rest = full.strip_prefix("aws://").ok_or_else(bad)?;
    // The host part (usually empty) is ignored.
    let path = rest.split_once('/').map(|(_, path)| path).unwrap_or("");
    let id = path.trim_matches('/').rsplit('/').next().unwrap_or("");
    if id.starts_with("i-") && id.len() > 2 {
        Ok(id.to_owned())
    } else {
        Err(bad())
    }
}

/// `aws:///<zone>/<id>`.
pub fn provider_id(instance: &Instance) -> String {
    format!("{PROVIDER_NAME}:///{}/{}", instance.zone, instance.id)
}

/// The instance behind `node`: `None` only when EC2 says the node's provider ID names
/// no instance; a node without a provider ID that matches no instance by name is
/// `instance-not-found` (not a proof that its instance is gone).
pub fn find(state: &Aws, node: &Node) -> Result<Option<Instance>, CloudError> {
    if let Some(pid) = node.provider_id.as_deref().filter(|p| !p.is_empty()) {
        let id = instance_id(pid)?;
        return Ok(state.ec2.instances_by_id(&[id])?.into_iter().next());
    }
    match by_node_name(state, &node.metadata.name)? {
        Some(instance) => Ok(Some(instance)),
        None => Err(CloudError::InstanceNotFound),
    }
}

/// The alive instance a node named `name` runs on.
pub fn by_node_name(state: &Aws, name: &str) -> Result<Option<Instance>, CloudError> {
    if let Some(id) = name.strip_prefix("i-") {
        let id = format!("i-{}", id.split('.').next().unwrap_or(id));
        return Ok(state.ec2.instances_by_id(&[id])?.into_iter().next());
    }
    let found: Vec<Instance> = state
        .ec2
        .instances_filtered(
            Params::new()
                .filter("private-dns-name", &[name])
                .filter("instance-state-name", &ec2::ALIVE_STATES),
        )?
        .into_iter()
        .filter(|i| state.config.has_cluster_tag(&i.tags))
        .collect();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.into_iter().next()),
        n => Err(CloudError::Other(format!(
            "{n} instances have the private DNS name {name}"
        ))),
    }
}

/// Node addresses as upstream's `getInstanceNodeAddress`, for each configured family.
pub fn node_addresses(config: &Config, instance: &Instance) -> Vec<NodeAddress> {
    let address = |address_type, address: &str| NodeAddress {
        address_type,
        address: address.to_owned(),
    };
    let mut addresses = Vec::new();
    for family in &config.node_ip_families {
        if family == "ipv4" {
            let mut interfaces: Vec<&ec2::Interface> = instance.interfaces.iter().collect();
            // By device index; detached interfaces last.
            interfaces.sort_by_key(|i| i.device_index.unwrap_or(u32::MAX));
            for interface in interfaces.iter().filter(|i| i.status == "in-use") {
                for ip in &interface.private_ips {
                    addresses.push(address(NodeAddressType::InternalIp, ip));
                }
            }
            if !instance.public_ip.is_empty() {
                addresses.push(address(NodeAddressType::ExternalIp, &instance.public_ip));
            }
            if !instance.private_dns_name.is_empty() {
                addresses.push(address(
                    NodeAddressType::InternalDns,
                    &instance.private_dns_name,
                ));
                addresses.push(address(
                    NodeAddressType::Hostname,
                    &instance.private_dns_name,
                ));
            }
            if !instance.public_dns_name.is_empty() {
                addresses.push(address(
                    NodeAddressType::ExternalDns,
                    &instance.public_dns_name,
                ));
            }
        } else {
            for interface in instance.interfaces.iter().filter(|i| i.status == "in-use") {
                if let Some(ip) = interface.ipv6.first() {
                    addresses.push(address(NodeAddressType::InternalIp, ip));
                }
            }
        }
    }
    addresses
}

/// The zone's ID, from the zones the provider has seen (asked again when a zone is
/// new). Failing to get it only leaves the label out.
fn zone_id(state: &Aws, zone: &str) -> Option<String> {
    let cached = |zones: &[ec2::Zone]| zones.iter().find(|z| z.name == zone).map(|z| z.id.clone());
    if let Some(id) = cached(&state.zones.borrow()) {
        return Some(id);
    }
    match state.ec2.zones() {
        Ok(zones) => {
            let id = cached(&zones);
            *state.zones.borrow_mut() = zones;
            id
        }
        Err(e) => {
            wasm_ccm_guest::log::warn(
                "cannot list availability zones; the zone-id label is left out",
                &[("error", &e.to_string())],
            );
            None
        }
    }
}

impl InstancesV2 for Aws {
    fn instance_exists(&self, node: Node) -> Result<bool, CloudError> {
        {
            let s = self;
            Ok(find(s, &node)?.is_some_and(|i| i.state != "terminated"))
        }
    }

    fn instance_shutdown(&self, node: Node) -> Result<bool, CloudError> {
        {
            let s = self;
            Ok(find(s, &node)?.is_some_and(|i| i.state == "stopped"))
        }
    }

    fn instance_metadata(&self, node: Node) -> Result<InstanceInfo, CloudError> {
        {
            let s = self;
            let instance = find(s, &node)?.ok_or(CloudError::InstanceNotFound)?;
            let mut additional_labels = Vec::new();
            let has_label = node.metadata.labels.iter().any(|(k, _)| k == ZONE_ID_LABEL);
            if !has_label
                && !instance.zone.is_empty()
                && let Some(id) = zone_id(s, &instance.zone)
            {
                additional_labels.push((ZONE_ID_LABEL.to_owned(), id));
            }
            Ok(InstanceInfo {
                provider_id: node
                    .provider_id
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| provider_id(&instance)),
                instance_type: instance.instance_type.clone(),
                node_addresses: node_addresses(&s.config, &instance),
                zone: instance.zone.clone(),
                region: s.config.region.clone(),
                additional_labels,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_as_upstream() {
        for (pid, id) in [
            ("aws:///us-east-1a/i-12345678", "i-12345678"),
            ("aws:////i-12345678abcdef01", "i-12345678abcdef01"),
            ("i-12345678", "i-12345678"),
            ("aws://account/us-east-1a/i-1", "i-1"),
        ] {
            assert_eq!(instance_id(pid).unwrap(), id, "{pid}");
        }
        for bad in [
            "",
            "vol-123",
            "aws:///az/vol-x",
            "gce://p/z/i-1",
            "aws:///us-east-1a/",
        ] {
            assert!(instance_id(bad).is_err(), "{bad}");
        }
        let instance = Instance {
            id: "i-9".into(),
            zone: "eu-west-1b".into(),
            ..Default::default()
        };
        assert_eq!(provider_id(&instance), "aws:///eu-west-1b/i-9");
        assert_eq!(instance_id(&provider_id(&instance)).unwrap(), "i-9");
    }

    #[test]
    fn addresses_as_upstream() {
        let config = Config {
            node_ip_families: vec!["ipv4".into(), "ipv6".into()],
            ..Default::default()
        };
        let nic = |index: Option<u32>, status: &str, ips: &[&str], v6: &[&str]| ec2::Interface {
            device_index: index,
            status: status.into(),
            private_ips: ips.iter().map(|s| s.to_string()).collect(),
            ipv6: v6.iter().map(|s| s.to_string()).collect(),
        };
        let instance = Instance {
            interfaces: vec![
                nic(Some(1), "in-use", &["10.0.1.1"], &[]),
                nic(None, "available", &["10.0.9.9"], &[]),
                nic(
                    Some(0),
                    "in-use",
                    &["10.0.0.1", "10.0.0.2"],
                    &["2600::1", "2600::2"],
                ),
            ],
            public_ip: "1.2.3.4".into(),
            private_dns_name: "ip-10-0-0-1.ec2.internal".into(),
            public_dns_name: "ec2-1-2-3-4.compute-1.amazonaws.com".into(),
            ..Default::default()
        };
        let got: Vec<(NodeAddressType, String)> = node_addresses(&config, &instance)
            .into_iter()
            .map(|a| (a.address_type, a.address))
            .collect();
        use NodeAddressType::*;
        let want = [
            (InternalIp, "10.0.0.1"),
            (InternalIp, "10.0.0.2"),
            (InternalIp, "10.0.1.1"),
            (ExternalIp, "1.2.3.4"),
            (InternalDns, "ip-10-0-0-1.ec2.internal"),
            (Hostname, "ip-10-0-0-1.ec2.internal"),
            (ExternalDns, "ec2-1-2-3-4.compute-1.amazonaws.com"),
            (InternalIp, "2600::1"),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for ((gt, ga), (wt, wa)) in got.iter().zip(want) {
            assert!(*gt == wt && ga == wa, "{got:?}");
        }
    }
}
