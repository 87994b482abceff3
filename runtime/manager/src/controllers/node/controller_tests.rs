//! Upstream's cloud-node controller tests (`node_controller_test.go`, `Test_syncNode`)
//! ported in process: the controller runs against the API server double and the
//! recording cloud, and each case waits for what upstream's asserts: the Node's provider
//! ID, labels and taints, and the cloud calls made.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::Api;
use serde_json::json;

use super::{LABEL_INSTANCE_TYPE, LABEL_REGION, LABEL_ZONE, LABEL_ZONE_BETA, Options, run};
use crate::cloud::fake::Recording;
use crate::cloud::{Cloud, InstanceMetadata};
use crate::controllers::TAINT_UNINITIALIZED;
use crate::controllers::test_cluster::{TestCluster, about, wait_for};

fn options() -> Options {
    Options {
        status_update_frequency: Duration::from_secs(300),
        workers: 1,
        batch_size: 1,
        batch_window: Duration::from_millis(10),
    }
}

/// A Node as kubelet registers it with `--cloud-provider=external`.
fn tainted(name: &str, provider_id: Option<&str>) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "providerID": provider_id,
            "taints": [{"key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn uninitialized(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_UNINITIALIZED))
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// "node initialized with provider ID": the provider's ID, instance type, zone and
/// region (GA and beta labels) are set, and the taint goes, after one metadata call.
#[tokio::test]
async fn an_uninitialized_node_is_initialized() {
    let mut cluster =
        TestCluster::start(|calls| Arc::new(Recording::new(1, calls)) as Arc<dyn Cloud>).await;
    cluster.node(tainted("node0", None)).await;
    cluster.run(|ctx, stop| run(ctx, options(), stop));
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let node = wait_for("node0 initialized", || async {
        let node = nodes.get("node0").await.map_err(|e| e.to_string())?;
        if uninitialized(&node) {
            Err(format!("still tainted: {:?}", node.spec))
        } else {
            Ok(node)
        }
    })
    .await;
    assert_eq!(
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some("fake://node0")
    );
    assert_eq!(label(&node, LABEL_INSTANCE_TYPE), Some("fake.small"));
    assert_eq!(label(&node, LABEL_ZONE), Some("zone-a"));
    assert_eq!(label(&node, LABEL_ZONE_BETA), Some("zone-a"));
    assert_eq!(label(&node, LABEL_REGION), Some("region-1"));
    let metadata_calls = cluster
        .taken()
        .iter()
        .filter(|(_, c)| *c == "metadata")
        .count();
    assert_eq!(metadata_calls, 1, "{:?}", cluster.taken());
}

/// The Node's `verb` requests served so far (the tests read with lists, so every
/// `get` is the controller's).
fn node_requests(cluster: &TestCluster, verb: &str) -> u64 {
    cluster
        .api
        .request_counts()
        .iter()
        .filter(|(access, _)| access.resource == "nodes" && access.verb == verb)
        .map(|(_, n)| n)
        .sum()
}

/// Waits until every Node of the cluster is untainted, reading with lists.
async fn wait_all_initialized(cluster: &TestCluster, count: usize) {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    wait_for("every Node initialized", || async {
        let list = nodes
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let done = list.items.iter().filter(|n| !uninitialized(n)).count();
        if done == count {
            Ok(())
        } else {
            Err(format!("{done} of {count} initialized"))
        }
    })
    .await;
}

/// As upstream's controller reads the Node from its lister: initializing a joining
/// Node is one update, with no read of the Node from the API server.
#[tokio::test]
async fn a_node_is_initialized_from_the_cache_with_one_write() {
    let mut cluster =
        TestCluster::start(|calls| Arc::new(Recording::new(1, calls)) as Arc<dyn Cloud>).await;
    for i in 0..3 {
        cluster.node(tainted(&format!("node{i}"), None)).await;
    }
    cluster.run(|ctx, stop| run(ctx, options(), stop));
    wait_all_initialized(&cluster, 3).await;
    assert_eq!(
        (
            node_requests(&cluster, "get"),
            node_requests(&cluster, "update")
        ),
        (0, 3)
    );
}

/// Upstream's RetryOnConflict: an update refused with a conflict is tried again with
/// a newer version of the Node: read from the API server when the cache has none yet
/// (here the refused version is the newest), and the Node is initialized.
#[tokio::test]
async fn a_conflicting_initialization_is_retried_with_a_fresh_read() {
    let mut cluster =
        TestCluster::start(|calls| Arc::new(Recording::new(1, calls)) as Arc<dyn Cloud>).await;
    cluster.node(tainted("node0", None)).await;
    cluster.api.inject_conflicts("nodes", "update", 1);
    cluster.run(|ctx, stop| run(ctx, options(), stop));
    wait_all_initialized(&cluster, 1).await;
    assert_eq!(
        (
            node_requests(&cluster, "get"),
            node_requests(&cluster, "update")
        ),
        (1, 2)
    );
}

/// "node has provider ID already": the Node's own ID stays, even when the cloud's
/// answer names another (here `fake://node0`); the rest of the answer is written. (A
/// real provider's answers pass the seam's checks first, which refuse such an answer:
/// `cloud/validate.rs`; the recording cloud is behind no seam.)
#[tokio::test]
async fn a_node_keeps_its_provider_id() {
    let mut cluster =
        TestCluster::start(|calls| Arc::new(Recording::new(1, calls)) as Arc<dyn Cloud>).await;
    cluster.node(tainted("node0", Some("fake://own-id"))).await;
    cluster.run(|ctx, stop| run(ctx, options(), stop));
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let node = wait_for("node0 initialized", || async {
        let node = nodes.get("node0").await.map_err(|e| e.to_string())?;
        if uninitialized(&node) {
            Err("still tainted".to_string())
        } else {
            Ok(node)
        }
    })
    .await;
    assert_eq!(
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some("fake://own-id")
    );
    assert_eq!(label(&node, LABEL_INSTANCE_TYPE), Some("fake.small"));
}

/// "provider error": the taint stays and the Node is asked about again after the
/// controller's back-off (0.5 s, doubling), never initialized on an error. On paused
/// time: the clock jumps to each retry instead of waiting for it.
#[tokio::test(start_paused = true)]
async fn a_provider_error_keeps_the_taint_and_is_retried() {
    let mut cluster = TestCluster::in_memory(|calls| {
        Arc::new(Recording::new(1, calls).failing("metadata")) as Arc<dyn Cloud>
    })
    .await;
    cluster.node(tainted("node0", None)).await;
    cluster.run(|ctx, stop| run(ctx, options(), stop));
    let calls = cluster.calls.clone();
    let asked = wait_for("three metadata calls", || {
        let asked = calls.times("metadata");
        async move {
            if asked.len() >= 3 {
                Ok(asked)
            } else {
                Err(format!("{asked:?}"))
            }
        }
    })
    .await;
    let delays: Vec<Duration> = asked.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        about(delays[0], Duration::from_millis(500)) && about(delays[1], Duration::from_secs(1)),
        "delays between the calls: {delays:?}"
    );
    let node = Api::<Node>::all(cluster.client.clone())
        .get("node0")
        .await
        .expect("node0");
    assert!(uninitialized(&node), "{:?}", node.spec);
    assert!(node.spec.and_then(|s| s.provider_id).is_none());
}

/// A controller that stops (its replica lost the lease, or SIGTERM) while joining Nodes
/// wait for their turn to write writes none of them: here it stops inside the batched
/// call that answers all thirty, and every Node keeps its taint.
#[tokio::test]
async fn nodes_still_waiting_when_the_controller_stops_are_not_written() {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let stop = Arc::new(stop);
    let stopper = stop.clone();
    let cluster = TestCluster::start(move |calls| {
        Arc::new(
            Recording::new(1, calls)
                .batching()
                .after("metadata", move || {
                    let _ = stopper.send(true);
                }),
        ) as Arc<dyn Cloud>
    })
    .await;
    let names: Vec<String> = (0..30).map(|i| format!("join-{i}")).collect();
    for name in &names {
        cluster.node(tainted(name, None)).await;
    }
    let batched = Options {
        batch_size: 30,
        batch_window: Duration::from_millis(200),
        ..options()
    };
    tokio::time::timeout(
        crate::controllers::test_cluster::TIMEOUT,
        run(cluster.context(), batched, stopping),
    )
    .await
    .expect("the controller stops");
    let asked = cluster
        .taken()
        .iter()
        .filter(|(_, c)| *c == "metadata")
        .count();
    assert_eq!(asked, 30, "one batch answered all thirty");
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    for name in &names {
        let node = nodes.get(name).await.expect("the Node");
        assert!(uninitialized(&node), "{name} was written after the stop");
    }
    drop(stop);
}

/// One row of upstream's `Test_syncNode` that scripts the cloud's answer.
struct SyncCase {
    name: &'static str,
    /// The Node's `alpha.kubernetes.io/provided-node-ip` annotation.
    provided_ip: Option<&'static str>,
    /// What the cloud answers about the instance.
    answer: InstanceMetadata,
    /// The Node is initialized (else: it keeps the taint and is asked about again).
    initialized: bool,
    /// Its labels afterwards (key, value), and labels it must not have.
    labels: &'static [(&'static str, &'static str)],
    absent: &'static [&'static str],
    /// Its addresses afterwards (type, address), in order.
    addresses: &'static [(&'static str, &'static str)],
}

