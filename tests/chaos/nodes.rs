//! The nodes scenario: NotReady churn, terminations and not-found storms against the
//! node deletion guard.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

use crate::{Rng, Row, SETTLE, Size, quiet, set_ready};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::{Stack, initialized, kubelet_node, listening_port};

pub(crate) async fn nodes(size: &Size, rng: &mut Rng) -> Row {
    let stack = Stack::start().await;
    let count = size.nodes;
    let ids: Vec<String> = stack.cloud.with_state(|s| {
        (0..count)
            .map(|i| s.create_instance(NewInstance::named(&format!("n{i}"))).id)
            .collect()
    });
    let api: Api<Node> = Api::all(stack.client());
    for i in 0..count {
        api.create(
            &PostParams::default(),
            &kubelet_node(&format!("n{i}"), "True"),
        )
        .await
        .unwrap();
    }
    let window = Duration::from_secs(4);
    let limit = 2usize;
    let port = listening_port();
    let mut ccm = quiet(
        &stack,
        port,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
            "--node-deletion-window=4s",
            "--node-deletion-limit=2",
            "--node-deletion-limit-percent=0",
        ],
    );
    for i in 0..count {
        let name = format!("n{i}");
        let deadline = Instant::now() + SETTLE;
        while !initialized(&api, &name).await && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let started = Instant::now();
    // Node state as the run made it: each Node's Ready changes, (when, ready), a
    // NotReady one taken before its patch is sent, a Ready one once its patch is made.
    let mut ready: BTreeSet<usize> = (0..count).collect();
    let mut gone: BTreeSet<usize> = BTreeSet::new();
    let mut changes: BTreeMap<usize, Vec<(Instant, bool)>> = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut storms, mut partitions, mut terminations) = (0usize, 0usize, 0usize);
    // When each Node was deleted: as a watch of the Nodes sees the deletion, whatever
    // this task is doing then; a list notices one the watch missed (a relist).
    let (watched, watch) = deletions(api.clone());
    let mut deleted_at: BTreeMap<usize, Instant> = BTreeMap::new();
    let observe = async |deleted_at: &mut BTreeMap<usize, Instant>| {
        for (i, at) in watched.lock().unwrap().iter() {
            deleted_at.entry(*i).or_insert(*at);
        }
        let Ok(list) = api.list(&ListParams::default()).await else {
            return;
        };
        let present: BTreeSet<String> = list
            .items
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        for i in 0..count {
            if !present.contains(&format!("n{i}")) {
                deleted_at.entry(i).or_insert_with(Instant::now);
            }
        }
    };
    for _ in 0..size.node_rounds {
        // A storm: the cloud says "not found" for random existing instances.
        let hidden: BTreeSet<String> = (0..count)
            .filter(|i| !gone.contains(i) && rng.chance(30))
            .map(|i| ids[i].clone())
            .collect();
        storms += 1;
        // Some Nodes go NotReady: a partition (instance exists) or a termination.
        for (i, id) in ids.iter().enumerate() {
            if deleted_at.contains_key(&i) || !ready.contains(&i) || !rng.chance(20) {
                continue;
            }
            ready.remove(&i);
            changes.entry(i).or_default().push((Instant::now(), false));
            set_ready(&api, &format!("n{i}"), "Unknown").await;
            if rng.chance(50) {
                gone.insert(i);
                terminations += 1;
                stack.cloud.with_state(|s| s.delete_instance(id));
            } else {
                partitions += 1;
            }
        }
        stack
            .cloud
            .with_state(|s| s.hidden_instances = hidden.clone());
        let until = Instant::now() + Duration::from_millis(1_500 + rng.below(2_000));
        while Instant::now() < until {
            observe(&mut deleted_at).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stack.cloud.with_state(|s| s.hidden_instances.clear());
        observe(&mut deleted_at).await;
        // Partitions heal now and then.
        for i in 0..count {
            if !ready.contains(&i)
                && !gone.contains(&i)
                && !deleted_at.contains_key(&i)
                && rng.chance(50)
            {
                set_ready(&api, &format!("n{i}"), "True").await;
                ready.insert(i);
                changes.entry(i).or_default().push((Instant::now(), true));
            }
        }
    }
    // Afterwards: every truly gone NotReady Node is deleted.
    let deadline = Instant::now() + SETTLE;
    while gone.iter().any(|i| !deleted_at.contains_key(i)) && Instant::now() < deadline {
        observe(&mut deleted_at).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in &gone {
        if !deleted_at.contains_key(i) {
            failures.push(format!("truly gone node n{i} not deleted"));
        }
    }
    // No Node was deleted while Ready: the last change before its deletion made it
    // NotReady, or made it Ready less than a second before (a pass already under way
    // may have judged it NotReady).
    for (i, at) in &deleted_at {
        let ready_since = match changes
            .get(i)
            .and_then(|c| c.iter().rev().find(|(when, _)| when < at))
        {
            None => Some(Duration::MAX),
            Some((when, true)) => Some(at.duration_since(*when)),
            Some((_, false)) => None,
        };
        if ready_since.is_some_and(|since| since > Duration::from_secs(1)) {
            failures.push(format!("Ready node n{i} deleted"));
        }
    }
    // Deletions per window as the watch saw them, which lags each deletion a little: a
    // third deletion within 3 s of a first is what this catches.
    let times: Vec<Instant> = deleted_at.values().copied().collect();
    let mut most = 0;
    for t in &times {
        let within = times
            .iter()
            .filter(|u| **u >= *t && u.duration_since(*t) < window - Duration::from_secs(1))
            .count();
        most = most.max(within);
    }
    if most > limit {
        failures.push(format!("{most} deletions within one window, limit {limit}"));
    }
    let text = wasm_ccm_tests::metrics(port).await;
    let holds = wasm_ccm_tests::metric(&text, "wasm_ccm_node_deletion_guard_holds_total");
    ccm.kill().await.ok();
    watch.abort();
    let wrongly = deleted_at.keys().filter(|i| !gone.contains(i)).count();
    Row {
        scenario: "nodes: NotReady churn, terminations, not-found storms (window 4 s, limit 2)",
        figures: vec![
            ("Nodes", count.to_string()),
            ("storms (random instances hidden)", storms.to_string()),
            (
                "partitions (NotReady, instance exists)",
                partitions.to_string(),
            ),
            (
                "terminations (NotReady, instance gone)",
                terminations.to_string(),
            ),
            ("Nodes deleted", deleted_at.len().to_string()),
            ("of them with an existing instance", wrongly.to_string()),
            ("Ready Nodes deleted", "0 (checked)".into()),
            ("most deletions in one window", most.to_string()),
            ("holds by the guard", holds.to_string()),
            (
                "run time",
                format!("{:.0} s", started.elapsed().as_secs_f64()),
            ),
        ],
        failures,
    }
}

/// The Nodes deleted, by number, with when the watch saw each deletion.
type Deletions = Arc<Mutex<BTreeMap<usize, Instant>>>;

/// Watches the Nodes of `api` for deletions: what it saw, and the task that watches
/// (abort it when done).
fn deletions(api: Api<Node>) -> (Deletions, tokio::task::JoinHandle<()>) {
    let seen = Deletions::default();
    let record = seen.clone();
    let watch = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Delete(node)) = event
                && let Some(i) = node
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| n.strip_prefix('n')?.parse::<usize>().ok())
            {
                record.lock().unwrap().entry(i).or_insert_with(Instant::now);
            }
        }
    });
    (seen, watch)
}
