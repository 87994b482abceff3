//! The cloud-node controller.
//!
//! Initializes Nodes that kubelet registered with `--cloud-provider=external` (tainted
//! [`TAINT_UNINITIALIZED`]): sets `spec.providerID` if empty, the instance-type,
//! zone and region labels (GA and beta), the provider's additional labels (never in the
//! `kubernetes.io`/`k8s.io` namespaces, never overwriting), validates the
//! `alpha.kubernetes.io/provided-node-ip` annotation against the cloud's addresses,
//! removes only that taint, then sets the addresses and records `Synced`. Any provider
//! error keeps the taint and retries with backoff. Every
//! `--node-status-update-frequency` it refreshes the addresses of initialized Nodes
//! and reconciles beta/GA labels; provider ID and labels are not re-synced.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::events::{EventType, Recorder};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use serde_json::json;

use super::backoff::Backoff;
use super::batcher::{Batching, MetadataBatcher};
use super::node_informer::NodeEvent;
use super::{Context, TAINT_UNINITIALIZED, has_taint, node_event, tick};
use crate::cloud::{self, CloudError, InstanceMetadata};

/// The controller's name: in `--controllers`, metrics and logs.
pub const NAME: &str = "cloud-node";

pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const LABEL_INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
pub const LABEL_REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
/// kubelet's `--node-ip`, comma-separated for dual stack.
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// (primary, secondary): upstream keeps the beta label as the source of truth and
/// ensures the GA one exists with the same value.
const LABELS_TO_RECONCILE: [(&str, &str); 3] = [
    (LABEL_ZONE_BETA, LABEL_ZONE),
    (LABEL_REGION_BETA, LABEL_REGION),
    (LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE),
];

/// Why syncing a Node failed (the taint stays; the Node is retried).
#[derive(Debug, thiserror::Error)]
pub enum NodeSyncError {
    /// The cloud failed, or gave no provider ID for a Node without one.
    #[error(transparent)]
    Cloud(#[from] cloud::Error),
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The provided node IP is not among the cloud's addresses.
    #[error("provided node ip for node {node} is not valid: {reason}")]
    ProvidedNodeIp { node: String, reason: String },
}

impl NodeSyncError {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            NodeSyncError::Cloud(e) => e.retry_after(),
            _ => None,
        }
    }
}

/// Options of the controller (upstream flags, and ours for batching).
#[derive(Debug, Clone)]
pub struct Options {
    /// `--node-status-update-frequency`.
    pub status_update_frequency: Duration,
    /// `--concurrent-node-syncs`: provider calls in flight at once.
    pub workers: u16,
    /// `--instances-batch-size`: the most Nodes in one batched provider call.
    pub batch_size: usize,
    /// `--node-init-batch-window`: how long a joining Node waits for company.
    pub batch_window: Duration,
}

struct State {
    ctx: Context,
    api: Api<Node>,
    recorder: Recorder,
    backoff: Backoff,
    batcher: MetadataBatcher,
    /// Node updates in flight: at most `--concurrent-node-syncs`, as upstream's
    /// workers. Reconciles wait for a batched answer together, but write to the API
    /// server no faster than upstream would (and hold no more connections and buffers).
    updates: tokio::sync::Semaphore,
    /// Turns true when the controller stops (shutdown, or the lease lost): reconciles
    /// still queued then write nothing.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl State {
    /// Waits for a turn to write a Node (at most `--concurrent-node-syncs` at once);
    /// `None` once the controller is stopping, so a replica that lost its lease writes
    /// no more and its queued reconciles end at once.
    async fn write_turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let permit = self.updates.acquire().await.expect("never closed");
        (!*self.stopping.borrow()).then_some(permit)
    }
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

