//! Prometheus metrics of the host, served on `/metrics`.
//!
//! [`Metrics`] owns the registry. The provider runtime records calls, traps and egress
//! here; other subsystems register their own families with [`Metrics::register`].

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// Labels of `wasm_ccm_egress_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressLabels {
    pub provider: String,
    pub host: String,
    pub method: String,
    /// The HTTP status, or `error` when no response arrived.
    pub status: String,
}

/// Labels of `wasm_ccm_egress_denied_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeniedLabels {
    pub provider: String,
    pub host: String,
    pub reason: String,
}

/// Labels of the egress latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub provider: String,
    pub host: String,
}

/// Labels of `wasm_ccm_provider_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub provider: String,
    pub interface: String,
    pub function: String,
    /// `ok`, `cloud_error`, `trap`, `timeout` or `unavailable`.
    pub result: String,
}

/// Labels of the provider call latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabels {
    pub provider: String,
    pub interface: String,
    pub function: String,
}

/// Labels of `wasm_ccm_provider_traps_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrapLabels {
    pub provider: String,
    pub kind: String,
}

/// Labels carrying only the provider name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    pub provider: String,
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~100 s
    Histogram::new(exponential_buckets(0.0001, 2.5, 16))
}

/// The families recorded by the provider runtime.
pub struct ProviderMetrics {
    pub egress_requests: Family<EgressLabels, Counter>,
    pub egress_denied: Family<DeniedLabels, Counter>,
    pub egress_duration: Family<HostLabels, Histogram, fn() -> Histogram>,
    pub calls: Family<CallLabels, Counter>,
    pub call_duration: Family<FunctionLabels, Histogram, fn() -> Histogram>,
    pub traps: Family<TrapLabels, Counter>,
    pub guest_log_dropped: Family<ProviderLabels, Counter>,
}

/// Labels of the controller reconcile metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels carrying only the controller name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

/// The families recorded by the controllers.
pub struct ControllerMetrics {
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Upstream's `initial_node_sync_delay_seconds`: Node creation to initialization.
    pub initial_node_sync_delay: Histogram,
    /// Objects waiting for a retry after a failed reconcile (the retry queue's depth).
    pub retries_pending: Family<ControllerLabels, Gauge>,
}

impl ControllerMetrics {
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

/// The host's metrics registry. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    provider: Arc<ProviderMetrics>,
    controllers: Arc<ControllerMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// A registry with the provider runtime's families registered under `wasm_ccm_`.
    pub fn new() -> Self {
        let provider = ProviderMetrics {
            egress_requests: Family::default(),
            egress_denied: Family::default(),
            egress_duration: Family::new_with_constructor(latency_histogram),
            calls: Family::default(),
            call_duration: Family::new_with_constructor(latency_histogram),
            traps: Family::default(),
            guest_log_dropped: Family::default(),
        };
        let mut registry = Registry::with_prefix("wasm_ccm");
        registry.register(
            "egress_requests",
            "Outbound HTTP requests made for providers, by destination and status",
            provider.egress_requests.clone(),
        );
        registry.register(
            "egress_denied",
            "Outbound HTTP requests refused by the provider policy, by reason",
            provider.egress_denied.clone(),
        );
        registry.register(
            "egress_request_duration_seconds",
            "Latency of outbound HTTP requests made for providers",
            provider.egress_duration.clone(),
        );
        registry.register(
            "provider_calls",
            "Calls into providers, by interface, function and result",
            provider.calls.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Latency of calls into providers, including the HTTP requests they make",
            provider.call_duration.clone(),
        );
        registry.register(
            "provider_traps",
            "Provider instances discarded after a trap, by kind",
            provider.traps.clone(),
        );
        registry.register(
            "provider_log_records_dropped",
            "Provider log and stdout/stderr records dropped by the rate limit",
            provider.guest_log_dropped.clone(),
        );
        let controllers = ControllerMetrics {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(latency_histogram),
            initial_node_sync_delay: Histogram::new(exponential_buckets(0.1, 2.0, 16)),
            retries_pending: Family::default(),
        };
        registry.register(
            "controller_reconciles",
            "Reconciles by controller and result",
            controllers.reconciles.clone(),
        );
        registry.register(
            "controller_reconcile_duration_seconds",
            "Time spent in one reconcile, by controller",
            controllers.reconcile_duration.clone(),
        );
        registry.register(
            "node_controller_initial_node_sync_delay_seconds",
            "Delay between a Node's creation and its initialization by the cloud-node controller",
            controllers.initial_node_sync_delay.clone(),
        );
        registry.register(
            "controller_retries_pending",
            "Objects whose last reconcile failed, waiting for their retry (the depth of the controller's retry queue)",
            controllers.retries_pending.clone(),
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
            provider: Arc::new(provider),
            controllers: Arc::new(controllers),
        }
    }

    /// The controllers' families.
    pub fn controllers(&self) -> &Arc<ControllerMetrics> {
        &self.controllers
    }

    /// The provider runtime's families.
    pub fn provider(&self) -> &Arc<ProviderMetrics> {
        &self.provider
    }

    /// Registers another metric under the `wasm_ccm_` prefix.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry
            .lock()
            .expect("metrics registry lock")
            .register(name, help, metric);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(
            &mut out,
            &self.registry.lock().expect("metrics registry lock"),
        )
        .expect("encoding metrics into a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_exposed_with_the_prefix() {
        let metrics = Metrics::new();
        metrics
            .provider()
            .traps
            .get_or_create(&TrapLabels {
                provider: "p".into(),
                kind: "deadline".into(),
            })
            .inc();
        let text = metrics.encode();
        assert!(
            text.contains("wasm_ccm_provider_traps_total{provider=\"p\",kind=\"deadline\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# HELP wasm_ccm_provider_traps Provider instances"),
            "{text}"
        );
    }
}
