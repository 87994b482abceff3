//! The service (load balancer) controller.
//!
//! For Services of `type: LoadBalancer` without `spec.loadBalancerClass`: add the
//! finalizer `service.kubernetes.io/load-balancer-cleanup`, ensure the load balancer on
//! the eligible nodes, and patch `status.loadBalancer` on the status subresource when
//! it changed. When a Service is deleted (deletionTimestamp) or stops wanting a load
//! balancer, ensure it is deleted and only then remove the finalizer. When the set of
//! eligible nodes changes (names or provider IDs, upstream's `nodesSufficientlyEqual`),
//! update every load balancer; retry only the ones that failed. Events use upstream's reasons;
//! errors back off exponentially from 5 s to 300 s, or by the provider's retry-after.
//!
//! Eligible nodes: not being deleted, not labelled
//! `node.kubernetes.io/exclude-from-external-load-balancers` (unless the value parses
//! as false), not tainted `ToBeDeletedByClusterAutoscaler`. Readiness does not matter.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::backoff::Backoff;
use super::{Context, tick};
use crate::cloud::{self, Requirement};

/// The controller's name: in `--controllers`, metrics and logs.
pub const NAME: &str = "service";

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
pub const LABEL_EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// Why a Service sync failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceSyncError {
    /// The cloud failed.
    #[error(transparent)]
    Cloud(#[from] cloud::Error),
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The Node cache stopped (only at shutdown).
    #[error("the Node cache is not running")]
    NodeCacheStopped,
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
    /// The eligible node set last used for load balancers.
    last_nodes: Mutex<Option<NodeSet>>,
    /// Services whose host update failed, retried until they succeed.
    failed: Mutex<BTreeSet<String>>,
    /// What each Service looked like at its last sync, and how that went.
    seen: Mutex<std::collections::HashMap<String, Seen>>,
    /// Every Node, kept by the node-sync watch (upstream's node lister).
    nodes: reflector::Store<Node>,
}

/// A Service's last sync: the fields upstream's `needsUpdate`/`needsCleanup` compare,
/// hashed, and the outcome.
#[derive(Debug, Clone, Copy)]
struct Seen {
    fingerprint: u64,
    /// The sync succeeded: nothing to do until those fields change.
    ok: bool,
    /// After a failure: when the next attempt is due.
    retry_at: Option<Instant>,
}

