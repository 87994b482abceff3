//! `instances-v2`, legacy `instances`, and `zones`.

use std::collections::HashMap;

use wasm_ccm_guest::types::{
    BoolAnswer, CloudError, InstanceInfo, MetadataAnswer, Node, NodeAddress, NodeAddressType, Zone,
};
use wasm_ccm_guest::{Instances, InstancesBatch, InstancesV2, Zones};

use crate::cloud::{Address, Instance};
use crate::{SimCloud, instance_id_from_provider_id, provider_id};

impl SimCloud {
    /// The instance backing `node`: by provider ID when set, else by node name.
    fn find(&self, node: &Node) -> Result<Option<Instance>, CloudError> {
        match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
            Some(pid) => self.by_provider_id(pid),
            None => self.cloud.instance_by_name(&node.metadata.name),
        }
    }

    fn by_provider_id(&self, provider_id: &str) -> Result<Option<Instance>, CloudError> {
        let id = instance_id_from_provider_id(provider_id)?;
        Ok(self.cloud.instance(id)?.filter(|i| !i.is_terminated()))
    }

    fn by_name(&self, node_name: &str) -> Result<Instance, CloudError> {
        require(self.cloud.instance_by_name(node_name)?)
    }

    /// The instances backing `nodes` (as [`Self::find`] would find each), from one
    /// listing of the cloud's instances.
    fn find_all(
        &self,
        nodes: &[Node],
    ) -> Result<Vec<Result<Option<Instance>, CloudError>>, CloudError> {
        let live: Vec<Instance> = self
            .cloud
            .instances()?
            .into_iter()
            .filter(|i| !i.is_terminated())
            .collect();
        let by_id: HashMap<&str, &Instance> = live.iter().map(|i| (i.id.as_str(), i)).collect();
        let by_name: HashMap<&str, &Instance> = live.iter().map(|i| (i.name.as_str(), i)).collect();
        Ok(nodes
            .iter()
            .map(
                |node| match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
                    Some(pid) => instance_id_from_provider_id(pid)
                        .map(|id| by_id.get(id).map(|i| (*i).clone())),
                    None => Ok(by_name
                        .get(node.metadata.name.as_str())
                        .map(|i| (*i).clone())),
                },
            )
            .collect())
    }
}