/// Go's `netutils.ParseIPSloppy`: IPv4 components may have leading zeros (read as
/// decimal); an IPv4-mapped IPv6 address is that IPv4 address (Go's `net.IP` equality).
pub fn parse_ip_sloppy(text: &str) -> Option<IpAddr> {
    if text.contains(':') {
        let v6: Ipv6Addr = text.parse().ok()?;
        return Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        });
    }
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Go's dtoi: any number of leading zeros; a value past 0xFFFFFF stops it.
        let mut n: u32 = 0;
        for digit in part.bytes() {
            n = n * 10 + u32::from(digit - b'0');
            if n >= 0xFF_FFFF {
                return None;
            }
        }
        *octet = u8::try_from(n).ok()?;
    }
    parts
        .next()
        .is_none()
        .then_some(IpAddr::V4(Ipv4Addr::from(octets)))
}

/// Upstream's `ParseNodeIPAnnotation` (component-helpers): one IP, or a dual-stack pair
/// separated by a comma; strict (no spaces, nothing empty); a pair may not hold an
/// unspecified address.
pub fn parse_node_ip_annotation(value: &str) -> Result<Vec<IpAddr>, String> {
    let mut ips = Vec::new();
    for part in value.split(',') {
        ips.push(parse_ip_sloppy(part).ok_or_else(|| format!("could not parse {part:?}"))?);
    }
    if ips.len() > 2 || (ips.len() == 2 && ips[0].is_ipv6() == ips[1].is_ipv6()) {
        return Err("must contain either a single IP or a dual-stack pair of IPs".into());
    }
    if ips.len() == 2 && ips.iter().any(IpAddr::is_unspecified) {
        return Err("dual-stack node IP cannot include '0.0.0.0' or '::'".into());
    }
    Ok(ips)
}

/// Upstream's `GetNodeAddressesFromNodeIP`: when kubelet provided node IP(s)
/// (`alpha.kubernetes.io/provided-node-ip`), every cloud address equal to one of them
/// (compared as IPs) comes first and is the only one of its type; the cloud's other
/// addresses of the other types follow. A node IP the cloud does not report, or an
/// annotation that does not parse, is an error (the Node stays uninitialized).
pub fn apply_provided_node_ip(
    node: &Node,
    cloud: &[NodeAddress],
) -> Result<Vec<NodeAddress>, String> {
    let Some(provided) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PROVIDED_NODE_IP))
    else {
        return Ok(cloud.to_vec());
    };
    let ips = parse_node_ip_annotation(provided)
        .map_err(|err| format!("failed to parse node IP {provided:?}: {err}"))?;
    let mut enforced = Vec::new();
    let mut types = std::collections::BTreeSet::new();
    for ip in ips {
        let matching: Vec<&NodeAddress> = cloud
            .iter()
            .filter(|a| parse_ip_sloppy(&a.address) == Some(ip))
            .collect();
        if matching.is_empty() {
            return Err(format!(
                "failed to get node address from cloud provider that matches ip: {ip}"
            ));
        }
        for address in matching {
            enforced.push(address.clone());
            types.insert(address.type_.as_str());
        }
    }
    enforced.extend(
        cloud
            .iter()
            .filter(|a| !types.contains(a.type_.as_str()))
            .cloned(),
    );
    Ok(enforced)
}

/// Additional label keys upstream discards: `(^|\.)(kubernetes|k8s)\.io/`.
pub fn is_kubernetes_namespaced(key: &str) -> bool {
    ["kubernetes.io/", "k8s.io/"]
        .iter()
        .any(|ns| key.starts_with(ns) || key.contains(&format!(".{ns}")))
}

/// The cloud's addresses, keeping the Node's Hostname address when the cloud has none.
fn addresses_with_hostname(node: &Node, cloud: &[NodeAddress]) -> Vec<NodeAddress> {
    let mut addresses = cloud.to_vec();
    if !addresses.iter().any(|a| a.type_ == "Hostname") {
        let current = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        addresses.extend(
            current
                .into_iter()
                .flatten()
                .filter(|a| a.type_ == "Hostname")
                .cloned(),
        );
    }
    addresses
}

/// Upstream's `nodeAddressesChangeDetected`.
fn addresses_changed(current: &[NodeAddress], next: &[NodeAddress]) -> bool {
    if current.len() != next.len() {
        return true;
    }
    let by_type: BTreeMap<&str, &str> = current
        .iter()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    next.iter()
        .any(|a| by_type.get(a.type_.as_str()) != Some(&a.address.as_str()))
}

