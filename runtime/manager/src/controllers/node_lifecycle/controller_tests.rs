//! Upstream's cloud-node-lifecycle tests (`node_lifecycle_controller_test.go`:
//! `Test_NodesDeleted`, `Test_NodesShutdown`) ported in process: one monitor pass over
//! a Node as the API server double holds it, against the recording cloud, with the
//! deletion guard set to upstream's rule (one answer deletes, no limit).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;

use super::guard::{DeletionGuard, GuardOptions};
use super::monitor;
use crate::cloud::Cloud;
use crate::cloud::fake::Recording;
use crate::controllers::TAINT_SHUTDOWN;
use crate::controllers::test_cluster::TestCluster;

/// The cloud's answer about the Node's instance.
#[derive(Clone, Copy, Debug)]
enum Instance {
    Running,
    ShutDown,
    Gone,
    /// `exists` fails.
    ExistsFails,
    /// It exists; `shutdown` fails.
    ShutdownFails,
}

/// One row: the Node's Ready condition (`None`: no condition), whether it carries the
/// shutdown taint, the cloud's answer; then the calls, whether the Node is still there,
/// and whether it has the shutdown taint after one pass.
struct Case {
    name: &'static str,
    ready: Option<&'static str>,
    tainted: bool,
    instance: Instance,
    calls: &'static [&'static str],
    kept: bool,
    tainted_after: bool,
}

const CASES: &[Case] = &[
    // Test_NodesDeleted
    Case {
        name: "node is not ready and does not exist",
        ready: Some("False"),
        tainted: false,
        instance: Instance::Gone,
        calls: &["exists"],
        kept: false,
        tainted_after: false,
    },
    Case {
        name: "node is not ready and provider returns err",
        ready: Some("False"),
        tainted: false,
        instance: Instance::ExistsFails,
        calls: &["exists"],
        kept: true,
        tainted_after: false,
    },
    Case {
        name: "node is not ready but still exists",
        ready: Some("False"),
        tainted: false,
        instance: Instance::Running,
        calls: &["exists", "shutdown"],
        kept: true,
        tainted_after: false,
    },
    Case {
        name: "node ready condition is unknown, node doesn't exist",
        ready: Some("Unknown"),
        tainted: false,
        instance: Instance::Gone,
        calls: &["exists"],
        kept: false,
        tainted_after: false,
    },
    Case {
        name: "node ready condition is unknown, node exists",
        ready: Some("Unknown"),
        tainted: false,
        instance: Instance::Running,
        calls: &["exists", "shutdown"],
        kept: true,
        tainted_after: false,
    },
    Case {
        name: "node has no ready condition, node doesn't exist",
        ready: None,
        tainted: false,
        instance: Instance::Gone,
        calls: &["exists"],
        kept: false,
        tainted_after: false,
    },
    Case {
        name: "node is ready, but provider said it is deleted",
        ready: Some("True"),
        tainted: false,
        instance: Instance::Gone,
        calls: &[],
        kept: true,
        tainted_after: false,
    },
    // Test_NodesShutdown
    Case {
        name: "node is not ready and was shutdown, but exists",
        ready: Some("False"),
        tainted: false,
        instance: Instance::ShutDown,
        calls: &["exists", "shutdown"],
        kept: true,
        tainted_after: true,
    },
    Case {
        name: "node is not ready, but there is error checking if node is shutdown",
        ready: Some("False"),
        tainted: false,
        instance: Instance::ShutdownFails,
        calls: &["exists", "shutdown"],
        kept: true,
        tainted_after: false,
    },
    Case {
        name: "node is not ready and was not shutdown",
        ready: Some("False"),
        tainted: false,
        instance: Instance::Running,
        calls: &["exists", "shutdown"],
        kept: true,
        tainted_after: false,
    },
    Case {
        name: "node is ready but was shutdown",
        ready: Some("True"),
        tainted: false,
        instance: Instance::ShutDown,
        calls: &[],
        kept: true,
        tainted_after: false,
    },
    Case {
        name: "node is ready and has the shutdown taint: it goes",
        ready: Some("True"),
        tainted: true,
        instance: Instance::Running,
        calls: &[],
        kept: true,
        tainted_after: false,
    },
    Case {
        name: "node is not ready, was shutdown, and the taint exists",
        ready: Some("False"),
        tainted: true,
        instance: Instance::ShutDown,
        calls: &["exists", "shutdown"],
        kept: true,
        tainted_after: true,
    },
];

/// The deletion guard as upstream: the first "does not exist" deletes, no limit.
fn upstream_guard() -> DeletionGuard {
    DeletionGuard::new(GuardOptions {
        confirmations: 1,
        spacing: Duration::ZERO,
        limit: u32::MAX,
        limit_percent: 100,
        window: Duration::from_secs(600),
        swap_grace: Duration::ZERO,
    })
}

fn has_shutdown_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_SHUTDOWN))
}

#[tokio::test]
async fn monitor_nodes() {
    for case in CASES {
        let instance = case.instance;
        let cluster = TestCluster::start(|calls| {
            let cloud = Recording::new(1, calls);
            Arc::new(match instance {
                Instance::Running => cloud,
                Instance::ShutDown => cloud.shut_down(),
                Instance::Gone => cloud.without_instances(),
                Instance::ExistsFails => cloud.failing("exists"),
                Instance::ShutdownFails => cloud.failing("shutdown"),
            }) as Arc<dyn Cloud>
        })
        .await;
        let conditions = match case.ready {
            Some(status) => json!([{"type": "Ready", "status": status}]),
            None => json!([]),
        };
        let taints = if case.tainted {
            json!([{"key": TAINT_SHUTDOWN, "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        cluster
            .node(json!({
                "metadata": {"name": "node0"},
                "spec": {"providerID": "fake://node0", "taints": taints},
                "status": {"conditions": conditions},
            }))
            .await;
        let ctx = cluster.context();
        let api: Api<Node> = Api::all(cluster.client.clone());
        let recorder = ctx.recorder("cloud-node-lifecycle-controller");
        monitor(&ctx, &api, &recorder, 1, &mut upstream_guard()).await;

        let calls: Vec<&str> = cluster.taken().into_iter().map(|(_, c)| c).collect();
        assert_eq!(calls, case.calls, "{}: calls", case.name);
        for name in ["exists", "shutdown"] {
            let about = cluster.calls.subjects(name);
            assert!(
                about.iter().all(|node| node == "node0"),
                "{}: {name} calls about {about:?}",
                case.name
            );
        }
        let after = api.get_opt("node0").await.expect("the Node can be read");
        assert_eq!(after.is_some(), case.kept, "{}: kept", case.name);
        if let Some(node) = after {
            assert_eq!(
                has_shutdown_taint(&node),
                case.tainted_after,
                "{}: shutdown taint",
                case.name
            );
        }
    }
}
