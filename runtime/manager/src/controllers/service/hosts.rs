//! The node sync: when the eligible Nodes change, every load balancer whose last node
//! set differs is updated (upstream's `syncNodes` and `lockedUpdateLoadBalancerHosts`).

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast;

use super::predicates::{eligible, should_sync_updated_node, wants_load_balancer};
use super::state::State;
use super::{EventType, NAME, event, key};
use crate::cloud::{Cloud, Requirement};
use crate::controllers::Context;
use crate::controllers::node_informer::NodeEvent;

/// Node names listed in an event at most (upstream's `maxNodeNamesToLog`).
const MAX_NODE_NAMES: usize = 20;

/// The eligible Nodes now.
pub(super) fn eligible_nodes(ctx: &Context) -> Vec<Arc<Node>> {
    ctx.nodes
        .list()
        .into_iter()
        .filter(|n| eligible(n))
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
pub(super) async fn sync_nodes(state: &Arc<State>) {
    if !state.ctx.cloud.current().meets(Requirement::LoadBalancer) {
        return;
    }
    let nodes = eligible_nodes(&state.ctx);
    let set = state.node_set(&nodes);
    let services: Vec<Arc<Service>> = state
        .synced_states()
        .into_iter()
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
                // The version serving now, taken under the Service's lock as its own
                // sync takes it: an update never lands after a newer version's sync,
                // and the check after a failed update asks the same version.
                let lb = state.ctx.cloud.current();
                if !lb.meets(Requirement::LoadBalancer) {
                    return 0;
                }
                // Stored before trying: a failure is retried by a full sync.
                let previous = state.set_nodes(&key, set.clone());
                if previous.as_ref() == Some(&set) {
                    return 0;
                }
                if update_hosts(&state, lb.as_ref(), &svc, &nodes).await {
                    return 0;
                }
                state.ctx.metrics.upstream.nodesync_error.inc();
                // Upstream's serviceQueue.Add: the Service's own sync, with its backoff.
                state.mark_failed(&key);
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
    let cached = state.is_synced(key);
    (cached
        && current.metadata.uid == seen.metadata.uid
        && current.metadata.deletion_timestamp.is_none()
        && wants_load_balancer(&current))
    .then_some(current)
}

/// Upstream's `lockedUpdateLoadBalancerHosts`: implemented elsewhere is success; on an
/// error, a load balancer that no longer exists is success too. Returns success.
async fn update_hosts(state: &State, lb: &dyn Cloud, svc: &Service, nodes: &[Arc<Node>]) -> bool {
    let ctx = &state.ctx;
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

/// Node changes that matter to load balancers (added, deleted, or
/// [`should_sync_updated_node`]), coalesced, start a node sync.
pub(super) async fn watch_nodes(
    state: Arc<State>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
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
        if sync {
            sync_nodes(&state).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::fake::{Calls, Recording, Switch};
    use kube::runtime::watcher;

    /// A provider swapped right after a failed host update: the check whether that load
    /// balancer still exists is asked of the same version, the Service goes back through
    /// a full sync, and the next Service's update is asked of the version serving when
    /// its turn (its lock) comes, as its own sync would.
    #[tokio::test]
    async fn each_host_update_stays_on_one_provider_version() {
        let calls = Calls::default();
        let v2: Arc<dyn Cloud> = Arc::new(Recording::new(2, &calls));
        let switch = Switch::new(v2.clone());
        let swap = switch.clone();
        switch.set(Arc::new(
            Recording::new(1, &calls)
                .failing("update")
                .after("update", move || swap.set(v2)),
        ));
        let (state, mut writer, mut queued) = State::for_test(switch.shared());
        for name in ["web", "api"] {
            let svc: Service = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080}]},
            }))
            .unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(svc.clone()));
            state.synced_ok(Arc::new(svc));
        }
        let state = Arc::new(state);
        sync_nodes(&state).await;
        assert_eq!(calls.taken(), [(1, "update"), (1, "get"), (2, "update")]);
        let failed = queued.try_recv().map(|s| s.name_any()).expect("a resync");
        assert!(
            queued.try_recv().is_err(),
            "only the failed Service is synced again"
        );
        assert!(!state.synced(&format!("default/{failed}")).unwrap().ok);
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