fn info(instance: Instance) -> InstanceInfo {
    InstanceInfo {
        provider_id: provider_id(&instance.id),
        instance_type: instance.instance_type,
        node_addresses: addresses(&instance.addresses),
        zone: instance.zone,
        region: instance.region,
        additional_labels: instance.labels.into_iter().collect(),
    }
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

impl InstancesV2 for SimCloud {
    fn instance_exists(&self, node: Node) -> Result<bool, CloudError> {
        Ok(self.find(&node)?.is_some())
    }

    fn instance_shutdown(&self, node: Node) -> Result<bool, CloudError> {
        Ok(require(self.find(&node)?)?.state == "stopped")
    }

    fn instance_metadata(&self, node: Node) -> Result<InstanceInfo, CloudError> {
        Ok(info(require(self.find(&node)?)?))
    }
}

/// One listing of the cloud answers a whole batch.
impl InstancesBatch for SimCloud {
    fn instances_exist(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(self
            .find_all(&nodes)?
            .into_iter()
            .map(|found| found.map(|i| i.is_some()))
            .collect())
    }

    fn instances_shutdown(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(self
            .find_all(&nodes)?
            .into_iter()
            .map(|found| Ok(require(found?)?.state == "stopped"))
            .collect())
    }

    fn instances_metadata(&self, nodes: Vec<Node>) -> Result<Vec<MetadataAnswer>, CloudError> {
        Ok(self
            .find_all(&nodes)?
            .into_iter()
            .map(|found| Ok(info(require(found?)?)))
            .collect())
    }
}

impl Instances for SimCloud {
    fn node_addresses(&self, node_name: String) -> Result<Vec<NodeAddress>, CloudError> {
        Ok(addresses(&self.by_name(&node_name)?.addresses))
    }

    fn node_addresses_by_provider_id(
        &self,
        provider_id: String,
    ) -> Result<Vec<NodeAddress>, CloudError> {
        Ok(addresses(
            &require(self.by_provider_id(&provider_id)?)?.addresses,
        ))
    }

    fn instance_id(&self, node_name: String) -> Result<String, CloudError> {
        Ok(self.by_name(&node_name)?.id)
    }

    fn instance_type(&self, node_name: String) -> Result<String, CloudError> {
        Ok(self.by_name(&node_name)?.instance_type)
    }

    fn instance_type_by_provider_id(&self, provider_id: String) -> Result<String, CloudError> {
        Ok(require(self.by_provider_id(&provider_id)?)?.instance_type)
    }

    fn instance_exists_by_provider_id(&self, provider_id: String) -> Result<bool, CloudError> {
        Ok(self.by_provider_id(&provider_id)?.is_some())
    }

    fn instance_shutdown_by_provider_id(&self, provider_id: String) -> Result<bool, CloudError> {
        Ok(require(self.by_provider_id(&provider_id)?)?.state == "stopped")
    }
}

impl Zones for SimCloud {
    fn get_zone(&self) -> Result<Zone, CloudError> {
        match (&self.config.zone, &self.config.region) {
            (Some(zone), Some(region)) => Ok(Zone {
                failure_domain: zone.clone(),
                region: region.clone(),
            }),
            _ => Err(CloudError::NotImplemented),
        }
    }

    fn get_zone_by_provider_id(&self, provider_id: String) -> Result<Zone, CloudError> {
        Ok(zone_of(require(self.by_provider_id(&provider_id)?)?))
    }

    fn get_zone_by_node_name(&self, node_name: String) -> Result<Zone, CloudError> {
        Ok(zone_of(self.by_name(&node_name)?))
    }
}

fn zone_of(instance: Instance) -> Zone {
    Zone {
        failure_domain: instance.zone,
        region: instance.region,
    }
}

#[cfg(test)]
mod tests {
    //! The provider's logic against a mock cloud, natively (`cargo test`).

    use serde_json::json;
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;
    use wasm_ccm_guest::types::{ObjectMeta, Retry};
    use wasm_ccm_guest::{InstancesV2, Provider};

    use super::*;

    fn provider() -> SimCloud {
        SimCloud::initialize(br#"{"endpoint": "http://simcloud.test"}"#).unwrap()
    }

    fn node(name: &str, provider_id: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: String::new(),
                uid: "u".into(),
                labels: Vec::new(),
                annotations: Vec::new(),
                deletion_timestamp: None,
            },
            provider_id: provider_id.map(Into::into),
            pod_cidrs: Vec::new(),
            taints: Vec::new(),
            addresses: Vec::new(),
            conditions: Vec::new(),
            unschedulable: false,
        }
    }

    fn instance(state: &str) -> Response {
        Response::with_json(
            200,
            &json!({"id": "i-1", "name": "n1", "type": "m1", "zone": "z", "region": "r",
                    "state": state, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "labels": {"team": "a"}}),
        )
    }

    #[test]
    fn metadata_from_the_cloud() {
        let cloud = MockTransport::new();
        cloud.on("GET", "/v1/instances/i-1", instance("running"));
        let _installed = cloud.install();
        let info = provider()
            .instance_metadata(node("n1", Some("simcloud://i-1")))
            .unwrap();
        assert_eq!(info.provider_id, "simcloud://i-1");
        assert_eq!(info.instance_type, "m1");
        assert_eq!(
            info.node_addresses,
            [NodeAddress {
                address_type: NodeAddressType::InternalIp,
                address: "10.0.0.1".into()
            }]
        );
        assert_eq!(info.additional_labels, [("team".into(), "a".into())]);
    }

    #[test]
    fn gone_terminated_and_throttled_instances() {
        let cloud = MockTransport::new();
        cloud.on("GET", "/v1/instances/i-1", Response::new(404));
        cloud.on("GET", "/v1/instances/i-2", instance("terminated"));
        cloud.on(
            "GET",
            "/v1/instances/i-3",
            Response::new(429).with_header("retry-after", "2"),
        );
        let _installed = cloud.install();
        let provider = provider();
        assert_eq!(
            provider.instance_exists(node("a", Some("simcloud://i-1"))),
            Ok(false)
        );
        assert_eq!(
            provider.instance_exists(node("b", Some("simcloud://i-2"))),
            Ok(false)
        );
        assert_eq!(
            provider.instance_shutdown(node("a", Some("simcloud://i-1"))),
            Err(CloudError::InstanceNotFound)
        );
        assert_eq!(
            provider.instance_exists(node("c", Some("simcloud://i-3"))),
            Err(CloudError::RetryAfter(Retry {
                delay_ms: 2_000,
                message: "simcloud: get instance i-3: throttled (HTTP 429)".into()
            }))
        );
        assert_eq!(cloud.requests().len(), 4);
    }
}
