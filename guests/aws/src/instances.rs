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
//! - `instances-batch` answers many Nodes with one `DescribeInstances` per page of
//!   [`BATCH_FILTER_VALUES`] instance IDs or private DNS names (filters, so an unknown
//!   ID is simply absent instead of failing the call), as cloud-provider-aws batches
//!   its lookups.
//! - Availability zones (for the zone-ID label) live in the host's shared cache, so
//!   the pooled instances ask EC2 once an hour between them, not once each; the
//!   network node labels come from [`crate::topology`].

use std::collections::HashMap;
use std::time::Duration;

use crate::api::Params;
use crate::config::Config;
use crate::ec2::{self, Instance};
use crate::{Aws, PROVIDER_NAME};
use wasm_ccm_guest::types::{
    BoolAnswer, CloudError, InstanceInfo, MetadataAnswer, Node, NodeAddress, NodeAddressType,
};
use wasm_ccm_guest::{InstancesBatch, InstancesV2, cache};

/// The most values in one EC2 filter (EC2 allows 200).
pub const BATCH_FILTER_VALUES: usize = 200;
/// The shared cache's key for the region's availability zones.
const ZONES_KEY: &str = "aws/availability-zones";
/// How long the zone list is kept.
const ZONES_TTL: Duration = Duration::from_secs(3600);

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

/// The region's availability zones, from the shared cache, else asked once and kept
/// for [`ZONES_TTL`] (asked again when `wanted` is a zone the list lacks).
pub fn zones(state: &Aws, wanted: Option<&str>) -> Result<Vec<ec2::Zone>, CloudError> {
    if let Some(zones) = cache::get_json::<Vec<ec2::Zone>>(ZONES_KEY)
        && wanted.is_none_or(|w| zones.iter().any(|z| z.name == w))
    {
        return Ok(zones);
    }
    let zones = state.ec2.zones()?;
    if let Err(e) = cache::set_json(ZONES_KEY, &zones, ZONES_TTL) {
        wasm_ccm_guest::log::warn(
            "cannot keep the zone list in the shared cache",
            &[("error", &format!("{e:?}"))],
        );
    }
    Ok(zones)
}

/// The zone's ID. Failing to get it only leaves the label out.
fn zone_id(state: &Aws, zone: &str) -> Option<String> {
    match zones(state, Some(zone)) {
        Ok(zones) => zones.into_iter().find(|z| z.name == zone).map(|z| z.id),
        Err(e) => {
            wasm_ccm_guest::log::warn(
                "cannot list availability zones; the zone-id label is left out",
                &[("error", &e.to_string())],
            );
            None
        }
    }
}

/// What the cloud says about a node's instance: `find`'s answer.
type Found = Result<Option<Instance>, CloudError>;

/// [`find`] for many nodes, with one `DescribeInstances` per page of IDs and one per
/// page of private DNS names.
pub fn find_all(state: &Aws, nodes: &[Node]) -> Result<Vec<Found>, CloudError> {
    enum Key {
        Id(String),
        Name(String),
        Bad(CloudError),
    }
    let keys: Vec<Key> = nodes
        .iter()
        .map(
            |node| match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
                Some(pid) => instance_id(pid).map_or_else(Key::Bad, Key::Id),
                None => match node.metadata.name.strip_prefix("i-") {
                    Some(id) => Key::Id(format!("i-{}", id.split('.').next().unwrap_or(id))),
                    None => Key::Name(node.metadata.name.clone()),
                },
            },
        )
        .collect();
    let mut ids: Vec<&str> = keys
        .iter()
        .filter_map(|k| match k {
            Key::Id(id) => Some(id.as_str()),
            _ => None,
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut by_id: HashMap<String, Instance> = HashMap::new();
    for page in ids.chunks(BATCH_FILTER_VALUES) {
        for instance in state
            .ec2
            .instances_filtered(Params::new().filter("instance-id", page))?
        {
            by_id.insert(instance.id.clone(), instance);
        }
    }
    let mut names: Vec<&str> = keys
        .iter()
        .filter_map(|k| match k {
            Key::Name(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut by_name: HashMap<String, Vec<Instance>> = HashMap::new();
    for page in names.chunks(BATCH_FILTER_VALUES) {
        let found = state.ec2.instances_filtered(
            Params::new()
                .filter("private-dns-name", page)
                .filter("instance-state-name", &ec2::ALIVE_STATES),
        )?;
        for instance in found
            .into_iter()
            .filter(|i| state.config.has_cluster_tag(&i.tags))
        {
            by_name
                .entry(instance.private_dns_name.clone())
                .or_default()
                .push(instance);
        }
    }
    Ok(keys
        .into_iter()
        .map(|key| match key {
            Key::Bad(err) => Err(err),
            Key::Id(id) => Ok(by_id.get(&id).cloned()),
            Key::Name(name) => match by_name.get(&name).map(Vec::as_slice) {
                None | Some([]) => Err(CloudError::InstanceNotFound),
                Some([one]) => Ok(Some(one.clone())),
                Some(many) => Err(CloudError::Other(format!(
                    "{} instances have the private DNS name {name}",
                    many.len()
                ))),
            },
        })
        .collect())
}

fn exists(found: Found) -> BoolAnswer {
    Ok(found?.is_some_and(|i| i.state != "terminated"))
}

fn shut_down(found: Found) -> BoolAnswer {
    Ok(found?.is_some_and(|i| i.state == "stopped"))
}

fn metadata(state: &Aws, node: &Node, found: Found) -> MetadataAnswer {
    let instance = found?.ok_or(CloudError::InstanceNotFound)?;
    let mut additional_labels = Vec::new();
    let has_label = node.metadata.labels.iter().any(|(k, _)| k == ZONE_ID_LABEL);
    if !has_label
        && !instance.zone.is_empty()
        && let Some(id) = zone_id(state, &instance.zone)
    {
        additional_labels.push((ZONE_ID_LABEL.to_owned(), id));
    }
    additional_labels.extend(crate::topology::labels(
        state,
        &instance,
        &node.metadata.labels,
    )?);
    Ok(InstanceInfo {
        provider_id: node
            .provider_id
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| provider_id(&instance)),
        instance_type: instance.instance_type.clone(),
        node_addresses: node_addresses(&state.config, &instance),
        zone: instance.zone.clone(),
        region: state.config.region.clone(),
        additional_labels,
    })
}

impl InstancesV2 for Aws {
    fn instance_exists(&self, node: Node) -> Result<bool, CloudError> {
        exists(find(self, &node))
    }

    fn instance_shutdown(&self, node: Node) -> Result<bool, CloudError> {
        shut_down(find(self, &node))
    }

    fn instance_metadata(&self, node: Node) -> Result<InstanceInfo, CloudError> {
        metadata(self, &node, find(self, &node))
    }
}

impl InstancesBatch for Aws {
    fn instances_exist(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(find_all(self, &nodes)?.into_iter().map(exists).collect())
    }

    fn instances_shutdown(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(find_all(self, &nodes)?.into_iter().map(shut_down).collect())
    }

    fn instances_metadata(&self, nodes: Vec<Node>) -> Result<Vec<MetadataAnswer>, CloudError> {
        let found = find_all(self, &nodes)?;
        Ok(nodes
            .iter()
            .zip(found)
            .map(|(node, found)| metadata(self, node, found))
            .collect())
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
