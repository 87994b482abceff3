//! The controllers' batched instance calls through the real `wasm-ccm` binary, the
//! API server double and the simulated cloud: Nodes joining together, the status pass
//! and the lifecycle pass each cost a handful of cloud requests (one listing per
//! batch), with upstream's per-Node answers; a 0.1 provider without `instances-batch`
//! is asked per Node. Also the host's checks around the contract: `has-cluster-id`
//! enforced as upstream, and events a provider records landing on the Node.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use sim_cloud::model::{InstanceState, NewInstance};
use wasm_ccm_tests::{
    Stack, function_calls, http_get, initialized, listening_port, metrics, reconciles, taint_keys,
    wait_for, wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

fn tainted(name: &str, ready: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": ready}]}
    }))
    .unwrap()
}

/// Cloud requests served for `route` (`METHOD /template`).
fn served(stack: &Stack, route: &str) -> u64 {
    stack
        .cloud
        .with_state(|s| s.requests.get(route).copied().unwrap_or(0))
}

/// Instances and tainted Nodes `prefix-0`.. `prefix-{n-1}`.
async fn join(stack: &Stack, prefix: &str, n: usize) -> Vec<String> {
    let nodes: Api<Node> = Api::all(stack.client());
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(&name)));
        nodes
            .create(&PostParams::default(), &tainted(&name, "True"))
            .await
            .unwrap();
        names.push(name);
    }
    names
}

