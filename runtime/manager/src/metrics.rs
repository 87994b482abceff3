//! The controllers' metrics, registered in the host's registry
//! ([`wasm_ccm_host::metrics::Metrics`], which `/metrics` serves).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use wasm_ccm_host::metrics::{Metrics, latency_histogram};

/// Labels of the controller reconcile metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The controller's name.
    pub controller: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels carrying only the controller name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller's name.
    pub controller: String,
}

/// The families recorded by the controllers.
pub struct ControllerMetrics {
    /// `wasm_ccm_controller_reconciles_total{controller,result}`.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// `wasm_ccm_controller_reconcile_duration_seconds{controller}`.
    pub reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Upstream's `initial_node_sync_delay_seconds`: Node creation to initialization.
    pub initial_node_sync_delay: Histogram,
    /// Objects waiting for a retry after a failed reconcile (the retry queue's depth).
    pub retries_pending: Family<ControllerLabels, Gauge>,
}

impl std::fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControllerMetrics")
    }
}

impl ControllerMetrics {
    /// Creates the families and registers them in `metrics`.
    pub fn register(metrics: &Metrics) -> Self {
        let this = Self {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(latency_histogram),
            initial_node_sync_delay: Histogram::new(exponential_buckets(0.1, 2.0, 16)),
            retries_pending: Family::default(),
        };
        metrics.register(
            "controller_reconciles",
            "Reconciles by controller and result",
            this.reconciles.clone(),
        );
        metrics.register(
            "controller_reconcile_duration_seconds",
            "Time spent in one reconcile, by controller",
            this.reconcile_duration.clone(),
        );
        metrics.register(
            "node_controller_initial_node_sync_delay_seconds",
            "Delay between a Node's creation and its initialization by the cloud-node controller",
            this.initial_node_sync_delay.clone(),
        );
        metrics.register(
            "controller_retries_pending",
            "Objects whose last reconcile failed, waiting for their retry (the depth of the controller's retry queue)",
            this.retries_pending.clone(),
        );
        this
    }

    /// The retry-queue gauge of `controller`.
    pub fn retries_pending(&self, controller: &str) -> Gauge {
        self.retries_pending
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .clone()
    }

    /// Counts one reconcile of `controller` that started at `started`.
    pub fn record(&self, controller: &str, started: std::time::Instant, ok: bool) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}
