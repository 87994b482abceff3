//! `instances-v2`, legacy `instances`, and `zones`.

use crate::bindings::exports::wasm_ccm::provider::{instances, instances_v2, zones};
use crate::bindings::wasm_ccm::provider::types::{
    CloudError, InstanceInfo, Node, NodeAddress, NodeAddressType, Zone,
};
use crate::cloud::{Address, Instance};
use crate::{Provider, State, instance_id_from_provider_id, provider_id, with_state};

/// The instance backing `node`: by provider ID when set, else by node name.
fn find(state: &State, node: &Node) -> Result<Option<Instance>, CloudError> {
    match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
        Some(pid) => by_provider_id(state, pid),
        None => state.cloud.instance_by_name(&node.metadata.name),
    }
}

fn by_provider_id(state: &State, provider_id: &str) -> Result<Option<Instance>, CloudError> {
    let id = instance_id_from_provider_id(provider_id)?;
    Ok(state.cloud.instance(id)?.filter(|i| !i.is_terminated()))
}

fn require(found: Option<Instance>) -> Result<Instance, CloudError> {
    found.ok_or(CloudError::InstanceNotFound)
}

pub(crate) fn addresses(addresses: &[Address]) -> Vec<NodeAddress> {
    addresses
        .iter()
        .filter_map(|a| {
            let address_type = match a.kind.as_str() {
                "Hostname" => NodeAddressType::Hostname,
                "InternalIP" => NodeAddressType::InternalIp,
                "ExternalIP" => NodeAddressType::ExternalIp,
                "InternalDNS" => NodeAddressType::InternalDns,
                "ExternalDNS" => NodeAddressType::ExternalDns,
                _ => return None,
            };
            Some(NodeAddress {
                address_type,
                address: a.address.clone(),
            })
        })
        .collect()
}

impl instances_v2::Guest for Provider {
    fn instance_exists(node: Node) -> Result<bool, CloudError> {
        with_state(|s| Ok(find(s, &node)?.is_some()))
    }

    fn instance_shutdown(node: Node) -> Result<bool, CloudError> {
        with_state(|s| Ok(require(find(s, &node)?)?.state == "stopped"))
    }

    fn instance_metadata(node: Node) -> Result<InstanceInfo, CloudError> {
        with_state(|s| {
            let instance = require(find(s, &node)?)?;
            Ok(InstanceInfo {
                provider_id: provider_id(&instance.id),
                instance_type: instance.instance_type,
                node_addresses: addresses(&instance.addresses),
                zone: instance.zone,
                region: instance.region,
                additional_labels: instance.labels.into_iter().collect(),
            })
        })
    }
}

impl instances::Guest for Provider {
    fn node_addresses(node_name: String) -> Result<Vec<NodeAddress>, CloudError> {
        with_state(|s| {
            Ok(addresses(
                &require(s.cloud.instance_by_name(&node_name)?)?.addresses,
            ))
        })
    }

    fn node_addresses_by_provider_id(provider_id: String) -> Result<Vec<NodeAddress>, CloudError> {
        with_state(|s| {
            Ok(addresses(
                &require(by_provider_id(s, &provider_id)?)?.addresses,
            ))
        })
    }

    fn instance_id(node_name: String) -> Result<String, CloudError> {
        with_state(|s| Ok(require(s.cloud.instance_by_name(&node_name)?)?.id))
    }

    fn instance_type(node_name: String) -> Result<String, CloudError> {
        with_state(|s| Ok(require(s.cloud.instance_by_name(&node_name)?)?.instance_type))
    }

    fn instance_type_by_provider_id(provider_id: String) -> Result<String, CloudError> {
        with_state(|s| Ok(require(by_provider_id(s, &provider_id)?)?.instance_type))
    }

    fn add_ssh_key_to_all_instances(_user: String, _key_data: Vec<u8>) -> Result<(), CloudError> {
        Err(CloudError::NotImplemented)
    }

    fn current_node_name(hostname: String) -> Result<String, CloudError> {
        Ok(hostname)
    }

    fn instance_exists_by_provider_id(provider_id: String) -> Result<bool, CloudError> {
        with_state(|s| Ok(by_provider_id(s, &provider_id)?.is_some()))
    }

    fn instance_shutdown_by_provider_id(provider_id: String) -> Result<bool, CloudError> {
        with_state(|s| Ok(require(by_provider_id(s, &provider_id)?)?.state == "stopped"))
    }
}

impl zones::Guest for Provider {
    fn get_zone() -> Result<Zone, CloudError> {
        with_state(|s| match (&s.config.zone, &s.config.region) {
            (Some(zone), Some(region)) => Ok(Zone {
                failure_domain: zone.clone(),
                region: region.clone(),
            }),
            _ => Err(CloudError::NotImplemented),
        })
    }

    fn get_zone_by_provider_id(provider_id: String) -> Result<Zone, CloudError> {
        with_state(|s| Ok(zone_of(require(by_provider_id(s, &provider_id)?)?)))
    }

    fn get_zone_by_node_name(node_name: String) -> Result<Zone, CloudError> {
        with_state(|s| Ok(zone_of(require(s.cloud.instance_by_name(&node_name)?)?)))
    }
}

fn zone_of(instance: Instance) -> Zone {
    Zone {
        failure_domain: instance.zone,
        region: instance.region,
    }
}
