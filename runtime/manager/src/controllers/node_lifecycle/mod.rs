//! The cloud-node-lifecycle controller.
//!
//! Every `--node-monitor-period`: a Ready Node loses the
//! `node.cloudprovider.kubernetes.io/shutdown` taint; a Node that is not Ready is
//! deleted (event `DeletingNode`) only when the provider says its instance definitely
//! does not exist — confirmed and within the limits of the [`guard`] — and gets the
//! shutdown taint when the instance is shut down. Any provider error, trap or timeout
//! leaves the Node alone.

#[cfg(test)]
mod controller_tests;
pub mod guard;
#[cfg(test)]
mod period_tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::events::EventType;
use guard::{Answer, DeletionGuard, GuardOptions};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::{Context, TAINT_SHUTDOWN, node_event, ready_status, tick};
use crate::cloud;

/// The controller's name: in `--controllers`, metrics and logs.
pub const NAME: &str = "cloud-node-lifecycle";

/// Options of the controller (upstream flags, and ours for batching).
#[derive(Debug, Clone)]
pub struct Options {
    /// `--node-monitor-period`.
    pub monitor_period: Duration,
    /// `--instances-batch-size`: the most Nodes in one batched provider call.
    pub batch_size: usize,
    /// The node deletion guard's settings (`--node-deletion-*`).
    pub guard: GuardOptions,
}

/// The shutdown taint's effect.
const SHUTDOWN_EFFECT: &str = "NoSchedule";

/// Whether `taint` is the shutdown taint: key and effect, as upstream's `MatchTaint`
/// (a taint with the same key and another effect is someone else's).
fn is_shutdown_taint(taint: &Taint) -> bool {
    taint.key == TAINT_SHUTDOWN && taint.effect == SHUTDOWN_EFFECT
}

fn node_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn has_shutdown_taint(node: &Node) -> bool {
    node_taints(node).iter().any(is_shutdown_taint)
}

fn taints_without_shutdown(node: &Node) -> Vec<Taint> {
    node_taints(node)
        .into_iter()
        .filter(|t| !is_shutdown_taint(t))
        .collect()
}

/// Writes the Node's taints, conditional on its resourceVersion (a JSON merge patch
/// replaces the list, like upstream's taint helpers).
async fn set_taints(api: &Api<Node>, node: &Node, taints: Vec<Taint>) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": taints},
    });
    api.patch(
        node.metadata.name.as_deref().unwrap_or(""),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map(drop)
}

/// One pass over all Nodes (as the shared informer has them): Ready Nodes lose the
/// shutdown taint; the Nodes that are not Ready are asked about together (in batches
/// of `batch_size` when the provider exports `instances-batch`, else one by one).
/// Nodes the provider says do not exist go through the [`guard`] before deletion.
pub async fn monitor(
    ctx: &Context,
    api: &Api<Node>,
    recorder: &crate::events::Recorder,
    batch_size: usize,
    guard: &mut DeletionGuard,
) {
    // The guard's clock is tokio's; the metrics' durations are the machine's.
    let pass = tokio::time::Instant::now();
    let cloud = ctx.cloud.current();
    guard.begin_pass(cloud.version(), pass);
    let nodes = ctx.nodes.list();
    let mut not_ready = Vec::new();
    for node in &nodes {
        if ready_status(node) != Some("True") {
            not_ready.push(node.clone());
            continue;
        }
        let started = Instant::now();
        let ok = !has_shutdown_taint(node) || {
            let name = node.metadata.name.clone().unwrap_or_default();
            match set_taints(api, node, taints_without_shutdown(node)).await {
                Ok(()) => true,
                Err(err) => {
                    tracing::error!(node = %name, error = %err, "cannot remove the shutdown taint");
                    false
                }
            }
        };
        ctx.metrics.record(NAME, started, ok);
    }
    guard.retain(&not_ready.iter().map(|n| key(n)).collect());
    let mut confirmed = Vec::new();
    for chunk in not_ready.chunks(batch_size.max(1)) {
        let started = Instant::now();
        let exists = cloud::per_node(cloud.instances_exist(chunk).await, chunk.len());
        let mut existing = Vec::new();
        for (node, exists) in chunk.iter().zip(exists) {
            let name = node.metadata.name.clone().unwrap_or_default();
            let ok = match exists {
                Ok(Some(false)) => {
                    gone(ctx, guard, node, &name, pass, &mut confirmed);
                    continue;
                }
                Ok(Some(true)) => {
                    guard.not_gone(&key(node));
                    existing.push(node.clone());
                    continue;
                }
                Ok(None) => {
                    guard.not_gone(&key(node));
                    true
                }
                Err(err) => {
                    tracing::error!(node = %name, error = %err, "error checking if node exists; leaving it alone");
                    false
                }
            };
            ctx.metrics.record(NAME, started, ok);
        }
        if existing.is_empty() {
            continue;
        }
        let shutdown = cloud::per_node(cloud.instances_shutdown(&existing).await, existing.len());
        for (node, shutdown) in existing.iter().zip(shutdown) {
            let ok = taint_if_shut_down(api, node, shutdown).await;
            ctx.metrics.record(NAME, started, ok);
        }
    }
    let by_key: std::collections::HashMap<String, &Arc<Node>> =
        not_ready.iter().map(|n| (key(n), n)).collect();
    let admission = guard.admit(confirmed, nodes.len(), pass);
    for held in &admission.hold {
        let Some(node) = by_key.get(&held.key) else {
            continue;
        };
        hold(ctx, guard, recorder, node, held.newly).await;
    }
    for k in admission.delete {
        let Some(node) = by_key.get(&k) else { continue };
        let started = Instant::now();
        let name = node.metadata.name.clone().unwrap_or_default();
        let ok = delete_node(api, recorder, node, &name).await;
        if ok {
            guard.deleted(&k, tokio::time::Instant::now());
        }
        ctx.metrics.record(NAME, started, ok);
    }
    ctx.metrics.guard.held_nodes.set(guard.held() as i64);
}

