//! The service (load balancer) controller, as upstream's.
//!
//! For Services of `type: LoadBalancer` without `spec.loadBalancerClass`: emit
//! `EnsuringLoadBalancer`, add the finalizer `service.kubernetes.io/load-balancer-cleanup`,
//! ensure the load balancer on the eligible nodes, emit `EnsuredLoadBalancer`, and patch
//! `status.loadBalancer` when it changed. A Service that no longer wants a load
//! balancer, or is being deleted, has it deleted whether or not the finalizer is there:
//! `GetLoadBalancer` first, `EnsureLoadBalancerDeleted` only if it exists
//! (implemented elsewhere is not an error), then the finalizer goes. A Service deleted
//! without the finalizer (or deleted and re-created under its name) has its load
//! balancer deleted from the last state synced (upstream's service cache). Any failure
//! records `SyncLoadBalancerFailed` and is retried with per-Service backoff (5 s doubling
//! to 300 s), or after the cloud's retry-after without growing the backoff.
//!
//! Only changes upstream's `needsUpdate`/`needsCleanup` see start a sync (not the
//! controller's own finalizer and status writes). When the eligible nodes change
//! (added, deleted, exclusion label or provider ID changed: `shouldSyncUpdatedNode`),
//! each load balancer whose last node set (name → provider ID) differs is updated; a
//! failed update sends that Service through a full sync with its backoff.
//!
//! Eligible nodes: not being deleted, not labelled
//! `node.kubernetes.io/exclude-from-external-load-balancers` (unless the value parses
//! as false with Go's `strconv.ParseBool`), not tainted `ToBeDeletedByClusterAutoscaler`.
//! Readiness does not matter.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::events::{Event, EventType, Recorder};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service, ServiceSpec};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::backoff::Backoff;
use super::node_informer::NodeEvent;
use super::{Context, tick};
use crate::cloud::{self, Requirement};

/// The controller's name: in `--controllers`, metrics and logs.
pub const NAME: &str = "service";

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
pub const LABEL_EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";
/// Node names listed in an event at most (upstream's `maxNodeNamesToLog`).
const MAX_NODE_NAMES: usize = 20;

/// Why a Service sync failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceSyncError {
    /// The cloud failed at a step (upstream's wording, e.g. `ensure load balancer`).
    #[error("failed to {step}: {source}")]
    Cloud {
        /// What the controller was doing.
        step: &'static str,
        /// The provider's error.
        #[source]
        source: cloud::Error,
    },
    /// The Kubernetes API failed at a step (e.g. `add load balancer cleanup finalizer`).
    #[error("failed to {step}: {source}")]
    Kube {
        /// What the controller was doing.
        step: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Node view stopped (only at shutdown).
    #[error("the Node cache is not running")]
    NodeCacheStopped,
}

impl ServiceSyncError {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Cloud { source, .. } => source.retry_after(),
            Self::Kube { .. } | Self::NodeCacheStopped => None,
        }
    }
}

fn cloud_step(step: &'static str) -> impl FnOnce(cloud::Error) -> ServiceSyncError {
    move |source| ServiceSyncError::Cloud { step, source }
}

fn kube_step(step: &'static str) -> impl FnOnce(kube::Error) -> ServiceSyncError {
    move |source| ServiceSyncError::Kube { step, source }
}

/// Options of the controller (upstream flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// `--cluster-name`.
    pub cluster_name: String,
    /// `--concurrent-service-syncs`.
    pub workers: u16,
}

struct State {
    ctx: Context,
    options: Options,
    recorder: Recorder,
    backoff: Backoff,
    /// Upstream's service cache: the last state of each Service synced, and how that went.
    cache: Mutex<HashMap<String, Cached>>,
    /// Upstream's `lastSyncedNodes`: the node set each load balancer was last given.
    last_nodes: Mutex<HashMap<String, NodeSet>>,
    /// One sync at a time per Service key (upstream's work queue guarantees it), across
    /// the Service reconciles, the node sync and the cleanup of deleted Services.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The Services, as the watch keeps them.
    services: reflector::Store<Service>,
    /// Services to sync again (the node sync's failures), into the controller's queue.
    resync: mpsc::UnboundedSender<Arc<Service>>,
}

/// A Service's last sync: its state (what upstream's `needsUpdate` compares the next
/// one with), and the outcome.
#[derive(Debug, Clone)]
struct Cached {
    state: Arc<Service>,
    /// The sync succeeded: nothing to do until those fields change.
    ok: bool,
    /// After a failure: when the next attempt is due.
    retry_at: Option<Instant>,
}

impl State {
    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("locks lock")
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    fn forget(&self, key: &str) {
        self.cache.lock().expect("cache lock").remove(key);
        self.last_nodes.lock().expect("node sets lock").remove(key);
        self.locks.lock().expect("locks lock").remove(key);
    }
}

