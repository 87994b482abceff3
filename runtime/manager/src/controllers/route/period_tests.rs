//! The route controller's whole loop on paused time: a route whose creation failed is
//! tried again on each reconcile, one `--route-reconciliation-period` after the last,
//! as upstream's periodic reconcile does; tokio's clock jumps to each period.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;
use tokio::time::{Instant, sleep_until};

use super::controller_tests::network_unavailable;
use super::{Cidr, Options, run};
use crate::cloud::Cloud;
use crate::cloud::fake::Recording;
use crate::controllers::test_cluster::{TestCluster, about};

const PERIOD: Duration = Duration::from_secs(10);

/// The first two versions fail `create-route`, each swapped for the next right after:
/// the Node is `NetworkUnavailable` with a `FailedToCreateRoute` event until the third
/// reconcile, two periods later, creates the route; each retry comes one period after
/// the last, and nothing is tried in between.
#[tokio::test(start_paused = true)]
async fn a_failed_route_is_created_again_each_period_until_it_is_made() {
    let mut cluster =
        TestCluster::in_memory(|calls| Arc::new(Recording::new(0, calls)) as Arc<dyn Cloud>).await;
    cluster
        .cloud
        .set_failing_versions(&cluster.calls, 2, "create-route", |r| {
            r.failing("create-route")
        });
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
        watch_based: false,
    };
    let start = Instant::now();
    cluster.run(|ctx, stop| run(ctx, options, stop));
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let just = Duration::from_millis(100);

    let unavailable =
        || async { network_unavailable(&nodes.get("node-1").await.expect("the Node")) };

    sleep_until(start + 2 * PERIOD - just).await;
    assert_eq!(unavailable().await.as_deref(), Some("True"));
    assert!(
        cluster
            .reasons("node-1")
            .await
            .contains(&"FailedToCreateRoute".to_owned())
    );
    assert_eq!(cluster.calls.times("create-route").len(), 2);

    sleep_until(start + 2 * PERIOD + just).await;
    assert_eq!(unavailable().await.as_deref(), Some("False"));
    let creates = cluster.calls.times("create-route");
    let gaps: Vec<Duration> = creates.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.len() == 2 && gaps.iter().all(|gap| about(*gap, PERIOD)),
        "time between the create-route calls: {gaps:?}"
    );
    let versions: Vec<u64> = cluster
        .taken()
        .into_iter()
        .filter(|(_, call)| *call == "create-route")
        .map(|(version, _)| version)
        .collect();
    assert_eq!(versions, [1, 2, 3]);
}
