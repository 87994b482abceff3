//! The route controller's whole loop on paused time: a route whose creation failed is
//! created again on the next reconcile, one `--route-reconciliation-period` later, as
//! upstream's periodic reconcile does; tokio's clock jumps to each period.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;
use tokio::time::{Instant, sleep_until};

use super::{Cidr, Options, run};
use crate::cloud::Cloud;
use crate::cloud::fake::Recording;
use crate::controllers::test_cluster::{TestCluster, about};

const PERIOD: Duration = Duration::from_secs(10);

/// The Node's `NetworkUnavailable` (status, reason).
async fn network(nodes: &Api<Node>, name: &str) -> Option<(String, Option<String>)> {
    let node = nodes.get(name).await.expect("the Node");
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "NetworkUnavailable")
        .map(|c| (c.status, c.reason))
}

/// The first version fails `create-route` and is swapped for one that works: the
/// Node is `NetworkUnavailable` (`NoRouteCreated`) with a `FailedToCreateRoute` event
/// until the next reconcile, a period later, creates the route; nothing is tried in
/// between.
#[tokio::test(start_paused = true)]
async fn a_failed_route_is_created_on_the_next_reconcile_a_period_later() {
    let mut cluster =
        TestCluster::in_memory(|calls| Arc::new(Recording::new(0, calls)) as Arc<dyn Cloud>).await;
    let working: Arc<dyn Cloud> = Arc::new(Recording::new(2, &cluster.calls));
    let swap = cluster.cloud.clone();
    cluster.cloud.set(Arc::new(
        Recording::new(1, &cluster.calls)
            .failing("create-route")
            .after("create-route", move || swap.set(working)),
    ));
    cluster
        .node(json!({
            "metadata": {"name": "node-1", "uid": "uid-node-1"},
            "spec": {
                "providerID": "fake://node-1",
                "podCIDR": "10.120.0.0/24",
                "podCIDRs": ["10.120.0.0/24"],
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .await;
    let options = Options {
        cluster_name: "kubernetes".into(),
        cluster_cidrs: vec![Cidr::parse("10.120.0.0/16").expect("a CIDR")],
        period: PERIOD,
    };
    let start = Instant::now();
    cluster.run(|ctx, stop| run(ctx, options, stop));
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let just = Duration::from_millis(100);

    sleep_until(start + PERIOD - just).await;
    assert_eq!(
        network(&nodes, "node-1").await,
        Some(("True".into(), Some("NoRouteCreated".into())))
    );
    assert!(
        cluster
            .reasons("node-1")
            .await
            .contains(&"FailedToCreateRoute".to_owned())
    );
    assert_eq!(cluster.calls.times("create-route").len(), 1);

    sleep_until(start + PERIOD + just).await;
    assert_eq!(
        network(&nodes, "node-1").await,
        Some(("False".into(), Some("RouteCreated".into())))
    );
    let creates = cluster.calls.times("create-route");
    assert!(
        creates.len() == 2 && about(creates[1] - creates[0], PERIOD),
        "create-route at {:?} after the first",
        creates.iter().map(|t| *t - creates[0]).collect::<Vec<_>>()
    );
    let versions: Vec<u64> = cluster
        .taken()
        .into_iter()
        .filter(|(_, call)| *call == "create-route")
        .map(|(version, _)| version)
        .collect();
    assert_eq!(versions, [1, 2]);
}