/// Upstream's `needsUpdate`: whether a change from `old` to `new` matters to the load
/// balancer, and which field changed (for the log). Only Services that want a load
/// balancer before or after count; then the type, source ranges, ports (name,
/// protocol, port, node port, target port, app protocol), session affinity and its
/// config, load balancer IP, external IPs, annotations, UID, external traffic policy,
/// health check node port and the number of IP families. The controller's own
/// finalizer and status writes change none of them.
fn needs_update(old: &Service, new: &Service) -> Option<&'static str> {
    if !wants_load_balancer(old) && !wants_load_balancer(new) {
        return None;
    }
    if wants_load_balancer(old) != wants_load_balancer(new) {
        return Some("wants load balancer");
    }
    let unset = ServiceSpec::default();
    let (o, n) = (
        old.spec.as_ref().unwrap_or(&unset),
        new.spec.as_ref().unwrap_or(&unset),
    );
    // Go compares strings, slices and maps by value: unset and empty are the same.
    fn text(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or_default()
    }
    fn list<T>(v: &Option<Vec<T>>) -> &[T] {
        v.as_deref().unwrap_or_default()
    }
    fn annotations(s: &Service) -> Option<&BTreeMap<String, String>> {
        s.metadata.annotations.as_ref().filter(|a| !a.is_empty())
    }
    if list(&o.load_balancer_source_ranges) != list(&n.load_balancer_source_ranges) {
        return Some("loadBalancerSourceRanges");
    }
    if list(&o.ports) != list(&n.ports) || text(&o.session_affinity) != text(&n.session_affinity) {
        return Some("ports or sessionAffinity");
    }
    if o.session_affinity_config != n.session_affinity_config {
        return Some("sessionAffinityConfig");
    }
    if text(&o.load_balancer_ip) != text(&n.load_balancer_ip) {
        return Some("loadBalancerIP");
    }
    if list(&o.external_ips) != list(&n.external_ips) {
        return Some("externalIPs");
    }
    if annotations(old) != annotations(new) {
        return Some("annotations");
    }
    if old.metadata.uid != new.metadata.uid {
        return Some("uid");
    }
    if text(&o.external_traffic_policy) != text(&n.external_traffic_policy) {
        return Some("externalTrafficPolicy");
    }
    if o.health_check_node_port.unwrap_or_default() != n.health_check_node_port.unwrap_or_default()
    {
        return Some("healthCheckNodePort");
    }
    if list(&o.ip_families).len() != list(&n.ip_families).len() {
        return Some("ipFamilies count");
    }
    None
}

/// Whether a Service wants a load balancer from this controller.
pub fn wants_load_balancer(s: &Service) -> bool {
    let spec = s.spec.as_ref();
    spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
        && spec.and_then(|s| s.load_balancer_class.as_ref()).is_none()
}

fn has_finalizer(s: &Service) -> bool {
    s.finalizers().iter().any(|f| f == FINALIZER)
}

/// Upstream's `needsCleanup`: the finalizer is there and the Service is being
/// deleted or is no longer of type LoadBalancer.
fn needs_cleanup(s: &Service) -> bool {
    has_finalizer(s)
        && (s.metadata.deletion_timestamp.is_some()
            || s.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer"))
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Upstream's `nodeIncludedPredicate`: no exclusion label, or one that parses as false.
fn included(node: &Node) -> bool {
    node.labels()
        .get(LABEL_EXCLUDE_FROM_LB)
        .is_none_or(|v| parse_bool(v) == Some(false))
}

/// Whether a Node may back load balancers (upstream's `stableNodeSetPredicates`).
pub fn eligible(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && included(node)
        && !super::has_taint(node, TAINT_TO_BE_DELETED)
}

/// Upstream's `shouldSyncUpdatedNode`: a Node update changes load balancers only when
/// its exclusion or its provider ID changed (a taint or a deletion timestamp waits for
/// the next sync).
fn should_sync_updated_node(old: &Node, new: &Node) -> bool {
    let provider_id = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default()
    };
    included(old) != included(new) || provider_id(old) != provider_id(new)
}

async fn event(state: &State, svc: &Service, type_: EventType, reason: &str, note: String) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(err) = state.recorder.publish(&ev, &svc.object_ref(&())).await {
        tracing::warn!(service = %svc.name_any(), reason, error = %err, "cannot record event");
    }
}

/// Adds (`add`) or removes the cleanup finalizer with a strategic merge patch, as
/// upstream's `addFinalizer`/`removeFinalizer` (through `PatchService`): `finalizers`
/// merges, so neither a concurrent change to the Service nor another controller's
/// finalizer makes it conflict.
async fn patch_finalizer(
    api: &Api<Service>,
    svc: &Service,
    add: bool,
) -> Result<Service, kube::Error> {
    let patch = if add {
        json!({"metadata": {"finalizers": [FINALIZER]}})
    } else {
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}})
    };
    api.patch(
        &svc.name_any(),
        &PatchParams::default(),
        &Patch::Strategic(patch),
    )
    .await
}

/// Patches `status.loadBalancer` when it differs; a Service already gone is fine
/// (upstream: it disappears right after the finalizer goes).
async fn patch_status(
    api: &Api<Service>,
    svc: &Service,
    status: &LoadBalancerStatus,
) -> Result<(), kube::Error> {
    let current = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.clone())
        .unwrap_or_default();
    let normalize = |s: &LoadBalancerStatus| s.ingress.clone().unwrap_or_default();
    if normalize(&current) == normalize(status) {
        return Ok(());
    }
    let ingress = if normalize(status).is_empty() {
        json!(null)
    } else {
        json!(status.ingress)
    };
    let result = api
        .patch_status(
            &svc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
        )
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// What a sync did (upstream's `loadBalancerOperation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Delete,
    Ensure,
}

