//! The cloud-node controller's helpers: upstream's provided-node-IP and address tables, the
//! label rules, and what initialization writes.

use super::*;

fn addr(t: &str, a: &str) -> NodeAddress {
    NodeAddress {
        type_: t.into(),
        address: a.into(),
    }
}

fn annotated(ip: &str) -> Node {
    let mut node = Node::default();
    node.metadata.annotations =
        Some([(ANNOTATION_PROVIDED_NODE_IP.to_string(), ip.to_string())].into());
    node
}

/// Ported from upstream `TestGetNodeAddressesFromNodeIP` (cloud-provider
/// node/helpers/address_test.go).
#[test]
fn get_node_addresses_from_node_ip() {
    let host = addr("Hostname", "kubelet-hostname");
    // (case, annotation, cloud addresses, expected addresses or an error)
    type Case<'a> = (&'a str, &'a str, Vec<NodeAddress>, Option<Vec<NodeAddress>>);
    let cases: Vec<Case> = vec![
        (
            "a single InternalIP",
            "10.1.1.1",
            vec![addr("InternalIP", "10.1.1.1"), host.clone()],
            Some(vec![addr("InternalIP", "10.1.1.1"), host.clone()]),
        ),
        (
            "node IP is external",
            "55.55.55.55",
            vec![
                addr("InternalIP", "10.1.1.1"),
                addr("ExternalIP", "55.55.55.55"),
                host.clone(),
            ],
            Some(vec![
                addr("ExternalIP", "55.55.55.55"),
                addr("InternalIP", "10.1.1.1"),
                host.clone(),
            ]),
        ),
        (
            "InternalIP and ExternalIP are the same",
            "55.55.55.55",
            vec![
                addr("InternalIP", "44.44.44.44"),
                addr("ExternalIP", "44.44.44.44"),
                addr("InternalIP", "55.55.55.55"),
                addr("ExternalIP", "55.55.55.55"),
                host.clone(),
            ],
            Some(vec![
                addr("InternalIP", "55.55.55.55"),
                addr("ExternalIP", "55.55.55.55"),
                host.clone(),
            ]),
        ),
        (
            "an InternalIP with multiple internal IPs",
            "10.1.1.1",
            vec![
                addr("InternalIP", "10.1.1.1"),
                addr("InternalIP", "10.2.2.2"),
                addr("InternalIP", "10.3.3.3"),
                addr("ExternalIP", "55.55.55.55"),
                host.clone(),
            ],
            Some(vec![
                addr("InternalIP", "10.1.1.1"),
                addr("ExternalIP", "55.55.55.55"),
                host.clone(),
            ]),
        ),
        (
            "an InternalIP that isn't the cloud's: error",
            "10.2.2.2",
            vec![
                addr("InternalIP", "10.1.1.1"),
                addr("ExternalIP", "55.55.55.55"),
                host.clone(),
            ],
            None,
        ),
        (
            "different IPv6 formats",
            "2600:1f14:1d4:d101::ba3d",
            vec![
                addr("InternalIP", "10.1.1.1"),
                addr("InternalIP", "2600:1f14:1d4:d101:0:0:0:ba3d"),
                host.clone(),
            ],
            Some(vec![
                addr("InternalIP", "2600:1f14:1d4:d101:0:0:0:ba3d"),
                host.clone(),
            ]),
        ),
        (
            "single-stack cloud, dual-stack request",
            "10.1.1.1,fc01:1234::5678",
            vec![addr("InternalIP", "10.1.1.1"), host.clone()],
            None,
        ),
        (
            "dual-stack cloud, IPv6 first, IPv4-primary request",
            "10.1.1.1,fc01:1234::5678",
            vec![
                addr("InternalIP", "fc01:1234::5678"),
                addr("InternalIP", "10.1.1.1"),
                host.clone(),
            ],
            Some(vec![
                addr("InternalIP", "10.1.1.1"),
                addr("InternalIP", "fc01:1234::5678"),
                host.clone(),
            ]),
        ),
        (
            "leading zeros are the same IP (ParseIPSloppy)",
            "010.001.001.001",
            vec![addr("InternalIP", "10.1.1.1"), host.clone()],
            Some(vec![addr("InternalIP", "10.1.1.1"), host.clone()]),
        ),
    ];
    for (name, ip, cloud, want) in cases {
        let got = apply_provided_node_ip(&annotated(ip), &cloud).ok();
        assert_eq!(got, want, "{name}");
    }
    assert!(
        apply_provided_node_ip(&annotated("10.9.9.9"), &[addr("InternalIP", "10.1.1.1")])
            .unwrap_err()
            .contains("matches ip: 10.9.9.9")
    );
    let cloud = [addr("InternalIP", "10.1.1.1")];
    assert_eq!(
        apply_provided_node_ip(&Node::default(), &cloud).unwrap(),
        cloud
    );
}

