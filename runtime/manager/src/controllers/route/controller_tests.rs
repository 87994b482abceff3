//! Upstream's route controller test (`route_controller_test.go`, `TestReconcile`)
//! ported in process: one reconcile over two Nodes as the API server double holds
//! them, against the recording cloud's routes, asserting on the routes left, the calls
//! made and the Nodes' `NetworkUnavailable` conditions. Cluster CIDR 10.120.0.0/16.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;

use super::{Cidr, Options, reconcile};
use crate::cloud::fake::Recording;
use crate::cloud::{Cloud, Route};
use crate::controllers::test_cluster::TestCluster;

fn route(target: &str, cidr: &str, blackhole: bool) -> Route {
    Route {
        name: format!("{target}-{cidr}"),
        target_node: target.into(),
        target_node_addresses: Vec::new(),
        destination_cidr: cidr.into(),
        blackhole,
        enable_node_addresses: false,
        target_node_provider_id: None,
    }
}

/// One row: node-2's pod CIDR (node-1 has 10.120.0.0/24), the routes before, the
/// routes after as (target, CIDR), how many are created and deleted, and each Node's
/// `NetworkUnavailable` status afterwards (`None`: not set).
struct Case {
    name: &'static str,
    node2_cidr: Option<&'static str>,
    before: Vec<Route>,
    after: &'static [(&'static str, &'static str)],
    created: usize,
    deleted: usize,
    unavailable: [Option<&'static str>; 2],
}

fn cases() -> Vec<Case> {
    let both = &[("node-1", "10.120.0.0/24"), ("node-2", "10.120.1.0/24")];
    vec![
        Case {
            name: "2 nodes, routes already there",
            node2_cidr: Some("10.120.1.0/24"),
            before: vec![
                route("node-1", "10.120.0.0/24", false),
                route("node-2", "10.120.1.0/24", false),
            ],
            after: both,
            created: 0,
            deleted: 0,
            unavailable: [Some("False"), Some("False")],
        },
        Case {
            name: "2 nodes, one route already there",
            node2_cidr: Some("10.120.1.0/24"),
            before: vec![route("node-1", "10.120.0.0/24", false)],
            after: both,
            created: 1,
            deleted: 0,
            unavailable: [Some("False"), Some("False")],
        },
        Case {
            name: "2 nodes, no routes yet",
            node2_cidr: Some("10.120.1.0/24"),
            before: vec![],
            after: both,
            created: 2,
            deleted: 0,
            unavailable: [Some("False"), Some("False")],
        },
        Case {
            name: "2 nodes, a few too many routes",
            node2_cidr: Some("10.120.1.0/24"),
            before: vec![
                route("node-1", "10.120.0.0/24", false),
                route("node-2", "10.120.1.0/24", false),
                route("node-3", "10.120.2.0/24", false),
                route("node-4", "10.120.3.0/24", false),
            ],
            after: both,
            created: 0,
            deleted: 2,
            unavailable: [Some("False"), Some("False")],
        },
        Case {
            name: "2 nodes, 2 routes, but only 1 is right",
            node2_cidr: Some("10.120.1.0/24"),
            before: vec![
                route("node-1", "10.120.0.0/24", false),
                route("node-3", "10.120.2.0/24", false),
            ],
            after: both,
            created: 1,
            deleted: 1,
            unavailable: [Some("False"), Some("False")],
        },
        Case {
            name: "2 nodes, one node without CIDR assigned",
            node2_cidr: None,
            before: vec![],
            after: &[("node-1", "10.120.0.0/24")],
            created: 1,
            deleted: 0,
            unavailable: [Some("False"), None],
        },
        Case {
            name: "2 nodes, an extra blackhole route in our range",
            node2_cidr: Some("10.120.1.0/24"),
            before: vec![
                route("node-1", "10.120.0.0/24", false),
                route("node-2", "10.120.1.0/24", false),
                route("", "10.120.2.0/24", true),
            ],
            after: both,
            created: 0,
            deleted: 1,
            unavailable: [Some("False"), Some("False")],
        },
        Case {
            name: "2 nodes, an extra blackhole route not in our range",
            node2_cidr: Some("10.120.1.0/24"),
            before: vec![
                route("node-1", "10.120.0.0/24", false),
                route("node-2", "10.120.1.0/24", false),
                route("", "10.1.1.0/24", true),
            ],
            after: &[
                ("", "10.1.1.0/24"),
                ("node-1", "10.120.0.0/24"),
                ("node-2", "10.120.1.0/24"),
            ],
            created: 0,
            deleted: 0,
            unavailable: [Some("False"), Some("False")],
        },
    ]
}

/// The Node's `NetworkUnavailable` status, `None` when not set.
pub(super) fn network_unavailable(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "NetworkUnavailable")
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn reconcile_as_upstream() {
    for case in cases() {
        let mut cloud = None;
        let cluster = TestCluster::start(|calls| {
            let recording = Arc::new(Recording::new(1, calls).with_routes(case.before.clone()));
            cloud = Some(recording.clone());
            recording as Arc<dyn Cloud>
        })
        .await;
        let cloud = cloud.expect("the cloud");
        for (name, cidr) in [
            ("node-1", Some("10.120.0.0/24")),
            ("node-2", case.node2_cidr),
        ] {
            cluster
                .node(json!({
                    "metadata": {"name": name, "uid": format!("uid-{name}")},
                    "spec": {
                        "providerID": format!("fake://{name}"),
                        "podCIDR": cidr,
                        "podCIDRs": cidr.map(|c| vec![c]),
                    },
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }))
                .await;
        }
        let ctx = cluster.context();
        let options = Options {
            cluster_name: "kubernetes".into(),
            cluster_cidrs: vec![Cidr::parse("10.120.0.0/16").expect("a CIDR")],
            period: Duration::from_secs(10),
            watch_based: false,
        };
        let recorder = ctx.recorder("route-controller");
        assert!(reconcile(&ctx, &options, &recorder).await, "{}", case.name);

        let after: Vec<(String, String)> = cloud
            .routes()
            .into_iter()
            .map(|r| (r.target_node, r.destination_cidr))
            .collect();
        let want: Vec<(String, String)> = case
            .after
            .iter()
            .map(|(t, c)| (t.to_string(), c.to_string()))
            .collect();
        assert_eq!(after, want, "{}: routes", case.name);
        let calls: Vec<&str> = cluster.taken().into_iter().map(|(_, c)| c).collect();
        let count = |call: &str| calls.iter().filter(|c| **c == call).count();
        assert_eq!(count("list-routes"), 1, "{}: {calls:?}", case.name);
        assert_eq!(
            count("create-route"),
            case.created,
            "{}: {calls:?}",
            case.name
        );
        assert_eq!(
            count("delete-route"),
            case.deleted,
            "{}: {calls:?}",
            case.name
        );
        let nodes: Api<Node> = Api::all(cluster.client.clone());
        for (name, want) in ["node-1", "node-2"].iter().zip(case.unavailable) {
            let node = nodes.get(name).await.expect("the Node");
            assert_eq!(
                network_unavailable(&node).as_deref(),
                want,
                "{}: {name}'s NetworkUnavailable",
                case.name
            );
        }
    }
}