/// Upstream's `syncLoadBalancerIfNeeded`.
async fn sync_service(state: &State, svc: &Service) -> Result<Operation, ServiceSyncError> {
    let ctx = &state.ctx;
    let lb = ctx.cloud.current();
    let ns = svc.namespace().unwrap_or_default();
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = &state.options.cluster_name;
    // A Service being deleted never gets a load balancer (the API server refuses a new
    // finalizer on it, so upstream's ensure would only fail until it is gone).
    if !wants_load_balancer(svc) || needs_cleanup(svc) || svc.metadata.deletion_timestamp.is_some()
    {
        let exists = match lb.get_load_balancer(cluster, svc).await {
            Ok(found) => found.is_some(),
            // Another controller's load balancer: nothing of ours to delete.
            Err(err) if err.is_implemented_elsewhere() => false,
            Err(err) => {
                return Err(cloud_step("check if load balancer exists before cleanup")(
                    err,
                ));
            }
        };
        if exists {
            tracing::info!(service = %key(svc), "deleting existing load balancer");
            delete_load_balancer(state, svc)
                .await
                .map_err(cloud_step("delete load balancer"))?;
        }
        // Only now that the provider confirmed the load balancer is gone.
        if has_finalizer(svc) {
            patch_finalizer(&api, svc, false)
                .await
                .map_err(kube_step("remove load balancer cleanup finalizer"))?;
        }
        event(
            state,
            svc,
            EventType::Normal,
            "DeletedLoadBalancer",
            "Deleted load balancer".into(),
        )
        .await;
        patch_status(&api, svc, &LoadBalancerStatus::default())
            .await
            .map_err(kube_step("update load balancer status"))?;
        return Ok(Operation::Delete);
    }
    tracing::info!(service = %key(svc), "ensuring load balancer");
    event(
        state,
        svc,
        EventType::Normal,
        "EnsuringLoadBalancer",
        "Ensuring load balancer".into(),
    )
    .await;
    let svc = if has_finalizer(svc) {
        svc.clone()
    } else {
        patch_finalizer(&api, svc, true)
            .await
            .map_err(kube_step("add load balancer cleanup finalizer"))?
    };
    if !ctx.nodes.ready().await {
        return Err(ServiceSyncError::NodeCacheStopped);
    }
    let nodes = eligible_nodes(ctx);
    if nodes.is_empty() {
        event(
            state,
            &svc,
            EventType::Warning,
            "UnAvailableLoadBalancer",
            "There are no available nodes for LoadBalancer".into(),
        )
        .await;
    }
    state
        .last_nodes
        .lock()
        .expect("node sets lock")
        .insert(key(&svc), node_set(&nodes));
    let status = match lb.ensure_load_balancer(cluster, &svc, &nodes).await {
        Ok(status) => status,
        Err(err) if err.is_implemented_elsewhere() => {
            tracing::debug!(service = %key(&svc), "load balancer implemented elsewhere; skipping");
            return Ok(Operation::Ensure);
        }
        Err(err) => return Err(cloud_step("ensure load balancer")(err)),
    };
    event(
        state,
        &svc,
        EventType::Normal,
        "EnsuredLoadBalancer",
        "Ensured load balancer".into(),
    )
    .await;
    patch_status(&api, &svc, &status)
        .await
        .map_err(kube_step("update load balancer status"))?;
    Ok(Operation::Ensure)
}

/// `DeletingLoadBalancer`, then the provider's delete; implemented elsewhere is not
/// an error (another controller's load balancer).
async fn delete_load_balancer(state: &State, svc: &Service) -> Result<(), cloud::Error> {
    event(
        state,
        svc,
        EventType::Normal,
        "DeletingLoadBalancer",
        "Deleting load balancer".into(),
    )
    .await;
    let lb = state.ctx.cloud.current();
    match lb
        .ensure_load_balancer_deleted(&state.options.cluster_name, svc)
        .await
    {
        Err(err) if err.is_implemented_elsewhere() => {
            tracing::debug!(service = %key(svc), "load balancer implemented elsewhere; nothing to delete");
            Ok(())
        }
        result => result,
    }
}

/// Upstream's `processLoadBalancerDelete`, for a Service that is gone (deleted without
/// the finalizer) or replaced by another of the same name: deletes the load balancer of
/// its last synced state.
async fn delete_for_gone_service(state: &State, svc: &Service) -> Result<(), ServiceSyncError> {
    if !wants_load_balancer(svc) {
        return Ok(());
    }
    if let Err(err) = delete_load_balancer(state, svc).await {
        event(
            state,
            svc,
            EventType::Warning,
            "DeleteLoadBalancerFailed",
            format!("Error deleting load balancer: {err}"),
        )
        .await;
        return Err(cloud_step("delete load balancer")(err));
    }
    event(
        state,
        svc,
        EventType::Normal,
        "DeletedLoadBalancer",
        "Deleted load balancer".into(),
    )
    .await;
    Ok(())
}

/// The eligible Nodes now.
fn eligible_nodes(ctx: &Context) -> Vec<Arc<Node>> {
    ctx.nodes
        .list()
        .into_iter()
        .filter(|n| eligible(n))
        .collect()
}

/// The node set as upstream's `nodesSufficientlyEqual` compares it: name → provider
/// ID, so a provider ID set after a Node joined (by cloud-node) updates load balancers.
type NodeSet = BTreeMap<String, String>;

