//! A Service's sync (upstream's `syncLoadBalancerIfNeeded` and its callers): ensure
//! or delete its load balancer, the finalizer and the status; the cleanup after a
//! Service deleted without the finalizer. Each reconcile takes the provider once and
//! makes all its calls on that version.

use std::sync::Arc;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Service};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::hosts::eligible_nodes;
use super::predicates::{has_finalizer, needs_cleanup, needs_update, wants_load_balancer};
use super::state::{Cached, State};
use super::{EventType, FINALIZER, NAME, ServiceSyncError, cloud_step, event, key, kube_step};
use crate::cloud::{self, Cloud, Requirement};
use crate::controllers::tick;

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
async fn sync_service(
    state: &State,
    lb: &dyn Cloud,
    svc: &Service,
) -> Result<Operation, ServiceSyncError> {
    let ctx = &state.ctx;
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
            delete_load_balancer(state, lb, svc)
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
    state.set_nodes(&key(&svc), state.node_set(&nodes));
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
async fn delete_load_balancer(
    state: &State,
    lb: &dyn Cloud,
    svc: &Service,
) -> Result<(), cloud::Error> {
    event(
        state,
        svc,
        EventType::Normal,
        "DeletingLoadBalancer",
        "Deleting load balancer".into(),
    )
    .await;
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
async fn delete_for_gone_service(
    state: &State,
    lb: &dyn Cloud,
    svc: &Service,
) -> Result<(), ServiceSyncError> {
    if !wants_load_balancer(svc) {
        return Ok(());
    }
    if let Err(err) = delete_load_balancer(state, lb, svc).await {
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

/// Upstream's `processServiceDeletion`: a Service gone from the API server whose last
/// synced state wanted a load balancer has it deleted, retried with backoff until it is
/// gone, the Service reappears under the same name (its sync takes over), or shutdown.
pub(super) async fn clean_up_gone(
    state: Arc<State>,
    svc: Arc<Service>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let key = key(&svc);
    loop {
        let lock = state.lock_for(&key);
        let guard = lock.lock().await;
        let cached = state.synced(&key);
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
        let started = std::time::Instant::now();
        let lb = state.ctx.cloud.current();
        let result = delete_for_gone_service(&state, lb.as_ref(), &cached.state).await;
        state.ctx.metrics.record(NAME, started, result.is_ok());
        let err = match result {
            Ok(()) => {
                // Forgotten while still holding the lock: a Service made again under
                // the name waits for it, and its first sync is not wiped.
                state.forget(&key);
                state.backoff.succeeded(&key);
                return;
            }
            Err(err) => err,
        };
        drop(guard);
        let delay = state.backoff.failed(&key, err.retry_after());
        tracing::warn!(service = %key, error = %err, retry_in = ?delay, "error deleting the load balancer of a deleted service");
        if !tick(delay, &shutdown).await {
            return;
        }
    }
}

pub(super) async fn reconcile(
    svc: Arc<Service>,
    state: Arc<State>,
) -> Result<Action, ServiceSyncError> {
    let key = key(&svc);
    let lock = state.lock_for(&key);
    let _guard = lock.lock().await;
    // One provider version for the whole reconcile: a hot swap between two of its calls
    // (a get and a delete, say) does not split them.
    let lb = state.ctx.cloud.current();
    if !lb.meets(Requirement::LoadBalancer) {
        return Ok(Action::await_change());
    }
    let mut previous = state.synced(&key);
    // Deleted and re-created under the same name without the finalizer: the old
    // Service's load balancer goes first (upstream's processServiceCreateOrUpdate).
    if let Some(old) = &previous
        && old.state.metadata.uid != svc.metadata.uid
    {
        delete_for_gone_service(&state, lb.as_ref(), &old.state).await?;
        state.replaced(&key);
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
    let started = std::time::Instant::now();
    let result = sync_service(&state, lb.as_ref(), &svc).await;
    state.ctx.metrics.record(NAME, started, result.is_ok());
    match &result {
        // Upstream deletes the cache entry only once the load balancer is deleted.
        Ok(Operation::Delete) => state.deleted(&key),
        Ok(Operation::Ensure) | Err(_) => {
            state.record(
                &key,
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
        // The provider asked to be called again (a load balancer still provisioning, a
        // throttled cloud, a call's time used up): not a failure, as occm waiting inside
        // one call shows none.
        let (kind, reason, message) = match err.retry_after() {
            Some(_) => (
                EventType::Normal,
                "SyncLoadBalancerPending",
                format!("Load balancer not ready yet: {err}"),
            ),
            None => (
                EventType::Warning,
                "SyncLoadBalancerFailed",
                format!("Error syncing load balancer: {err}"),
            ),
        };
        event(&state, &svc, kind, reason, message).await;
    }
    result?;
    state.backoff.succeeded(&key);
    Ok(Action::await_change())
}

pub(super) fn error_policy(svc: Arc<Service>, err: &ServiceSyncError, state: Arc<State>) -> Action {
    let delay = state.backoff.failed(&key(&svc), err.retry_after());
    state.set_retry_at(&key(&svc), Instant::now() + delay);
    tracing::warn!(service = %key(&svc), error = %err, retry_in = ?delay, "error syncing load balancer");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::fake::{Calls, Recording, Switch};

    fn service(type_: &str, finalized: bool) -> Service {
        let mut svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
            "spec": {"type": type_, "ports": [{"port": 80, "nodePort": 30080}]},
        }))
        .unwrap();
        if finalized {
            svc.metadata.finalizers = Some(vec![FINALIZER.into()]);
        }
        svc
    }

    /// A state in which `default/web` was synced with a load balancer.
    fn synced_web(switch: &Switch) -> Arc<State> {
        let (state, _writer, _queued) = State::for_test(switch.shared());
        state.synced_ok(Arc::new(service("LoadBalancer", true)));
        Arc::new(state)
    }

    /// A provider swapped between the get and the delete of one cleanup: both calls
    /// are made on the version the reconcile started with.
    #[tokio::test]
    async fn a_cleanup_stays_on_one_provider_version() {
        let calls = Calls::default();
        let v2: Arc<dyn Cloud> = Arc::new(Recording::new(2, &calls));
        let switch = Switch::new(v2.clone());
        let swap = switch.clone();
        switch.set(Arc::new(
            Recording::new(1, &calls).after("get", move || swap.set(v2)),
        ));
        let state = synced_web(&switch);
        // The Service no longer wants a load balancer (no finalizer, no status: no
        // write to the API server is needed).
        reconcile(Arc::new(service("ClusterIP", false)), state.clone())
            .await
            .unwrap();
        assert_eq!(calls.taken(), [(1, "get"), (1, "delete")]);
        assert!(!state.is_synced("default/web"));
    }

    /// Upstream's TestSyncLoadBalancerIfNeeded, "service that needs cleanup but LB does
    /// not exist": the get says it is gone, so nothing is deleted.
    #[tokio::test]
    async fn a_cleanup_of_a_load_balancer_already_gone_deletes_nothing() {
        let calls = Calls::default();
        let switch = Switch::new(Arc::new(Recording::new(1, &calls).without_load_balancer()));
        let state = synced_web(&switch);
        reconcile(Arc::new(service("ClusterIP", false)), state.clone())
            .await
            .unwrap();
        assert_eq!(calls.taken(), [(1, "get")]);
    }

    /// Upstream's TestProcessServiceDeletion, the case of a cloud that fails: the error
    /// is the cloud's, named by its step, and the next attempt is asked of the provider
    /// serving then.
    #[tokio::test]
    async fn a_failed_cleanup_of_a_gone_service_is_retried_on_the_serving_version() {
        let calls = Calls::default();
        let switch = Switch::new(Arc::new(Recording::new(1, &calls).failing("delete")));
        let (state, _writer, _queued) = State::for_test(switch.shared());
        let gone = service("LoadBalancer", false);
        let err = delete_for_gone_service(&state, switch.shared().current().as_ref(), &gone)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ServiceSyncError::Cloud {
                    step: "delete load balancer",
                    ..
                }
            ),
            "{err}"
        );
        switch.set(Arc::new(Recording::new(2, &calls)));
        delete_for_gone_service(&state, switch.shared().current().as_ref(), &gone)
            .await
            .unwrap();
        assert_eq!(calls.taken(), [(1, "delete"), (2, "delete")]);
    }
}
