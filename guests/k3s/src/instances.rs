//! `instances-v2` and `instances-batch`: K3s's `pkg/cloudprovider/instances.go`
//! (k3s-io/k3s, the `InstancesV2` version with the `internal-dns`/`external-dns`
//! annotations). The instance is the Node: it always exists, is never shut down, and
//! its metadata is what the K3s agent wrote on the Node:
//!
//! | field | from |
//! | --- | --- |
//! | provider ID | the Node's own `spec.providerID` when it has one, else `<program>://<node-name>` |
//! | instance type | label `node.kubernetes.io/instance-type`, else `<program>` |
//! | region, zone | labels `topology.kubernetes.io/region`, `topology.kubernetes.io/zone` (empty: none) |
//! | InternalIP | annotation `<program>.io/internal-ip` (a comma list), else the label of that name (one address) |
//! | ExternalIP | annotation `<program>.io/external-ip` (a comma list), else the label (one address) |
//! | InternalDNS | annotation `<program>.io/internal-dns` (a comma list) |
//! | ExternalDNS | annotation `<program>.io/external-dns` (a comma list) |
//! | Hostname | annotation `<program>.io/hostname`, else the label |
//!
//! in that order, each comma list split on `,` as K3s splits it (no trimming: an
//! item that is not an address is refused by the host, naming it). A Node with
//! neither the internal-ip annotation nor the label is not yet annotated by its agent:
//! K3s fails with `address annotations not yet set`, here a `retry-after` of
//! [`ADDRESSES_PENDING_RETRY_MS`], so the Node is initialized once annotated.
//!
//! `instances-batch` answers each node as `instances-v2` does: with no cloud to ask,
//! there is nothing to batch, but the host then makes one call per pass, not one per
//! Node.

use wasm_ccm_guest::types::{CloudError, InstanceInfo, Node, NodeAddress, NodeAddressType, Retry};
use wasm_ccm_guest::{InstancesBatch, InstancesV2};

use crate::{
    EXTERNAL_DNS_KEY, EXTERNAL_IP_KEY, HOSTNAME_KEY, INTERNAL_DNS_KEY, INTERNAL_IP_KEY, K3s,
    PROGRAM,
};

/// `node.kubernetes.io/instance-type` (`corev1.LabelInstanceTypeStable`).
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// `topology.kubernetes.io/region` (`corev1.LabelTopologyRegion`).
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// `topology.kubernetes.io/zone` (`corev1.LabelTopologyZone`).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// K3s's error for a Node its agent has not annotated yet (`InstanceMetadata`).
pub const ADDRESSES_PENDING: &str = "address annotations not yet set";

/// The delay before the next attempt on a Node without its address annotations: the
/// agent writes them right after registering, and a Node that changes is synced again
/// at once anyway.
pub const ADDRESSES_PENDING_RETRY_MS: u64 = 10_000;

impl InstancesV2 for K3s {
    /// K3s's `InstanceExists`: "K3s nodes always exist".
    fn instance_exists(&self, _node: Node) -> Result<bool, CloudError> {
        Ok(true)
    }

    /// K3s's `InstanceShutdown`: "K3s nodes are never shutdown".
    fn instance_shutdown(&self, _node: Node) -> Result<bool, CloudError> {
        Ok(false)
    }

    fn instance_metadata(&self, node: Node) -> Result<InstanceInfo, CloudError> {
        metadata(&node)
    }
}

/// The defaults: `instances-v2` per node.
impl InstancesBatch for K3s {}