fn node_set(nodes: &[Arc<Node>]) -> NodeSet {
    nodes
        .iter()
        .map(|n| {
            let provider_id = n
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .unwrap_or_default();
            (n.name_any(), provider_id)
        })
        .collect()
}

/// Upstream's `loggableNodeNames`: at most 20 names, then how many more.
fn loggable_names(nodes: &[Arc<Node>]) -> Vec<String> {
    let mut names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
    names.sort();
    if names.len() > MAX_NODE_NAMES {
        let more = names.len() - MAX_NODE_NAMES;
        names.truncate(MAX_NODE_NAMES);
        names.push(format!("<{more} more>"));
    }
    names
}

/// Upstream's `syncNodes`: every load balancer whose last node set differs from the
/// eligible nodes now is updated, `workers` at a time; a failed one goes through a
/// full Service sync (with its backoff).
async fn sync_nodes(state: &Arc<State>) {
    let nodes = eligible_nodes(&state.ctx);
    let set = node_set(&nodes);
    let services: Vec<Arc<Service>> = state
        .cache
        .lock()
        .expect("cache lock")
        .values()
        .map(|c| c.state.clone())
        .filter(|s| wants_load_balancer(s) && s.metadata.deletion_timestamp.is_none())
        .collect();
    let started = Instant::now();
    let total = services.len();
    let failed = futures_util::stream::iter(services)
        .map(|svc| {
            let (state, nodes, set) = (state.clone(), nodes.clone(), set.clone());
            async move {
                let key = key(&svc);
                let lock = state.lock_for(&key);
                let _guard = lock.lock().await;
                // Waiting for the lock, the Service may have been deleted (its load
                // balancer with it) or stopped wanting one: its hosts are then not
                // updated, or the update would find nothing (or, from a provider that
                // creates, make a load balancer nobody deletes). Upstream's
                // `nodeSyncService` checks the cache the same way.
                let Some(svc) = still_synced(&state, &key, &svc) else {
                    return 0;
                };
                // Stored before trying: a failure is retried by a full sync.
                let previous = state
                    .last_nodes
                    .lock()
                    .expect("node sets lock")
                    .insert(key.clone(), set.clone());
                if previous.as_ref() == Some(&set) {
                    return 0;
                }
                if update_hosts(&state, &svc, &nodes).await {
                    return 0;
                }
                state.ctx.metrics.upstream.nodesync_error.inc();
                // Upstream's serviceQueue.Add: the Service's own sync, with its backoff.
                if let Some(cached) = state.cache.lock().expect("cache lock").get_mut(&key) {
                    cached.ok = false;
                }
                if let Some(current) = state.services.get(&ObjectRef::from_obj(svc.as_ref())) {
                    let _ = state.resync.send(current);
                }
                1
            }
        })
        .buffer_unordered(usize::from(state.options.workers.max(1)))
        .fold(0usize, |sum, n| async move { sum + n })
        .await;
    state
        .ctx
        .metrics
        .upstream
        .nodesync_latency
        .observe(started.elapsed().as_secs_f64());
    tracing::debug!(services = total, failed, elapsed = ?started.elapsed(), "synced load balancer hosts");
}

/// The Service of `key` as the watch has it now, if it is still the one `seen` was
/// (same UID), still in the cache of synced Services, not being deleted and still
/// wanting a load balancer.
fn still_synced(state: &State, key: &str, seen: &Service) -> Option<Arc<Service>> {
    let current = state.services.get(&ObjectRef::from_obj(seen))?;
    let cached = state.cache.lock().expect("cache lock").contains_key(key);
    (cached
        && current.metadata.uid == seen.metadata.uid
        && current.metadata.deletion_timestamp.is_none()
        && wants_load_balancer(&current))
    .then_some(current)
}