/// Applies the labels, provider ID and taint removal of initialization to `node`.
fn initialize(node: &mut Node, meta: &InstanceMetadata) {
    let spec = node.spec.get_or_insert_default();
    if spec.provider_id.as_deref().unwrap_or("").is_empty() && !meta.provider_id.is_empty() {
        spec.provider_id = Some(meta.provider_id.clone());
    }
    if let Some(taints) = spec.taints.as_mut() {
        taints.retain(|t| t.key != TAINT_UNINITIALIZED);
    }
    let labels = node.metadata.labels.get_or_insert_default();
    for (value, keys) in [
        (
            &meta.instance_type,
            [LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA],
        ),
        (&meta.zone, [LABEL_ZONE, LABEL_ZONE_BETA]),
        (&meta.region, [LABEL_REGION, LABEL_REGION_BETA]),
    ] {
        if !value.is_empty() {
            for key in keys {
                labels.insert(key.into(), value.clone());
            }
        }
    }
    for (k, v) in &meta.additional_labels {
        if is_kubernetes_namespaced(k) {
            tracing::warn!(label = %k, "discarding node label with kubernetes namespace");
        } else if let Some(existing) = labels.get(k) {
            if existing != v {
                tracing::warn!(label = %k, "discarding node label that is already present");
            }
        } else {
            labels.insert(k.clone(), v.clone());
        }
    }
}

/// Writes the addresses to the status subresource when they changed.
async fn update_addresses(
    api: &Api<Node>,
    node: &Node,
    cloud: &[NodeAddress],
) -> Result<(), NodeSyncError> {
    if cloud.is_empty() {
        return Ok(());
    }
    let name = node_name(node);
    let addresses =
        apply_provided_node_ip(node, &addresses_with_hostname(node, cloud)).map_err(|reason| {
            NodeSyncError::ProvidedNodeIp {
                node: name.clone(),
                reason,
            }
        })?;
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default();
    if !addresses_changed(&current, &addresses) {
        return Ok(());
    }
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"addresses": addresses}})),
    )
    .await?;
    Ok(())
}

