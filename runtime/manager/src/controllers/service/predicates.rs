//! Which Services and Nodes matter, and which changes start a sync: upstream's
//! `needsUpdate`, `needsCleanup`, `wantsLoadBalancer`, the node predicates of the load
//! balancer host list and `shouldSyncUpdatedNode`, with their ported table tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Service, ServiceSpec};
use kube::ResourceExt;

use super::{FINALIZER, LABEL_EXCLUDE_FROM_LB, TAINT_TO_BE_DELETED};

/// Upstream's `needsUpdate`: whether a change from `old` to `new` matters to the load
/// balancer, and which field changed (for the log). Only Services that want a load
/// balancer before or after count; then the type, source ranges, ports (name,
/// protocol, port, node port, target port, app protocol), session affinity and its
/// config, load balancer IP, external IPs, annotations, UID, external traffic policy,
/// health check node port and the number of IP families. The controller's own
/// finalizer and status writes change none of them.
pub(super) fn needs_update(old: &Service, new: &Service) -> Option<&'static str> {
    if !wants_load_balancer(old) && !wants_load_balancer(new) {
        return None;
    }
    if wants_load_balancer(old) != wants_load_balancer(new) {
        return Some("wants load balancer");
    }
    let unset = ServiceSpec::default();
    let (o, n) = (
        old.spec.as_ref().unwrap_or(&unset),
        new.spec.as_ref().unwrap_or(&unset),
    );
    // Go compares strings, slices and maps by value: unset and empty are the same.
    fn text(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or_default()
    }
    fn list<T>(v: &Option<Vec<T>>) -> &[T] {
        v.as_deref().unwrap_or_default()
    }
    fn annotations(s: &Service) -> Option<&BTreeMap<String, String>> {
        s.metadata.annotations.as_ref().filter(|a| !a.is_empty())
    }
    if list(&o.load_balancer_source_ranges) != list(&n.load_balancer_source_ranges) {
        return Some("loadBalancerSourceRanges");
    }
    if list(&o.ports) != list(&n.ports) || text(&o.session_affinity) != text(&n.session_affinity) {
        return Some("ports or sessionAffinity");
    }
    if o.session_affinity_config != n.session_affinity_config {
        return Some("sessionAffinityConfig");
    }
    if text(&o.load_balancer_ip) != text(&n.load_balancer_ip) {
        return Some("loadBalancerIP");
    }
    if list(&o.external_ips) != list(&n.external_ips) {
        return Some("externalIPs");
    }
    if annotations(old) != annotations(new) {
        return Some("annotations");
    }
    if old.metadata.uid != new.metadata.uid {
        return Some("uid");
    }
    if text(&o.external_traffic_policy) != text(&n.external_traffic_policy) {
        return Some("externalTrafficPolicy");
    }
    if o.health_check_node_port.unwrap_or_default() != n.health_check_node_port.unwrap_or_default()
    {
        return Some("healthCheckNodePort");
    }
    if list(&o.ip_families).len() != list(&n.ip_families).len() {
        return Some("ipFamilies count");
    }
    None
}

/// Whether a Service wants a load balancer from this controller.
pub fn wants_load_balancer(s: &Service) -> bool {
    let spec = s.spec.as_ref();
    spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
        && spec.and_then(|s| s.load_balancer_class.as_ref()).is_none()
}

pub(super) fn has_finalizer(s: &Service) -> bool {
    s.finalizers().iter().any(|f| f == FINALIZER)
}