/// Upstream's `lockedUpdateLoadBalancerHosts`: implemented elsewhere is success; on an
/// error, a load balancer that no longer exists is success too. Returns success.
async fn update_hosts(state: &State, svc: &Service, nodes: &[Arc<Node>]) -> bool {
    let ctx = &state.ctx;
    let lb = ctx.cloud.current();
    if !lb.meets(Requirement::LoadBalancer) {
        return true;
    }
    let cluster = &state.options.cluster_name;
    tracing::info!(service = %key(svc), nodes = nodes.len(), names = ?loggable_names(nodes), "updating load balancer hosts");
    let started = Instant::now();
    ctx.metrics.upstream.loadbalancer_sync.inc();
    let result = lb.update_load_balancer(cluster, svc, nodes).await;
    ctx.metrics
        .upstream
        .update_loadbalancer_host_latency
        .observe(started.elapsed().as_secs_f64());
    let ok = match &result {
        Ok(()) => true,
        Err(err) if err.is_implemented_elsewhere() => true,
        Err(_) => matches!(lb.get_load_balancer(cluster, svc).await, Ok(None)),
    };
    ctx.metrics.record(NAME, started, ok);
    match result {
        Ok(()) if nodes.is_empty() => {
            event(
                state,
                svc,
                EventType::Warning,
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer".into(),
            )
            .await;
        }
        Ok(()) => {
            event(
                state,
                svc,
                EventType::Normal,
                "UpdatedLoadBalancer",
                "Updated load balancer with new hosts".into(),
            )
            .await;
        }
        Err(err) if ok => {
            tracing::debug!(service = %key(svc), error = %err, "load balancer not updated: implemented elsewhere or gone");
        }
        Err(err) => {
            tracing::error!(service = %key(svc), error = %err, "failed to update load balancer hosts");
            event(
                state,
                svc,
                EventType::Warning,
                "UpdateLoadBalancerFailed",
                format!(
                    "Error updating load balancer with new hosts {:?} [node names limited, total number of nodes: {}], error: {err}",
                    loggable_names(nodes),
                    nodes.len()
                ),
            )
            .await;
        }
    }
    ok
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(ctx: Context, options: Options, shutdown: tokio::sync::watch::Receiver<bool>) {
    let (reader, writer) = reflector::store::<Service>();
    let (resync, triggers) = mpsc::unbounded_channel();
    let state = Arc::new(State {
        services: reader.clone(),
        resync: resync.clone(),
        recorder: ctx.recorder("service-controller"),
        backoff: Backoff::new(Duration::from_secs(5), Duration::from_secs(300))
            .reporting(ctx.metrics.retries_pending(NAME)),
        cache: Mutex::new(HashMap::new()),
        last_nodes: Mutex::new(HashMap::new()),
        locks: Mutex::new(HashMap::new()),
        options: options.clone(),
        ctx: ctx.clone(),
    });
    let mut stop = shutdown.clone();
    let triggers = futures_util::stream::unfold(triggers, |mut rx| async move {
        rx.recv().await.map(|svc| (svc, rx))
    });
    let controller = Controller::for_shared_stream(triggers, reader)
        .with_config(controller::Config::default().concurrency(options.workers.max(1)))
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(reconcile, error_policy, state.clone())
        .for_each(|_| async {});
    tokio::join!(
        controller,
        watch_services(state.clone(), writer, resync, shutdown.clone()),
        watch_nodes(state, shutdown),
    );
}

/// The Service watch: keeps the store, triggers a reconcile for each Service changed,
/// and cleans up after each one deleted (also one found missing when the watch lists
/// again: upstream's `DeletedFinalStateUnknown`).
async fn watch_services(
    state: Arc<State>,
    mut writer: reflector::store::Writer<Service>,
    trigger: mpsc::UnboundedSender<Arc<Service>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let api: Api<Service> = Api::all(state.ctx.client.clone());
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(stream);
    loop {
        let event = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            event = stream.next() => match event {
                Some(Ok(event)) => event,
                Some(Err(err)) => {
                    tracing::warn!(error = %err, "service watch failed; retrying");
                    continue;
                }
                None => return,
            },
        };
        writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Apply(svc) => {
                if let Some(svc) = state.services.get(&ObjectRef::from_obj(&svc)) {
                    let _ = trigger.send(svc);
                }
            }
            watcher::Event::Delete(svc) => {
                tokio::spawn(clean_up_gone(
                    state.clone(),
                    Arc::new(svc),
                    shutdown.clone(),
                ));
            }
            watcher::Event::InitDone => {
                let present: Vec<Arc<Service>> = state.services.state();
                let cached: Vec<Arc<Service>> = state
                    .cache
                    .lock()
                    .expect("cache lock")
                    .values()
                    .map(|c| c.state.clone())
                    .collect();
                for svc in cached {
                    if state
                        .services
                        .get(&ObjectRef::from_obj(svc.as_ref()))
                        .is_none()
                    {
                        tokio::spawn(clean_up_gone(state.clone(), svc, shutdown.clone()));
                    }
                }
                for svc in present {
                    let _ = trigger.send(svc);
                }
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }
}

/// Upstream's `processServiceDeletion`: a Service gone from the API server whose last
/// synced state wanted a load balancer has it deleted, retried with backoff until it is
/// gone, the Service reappears under the same name (its sync takes over), or shutdown.
async fn clean_up_gone(
    state: Arc<State>,
    svc: Arc<Service>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let key = key(&svc);
    loop {
        let lock = state.lock_for(&key);
        let guard = lock.lock().await;
        let cached = state.cache.lock().expect("cache lock").get(&key).cloned();
        // Nothing synced (no load balancer made), already cleaned up, or re-created:
        // the new Service's sync deletes the old load balancer first.
        let Some(cached) = cached.filter(|c| c.state.metadata.uid == svc.metadata.uid) else {
            return;
        };
        if state
            .services
            .get(&ObjectRef::from_obj(svc.as_ref()))
            .is_some()
        {
            return;
        }
        tracing::info!(service = %key, "service has been deleted; cleaning up its load balancer");
        let started = Instant::now();
        let result = delete_for_gone_service(&state, &cached.state).await;
        state.ctx.metrics.record(NAME, started, result.is_ok());
        drop(guard);
        let err = match result {
            Ok(()) => {
                state.forget(&key);
                state.backoff.succeeded(&key);
                return;
            }
            Err(err) => err,
        };
        let delay = state.backoff.failed(&key, err.retry_after());
        tracing::warn!(service = %key, error = %err, retry_in = ?delay, "error deleting the load balancer of a deleted service");
        if !tick(delay, &shutdown).await {
            return;
        }
    }
}

/// Node changes that matter to load balancers (added, deleted, or
/// [`should_sync_updated_node`]), coalesced, start a node sync.
async fn watch_nodes(state: Arc<State>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut changes = state.ctx.nodes.subscribe();
    let matters = |event: &Result<NodeEvent, broadcast::error::RecvError>| match event {
        Ok(NodeEvent::Added(_) | NodeEvent::Deleted(_)) => true,
        Ok(NodeEvent::Updated { old, new }) => should_sync_updated_node(old, new),
        Err(broadcast::error::RecvError::Lagged(_)) => true,
        Err(broadcast::error::RecvError::Closed) => false,
    };
    loop {
        let event = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            event = changes.recv() => event,
        };
        if matches!(event, Err(broadcast::error::RecvError::Closed)) {
            return;
        }
        let mut sync = matters(&event);
        // Everything already queued is part of the same burst.
        loop {
            match changes.try_recv() {
                Ok(event) => sync |= matters(&Ok(event)),
                Err(broadcast::error::TryRecvError::Lagged(_)) => sync = true,
                Err(_) => break,
            }
        }
        if sync && state.ctx.cloud.current().meets(Requirement::LoadBalancer) {
            sync_nodes(&state).await;
        }
    }
}