/// `value` of `key` in a Node's labels or annotations, empty when absent (a Go map
/// lookup).
fn get<'a>(pairs: &'a [(String, String)], key: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// K3s's `InstanceMetadata` for `node`.
pub fn metadata(node: &Node) -> Result<InstanceInfo, CloudError> {
    let annotation = |key: &str| get(&node.metadata.annotations, key);
    let label = |key: &str| get(&node.metadata.labels, key);
    let name = node.metadata.name.as_str();

    if annotation(INTERNAL_IP_KEY).is_empty() && label(INTERNAL_IP_KEY).is_empty() {
        return Err(CloudError::RetryAfter(Retry {
            delay_ms: ADDRESSES_PENDING_RETRY_MS,
            message: ADDRESSES_PENDING.to_owned(),
        }));
    }

    let provider_id = match node.provider_id.as_deref() {
        Some(own) if !own.is_empty() => own.to_owned(),
        _ => format!("{PROGRAM}://{name}"),
    };
    let or_default = |value: &str, default: &str| {
        if value.is_empty() {
            default.to_owned()
        } else {
            value.to_owned()
        }
    };

    let mut addresses = Vec::new();
    let mut add = |address_type: NodeAddressType, address: &str| {
        addresses.push(NodeAddress {
            address_type,
            address: address.to_owned(),
        });
    };
    // An annotation holds a comma list; the label fallback (older agents) one address.
    for (key, address_type) in [
        (INTERNAL_IP_KEY, NodeAddressType::InternalIp),
        (EXTERNAL_IP_KEY, NodeAddressType::ExternalIp),
    ] {
        let listed = annotation(key);
        if !listed.is_empty() {
            listed.split(',').for_each(|a| add(address_type, a));
        } else if !label(key).is_empty() {
            add(address_type, label(key));
        }
    }
    // DNS names: annotations only.
    for (key, address_type) in [
        (INTERNAL_DNS_KEY, NodeAddressType::InternalDns),
        (EXTERNAL_DNS_KEY, NodeAddressType::ExternalDns),
    ] {
        let listed = annotation(key);
        if !listed.is_empty() {
            listed.split(',').for_each(|a| add(address_type, a));
        }
    }
    if !annotation(HOSTNAME_KEY).is_empty() {
        add(NodeAddressType::Hostname, annotation(HOSTNAME_KEY));
    } else if !label(HOSTNAME_KEY).is_empty() {
        add(NodeAddressType::Hostname, label(HOSTNAME_KEY));
    } else {
        wasm_ccm_guest::log::info(
            "couldn't find node hostname annotation or label",
            &[("node", name), ("key", HOSTNAME_KEY)],
        );
    }

    Ok(InstanceInfo {
        provider_id,
        instance_type: or_default(label(INSTANCE_TYPE_LABEL), PROGRAM),
        node_addresses: addresses,
        zone: label(ZONE_LABEL).to_owned(),
        region: label(REGION_LABEL).to_owned(),
        additional_labels: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use wasm_ccm_guest::testing::node;
    use wasm_ccm_guest::types::NodeAddressType::{
        ExternalDns, ExternalIp, Hostname, InternalDns, InternalIp,
    };

    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn annotated(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Node {
        let mut n = node(name);
        n.metadata.annotations = pairs(annotations);
        n.metadata.labels = pairs(labels);
        n
    }

    fn addr(address_type: NodeAddressType, address: &str) -> NodeAddress {
        NodeAddress {
            address_type,
            address: address.to_owned(),
        }
    }

    fn info(provider_id: &str, instance_type: &str, addresses: Vec<NodeAddress>) -> InstanceInfo {
        InstanceInfo {
            provider_id: provider_id.to_owned(),
            instance_type: instance_type.to_owned(),
            node_addresses: addresses,
            zone: String::new(),
            region: String::new(),
            additional_labels: Vec::new(),
        }
    }

    const NODE: &str = "test-node";
    const INTERNAL: &str = "10.0.0.1";
    const EXTERNAL: &str = "1.2.3.4";

    /// k3s-io/k3s `pkg/cloudprovider/instances_test.go`, `Test_UnitK3sInstanceMetadata`.
    #[test]
    fn k3s_instance_metadata() {
        let own_id = format!("{PROGRAM}://{NODE}");
        let hostname = format!("{NODE}.example.com");
        let mut custom = annotated(
            NODE,
            &[(INTERNAL_IP_KEY, INTERNAL)],
            &[
                (INSTANCE_TYPE_LABEL, "test.t1"),
                (REGION_LABEL, "region"),
                (ZONE_LABEL, "zone"),
            ],
        );
        custom.provider_id = Some("test://i-abc".into());
        let cases: [(&str, Node, Option<InstanceInfo>); 5] = [
            ("No Annotations", node(""), None),
            (
                "Internal IP",
                annotated(NODE, &[(INTERNAL_IP_KEY, INTERNAL)], &[]),
                Some(info(&own_id, PROGRAM, vec![addr(InternalIp, INTERNAL)])),
            ),
            (
                "Internal IP, External IP",
                annotated(
                    NODE,
                    &[(INTERNAL_IP_KEY, INTERNAL), (EXTERNAL_IP_KEY, EXTERNAL)],
                    &[],
                ),
                Some(info(
                    &own_id,
                    PROGRAM,
                    vec![addr(InternalIp, INTERNAL), addr(ExternalIp, EXTERNAL)],
                )),
            ),
            (
                "Internal IP, External IP, Hostname",
                annotated(
                    NODE,
                    &[
                        (INTERNAL_IP_KEY, INTERNAL),
                        (EXTERNAL_IP_KEY, EXTERNAL),
                        (HOSTNAME_KEY, &hostname),
                    ],
                    &[],
                ),
                Some(info(
                    &own_id,
                    PROGRAM,
                    vec![
                        addr(InternalIp, INTERNAL),
                        addr(ExternalIp, EXTERNAL),
                        addr(Hostname, &hostname),
                    ],
                )),
            ),
            (
                "Custom Metadata",
                custom,
                Some(InstanceInfo {
                    zone: "zone".into(),
                    region: "region".into(),
                    ..info("test://i-abc", "test.t1", vec![addr(InternalIp, INTERNAL)])
                }),
            ),
        ];
        for (name, node, want) in cases {
            let got = metadata(&node);
            match want {
                Some(want) => assert_eq!(got, Ok(want), "{name}"),
                None => assert!(got.is_err(), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn without_the_internal_ip_the_node_is_retried() {
        // Only an external IP: not yet annotated, as K3s decides.
        let pending = annotated(NODE, &[(EXTERNAL_IP_KEY, EXTERNAL)], &[]);
        assert_eq!(
            metadata(&pending),
            Err(CloudError::RetryAfter(Retry {
                delay_ms: ADDRESSES_PENDING_RETRY_MS,
                message: "address annotations not yet set".into(),
            }))
        );
        // An empty annotation counts as absent (a Go map lookup).
        let empty = annotated(NODE, &[(INTERNAL_IP_KEY, "")], &[]);
        assert!(matches!(metadata(&empty), Err(CloudError::RetryAfter(_))));
    }

    #[test]
    fn dual_stack_lists_dns_names_and_label_fallbacks() {
        let dual = annotated(
            NODE,
            &[
                (INTERNAL_IP_KEY, "10.0.0.1,fd00::1"),
                (EXTERNAL_IP_KEY, "1.2.3.4,2001:db8::1"),
                (INTERNAL_DNS_KEY, "node.internal,alias.internal"),
                (EXTERNAL_DNS_KEY, "node.example.com"),
                (HOSTNAME_KEY, "node"),
            ],
            // Labels lose to the annotations.
            &[(INTERNAL_IP_KEY, "10.9.9.9"), (HOSTNAME_KEY, "other")],
        );
        assert_eq!(
            metadata(&dual).unwrap().node_addresses,
            [
                addr(InternalIp, "10.0.0.1"),
                addr(InternalIp, "fd00::1"),
                addr(ExternalIp, "1.2.3.4"),
                addr(ExternalIp, "2001:db8::1"),
                addr(InternalDns, "node.internal"),
                addr(InternalDns, "alias.internal"),
                addr(ExternalDns, "node.example.com"),
                addr(Hostname, "node"),
            ]
        );

        // Older agents: labels, one address each, not split; no DNS label is read.
        let labelled = annotated(
            NODE,
            &[],
            &[
                (INTERNAL_IP_KEY, "10.0.0.1"),
                (EXTERNAL_IP_KEY, "1.2.3.4"),
                (HOSTNAME_KEY, "node"),
                (INTERNAL_DNS_KEY, "ignored.internal"),
            ],
        );
        let info = metadata(&labelled).unwrap();
        assert_eq!(
            info.node_addresses,
            [
                addr(InternalIp, "10.0.0.1"),
                addr(ExternalIp, "1.2.3.4"),
                addr(Hostname, "node"),
            ]
        );
        assert_eq!(info.provider_id, format!("{PROGRAM}://{NODE}"));
        assert_eq!((info.zone.as_str(), info.region.as_str()), ("", ""));
    }

    #[test]
    fn lists_are_split_as_k3s_splits_them() {
        // No trimming, empty items kept: the host refuses what is not an address.
        let sloppy = annotated(NODE, &[(INTERNAL_IP_KEY, "10.0.0.1, fd00::1,")], &[]);
        assert_eq!(
            metadata(&sloppy).unwrap().node_addresses,
            [
                addr(InternalIp, "10.0.0.1"),
                addr(InternalIp, " fd00::1"),
                addr(InternalIp, ""),
            ]
        );
    }

    #[test]
    fn an_empty_provider_id_is_none() {
        let mut n = annotated(NODE, &[(INTERNAL_IP_KEY, INTERNAL)], &[]);
        n.provider_id = Some(String::new());
        assert_eq!(
            metadata(&n).unwrap().provider_id,
            format!("{PROGRAM}://{NODE}")
        );
    }

    #[test]
    fn instances_always_exist_and_never_shut_down() {
        let k3s = K3s {
            config: crate::config::Config::default(),
        };
        let nodes = vec![
            node("a"),
            annotated("b", &[(INTERNAL_IP_KEY, INTERNAL)], &[]),
        ];
        assert_eq!(k3s.instance_exists(node("gone")), Ok(true));
        assert_eq!(k3s.instance_shutdown(node("a")), Ok(false));
        assert_eq!(
            k3s.instances_exist(nodes.clone()),
            Ok(vec![Ok(true), Ok(true)])
        );
        assert_eq!(
            k3s.instances_shutdown(nodes.clone()),
            Ok(vec![Ok(false), Ok(false)])
        );
        // One answer per node, in order: the unannotated one is retried alone.
        let answers = k3s.instances_metadata(nodes).unwrap();
        assert!(matches!(answers[0], Err(CloudError::RetryAfter(_))));
        assert_eq!(
            answers[1].as_ref().unwrap().provider_id,
            format!("{PROGRAM}://b")
        );
    }
}