/// What upstream's service controller reacts to (`needsUpdate`, `needsCleanup`):
/// whether the Service wants a load balancer, is being deleted, and its type, source
/// ranges, ports, session affinity (and config), load balancer IP, external IPs,
/// annotations, UID, external traffic policy, health check node port and the number
/// of IP families. Its own finalizer and status writes change none of them.
fn fingerprint(s: &Service) -> u64 {
    use std::hash::{Hash, Hasher};
    let spec = s.spec.clone().unwrap_or_default();
    let fields = json!([
        wants_load_balancer(s),
        s.metadata.deletion_timestamp.is_some(),
        s.metadata.uid,
        s.metadata.annotations,
        spec.type_,
        spec.load_balancer_source_ranges,
        spec.ports,
        spec.session_affinity,
        spec.session_affinity_config,
        spec.load_balancer_ip,
        spec.external_ips,
        spec.external_traffic_policy,
        spec.health_check_node_port,
        spec.ip_families.map(|f| f.len()),
        spec.load_balancer_class,
    ]);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    fields.to_string().hash(&mut hasher);
    hasher.finish()
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

/// Whether a Node may back load balancers.
pub fn eligible(node: &Node) -> bool {
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if let Some(value) = node.labels().get(LABEL_EXCLUDE_FROM_LB)
        && !matches!(value.to_ascii_lowercase().as_str(), "false" | "0" | "f")
    {
        return false;
    }
    !super::has_taint(node, TAINT_TO_BE_DELETED)
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

/// Sets the finalizers, conditional on the resourceVersion read.
async fn set_finalizers(
    api: &Api<Service>,
    svc: &Service,
    finalizers: Vec<String>,
) -> Result<Service, kube::Error> {
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": svc.metadata.resource_version}});
    api.patch(
        &svc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
}

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
    api.patch_status(
        &svc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
    )
    .await
    .map(drop)
}

async fn sync_service(state: &State, svc: &Service) -> Result<(), ServiceSyncError> {
    let ctx = &state.ctx;
    let lb = ctx.cloud.current();
    if !lb.meets(Requirement::LoadBalancer) {
        return Ok(());
    }
    let ns = svc.namespace().unwrap_or_default();
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = &state.options.cluster_name;
    let deleting = svc.metadata.deletion_timestamp.is_some();
    if (deleting || !wants_load_balancer(svc)) && has_finalizer(svc) {
        event(
            state,
            svc,
            EventType::Normal,
            "DeletingLoadBalancer",
            "Deleting load balancer".into(),
        )
        .await;
        if let Err(err) = lb.ensure_load_balancer_deleted(cluster, svc).await {
            event(
                state,
                svc,
                EventType::Warning,
                "DeleteLoadBalancerFailed",
                format!("Error deleting load balancer: {err}"),
            )
            .await;
            return Err(err.into());
        }
        event(
            state,
            svc,
            EventType::Normal,
            "DeletedLoadBalancer",
            "Deleted load balancer".into(),
        )
        .await;
        if !deleting {
            patch_status(&api, svc, &LoadBalancerStatus::default()).await?;
        }
        // Only now that the provider confirmed the load balancer is gone.
        let remaining: Vec<String> = svc
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        set_finalizers(&api, svc, remaining).await?;
        return Ok(());
    }
    if deleting || !wants_load_balancer(svc) {
        return Ok(());
    }
    let svc = if has_finalizer(svc) {
        svc.clone()
    } else {
        let mut finalizers = svc.finalizers().to_vec();
        finalizers.push(FINALIZER.into());
        set_finalizers(&api, svc, finalizers).await?
    };
    // The cache holds every Node once its first list is complete.
    state
        .nodes
        .wait_until_ready()
        .await
        .map_err(|_| ServiceSyncError::NodeCacheStopped)?;
    let nodes = eligible_in(&state.nodes);
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
    event(
        state,
        &svc,
        EventType::Normal,
        "EnsuringLoadBalancer",
        "Ensuring load balancer".into(),
    )
    .await;
    let status = match lb.ensure_load_balancer(cluster, &svc, &nodes).await {
        Ok(status) => status,
        Err(err) if err.is_implemented_elsewhere() => {
            tracing::info!(service = %svc.name_any(), "load balancer implemented elsewhere; skipping");
            return Ok(());
        }
        Err(err) => {
            event(
                state,
                &svc,
                EventType::Warning,
                "SyncLoadBalancerFailed",
                format!("Error syncing load balancer: {err}"),
            )
            .await;
            return Err(err.into());
        }
    };
    patch_status(&api, &svc, &status).await?;
    event(
        state,
        &svc,
        EventType::Normal,
        "EnsuredLoadBalancer",
        "Ensured load balancer".into(),
    )
    .await;
    Ok(())
}

/// The Nodes of `store` eligible as load balancer members.
fn eligible_in(store: &reflector::Store<Node>) -> Vec<Arc<Node>> {
    store.state().into_iter().filter(|n| eligible(n)).collect()
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

/// Upstream's node sync: when the eligible node set (`nodes`) changed, every load
/// balancer is updated; otherwise only the Services whose update failed last time
/// (`retry`) are tried again — never a loop over every Service. Returns whether any
/// update is still failing.
async fn sync_nodes(state: &State, nodes: Vec<Arc<Node>>, retry: bool) -> bool {
    let ctx = &state.ctx;
    let lb = ctx.cloud.current();
    if !lb.meets(Requirement::LoadBalancer) {
        return false;
    }
    let set = node_set(&nodes);
    let changed = state.last_nodes.lock().expect("node set lock").as_ref() != Some(&set);
    let failed: BTreeSet<String> = std::mem::take(&mut *state.failed.lock().expect("failed lock"));
    if !changed && (!retry || failed.is_empty()) {
        *state.failed.lock().expect("failed lock") = failed;
        return !state.failed.lock().expect("failed lock").is_empty();
    }
    let services: Api<Service> = Api::all(ctx.client.clone());
    let services = match services.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(err) => {
            tracing::error!(error = %err, "cannot list services");
            *state.failed.lock().expect("failed lock") = failed;
            return true;
        }
    };
    *state.last_nodes.lock().expect("node set lock") = Some(set);
    let mut still_failing = BTreeSet::new();
    for svc in services.iter().filter(|s| {
        wants_load_balancer(s)
            && has_finalizer(s)
            && s.metadata.deletion_timestamp.is_none()
            && (changed || failed.contains(&key(s)))
    }) {
        if !update_hosts(state, svc, &nodes).await {
            still_failing.insert(key(svc));
        }
    }
    let failing = !still_failing.is_empty();
    *state.failed.lock().expect("failed lock") = still_failing;
    failing
}

/// Upstream's `lockedUpdateLoadBalancerHosts`: implemented elsewhere is success; on an
/// error, a load balancer that no longer exists is success too. Returns success.
async fn update_hosts(state: &State, svc: &Service, nodes: &[Arc<Node>]) -> bool {
    let ctx = &state.ctx;
    let lb = ctx.cloud.current();
    let cluster = &state.options.cluster_name;
    if nodes.is_empty() {
        event(
            state,
            svc,
            EventType::Warning,
            "UnAvailableLoadBalancer",
            "There are no available nodes for LoadBalancer".into(),
        )
        .await;
    }
    let started = Instant::now();
    let result = lb.update_load_balancer(cluster, svc, nodes).await;
    let ok = match &result {
        Ok(()) => true,
        Err(err) if err.is_implemented_elsewhere() => true,
        Err(_) => matches!(lb.get_load_balancer(cluster, svc).await, Ok(None)),
    };
    ctx.metrics.record(NAME, started, ok);
    match result {
        Ok(()) => {
            event(
                state,
                svc,
                EventType::Normal,
                "UpdatedLoadBalancer",
                format!(
                    "Updated load balancer with new hosts ({} nodes)",
                    nodes.len()
                ),
            )
            .await;
        }
        Err(err) if ok => {
            tracing::debug!(service = %key(svc), error = %err, "load balancer not updated: implemented elsewhere or gone");
        }
        Err(err) => {
            let names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
            event(
                state,
                svc,
                EventType::Warning,
                "UpdateLoadBalancerFailed",
                format!("Error updating load balancer with new hosts {names:?}, error: {err}"),
            )
            .await;
        }
    }
    ok
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(ctx: Context, options: Options, shutdown: tokio::sync::watch::Receiver<bool>) {
    let api: Api<Service> = Api::all(ctx.client.clone());
    let (reader, writer) = reflector::store::<Node>();
    let state = Arc::new(State {
        nodes: reader.clone(),
        recorder: ctx.recorder("service-controller"),
        backoff: Backoff::new(Duration::from_secs(5), Duration::from_secs(300))
            .reporting(ctx.metrics.retries_pending(NAME)),
        last_nodes: Mutex::new(None),
        failed: Mutex::new(BTreeSet::new()),
        seen: Mutex::new(std::collections::HashMap::new()),
        options: options.clone(),
        ctx: ctx.clone(),
    });
    let mut stop = shutdown.clone();
    let controller = Controller::new(api, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(options.workers.max(1)))
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(reconcile, error_policy, state.clone())
        .for_each(|_| async {});
    // Node set changes (upstream's node sync): a reflector keeps the Nodes in memory
    // (also what Service syncs read);
    // each burst of node events, coalesced, recomputes the eligible set, and only a
    // changed set lists the Services and updates their load balancers. Failed updates
    // are retried every 5 s.
    let nodes_state = state.clone();
    let node_changes = async move {
        let nodes: Api<Node> = Api::all(nodes_state.ctx.client.clone());
        let stream = reflector::reflector(
            writer,
            watcher(nodes, watcher::Config::default()).default_backoff(),
        )
        .ready_chunks(1024);
        futures_util::pin_mut!(stream);
        // The store holds every Node only once the first list is complete.
        let mut listed = false;
        let mut retry = false;
        let mut shutdown_rx = shutdown.clone();
        loop {
            tokio::select! {
                _ = async { let _ = shutdown_rx.wait_for(|s| *s).await; } => return,
                batch = stream.next() => {
                    let Some(batch) = batch else {
                        return;
                    };
                    listed |= batch
                        .iter()
                        .any(|e| matches!(e, Ok(watcher::Event::InitDone)));
                    if !listed {
                        continue;
                    }
                    let eligible = eligible_in(&reader);
                    // The first complete list establishes the set; later ones update.
                    {
                        let mut last = nodes_state.last_nodes.lock().expect("node set lock");
                        if last.is_none() {
                            *last = Some(node_set(&eligible));
                            continue;
                        }
                    }
                    retry = sync_nodes(&nodes_state, eligible, false).await;
                }
                more = async { tick(Duration::from_secs(5), &shutdown).await }, if retry => {
                    if !more {
                        return;
                    }
                    retry = sync_nodes(&nodes_state, eligible_in(&reader), true).await;
                }
            }
        }
    };
    tokio::join!(controller, node_changes);
}

async fn reconcile(svc: Arc<Service>, state: Arc<State>) -> Result<Action, ServiceSyncError> {
    let key = key(&svc);
    let print = fingerprint(&svc);
    // Only changes upstream cares about sync (not our own finalizer and status
    // writes); after a failure, the next attempt waits for its time (backoff or the
    // cloud's Retry-After) unless the Service changed.
    let last = state.seen.lock().expect("seen lock").get(&key).copied();
    if let Some(seen) = last
        && seen.fingerprint == print
    {
        if seen.ok {
            return Ok(Action::await_change());
        }
        if let Some(at) = seen.retry_at
            && let Some(wait) = at.checked_duration_since(Instant::now())
            && !wait.is_zero()
        {
            return Ok(Action::requeue(wait));
        }
    }
    let started = Instant::now();
    let result = sync_service(&state, &svc).await;
    state.ctx.metrics.record(NAME, started, result.is_ok());
    {
        let mut seen = state.seen.lock().expect("seen lock");
        if result.is_ok() && svc.metadata.deletion_timestamp.is_some() {
            // Cleaned up: the Service goes away.
            seen.remove(&key);
        } else {
            seen.insert(
                key.clone(),
                Seen {
                    fingerprint: print,
                    ok: result.is_ok(),
                    retry_at: None,
                },
            );
        }
    }
    result?;
    state.backoff.succeeded(&key);
    Ok(Action::await_change())
}

fn key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

fn error_policy(svc: Arc<Service>, err: &ServiceSyncError, state: Arc<State>) -> Action {
    let retry_after = match err {
        ServiceSyncError::Cloud(e) => e.retry_after(),
        ServiceSyncError::Kube(_) | ServiceSyncError::NodeCacheStopped => None,
    };
    let delay = state.backoff.failed(&key(&svc), retry_after);
    if let Some(seen) = state.seen.lock().expect("seen lock").get_mut(&key(&svc)) {
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
}