async fn all_initialized(stack: &Stack, names: &[String]) {
    let nodes: Api<Node> = Api::all(stack.client());
    for name in names {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_joining_together_cost_a_few_cloud_requests() {
    let stack = Stack::start().await;
    let names = join(&stack, "join", 120).await;
    let port = listening_port();
    let _ccm =
        stack.controller_manager(port, &["--leader-elect=false", "--controllers=cloud-node"]);
    all_initialized(&stack, &names).await;
    let lists = served(&stack, "GET /v1/instances");
    let gets = served(&stack, "GET /v1/instances/{id}");
    eprintln!("120 joining nodes: {lists} instance listings, {gets} instance gets");
    assert!(lists <= 6, "{lists} listings for 120 nodes");
    assert_eq!(gets, 0);
    let m = metrics(port).await;
    assert_eq!(reconciles(&m, "cloud-node", "error"), 0.0, "{m}");
    // Every Node got its own answer: provider ID and type.
    let node = Api::<Node>::all(stack.client())
        .get("join-77")
        .await
        .unwrap();
    let spec = node.spec.unwrap();
    assert!(
        spec.provider_id
            .as_deref()
            .unwrap()
            .starts_with("simcloud://"),
        "{spec:?}"
    );
    assert_eq!(
        node.metadata.labels.unwrap()["node.kubernetes.io/instance-type"],
        "sim.small"
    );
}

/// A join larger than a batch is asked about in full batches: every joining Node
/// reaches the batcher at once, while the Node writes go one at a time
/// (`--concurrent-node-syncs` 1). Were the controller's reconciles capped at a batch's
/// worth, the rest would reach the batcher a few at a time as writes freed their slots,
/// each few a listing of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_larger_than_a_batch_is_asked_in_full_batches() {
    let stack = Stack::start().await;
    let names = join(&stack, "wide", 60).await;
    let port = listening_port();
    let _ccm = stack.controller_manager(
        port,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node",
            "--instances-batch-size=10",
        ],
    );
    all_initialized(&stack, &names).await;
    let lists = served(&stack, "GET /v1/instances");
    eprintln!("60 joining nodes, batches of 10: {lists} instance listings");
    assert!(lists <= 8, "{lists} listings for 60 nodes in batches of 10");
    let m = metrics(port).await;
    assert_eq!(reconciles(&m, "cloud-node", "error"), 0.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_pass_is_one_listing_per_batch() {
    let stack = Stack::start().await;
    let names = join(&stack, "status", 30).await;
    let port = listening_port();
    let _ccm = stack.controller_manager(
        port,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node",
            "--node-status-update-frequency=1s",
            "--instances-batch-size=10",
        ],
    );
    all_initialized(&stack, &names).await;
    // An address changes in the cloud: the next pass writes it.
    stack.cloud.with_state(|s| {
        let id = s
            .instances
            .values()
            .find(|i| i.name == "status-3")
            .unwrap()
            .id
            .clone();
        s.instances.get_mut(&id).unwrap().addresses =
            vec![sim_cloud::model::Address::new("InternalIP", "10.9.9.9")];
    });
    let nodes: Api<Node> = Api::all(stack.client());
    wait_until(TIMEOUT, "the new address on status-3", || async {
        nodes.get("status-3").await.is_ok_and(|n| {
            n.status
                .and_then(|s| s.addresses)
                .unwrap_or_default()
                .iter()
                .any(|a| a.address == "10.9.9.9")
        })
    })
    .await;
    // Passes go on, each asking about the 30 Nodes in three batched calls: over at least
    // two more passes, each call is one listing (a call in flight at either read makes
    // them differ by one), never one request per Node.
    let batched = |m: &str| function_calls(m, "instances-metadata");
    let listings_before = served(&stack, "GET /v1/instances");
    let calls_before = batched(&metrics(port).await);
    let calls = wait_for(
        TIMEOUT,
        "two more status passes",
        || async { batched(&metrics(port).await) - calls_before },
        |calls| *calls >= 6.0,
    )
    .await;
    let listings = served(&stack, "GET /v1/instances") - listings_before;
    eprintln!("30 nodes, batches of 10: {listings} listings for {calls} batched calls");
    assert!(
        (listings as f64 - calls).abs() <= 2.0,
        "{listings} listings, {calls} calls"
    );
    assert_eq!(served(&stack, "GET /v1/instances/{id}"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifecycle_pass_asks_about_not_ready_nodes_together() {
    let stack = Stack::start().await;
    let names = join(&stack, "life", 12).await;
    let port = listening_port();
    let _ccm = stack.controller_manager(
        port,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
        ],
    );
    all_initialized(&stack, &names).await;
    // Four Nodes stop reporting: two instances are gone, one stopped, one running.
    let nodes: Api<Node> = Api::all(stack.client());
    stack.cloud.with_state(|s| {
        for (name, state) in [
            ("life-0", InstanceState::Terminated),
            ("life-1", InstanceState::Terminated),
            ("life-2", InstanceState::Stopped),
        ] {
            let id = s
                .instances
                .values()
                .find(|i| i.name == name)
                .unwrap()
                .id
                .clone();
            s.instances.get_mut(&id).unwrap().state = state;
        }
    });
    for name in ["life-0", "life-1", "life-2", "life-3"] {
        wasm_ccm_tests::set_ready(&nodes, name, "Unknown").await;
    }
    wait_until(
        TIMEOUT,
        "gone Nodes deleted, the stopped one tainted",
        || async {
            nodes.get_opt("life-0").await.unwrap().is_none()
                && nodes.get_opt("life-1").await.unwrap().is_none()
                && nodes
                    .get("life-2")
                    .await
                    .is_ok_and(|n| taint_keys(&n).contains(&SHUTDOWN.to_string()))
        },
    )
    .await;
    let life3 = nodes.get("life-3").await.unwrap();
    assert!(!taint_keys(&life3).contains(&SHUTDOWN.to_string()));
    // Each pass over the two NotReady Nodes asks whether they exist in one batched call
    // and whether they are shut down in another, each one listing: over at least three
    // more passes, one listing per call (a call in flight at either read makes them
    // differ by one each), never a request per Node.
    let batched =
        |m: &str| function_calls(m, "instances-exist") + function_calls(m, "instances-shutdown");
    let listings_before = served(&stack, "GET /v1/instances");
    let calls_before = batched(&metrics(port).await);
    let calls = wait_for(
        TIMEOUT,
        "three more lifecycle passes",
        || async { batched(&metrics(port).await) - calls_before },
        |calls| *calls >= 6.0,
    )
    .await;
    let listings = served(&stack, "GET /v1/instances") - listings_before;
    eprintln!("2 NotReady nodes: {listings} listings for {calls} batched calls");
    assert!(
        (listings as f64 - calls).abs() <= 2.0,
        "{listings} listings, {calls} calls"
    );
    assert_eq!(served(&stack, "GET /v1/instances/{id}"), 0);
    let m = metrics(port).await;
    assert_eq!(reconciles(&m, "cloud-node-lifecycle", "error"), 0.0, "{m}");
}

/// A 0.1 provider has no `instances-batch`: it is asked per Node, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_0_1_provider_is_asked_per_node() {
    let stack = Stack::with_provider("fixture_legacy", "simcloud").await;
    let names = join(&stack, "old", 8).await;
    let port = listening_port();
    let _ccm =
        stack.controller_manager(port, &["--leader-elect=false", "--controllers=cloud-node"]);
    all_initialized(&stack, &names).await;
    let m = metrics(port).await;
    assert!(
        m.contains("function=\"instance-id\""),
        "0.1 fallback calls: {m}"
    );
    assert!(!m.contains("function=\"instances-metadata\""), "{m}");
    assert_eq!(reconciles(&m, "cloud-node", "error"), 0.0, "{m}");
}

/// Upstream: a provider without a cluster ID does not start unless
/// `--allow-untagged-cloud`.
#[tokio::test]
async fn a_provider_without_a_cluster_id_needs_allow_untagged_cloud() {
    let stack = Stack::with_provider("fixture_hostile", "hostile").await;
    let out = stack
        .controller_manager_command(listening_port(), &["--leader-elect=false"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no ClusterID found") && stderr.contains("--allow-untagged-cloud"),
        "{stderr}"
    );
    let port = listening_port();
    let _ccm = stack.controller_manager(
        port,
        &["--leader-elect=false", "--allow-untagged-cloud=true"],
    );
    wait_until(
        TIMEOUT,
        "ready with --allow-untagged-cloud",
        || async move {
            http_get(port, "/readyz")
                .await
                .is_ok_and(|(status, _)| status == 200)
        },
    )
    .await;
}

/// An event the provider records during a call about a Node lands on that Node, with
/// the provider as its reporting controller.
#[tokio::test]
async fn provider_events_land_on_the_node() {
    let stack = Stack::with_provider("fixture_hostile", "hostile").await;
    let nodes: Api<Node> = Api::all(stack.client());
    let mut node = tainted("evented", "True");
    node.metadata.annotations = Some(
        [
            ("hostile/action", "event"),
            ("hostile/reason", "InstanceInspected"),
            ("hostile/message", "looked at from the provider"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let port = listening_port();
    let _ccm = stack.controller_manager(
        port,
        &[
            "--leader-elect=false",
            "--allow-untagged-cloud=true",
            "--controllers=cloud-node",
        ],
    );
    let events: Api<Event> = Api::namespaced(stack.client(), "default");
    wait_until(TIMEOUT, "the provider's event on the Node", || async {
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("InstanceInspected")
                    && e.type_.as_deref() == Some("Warning")
                    && e.reporting_controller.as_deref() == Some("wasm-ccm.io/provider-hostile")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("evented")
                    && e.note.as_deref() == Some("looked at from the provider")
            })
        })
    })
    .await;
}
