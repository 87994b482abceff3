//! Upstream's watch-based route reconciliation (the
//! `CloudControllerManagerWatchBasedRoutesReconciliation` gate) on paused time: a
//! reconcile at start, then only when a Node change can change the routes, never two
//! within upstream's `minRouteResyncInterval` (10 s), and nothing on a change that
//! cannot (a label).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::time::{Instant, sleep_until};

use super::{Cidr, MIN_RESYNC_INTERVAL, Options, run};
use crate::cloud::Cloud;
use crate::cloud::fake::Recording;
use crate::controllers::test_cluster::TestCluster;

fn node(name: &str, cidr: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {"providerID": format!("fake://{name}"), "podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
    })
}

#[tokio::test(start_paused = true)]
async fn routes_are_reconciled_on_the_node_changes_that_can_change_them() {
    let mut cluster =
        TestCluster::in_memory(|calls| Arc::new(Recording::new(0, calls)) as Arc<dyn Cloud>).await;
    cluster.node(node("node-1", "10.120.1.0/24")).await;
    let options = Options {
        cluster_name: "kubernetes".into(),
        cluster_cidrs: vec![Cidr::parse("10.120.0.0/16").expect("a CIDR")],
        // The periodic reconcile would list every 10 s: the gate replaces it.
        period: Duration::from_secs(10),
        watch_based: true,
    };
    let start = Instant::now();
    cluster.run(|ctx, stop| run(ctx, options, stop));
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let at = |secs: u64| start + Duration::from_secs(secs);
    let lists = || cluster.calls.times("list-routes").len();

    // At start: one reconcile, node-1's route made. A minute without changes: none.
    sleep_until(at(60)).await;
    assert_eq!(lists(), 1);
    assert_eq!(cluster.calls.times("create-route").len(), 1);

    // A Node joins: reconciled at once (the last reconcile is older than 10 s).
    cluster.node(node("node-2", "10.120.2.0/24")).await;
    sleep_until(at(61)).await;
    assert_eq!(lists(), 2);
    assert_eq!(cluster.calls.times("create-route").len(), 2);

    // A label changes: nothing to do with routes.
    nodes
        .patch(
            "node-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .unwrap();
    sleep_until(at(90)).await;
    assert_eq!(lists(), 2);

    // Two address changes a second apart: the first reconciled at once, the second
    // folded into one reconcile 10 s after it.
    for (secs, address) in [(90, "10.0.0.2"), (91, "10.0.0.3")] {
        sleep_until(at(secs)).await;
        nodes
            .patch_status(
                "node-2",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"addresses": [{"type": "InternalIP", "address": address}]}}),
                ),
            )
            .await
            .unwrap();
    }
    sleep_until(at(99)).await;
    assert_eq!(lists(), 3);
    sleep_until(at(101)).await;
    assert_eq!(lists(), 4);
    let times = cluster.calls.times("list-routes");
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|gap| *gap >= MIN_RESYNC_INTERVAL),
        "time between reconciles: {gaps:?}"
    );
}