/// Upstream's `ParseNodeIPAnnotation` (component-helpers node/util/ips.go): strict.
#[test]
fn parse_node_ip_annotation_is_strict() {
    for ok in [
        "10.1.1.1",
        "10.1.1.1,fd00::1",
        "fd00::1,10.1.1.1",
        "0.0.0.0",
        "::ffff:10.1.1.1",
    ] {
        assert!(parse_node_ip_annotation(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        " 10.1.1.1",
        "10.1.1.1 ",
        "10.1.1.1, fd00::1",
        "10.1.1.1,",
        "10.1.1.1,10.2.2.2",
        "10.1.1.1,::ffff:10.2.2.2",
        "10.1.1.1,fd00::1,fd00::2",
        "0.0.0.0,fd00::1",
        "10.1.1.1,::",
        "10.1.1",
        "10.1.1.256",
        "node-1",
    ] {
        assert!(parse_node_ip_annotation(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        parse_ip_sloppy("010.000.000.001"),
        parse_ip_sloppy("10.0.0.1")
    );
    // Go's dtoi reads any number of leading zeros, and stops past 0xFFFFFF.
    assert_eq!(
        parse_ip_sloppy("0000000010.0.0.1"),
        parse_ip_sloppy("10.0.0.1")
    );
    assert_eq!(parse_ip_sloppy("16777216.0.0.1"), None);
    assert_eq!(parse_ip_sloppy("10.0.0.1."), None);
    assert_eq!(
        parse_ip_sloppy("::ffff:10.0.0.1"),
        parse_ip_sloppy("10.0.0.1")
    );
}

#[test]
fn kubernetes_label_namespaces_are_discarded() {
    for key in [
        "kubernetes.io/role",
        "node.kubernetes.io/x",
        "k8s.io/a",
        "foo.k8s.io/b",
    ] {
        assert!(is_kubernetes_namespaced(key), "{key}");
    }
    for key in ["example.com/rack", "tier", "notkubernetes.io/x"] {
        assert!(!is_kubernetes_namespaced(key), "{key}");
    }
}

#[test]
fn initialization_sets_labels_without_overwriting() {
    let mut node = Node::default();
    node.metadata.labels = Some([("tier".to_string(), "mine".to_string())].into());
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        taints: Some(vec![
            k8s_openapi::api::core::v1::Taint {
                key: TAINT_UNINITIALIZED.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
            k8s_openapi::api::core::v1::Taint {
                key: "other".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    });
    let meta = InstanceMetadata {
        provider_id: "sim://1".into(),
        instance_type: "large".into(),
        zone: "z".into(),
        region: "r".into(),
        additional_labels: vec![
            ("tier".into(), "cloud".into()),
            ("kubernetes.io/evil".into(), "x".into()),
            ("rack".into(), "7".into()),
        ],
        ..InstanceMetadata::default()
    };
    initialize(&mut node, &meta);
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["tier"], "mine");
    assert_eq!(labels["rack"], "7");
    assert!(!labels.contains_key("kubernetes.io/evil"));
    for key in [LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA] {
        assert_eq!(labels[key], "large");
    }
    assert_eq!(labels[LABEL_ZONE_BETA], "z");
    assert_eq!(labels[LABEL_REGION], "r");
    let spec = node.spec.unwrap();
    assert_eq!(spec.provider_id.as_deref(), Some("sim://1"));
    assert_eq!(spec.taints.unwrap().len(), 1);
}

#[test]
fn address_changes_are_detected_by_type() {
    let a = vec![addr("InternalIP", "1"), addr("Hostname", "h")];
    assert!(!addresses_changed(
        &a,
        &[addr("Hostname", "h"), addr("InternalIP", "1")]
    ));
    assert!(addresses_changed(
        &a,
        &[addr("InternalIP", "2"), addr("Hostname", "h")]
    ));
    assert!(addresses_changed(&a, &a[..1]));
}
