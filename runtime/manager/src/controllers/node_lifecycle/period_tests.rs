//! The cloud-node-lifecycle controller's whole loop on paused time: passes come one
//! `--node-monitor-period` apart, and the deletion guard's confirmations and window
//! are kept on tokio's clock, which jumps to each timer, so a minute of guarding takes
//! milliseconds.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use tokio::time::{Instant, sleep_until};

use super::guard::GuardOptions;
use super::{Options, run};
use crate::cloud::Cloud;
use crate::cloud::fake::Recording;
use crate::controllers::test_cluster::{TestCluster, about};

const PERIOD: Duration = Duration::from_secs(5);
const SPACING: Duration = Duration::from_secs(10);
const WINDOW: Duration = Duration::from_secs(60);

/// The Nodes' names, sorted.
async fn names(api: &Api<Node>) -> Vec<String> {
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .expect("the Nodes can be listed")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

/// Three NotReady Nodes whose instances are gone, two confirmations at least two
/// periods apart and at most two deletions a minute: nothing is deleted on the first
/// pass nor on the second (5 s, too soon to count), two Nodes on the third (10 s); the
/// third Node is held with one `NodeDeletionHeld` event and deleted on the first pass a
/// full window after the first two (70 s), not before.
#[tokio::test(start_paused = true)]
async fn gone_nodes_are_confirmed_a_period_apart_and_held_to_the_window_limit() {
    let mut cluster = TestCluster::in_memory(|calls| {
        Arc::new(Recording::new(1, calls).without_instances()) as Arc<dyn Cloud>
    })
    .await;
    let all = ["gone-0", "gone-1", "gone-2"];
    for name in all {
        cluster
            .node(json!({
                "metadata": {"name": name},
                "spec": {"providerID": format!("fake://{name}")},
                "status": {"conditions": [{"type": "Ready", "status": "False"}]},
            }))
            .await;
    }
    let options = Options {
        monitor_period: PERIOD,
        batch_size: 10,
        guard: GuardOptions {
            confirmations: 2,
            spacing: SPACING,
            limit: 2,
            limit_percent: 0,
            window: WINDOW,
            swap_grace: Duration::ZERO,
        },
    };
    let start = Instant::now();
    cluster.run(|ctx, stop| run(ctx, options, stop));
    let api: Api<Node> = Api::all(cluster.client.clone());
    let just = Duration::from_millis(100);

    sleep_until(start + SPACING - just).await;
    assert_eq!(
        names(&api).await,
        all,
        "one answer, and one too soon after it, delete nothing"
    );
    sleep_until(start + SPACING + just).await;
    let left = names(&api).await;
    assert_eq!(left.len(), 1, "the limit deletes two: {left:?}");
    let held = left[0].clone();
    assert_eq!(
        cluster.reasons(&held).await,
        ["NodeDeletionHeld"],
        "{held} is held, once"
    );

    sleep_until(start + SPACING + WINDOW - just).await;
    assert_eq!(
        names(&api).await,
        std::slice::from_ref(&held),
        "held within the window"
    );
    assert_eq!(
        cluster.reasons(&held).await,
        ["NodeDeletionHeld"],
        "{held} is held, with one event over eleven passes"
    );
    sleep_until(start + SPACING + WINDOW + just).await;
    assert!(
        names(&api).await.is_empty(),
        "{held} deleted once the window allows"
    );
    let deleted: Vec<String> = all.iter().map(|n| n.to_string()).collect();
    for name in &deleted {
        assert!(
            cluster
                .reasons(name)
                .await
                .contains(&"DeletingNode".to_owned()),
            "{name}: {:?}",
            cluster.reasons(name).await
        );
    }

    // One pass each period: the cloud was asked at 0, 5, 10, ... 70 s.
    let mut passes = cluster.calls.times("exists");
    passes.dedup();
    let gaps: Vec<Duration> = passes.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.len() >= 14 && gaps.iter().all(|gap| about(*gap, PERIOD)),
        "time between passes: {gaps:?}"
    );
}