fn address(type_: &str, address: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.into(),
        address: address.into(),
    }
}

fn answer(zone: &str, region: &str, labels: &[(&str, &str)]) -> InstanceMetadata {
    InstanceMetadata {
        provider_id: "fake://node0".into(),
        instance_type: "fake.large".into(),
        addresses: vec![
            address("InternalIP", "10.0.0.1"),
            address("ExternalIP", "132.143.154.163"),
        ],
        zone: zone.into(),
        region: region.into(),
        additional_labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn sync_cases() -> Vec<SyncCase> {
    vec![
        SyncCase {
            name: "provided node IP address is valid",
            provided_ip: Some("10.0.0.1"),
            answer: answer("us-west-1a", "us-west", &[]),
            initialized: true,
            labels: &[
                (LABEL_INSTANCE_TYPE, "fake.large"),
                (LABEL_ZONE, "us-west-1a"),
                (LABEL_REGION, "us-west"),
            ],
            absent: &[],
            addresses: &[
                ("InternalIP", "10.0.0.1"),
                ("ExternalIP", "132.143.154.163"),
            ],
        },
        SyncCase {
            name: "provided node IP address is not valid: the cloud does not report it",
            provided_ip: Some("10.0.0.9"),
            answer: answer("us-west-1a", "us-west", &[]),
            initialized: false,
            labels: &[],
            absent: &[LABEL_INSTANCE_TYPE, LABEL_ZONE],
            addresses: &[],
        },
        SyncCase {
            name: "no zone and no region: no topology labels",
            provided_ip: None,
            answer: answer("", "", &[]),
            initialized: true,
            labels: &[(LABEL_INSTANCE_TYPE, "fake.large")],
            absent: &[LABEL_ZONE, LABEL_ZONE_BETA, LABEL_REGION],
            addresses: &[
                ("InternalIP", "10.0.0.1"),
                ("ExternalIP", "132.143.154.163"),
            ],
        },
        SyncCase {
            name: "additional labels: kept, except in the kubernetes.io and k8s.io namespaces",
            provided_ip: None,
            answer: answer(
                "us-west-1a",
                "us-west",
                &[
                    ("topology.fake.example/rack", "r1"),
                    (
                        "node.kubernetes.io/exclude-from-external-load-balancers",
                        "true",
                    ),
                    ("example.k8s.io/team", "a"),
                ],
            ),
            initialized: true,
            labels: &[
                ("topology.fake.example/rack", "r1"),
                (LABEL_ZONE, "us-west-1a"),
            ],
            absent: &[
                "node.kubernetes.io/exclude-from-external-load-balancers",
                "example.k8s.io/team",
            ],
            addresses: &[
                ("InternalIP", "10.0.0.1"),
                ("ExternalIP", "132.143.154.163"),
            ],
        },
    ]
}

/// Upstream's `Test_syncNode`, the rows that script the instance's answer: the
/// provided node IP checked against the cloud's addresses, empty topology, the
/// provider's additional labels. The other rows are the tests above.
#[tokio::test]
async fn sync_node() {
    for case in sync_cases() {
        let answer = case.answer.clone();
        let mut cluster = TestCluster::start(move |calls| {
            Arc::new(Recording::new(1, calls).answering(answer)) as Arc<dyn Cloud>
        })
        .await;
        let mut node = tainted("node0", None);
        if let Some(ip) = case.provided_ip {
            node["metadata"]["annotations"] = json!({super::ANNOTATION_PROVIDED_NODE_IP: ip});
        }
        cluster.node(node).await;
        cluster.run(|ctx, stop| run(ctx, options(), stop));
        let nodes: Api<Node> = Api::all(cluster.client.clone());
        let node = if case.initialized {
            wait_for(
                &format!("{}: initialized with addresses", case.name),
                || async {
                    let node = nodes.get("node0").await.map_err(|e| e.to_string())?;
                    let addresses = node.status.as_ref().and_then(|s| s.addresses.clone());
                    if uninitialized(&node) || addresses.is_none() {
                        Err(format!("{:?} {addresses:?}", node.spec))
                    } else {
                        Ok(node)
                    }
                },
            )
            .await
        } else {
            let calls = cluster.calls.clone();
            wait_for(&format!("{}: asked twice", case.name), || {
                let asked = calls.of("metadata").len();
                async move {
                    if asked >= 2 {
                        Ok(())
                    } else {
                        Err(format!("{asked} metadata calls"))
                    }
                }
            })
            .await;
            let node = nodes.get("node0").await.expect("node0");
            assert!(uninitialized(&node), "{}: the taint stays", case.name);
            assert!(
                node.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_none(),
                "{}: no provider ID written",
                case.name
            );
            node
        };
        for (key, value) in case.labels {
            assert_eq!(label(&node, key), Some(*value), "{}: {key}", case.name);
        }
        for key in case.absent {
            assert_eq!(label(&node, key), None, "{}: {key}", case.name);
        }
        let addresses: Vec<(String, String)> = node
            .status
            .and_then(|s| s.addresses)
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        let want: Vec<(String, String)> = case
            .addresses
            .iter()
            .map(|(t, a)| (t.to_string(), a.to_string()))
            .collect();
        assert_eq!(addresses, want, "{}: addresses", case.name);
        let about = cluster.calls.subjects("metadata");
        assert!(
            about.iter().all(|n| n == "node0"),
            "{}: metadata asked about {about:?}",
            case.name
        );
    }
}