/// Initializes one tainted Node.
async fn sync_node(state: &State, node: &Arc<Node>) -> Result<(), NodeSyncError> {
    let name = node_name(node);
    if !has_taint(node, TAINT_UNINITIALIZED) {
        let update = labels_to_reconcile(node);
        if update.is_empty() {
            return Ok(());
        }
        let Some(_writing) = state.write_turn().await else {
            return Ok(());
        };
        return patch_labels(&state.api, node, update).await;
    }
    tracing::info!(node = %name, "initializing node with cloud provider");
    // Without batching a reconcile is one of upstream's workers: it takes its turn to
    // write before asking the cloud, so at most --concurrent-node-syncs Nodes are
    // between the question and the write. With batching it waits for its batch's answer
    // first, with every other joining Node, then for its turn.
    let cloud = state.ctx.cloud.current();
    let early_turn = if state.batcher.batches(cloud.as_ref()) {
        None
    } else {
        let Some(turn) = state.write_turn().await else {
            return Ok(());
        };
        Some(turn)
    };
    let meta = match state.batcher.metadata(cloud, node.clone()).await {
        Ok(meta) => meta,
        Err(err) => {
            super::refused_answer(&state.ctx, &state.recorder, NAME, node, &err).await;
            return Err(err.into());
        }
    };
    let turn = match early_turn {
        Some(turn) => Some(turn),
        None => state.write_turn().await,
    };
    let Some(_writing) = turn else {
        return Ok(());
    };
    apply_provided_node_ip(node, &meta.addresses).map_err(|reason| {
        NodeSyncError::ProvidedNodeIp {
            node: name.clone(),
            reason,
        }
    })?;
    // Retry on conflict (upstream's RetryOnConflict, reading the Node from the
    // informer's cache as upstream reads its lister): a joining Node costs the API
    // server one write. After a conflict the cache is read again once the watch has
    // brought a newer version than the one refused, else (and from then on) the API
    // server is asked. (The cache lacks the status fields no controller reads; an
    // update of a Node leaves its status as it is.)
    let mut attempt = 0;
    let mut refused: Option<String> = None;
    let mut live = false;
    let updated = loop {
        let cached = state
            .ctx
            .nodes
            .get(&name)
            .filter(|n| !live && (refused.is_none() || n.metadata.resource_version != refused));
        let mut current = match cached {
            Some(node) => Node::clone(&node),
            None => {
                live = true;
                state.api.get(&name).await?
            }
        };
        let version = current.metadata.resource_version.clone();
        initialize(&mut current, &meta);
        match state
            .api
            .replace(&name, &PostParams::default(), &current)
            .await
        {
            Ok(updated) => break updated,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 20 => {
                attempt += 1;
                refused = version;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let upstream = &state.ctx.metrics.upstream;
    let since_creation = || {
        node.metadata.creation_timestamp.as_ref().map(|created| {
            (k8s_openapi::jiff::Timestamp::now().as_second() - created.0.as_second()).max(0) as f64
        })
    };
    if let Some(delay) = since_creation() {
        upstream.taint_removal_delay.observe(delay);
    }
    // Upstream updateNodeAddress: a failure here is logged, the node stays
    // initialized, and the periodic status update sets the addresses later.
    if let Err(err) = update_addresses(&state.api, &updated, &meta.addresses).await {
        tracing::error!(node = %name, error = %err, "failed to update the node's addresses after initializing it");
    }
    if let Some(delay) = since_creation() {
        state.ctx.metrics.initial_node_sync_delay.observe(delay);
        upstream.initial_node_sync_delay.observe(delay);
    }
    tracing::info!(node = %name, provider_id = %meta.provider_id, "successfully initialized node with cloud provider");
    node_event(
        &state.recorder,
        node,
        EventType::Normal,
        "Synced",
        "Node synced successfully".into(),
    )
    .await;
    Ok(())
}

/// Beta/GA label reconciliation of an initialized Node.
fn labels_to_reconcile(node: &Node) -> BTreeMap<&'static str, String> {
    let mut update = BTreeMap::new();
    let Some(labels) = node.metadata.labels.as_ref() else {
        return update;
    };
    for (primary, secondary) in LABELS_TO_RECONCILE {
        if let Some(value) = labels.get(primary)
            && labels.get(secondary) != Some(value)
        {
            update.insert(secondary, value.clone());
        }
    }
    update
}

/// Writes the labels [`labels_to_reconcile`] found missing or different.
async fn patch_labels(
    api: &Api<Node>,
    node: &Node,
    update: BTreeMap<&'static str, String>,
) -> Result<(), NodeSyncError> {
    api.patch(
        &node_name(node),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": update}})),
    )
    .await?;
    Ok(())
}

/// Upstream's `UpdateNodeStatus`: addresses (and label reconciliation) of initialized
/// Nodes. Errors are logged per Node. A provider exporting `instances-batch` is asked
/// about `batch_size` Nodes per call.
pub async fn update_node_status(
    ctx: &Context,
    api: &Api<Node>,
    recorder: &Recorder,
    batch_size: usize,
) {
    let started = Instant::now();
    let initialized: Vec<Arc<Node>> = ctx
        .nodes
        .list()
        .into_iter()
        .filter(|node| !has_taint(node, TAINT_UNINITIALIZED))
        .collect();
    // One provider version for the whole pass.
    let cloud = ctx.cloud.current();
    for chunk in initialized.chunks(batch_size.max(1)) {
        let answers = cloud::per_node(cloud.nodes_addresses(chunk).await, chunk.len());
        for (node, answer) in chunk.iter().zip(answers) {
            let name = node_name(node);
            let addresses = match answer {
                Ok(None) => continue,
                Ok(Some(addresses)) => Ok(addresses),
                Err(err) => Err(err),
            };
            match addresses {
                Ok(addresses) => {
                    if let Err(err) = update_addresses(api, node, &addresses).await {
                        tracing::error!(node = %name, error = %err, "cannot update node addresses");
                    }
                }
                Err(err) => {
                    tracing::error!(node = %name, error = %err, "error getting instance metadata for node addresses");
                    super::refused_answer(ctx, recorder, NAME, node, &err).await;
                }
            }
            let update = labels_to_reconcile(node);
            if !update.is_empty()
                && let Err(err) = patch_labels(api, node, update).await
            {
                tracing::error!(node = %name, error = %err, "cannot reconcile node labels");
            }
        }
    }
    tracing::debug!(nodes = initialized.len(), elapsed = ?started.elapsed(), "updated node status");
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(ctx: Context, options: Options, shutdown: tokio::sync::watch::Receiver<bool>) {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let batcher = MetadataBatcher::start(Batching {
        window: options.batch_window,
        max_nodes: options.batch_size,
        concurrent_calls: usize::from(options.workers.max(1)),
    });
    // With batching, a reconcile mostly waits: for its batch's answer (the batcher keeps
    // provider calls at --concurrent-node-syncs) and for its turn to write (`updates`,
    // --concurrent-node-syncs Node writes at once). So every Node that arrives reaches
    // the batcher at once (0: no bound), and Nodes joining together are asked about in
    // full batches rather than a few at a time as writes free a reconcile's slot.
    // Without batching, --concurrent-node-syncs reconciles run, as upstream's workers;
    // a provider that does not batch is asked per Node only once the reconcile has its
    // turn to write (`sync_node`), so it too has at most that many Nodes in progress.
    // Reconciles still queued when the controller stops write nothing (`write_turn`).
    let concurrency = if options.batch_size > 1 {
        0
    } else {
        options.workers.max(1)
    };
    let state = Arc::new(State {
        batcher,
        updates: tokio::sync::Semaphore::new(usize::from(options.workers.max(1))),
        recorder: ctx.recorder("cloud-node-controller"),
        backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(300))
            .reporting(ctx.metrics.retries_pending(NAME)),
        api: api.clone(),
        ctx: ctx.clone(),
        stopping: shutdown.clone(),
    });
    let mut stop = shutdown.clone();
    let forget = forget_deleted(state.clone(), shutdown.clone());
    let controller = Controller::for_shared_stream(ctx.nodes.changed_nodes(), ctx.nodes.store())
        .with_config(controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(reconcile, error_policy, state)
        .for_each(|_| async {});
    let periodic = async {
        let recorder = ctx.recorder("cloud-node-controller");
        while tick(options.status_update_frequency, &shutdown).await {
            update_node_status(&ctx, &api, &recorder, options.batch_size).await;
        }
    };
    tokio::join!(controller, periodic, forget);
}

/// A Node deleted while its sync waits in back-off leaves the retry queue at once
/// (its pending retry would find nothing; a Node of the same name starts afresh).
async fn forget_deleted(state: Arc<State>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut changes = state.ctx.nodes.subscribe();
    loop {
        let event = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            event = changes.recv() => event,
        };
        match event {
            Ok(NodeEvent::Deleted(node)) => state.backoff.succeeded(&node_name(&node)),
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

async fn reconcile(node: Arc<Node>, state: Arc<State>) -> Result<Action, NodeSyncError> {
    let started = Instant::now();
    let result = sync_node(&state, &node).await;
    state.ctx.metrics.record(NAME, started, result.is_ok());
    result?;
    state.backoff.succeeded(&node_name(&node));
    Ok(Action::await_change())
}

fn error_policy(node: Arc<Node>, err: &NodeSyncError, state: Arc<State>) -> Action {
    let name = node_name(&node);
    let delay = state.backoff.failed(&name, err.retry_after());
    let is_cloud = matches!(
        err,
        NodeSyncError::Cloud(e) if matches!(e.cloud(), Some(CloudError::Other(_)))
    );
    tracing::warn!(node = %name, error = %err, cloud_error = is_cloud, retry_in = ?delay, "error syncing node; the uninitialized taint stays");
    Action::requeue(delay)
}

#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod tests;