async fn reconcile(svc: Arc<Service>, state: Arc<State>) -> Result<Action, ServiceSyncError> {
    let key = key(&svc);
    if !state.ctx.cloud.current().meets(Requirement::LoadBalancer) {
        return Ok(Action::await_change());
    }
    let lock = state.lock_for(&key);
    let _guard = lock.lock().await;
    let mut previous = state.cache.lock().expect("cache lock").get(&key).cloned();
    // Deleted and re-created under the same name without the finalizer: the old
    // Service's load balancer goes first (upstream's processServiceCreateOrUpdate).
    if let Some(old) = &previous
        && old.state.metadata.uid != svc.metadata.uid
    {
        delete_for_gone_service(&state, &old.state).await?;
        state.cache.lock().expect("cache lock").remove(&key);
        previous = None;
    }
    match &previous {
        // Upstream's add filter: a Service never synced is of interest only if it wants
        // a load balancer or still carries the finalizer.
        None if !(wants_load_balancer(&svc) || needs_cleanup(&svc)) => {
            return Ok(Action::await_change());
        }
        // Upstream's update filter: only changes `needsUpdate` sees, or a cleanup due;
        // after a failure, the next attempt waits for its time unless the Service
        // changed.
        Some(seen) => match needs_update(&seen.state, &svc) {
            Some(field) => {
                tracing::debug!(service = %key, field, "service changed; syncing");
            }
            None => {
                if seen.ok && !needs_cleanup(&svc) {
                    return Ok(Action::await_change());
                }
                // A deletion (or a cleanup otherwise due) the last sync did not see yet
                // is acted on at once, whatever the back-off: upstream enqueues it with
                // `queue.Add`, which bypasses the rate limiter. A failed cleanup then
                // waits for its time like any other failure.
                let cleanup_due = needs_cleanup(&svc) && !needs_cleanup(&seen.state);
                if !cleanup_due
                    && let Some(at) = seen.retry_at
                    && let Some(wait) = at.checked_duration_since(Instant::now())
                    && !wait.is_zero()
                {
                    return Ok(Action::requeue(wait));
                }
            }
        },
        None => {}
    }
    let started = Instant::now();
    let result = sync_service(&state, &svc).await;
    state.ctx.metrics.record(NAME, started, result.is_ok());
    match &result {
        // Upstream deletes the cache entry only once the load balancer is deleted.
        Ok(Operation::Delete) => {
            state.cache.lock().expect("cache lock").remove(&key);
            state
                .last_nodes
                .lock()
                .expect("node sets lock")
                .remove(&key);
        }
        Ok(Operation::Ensure) | Err(_) => {
            state.cache.lock().expect("cache lock").insert(
                key.clone(),
                Cached {
                    state: svc.clone(),
                    ok: result.is_ok(),
                    retry_at: None,
                },
            );
        }
    }
    if let Err(err) = &result {
        if let ServiceSyncError::Cloud { source, .. } = err
            && let Some(field) = source.invalid_answer()
        {
            state.ctx.metrics.answer_refused(NAME, field);
        }
        event(
            &state,
            &svc,
            EventType::Warning,
            "SyncLoadBalancerFailed",
            format!("Error syncing load balancer: {err}"),
        )
        .await;
    }
    result?;
    state.backoff.succeeded(&key);
    Ok(Action::await_change())
}

fn key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