/// The guard's key for a Node: its UID (a Node re-created under the same name is
/// another Node), else its name.
fn key(node: &Node) -> String {
    node.metadata
        .uid
        .clone()
        .or_else(|| node.metadata.name.clone())
        .unwrap_or_default()
}

/// Feeds the guard one "does not exist" answer.
fn gone(
    ctx: &Context,
    guard: &mut DeletionGuard,
    node: &Arc<Node>,
    name: &str,
    pass: tokio::time::Instant,
    confirmed: &mut Vec<String>,
) {
    let answer = guard.gone(&key(node), pass);
    ctx.metrics.guard.answer(answer.label());
    match answer {
        Answer::Confirmed => confirmed.push(key(node)),
        Answer::Counted(n) => tracing::info!(
            node = %name,
            confirmations = n,
            needed = guard.options().confirmations,
            "the cloud provider says the node's instance does not exist; waiting for confirmation before deleting it"
        ),
        Answer::TooSoon => {}
        Answer::FreshVersion => tracing::warn!(
            node = %name,
            grace = ?guard.options().swap_grace,
            "the cloud provider version swapped in recently says the node's instance does not exist; not believed before --node-deletion-swap-grace passes"
        ),
    }
}

/// Holds a confirmed Node over the limit: a Warning event the first time, a log line.
async fn hold(
    ctx: &Context,
    guard: &mut DeletionGuard,
    recorder: &crate::events::Recorder,
    node: &Node,
    newly: bool,
) {
    let name = node.metadata.name.as_deref().unwrap_or("");
    let options = guard.options().clone();
    let nodes = ctx.nodes.list().len();
    let recent = guard.recent_deletions(tokio::time::Instant::now());
    let note = format!(
        "Not deleting node {name} although the cloud provider says its instance does not exist: \
         {recent} node(s) deleted in the last {window}, the most allowed in {nodes} nodes is {allowed} \
         (--node-deletion-limit={limit}, --node-deletion-limit-percent={percent}); deletion resumes \
         when the window allows it, if the instance is still gone",
        window = go_duration(options.window),
        allowed = options.allowed(nodes),
        limit = options.limit,
        percent = options.limit_percent,
    );
    if newly {
        ctx.metrics.guard.holds.inc();
        tracing::warn!(node = %name, recent, allowed = options.allowed(nodes), "node deletion guard: holding node");
        node_event(recorder, node, EventType::Warning, "NodeDeletionHeld", note).await;
    }
}

/// A duration as the flags write it (`10m0s`).
fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// Deletes a Node whose instance the provider says does not exist.
async fn delete_node(
    api: &Api<Node>,
    recorder: &crate::events::Recorder,
    node: &Node,
    name: &str,
) -> bool {
    tracing::info!(node = %name, "deleting node because it does not exist in the cloud provider");
    node_event(
        recorder,
        node,
        EventType::Normal,
        "DeletingNode",
        format!("Deleting node {name} because it does not exist in the cloud provider"),
    )
    .await;
    // Only the Node we looked at: a replaced Node (new UID) is not deleted.
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: node.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => true,
        Err(err) => {
            tracing::error!(node = %name, error = %err, "unable to delete node");
            node_event(
                recorder,
                node,
                EventType::Warning,
                "DeletingNodeFailed",
                format!("Failed deleting node {name}: {err}"),
            )
            .await;
            false
        }
    }
}

/// Adds the shutdown taint to a Node whose instance is shut down.
async fn taint_if_shut_down(
    api: &Api<Node>,
    node: &Node,
    shutdown: Result<Option<bool>, cloud::Error>,
) -> bool {
    let name = node.metadata.name.as_deref().unwrap_or("");
    match shutdown {
        Ok(Some(true)) if !has_shutdown_taint(node) => {
            let mut taints = taints_without_shutdown(node);
            taints.push(Taint {
                key: TAINT_SHUTDOWN.into(),
                effect: SHUTDOWN_EFFECT.into(),
                ..Taint::default()
            });
            if let Err(err) = set_taints(api, node, taints).await {
                tracing::error!(node = %name, error = %err, "cannot add the shutdown taint");
                return false;
            }
            true
        }
        Ok(_) => true,
        Err(err) => {
            tracing::error!(node = %name, error = %err, "error checking if node is shutdown; leaving it alone");
            false
        }
    }
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(ctx: Context, options: Options, shutdown: tokio::sync::watch::Receiver<bool>) {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let recorder = ctx.recorder("cloud-node-lifecycle-controller");
    if !ctx.nodes.ready().await {
        return;
    }
    let mut guard = DeletionGuard::new(options.guard.clone());
    loop {
        monitor(&ctx, &api, &recorder, options.batch_size, &mut guard).await;
        if !tick(options.monitor_period, &shutdown).await {
            return;
        }
    }
}
