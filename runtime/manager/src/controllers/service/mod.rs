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

#[cfg(test)]
mod controller_tests;
mod hosts;
mod predicates;
#[cfg(test)]
mod requeue_tests;
mod state;
mod sync;
mod view;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use super::Context;
use super::backoff::Backoff;
use crate::cloud;
use crate::events::{Event, EventType};
pub use predicates::{eligible, parse_bool, wants_load_balancer};
use state::State;
pub use view::ServiceView;

/// The controller's name: in `--controllers`, metrics and logs.
pub const NAME: &str = "service";

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
pub const LABEL_EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

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

#[cfg(test)]
impl Options {
    /// `--cluster-name kubernetes`, one worker: the in-process tests' controller.
    pub fn for_test() -> Self {
        Self {
            cluster_name: "kubernetes".into(),
            workers: 1,
        }
    }
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

/// Runs the controller until `shutdown` turns true.
pub async fn run(ctx: Context, options: Options, shutdown: tokio::sync::watch::Receiver<bool>) {
    let (reader, writer) = reflector::store::<Service>();
    let (resync, triggers) = mpsc::unbounded_channel();
    let state = Arc::new(State::new(
        ctx.clone(),
        options.clone(),
        ctx.recorder("service-controller"),
        Backoff::new(Duration::from_secs(5), Duration::from_secs(300))
            .reporting(ctx.metrics.retries_pending(NAME)),
        reader.clone(),
        resync.clone(),
    ));
    let mut stop = shutdown.clone();
    let triggers = futures_util::stream::unfold(triggers, |mut rx| async move {
        rx.recv().await.map(|svc| (svc, rx))
    });
    let controller = Controller::for_shared_stream(triggers, reader)
        .with_config(controller::Config::default().concurrency(options.workers.max(1)))
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(sync::reconcile, sync::error_policy, state.clone())
        .for_each(|_| async {});
    tokio::join!(
        controller,
        watch_services(state.clone(), writer, resync, shutdown.clone()),
        hosts::watch_nodes(state, shutdown),
    );
}

/// Drops what no controller reads before a Service is cached: its managed fields (often
/// larger than the rest of it). The controller only patches Services, so nothing
/// dropped here is written back.
fn trim(svc: &mut Service) {
    svc.metadata.managed_fields = None;
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
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim);
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
        if matches!(event, watcher::Event::InitDone) {
            // Listed: providers may now read which Services hold addresses.
            state.ctx.services.fill(state.services.clone());
        }
        match event {
            watcher::Event::Apply(svc) => {
                if let Some(svc) = state.services.get(&ObjectRef::from_obj(&svc)) {
                    let _ = trigger.send(svc);
                }
            }
            watcher::Event::Delete(svc) => {
                tokio::spawn(sync::clean_up_gone(
                    state.clone(),
                    Arc::new(svc),
                    shutdown.clone(),
                ));
            }
            watcher::Event::InitDone => {
                let present: Vec<Arc<Service>> = state.services.state();
                for svc in state.synced_states() {
                    if state
                        .services
                        .get(&ObjectRef::from_obj(svc.as_ref()))
                        .is_none()
                    {
                        tokio::spawn(sync::clean_up_gone(state.clone(), svc, shutdown.clone()));
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

fn key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}
