//! The controllers, with upstream `k8s.io/cloud-provider` semantics:
//!
//! - [`node`]: cloud-node — initializes Nodes tainted
//!   `node.cloudprovider.kubernetes.io/uninitialized`, then keeps their addresses current;
//! - [`node_lifecycle`]: cloud-node-lifecycle — deletes Nodes whose instance is gone and
//!   taints shut-down ones;
//! - [`service`]: service — load balancers for Services of type LoadBalancer;
//! - [`route`]: route — cloud routes for Node pod CIDRs.
//!
//! [`ALL`] is the table of controllers: each one's name (as in `--controllers`, the
//! metrics and the health checks), what it needs from the provider, and how it runs.
//! Flags, start-up and hot swap all read it. Each controller gets a [`Context`]: the
//! Kubernetes client, the cloud (through the seam in [`crate::cloud`]), an event
//! recorder, the metrics, and the one view of Nodes they all read
//! ([`node_informer`]).

pub mod backoff;
pub mod batcher;
pub mod node;
pub mod node_informer;
pub mod node_lifecycle;
pub mod route;
pub mod service;
#[cfg(test)]
pub mod test_cluster;

use std::sync::Arc;
use std::time::Duration;

use crate::events::{Event, EventType, Recorder};
use futures_util::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::Resource;

use crate::cloud::{Requirement, SharedCloud};
use crate::metrics::ControllerMetrics;

/// One controller of the table.
#[derive(Debug)]
pub struct Controller {
    /// Upstream's name: in `--controllers`, metrics, health checks and logs.
    pub name: &'static str,
    /// What the provider must export for it to run, and keep exporting across hot swaps.
    pub needs: Requirement,
    /// Runs it until the shutdown signal turns true.
    pub run: fn(Context, &Settings, tokio::sync::watch::Receiver<bool>) -> BoxFuture<'static, ()>,
}

/// The controllers, in upstream's order.
pub const ALL: [Controller; 4] = [
    Controller {
        name: node::NAME,
        needs: Requirement::Instances,
        run: |ctx, settings, stop| {
            Box::pin(node::run(
                ctx,
                node::Options {
                    status_update_frequency: settings.node_status_update_frequency,
                    workers: settings.concurrent_node_syncs,
                    batch_size: settings.instances_batch_size,
                    batch_window: settings.node_init_batch_window,
                },
                stop,
            ))
        },
    },
    Controller {
        name: node_lifecycle::NAME,
        needs: Requirement::Instances,
        run: |ctx, settings, stop| {
            Box::pin(node_lifecycle::run(
                ctx,
                node_lifecycle::Options {
                    monitor_period: settings.node_monitor_period,
                    batch_size: settings.instances_batch_size,
                    guard: settings.node_deletion_guard.clone(),
                },
                stop,
            ))
        },
    },
    Controller {
        name: service::NAME,
        needs: Requirement::LoadBalancer,
        run: |ctx, settings, stop| {
            Box::pin(service::run(
                ctx,
                service::Options {
                    cluster_name: settings.cluster_name.clone(),
                    workers: settings.concurrent_service_syncs,
                },
                stop,
            ))
        },
    },
    Controller {
        name: route::NAME,
        needs: Requirement::Routes,
        run: |ctx, settings, stop| {
            Box::pin(route::run(
                ctx,
                route::Options {
                    cluster_name: settings.cluster_name.clone(),
                    cluster_cidrs: settings.cluster_cidrs.clone(),
                    period: settings.route_reconciliation_period,
                    watch_based: settings.watch_based_routes,
                },
                stop,
            ))
        },
    },
];

/// The controller named `name`.
pub fn find(name: &str) -> Option<&'static Controller> {
    ALL.iter().find(|c| c.name == name)
}

/// What the controllers take from the flags (upstream's names).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--cluster-name`.
    pub cluster_name: String,
    /// `--cluster-cidr`, at most two (dual stack).
    pub cluster_cidrs: Vec<route::Cidr>,
    /// `--node-status-update-frequency`.
    pub node_status_update_frequency: Duration,
    /// `--node-monitor-period`.
    pub node_monitor_period: Duration,
    /// `--route-reconciliation-period`.
    pub route_reconciliation_period: Duration,
    /// `--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true`.
    pub watch_based_routes: bool,
    /// `--concurrent-node-syncs`.
    pub concurrent_node_syncs: u16,
    /// `--concurrent-service-syncs`.
    pub concurrent_service_syncs: u16,
    /// `--instances-batch-size`.
    pub instances_batch_size: usize,
    /// `--node-init-batch-window`.
    pub node_init_batch_window: Duration,
    /// `--node-deletion-*` (with `--node-monitor-period` as the spacing).
    pub node_deletion_guard: node_lifecycle::guard::GuardOptions,
}

/// `node.cloudprovider.kubernetes.io/uninitialized`: kubelet's taint with
/// `--cloud-provider=external`, removed by the cloud-node controller.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// `node.cloudprovider.kubernetes.io/shutdown`: set on Nodes whose instance is stopped.
pub const TAINT_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// What every controller needs.
#[derive(Clone)]
pub struct Context {
    /// The Kubernetes client.
    pub client: kube::Client,
    /// The cloud; take one per reconcile with `current()`.
    pub cloud: SharedCloud,
    /// The controllers' metrics.
    pub metrics: Arc<ControllerMetrics>,
    /// This replica's identity, the `reportingInstance` of events.
    pub instance: String,
    /// The Nodes, shared by every controller.
    pub nodes: node_informer::NodeInformer,
    /// The service controller's Services, for the providers' `services` import.
    pub services: service::ServiceView,
}

impl Context {
    /// A recorder publishing events as `controller`.
    pub fn recorder(&self, controller: &str) -> Recorder {
        Recorder::new(self.client.clone(), controller, &self.instance)
    }
}

/// Publishes an event about a Node, logging (not failing) when that is impossible.
pub async fn node_event(
    recorder: &Recorder,
    node: &Node,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &node.object_ref(&())).await {
        tracing::warn!(node = node.metadata.name.as_deref().unwrap_or(""), reason, error = %err, "cannot record event");
    }
}

/// When `err` is a provider answer refused at the seam: counts it
/// (`wasm_ccm_provider_answers_refused_total`) and records a Warning event
/// `InvalidCloudAnswer` on the Node.
pub async fn refused_answer(
    ctx: &Context,
    recorder: &Recorder,
    controller: &str,
    node: &Node,
    err: &crate::cloud::Error,
) {
    let Some(field) = err.invalid_answer() else {
        return;
    };
    ctx.metrics.answer_refused(controller, field);
    node_event(
        recorder,
        node,
        EventType::Warning,
        "InvalidCloudAnswer",
        format!("The cloud provider's answer was not applied: {err}"),
    )
    .await;
}

/// Whether a Node has a taint with this key.
pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// The Node's Ready condition status (`True`, `False`, `Unknown`), if any.
pub fn ready_status(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// Shared by periodic loops: sleep that ends early on shutdown.
pub async fn tick(period: Duration, shutdown: &tokio::sync::watch::Receiver<bool>) -> bool {
    let mut shutdown = shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(period) => true,
        _ = shutdown.wait_for(|stop| *stop) => false,
    }
}

/// A handle to stop controllers.
pub type Shutdown = Arc<tokio::sync::watch::Sender<bool>>;