/// Upstream's `needsCleanup`: the finalizer is there and the Service is being
/// deleted or is no longer of type LoadBalancer.
pub(super) fn needs_cleanup(s: &Service) -> bool {
    has_finalizer(s)
        && (s.metadata.deletion_timestamp.is_some()
            || s.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer"))
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Upstream's `nodeIncludedPredicate`: no exclusion label, or one that parses as false.
fn included(node: &Node) -> bool {
    node.labels()
        .get(LABEL_EXCLUDE_FROM_LB)
        .is_none_or(|v| parse_bool(v) == Some(false))
}

/// Whether a Node may back load balancers (upstream's `stableNodeSetPredicates`).
pub fn eligible(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && included(node)
        && !crate::controllers::has_taint(node, TAINT_TO_BE_DELETED)
}

/// Upstream's `shouldSyncUpdatedNode`: a Node update changes load balancers only when
/// its exclusion or its provider ID changed (a taint or a deletion timestamp waits for
/// the next sync).
pub(super) fn should_sync_updated_node(old: &Node, new: &Node) -> bool {
    let provider_id = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default()
    };
    included(old) != included(new) || provider_id(old) != provider_id(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: &[(&str, &str)], taint: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        if let Some(key) = taint {
            n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                    key: key.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        n
    }

    #[test]
    fn node_eligibility_follows_upstream() {
        assert!(eligible(&node(&[], None)));
        assert!(!eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, "")], None)));
        assert!(!eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, "true")], None)));
        assert!(eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, "false")], None)));
        // Go's strconv.ParseBool: these spellings are false, anything else excludes.
        for value in ["0", "f", "F", "FALSE", "False"] {
            assert!(eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, value)], None)));
        }
        for value in ["FaLsE", "no", " false", "off", "1", "t", "TRUE"] {
            assert!(
                !eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, value)], None)),
                "{value}"
            );
        }
        assert!(!eligible(&node(&[], Some(TAINT_TO_BE_DELETED))));
        let mut deleting = node(&[], None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert!(!eligible(&deleting));
    }

    #[test]
    fn only_classless_load_balancers_are_ours() {
        let mut svc = Service {
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(wants_load_balancer(&svc));
        svc.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other".into());
        assert!(!wants_load_balancer(&svc));
        svc.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(!wants_load_balancer(&svc));
    }

    /// Upstream's `defaultExternalService`, changed by `tweak`.
    fn external_service(tweak: impl Fn(&mut serde_json::Value)) -> Service {
        let mut v = json!({
            "metadata": {"name": "external-balancer", "namespace": "default", "uid": "UID old"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
        });
        tweak(&mut v);
        serde_json::from_value(v).unwrap()
    }

    /// Ported from upstream `TestNeedsUpdate` (every case, in its order), plus the fields
    /// `needsUpdate` compares that the upstream test has no case for.
    #[test]
    fn needs_update_as_upstream() {
        type Tweak = Box<dyn Fn(&mut serde_json::Value)>;
        let set = |pointer: &'static str, value: serde_json::Value| -> Tweak {
            Box::new(move |v: &mut serde_json::Value| {
                let (parent, field) = pointer.rsplit_once('/').unwrap();
                v.pointer_mut(parent).unwrap()[field] = value.clone();
            })
        };
        let ports = |ports: serde_json::Value| set("/spec/ports", ports);
        let cases: Vec<(&str, Tweak, Tweak, bool)> = vec![
            (
                "If the service type is changed from LoadBalancer to ClusterIP",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/type", json!("ClusterIP")),
                true,
            ),
            (
                "If the Ports are different",
                ports(json!([{"port": 8000}, {"port": 9000}, {"port": 10000}])),
                ports(json!([{"port": 8001}, {"port": 9001}, {"port": 10001}])),
                true,
            ),
            (
                "If external ip counts are different",
                set("/spec/externalIPs", json!(["old.IP.1"])),
                set("/spec/externalIPs", json!(["new.IP.1", "new.IP.2"])),
                true,
            ),
            (
                "If external ips are different",
                set("/spec/externalIPs", json!(["old.IP.1", "old.IP.2"])),
                set("/spec/externalIPs", json!(["new.IP.1", "new.IP.2"])),
                true,
            ),
            (
                "If UID is different",
                set("/metadata/uid", json!("UID old")),
                set("/metadata/uid", json!("UID new")),
                true,
            ),
            (
                "If ExternalTrafficPolicy is different",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/externalTrafficPolicy", json!("Local")),
                true,
            ),
            (
                "If HealthCheckNodePort is different",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/healthCheckNodePort", json!(30123)),
                true,
            ),
            (
                "If TargetGroup is different 1",
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": 20}])),
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": 21}])),
                true,
            ),
            (
                "If TargetGroup is different 2",
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": 22}])),
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": "dns"}])),
                true,
            ),
            (
                "If appProtocol is the same",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/type", json!("LoadBalancer")),
                false,
            ),
            (
                "If service IPFamilies from single stack to dual stack",
                set("/spec/ipFamilies", json!(["IPv4"])),
                set("/spec/ipFamilies", json!(["IPv4", "IPv6"])),
                true,
            ),
            (
                "If service IPFamilies from dual stack to single stack",
                set("/spec/ipFamilies", json!(["IPv4", "IPv6"])),
                set("/spec/ipFamilies", json!(["IPv4"])),
                true,
            ),
            (
                "If service IPFamilies not change",
                set("/spec/ipFamilies", json!(["IPv4"])),
                set("/spec/ipFamilies", json!(["IPv4"])),
                false,
            ),
            (
                "If appProtocol is set when previously unset",
                ports(json!([{"port": 80, "protocol": "TCP"}])),
                ports(json!([{"port": 80, "protocol": "TCP", "appProtocol": "http"}])),
                true,
            ),
            (
                "If appProtocol is set to a different value",
                ports(json!([{"port": 80, "protocol": "TCP", "appProtocol": "http"}])),
                ports(json!([{"port": 80, "protocol": "TCP", "appProtocol": "tcp"}])),
                true,
            ),
            // Compared by needsUpdate, without a case upstream.
            (
                "loadBalancerSourceRanges",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/loadBalancerSourceRanges", json!(["10.0.0.0/8"])),
                true,
            ),
            (
                "sessionAffinity",
                set("/spec/sessionAffinity", json!("None")),
                set("/spec/sessionAffinity", json!("ClientIP")),
                true,
            ),
            (
                "sessionAffinityConfig",
                set("/spec/sessionAffinity", json!("ClientIP")),
                set(
                    "/spec/sessionAffinityConfig",
                    json!({"clientIP": {"timeoutSeconds": 60}}),
                ),
                true,
            ),
            (
                "loadBalancerIP",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/loadBalancerIP", json!("192.0.2.7")),
                true,
            ),
            (
                "annotations",
                set("/spec/type", json!("LoadBalancer")),
                set("/metadata/annotations", json!({"example.com/a": "1"})),
                true,
            ),
            (
                "labels are not compared",
                set("/spec/type", json!("LoadBalancer")),
                set("/metadata/labels", json!({"team": "a"})),
                false,
            ),
            (
                "finalizers (the controller's own write) are not compared",
                set("/spec/type", json!("LoadBalancer")),
                set("/metadata/finalizers", json!([FINALIZER])),
                false,
            ),
            (
                "status (the controller's own write) is not compared",
                set("/spec/type", json!("LoadBalancer")),
                set(
                    "/status",
                    json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}),
                ),
                false,
            ),
            (
                "neither wants a load balancer",
                set("/spec/type", json!("ClusterIP")),
                Box::new(|v: &mut serde_json::Value| {
                    v["spec"]["type"] = json!("NodePort");
                    v["spec"]["ports"] = json!([{"port": 81}]);
                }),
                false,
            ),
            (
                "loadBalancerClass set: no longer ours",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/loadBalancerClass", json!("example.com/other")),
                true,
            ),
        ];
        for (name, old, new, want) in cases {
            let (old, new) = (external_service(old), external_service(new));
            assert_eq!(
                needs_update(&old, &new).is_some(),
                want,
                "{name}: needsUpdate() should have returned {want}"
            );
        }
    }

    /// Ported from upstream `TestNeedsCleanup`.
    #[test]
    fn needs_cleanup_as_upstream() {
        let with_finalizer = |tweak: &dyn Fn(&mut serde_json::Value)| {
            external_service(|v| {
                v["metadata"]["finalizers"] = json!([FINALIZER]);
                tweak(v);
            })
        };
        assert!(
            !needs_cleanup(&Service::default()),
            "service without finalizer"
        );
        assert!(
            needs_cleanup(&with_finalizer(&|v| v["spec"]["type"] = json!("NodePort"))),
            "service with finalizer without timestamp without LB"
        );
        assert!(
            !needs_cleanup(&with_finalizer(&|_| {})),
            "service with finalizer without timestamp with LB"
        );
        assert!(
            needs_cleanup(&with_finalizer(&|v| {
                v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z")
            })),
            "service with finalizer with timestamp"
        );
    }

    /// Ported from upstream `Test_shouldSyncUpdatedNode_individualPredicates`.
    #[test]
    fn should_sync_updated_node_individual_predicates() {
        let make = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = json!({"metadata": {"name": "node"}, "spec": {"providerID": "cloud://1"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
            f(&mut v);
            serde_json::from_value::<Node>(v).unwrap()
        };
        let plain = |_: &mut serde_json::Value| {};
        let excluded = |v: &mut serde_json::Value| {
            v["metadata"]["labels"] = json!({LABEL_EXCLUDE_FROM_LB: "true"})
        };
        let other_label = |v: &mut serde_json::Value| v["metadata"]["labels"] = json!({"a": "b"});
        let tainted = |v: &mut serde_json::Value| {
            v["spec"]["taints"] = json!([{"key": TAINT_TO_BE_DELETED, "effect": "NoSchedule"}])
        };
        let not_ready = |v: &mut serde_json::Value| {
            v["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}])
        };
        let no_ready = |v: &mut serde_json::Value| v["status"]["conditions"] = json!([]);
        let deleting = |v: &mut serde_json::Value| {
            v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z")
        };
        let no_provider_id = |v: &mut serde_json::Value| v["spec"]["providerID"] = json!("");
        let unset_provider_id = |v: &mut serde_json::Value| {
            v["spec"].as_object_mut().unwrap().remove("providerID");
        };
        let other_provider_id =
            |v: &mut serde_json::Value| v["spec"]["providerID"] = json!("cloud://2");
        type Tweak<'a> = &'a dyn Fn(&mut serde_json::Value);
        let cases: [(&str, Tweak, Tweak, bool); 14] = [
            ("nothing changed", &plain, &plain, false),
            ("excluded F->T", &plain, &excluded, true),
            ("excluded T->F", &excluded, &plain, true),
            ("excluded T->T", &excluded, &excluded, false),
            ("other taint F->T", &plain, &tainted, false),
            ("other taint T->F", &tainted, &plain, false),
            ("other label F->T", &plain, &other_label, false),
            ("other label T->F", &other_label, &plain, false),
            ("readiness changed T->F", &plain, &not_ready, false),
            ("readiness changed F->unset", &not_ready, &no_ready, false),
            ("deletionTimestamp F->T", &plain, &deleting, false),
            ("providerID set F->T", &no_provider_id, &plain, true),
            (
                "providerID set T->F (unset)",
                &plain,
                &unset_provider_id,
                true,
            ),
            ("providerID change", &plain, &other_provider_id, true),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(
                should_sync_updated_node(&make(old), &make(new)),
                want,
                "{name}"
            );
        }
        // An empty provider ID and none are the same (Go's zero string).
        assert!(!should_sync_updated_node(
            &make(&no_provider_id),
            &make(&unset_provider_id)
        ));
    }
}