fn error_policy(svc: Arc<Service>, err: &ServiceSyncError, state: Arc<State>) -> Action {
    let delay = state.backoff.failed(&key(&svc), err.retry_after());
    if let Some(seen) = state.cache.lock().expect("cache lock").get_mut(&key(&svc)) {
        seen.retry_at = Some(Instant::now() + delay);
    }
    tracing::warn!(service = %key(&svc), error = %err, retry_in = ?delay, "error syncing load balancer");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)], taint: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        if let Some(key) = taint {
            n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                    key: key.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        n
    }

    #[test]
    fn node_eligibility_follows_upstream() {
        assert!(eligible(&node(&[], None)));
        assert!(!eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, "")], None)));
        assert!(!eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, "true")], None)));
        assert!(eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, "false")], None)));
        // Go's strconv.ParseBool: these spellings are false, anything else excludes.
        for value in ["0", "f", "F", "FALSE", "False"] {
            assert!(eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, value)], None)));
        }
        for value in ["FaLsE", "no", " false", "off", "1", "t", "TRUE"] {
            assert!(
                !eligible(&node(&[(LABEL_EXCLUDE_FROM_LB, value)], None)),
                "{value}"
            );
        }
        assert!(!eligible(&node(&[], Some(TAINT_TO_BE_DELETED))));
        let mut deleting = node(&[], None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert!(!eligible(&deleting));
    }

    #[test]
    fn only_classless_load_balancers_are_ours() {
        let mut svc = Service {
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(wants_load_balancer(&svc));
        svc.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other".into());
        assert!(!wants_load_balancer(&svc));
        svc.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(!wants_load_balancer(&svc));
    }

    /// Upstream's `defaultExternalService`, changed by `tweak`.
    fn external_service(tweak: impl Fn(&mut serde_json::Value)) -> Service {
        let mut v = json!({
            "metadata": {"name": "external-balancer", "namespace": "default", "uid": "UID old"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
        });
        tweak(&mut v);
        serde_json::from_value(v).unwrap()
    }

    /// Ported from upstream `TestNeedsUpdate` (every case, in its order), plus the fields
    /// `needsUpdate` compares that the upstream test has no case for.
    #[test]
    fn needs_update_as_upstream() {
        type Tweak = Box<dyn Fn(&mut serde_json::Value)>;
        let set = |pointer: &'static str, value: serde_json::Value| -> Tweak {
            Box::new(move |v: &mut serde_json::Value| {
                let (parent, field) = pointer.rsplit_once('/').unwrap();
                v.pointer_mut(parent).unwrap()[field] = value.clone();
            })
        };
        let ports = |ports: serde_json::Value| set("/spec/ports", ports);
        let cases: Vec<(&str, Tweak, Tweak, bool)> = vec![
            (
                "If the service type is changed from LoadBalancer to ClusterIP",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/type", json!("ClusterIP")),
                true,
            ),
            (
                "If the Ports are different",
                ports(json!([{"port": 8000}, {"port": 9000}, {"port": 10000}])),
                ports(json!([{"port": 8001}, {"port": 9001}, {"port": 10001}])),
                true,
            ),
            (
                "If external ip counts are different",
                set("/spec/externalIPs", json!(["old.IP.1"])),
                set("/spec/externalIPs", json!(["new.IP.1", "new.IP.2"])),
                true,
            ),
            (
                "If external ips are different",
                set("/spec/externalIPs", json!(["old.IP.1", "old.IP.2"])),
                set("/spec/externalIPs", json!(["new.IP.1", "new.IP.2"])),
                true,
            ),
            (
                "If UID is different",
                set("/metadata/uid", json!("UID old")),
                set("/metadata/uid", json!("UID new")),
                true,
            ),
            (
                "If ExternalTrafficPolicy is different",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/externalTrafficPolicy", json!("Local")),
                true,
            ),
            (
                "If HealthCheckNodePort is different",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/healthCheckNodePort", json!(30123)),
                true,
            ),
            (
                "If TargetGroup is different 1",
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": 20}])),
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": 21}])),
                true,
            ),
            (
                "If TargetGroup is different 2",
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": 22}])),
                ports(json!([{"port": 80, "protocol": "TCP", "targetPort": "dns"}])),
                true,
            ),
            (
                "If appProtocol is the same",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/type", json!("LoadBalancer")),
                false,
            ),
            (
                "If service IPFamilies from single stack to dual stack",
                set("/spec/ipFamilies", json!(["IPv4"])),
                set("/spec/ipFamilies", json!(["IPv4", "IPv6"])),
                true,
            ),
            (
                "If service IPFamilies from dual stack to single stack",
                set("/spec/ipFamilies", json!(["IPv4", "IPv6"])),
                set("/spec/ipFamilies", json!(["IPv4"])),
                true,
            ),
            (
                "If service IPFamilies not change",
                set("/spec/ipFamilies", json!(["IPv4"])),
                set("/spec/ipFamilies", json!(["IPv4"])),
                false,
            ),
            (
                "If appProtocol is set when previously unset",
                ports(json!([{"port": 80, "protocol": "TCP"}])),
                ports(json!([{"port": 80, "protocol": "TCP", "appProtocol": "http"}])),
                true,
            ),
            (
                "If appProtocol is set to a different value",
                ports(json!([{"port": 80, "protocol": "TCP", "appProtocol": "http"}])),
                ports(json!([{"port": 80, "protocol": "TCP", "appProtocol": "tcp"}])),
                true,
            ),
            // Compared by needsUpdate, without a case upstream.
            (
                "loadBalancerSourceRanges",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/loadBalancerSourceRanges", json!(["10.0.0.0/8"])),
                true,
            ),
            (
                "sessionAffinity",
                set("/spec/sessionAffinity", json!("None")),
                set("/spec/sessionAffinity", json!("ClientIP")),
                true,
            ),
            (
                "sessionAffinityConfig",
                set("/spec/sessionAffinity", json!("ClientIP")),
                set(
                    "/spec/sessionAffinityConfig",
                    json!({"clientIP": {"timeoutSeconds": 60}}),
                ),
                true,
            ),
            (
                "loadBalancerIP",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/loadBalancerIP", json!("192.0.2.7")),
                true,
            ),
            (
                "annotations",
                set("/spec/type", json!("LoadBalancer")),
                set("/metadata/annotations", json!({"example.com/a": "1"})),
                true,
            ),
            (
                "labels are not compared",
                set("/spec/type", json!("LoadBalancer")),
                set("/metadata/labels", json!({"team": "a"})),
                false,
            ),
            (
                "finalizers (the controller's own write) are not compared",
                set("/spec/type", json!("LoadBalancer")),
                set("/metadata/finalizers", json!([FINALIZER])),
                false,
            ),
            (
                "status (the controller's own write) is not compared",
                set("/spec/type", json!("LoadBalancer")),
                set(
                    "/status",
                    json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}),
                ),
                false,
            ),
            (
                "neither wants a load balancer",
                set("/spec/type", json!("ClusterIP")),
                Box::new(|v: &mut serde_json::Value| {
                    v["spec"]["type"] = json!("NodePort");
                    v["spec"]["ports"] = json!([{"port": 81}]);
                }),
                false,
            ),
            (
                "loadBalancerClass set: no longer ours",
                set("/spec/type", json!("LoadBalancer")),
                set("/spec/loadBalancerClass", json!("example.com/other")),
                true,
            ),
        ];
        for (name, old, new, want) in cases {
            let (old, new) = (external_service(old), external_service(new));
            assert_eq!(
                needs_update(&old, &new).is_some(),
                want,
                "{name}: needsUpdate() should have returned {want}"
            );
        }
    }

    /// Ported from upstream `TestNeedsCleanup`.
    #[test]
    fn needs_cleanup_as_upstream() {
        let with_finalizer = |tweak: &dyn Fn(&mut serde_json::Value)| {
            external_service(|v| {
                v["metadata"]["finalizers"] = json!([FINALIZER]);
                tweak(v);
            })
        };
        assert!(
            !needs_cleanup(&Service::default()),
            "service without finalizer"
        );
        assert!(
            needs_cleanup(&with_finalizer(&|v| v["spec"]["type"] = json!("NodePort"))),
            "service with finalizer without timestamp without LB"
        );
        assert!(
            !needs_cleanup(&with_finalizer(&|_| {})),
            "service with finalizer without timestamp with LB"
        );
        assert!(
            needs_cleanup(&with_finalizer(&|v| {
                v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z")
            })),
            "service with finalizer with timestamp"
        );
    }

    /// Ported from upstream `Test_shouldSyncUpdatedNode_individualPredicates`.
    #[test]
    fn should_sync_updated_node_individual_predicates() {
        let make = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = json!({"metadata": {"name": "node"}, "spec": {"providerID": "cloud://1"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
            f(&mut v);
            serde_json::from_value::<Node>(v).unwrap()
        };
        let plain = |_: &mut serde_json::Value| {};
        let excluded = |v: &mut serde_json::Value| {
            v["metadata"]["labels"] = json!({LABEL_EXCLUDE_FROM_LB: "true"})
        };
        let other_label = |v: &mut serde_json::Value| v["metadata"]["labels"] = json!({"a": "b"});
        let tainted = |v: &mut serde_json::Value| {
            v["spec"]["taints"] = json!([{"key": TAINT_TO_BE_DELETED, "effect": "NoSchedule"}])
        };
        let not_ready = |v: &mut serde_json::Value| {
            v["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}])
        };
        let no_ready = |v: &mut serde_json::Value| v["status"]["conditions"] = json!([]);
        let deleting = |v: &mut serde_json::Value| {
            v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z")
        };
        let no_provider_id = |v: &mut serde_json::Value| v["spec"]["providerID"] = json!("");
        let unset_provider_id = |v: &mut serde_json::Value| {
            v["spec"].as_object_mut().unwrap().remove("providerID");
        };
        let other_provider_id =
            |v: &mut serde_json::Value| v["spec"]["providerID"] = json!("cloud://2");
        type Tweak<'a> = &'a dyn Fn(&mut serde_json::Value);
        let cases: [(&str, Tweak, Tweak, bool); 14] = [
            ("nothing changed", &plain, &plain, false),
            ("excluded F->T", &plain, &excluded, true),
            ("excluded T->F", &excluded, &plain, true),
            ("excluded T->T", &excluded, &excluded, false),
            ("other taint F->T", &plain, &tainted, false),
            ("other taint T->F", &tainted, &plain, false),
            ("other label F->T", &plain, &other_label, false),
            ("other label T->F", &other_label, &plain, false),
            ("readiness changed T->F", &plain, &not_ready, false),
            ("readiness changed F->unset", &not_ready, &no_ready, false),
            ("deletionTimestamp F->T", &plain, &deleting, false),
            ("providerID set F->T", &no_provider_id, &plain, true),
            (
                "providerID set T->F (unset)",
                &plain,
                &unset_provider_id,
                true,
            ),
            ("providerID change", &plain, &other_provider_id, true),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(
                should_sync_updated_node(&make(old), &make(new)),
                want,
                "{name}"
            );
        }
        // An empty provider ID and none are the same (Go's zero string).
        assert!(!should_sync_updated_node(
            &make(&no_provider_id),
            &make(&unset_provider_id)
        ));
    }

    #[test]
    fn node_names_in_events_are_limited_as_upstream() {
        let nodes: Vec<Arc<Node>> = (0..25)
            .map(|i| {
                let mut n = Node::default();
                n.metadata.name = Some(format!("n{i:02}"));
                Arc::new(n)
            })
            .collect();
        let names = loggable_names(&nodes);
        assert_eq!(names.len(), 21);
        assert_eq!(names[20], "<5 more>");
        assert_eq!(loggable_names(&nodes[..3]), ["n00", "n01", "n02"]);
    }
}
