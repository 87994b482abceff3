//! Prometheus metrics of the host, served on `/metrics`.
//!
//! [`Metrics`] owns the registry. The provider runtime records calls, traps and egress
//! here; other subsystems (the controller manager's controllers, hot swap, the compile
//! cache) register their own families with [`Metrics::register`].

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
    /// The provider's name.
    pub provider: String,
    /// The allowlist entry the destination matched.
    pub host: String,
    /// The HTTP method.
    pub method: String,
    /// The HTTP status, or `error` when no response arrived.
    pub status: String,
}

/// Labels of `wasm_ccm_egress_denied_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeniedLabels {
    /// The provider's name.
    pub provider: String,
    /// Always empty: refused destinations are chosen by the guest, so they are not
    /// labels (the log names them).
    pub host: String,
    /// Why the request was refused.
    pub reason: String,
}

/// Labels of `wasm_ccm_credential_logins_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoginLabels {
    /// The provider's name.
    pub provider: String,
    /// The credential kind that logged in: its key in the policy.
    pub kind: String,
    /// `success` or `failure`.
    pub result: String,
}

/// Labels of the egress latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    /// The provider's name.
    pub provider: String,
    /// The allowlist entry the destination matched.
    pub host: String,
}

/// Labels of `wasm_ccm_provider_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The provider's name.
    pub provider: String,
    /// The WIT interface.
    pub interface: String,
    /// The WIT function.
    pub function: String,
    /// `ok`, `cloud_error`, `trap`, `timeout` or `unavailable`.
    pub result: String,
}

/// Labels of the provider call latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabels {
    /// The provider's name.
    pub provider: String,
    /// The WIT interface.
    pub interface: String,
    /// The WIT function.
    pub function: String,
}

/// Labels of `wasm_ccm_provider_traps_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrapLabels {
    /// The provider's name.
    pub provider: String,
    /// The kind of trap (the provider module's `TrapKind`) as a label.
    pub kind: String,
}

/// Labels of `wasm_ccm_provider_cache_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// The provider's name.
    pub provider: String,
    /// `hit`, `miss`, `set` or `evicted`.
    pub result: String,
}

/// Labels of `wasm_ccm_provider_events_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// The provider's name.
    pub provider: String,
    /// `Normal` or `Warning`.
    pub r#type: String,
    /// `recorded`, `rate_limited`, `invalid_reason` or `no_object`.
    pub result: String,
}

/// Labels carrying only the provider name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// The provider's name.
    pub provider: String,
}

/// The `provider` label of a provider version's metrics and logs: `candidate` while
/// hot swap is still deciding on a new version, the provider's name once it serves.
/// Shared by the version's pool, instances and egress, so accepting a candidate
/// relabels all of them at once.
#[derive(Debug)]
pub struct ProviderLabel(std::sync::RwLock<Arc<str>>);

impl ProviderLabel {
    /// The label of a version not yet accepted.
    pub const CANDIDATE: &'static str = "candidate";

    /// A label reading `value`.
    pub fn new(value: &str) -> Arc<Self> {
        Arc::new(Self(std::sync::RwLock::new(value.into())))
    }

    /// The value now.
    pub fn get(&self) -> Arc<str> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Changes the value for every later metric and log line.
    pub fn set(&self, value: &str) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = value.into();
    }
}

impl std::fmt::Display for ProviderLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.get())
    }
}

/// The latency histogram of every `*_duration_seconds` family: 100 µs to ~100 s.
pub fn latency_histogram() -> Histogram {
    // 100 µs .. ~100 s
    Histogram::new(exponential_buckets(0.0001, 2.5, 16))
}

/// The families recorded by the provider runtime.
pub struct ProviderMetrics {
    /// `wasm_ccm_egress_requests_total`.
    pub egress_requests: Family<EgressLabels, Counter>,
    /// `wasm_ccm_egress_denied_total`.
    pub egress_denied: Family<DeniedLabels, Counter>,
    /// `wasm_ccm_egress_request_duration_seconds`.
    pub egress_duration: Family<HostLabels, Histogram, fn() -> Histogram>,
    /// `wasm_ccm_provider_calls_total`.
    pub calls: Family<CallLabels, Counter>,
    /// `wasm_ccm_provider_call_duration_seconds`.
    pub call_duration: Family<FunctionLabels, Histogram, fn() -> Histogram>,
    /// `wasm_ccm_provider_traps_total`.
    pub traps: Family<TrapLabels, Counter>,
    /// `wasm_ccm_provider_log_records_dropped_total`.
    pub guest_log_dropped: Family<ProviderLabels, Counter>,
    /// `wasm_ccm_provider_cache_requests_total`.
    pub cache_requests: Family<CacheLabels, Counter>,
    /// `wasm_ccm_provider_cache_bytes`.
    pub cache_bytes: Family<ProviderLabels, Gauge>,
    /// `wasm_ccm_provider_events_total`.
    pub events: Family<EventLabels, Counter>,
    /// `wasm_ccm_credential_logins_total`.
    pub credential_logins: Family<LoginLabels, Counter>,
}

impl ProviderMetrics {
    /// Creates `provider`'s counters of rare events at 0 (traps of each of
    /// `trap_kinds`, refused requests of each of `denial_reasons`, the shared cache), so
    /// they are exported before the first event and an alert's `increase()` sees the
    /// first one. The label values come from the modules that own them
    /// ([`crate::provider::initialize_metrics`] passes them).
    pub fn initialize(&self, provider: &str, trap_kinds: &[&str], denial_reasons: &[&str]) {
        for kind in trap_kinds {
            let _ = self.traps.get_or_create(&TrapLabels {
                provider: provider.into(),
                kind: (*kind).into(),
            });
        }
        for reason in denial_reasons {
            let _ = self.egress_denied.get_or_create(&DeniedLabels {
                provider: provider.into(),
                host: String::new(),
                reason: (*reason).into(),
            });
        }
        for result in ["hit", "miss", "set", "evicted"] {
            let _ = self.cache_requests.get_or_create(&CacheLabels {
                provider: provider.into(),
                result: result.into(),
            });
        }
        let _ = self.cache_bytes.get_or_create(&ProviderLabels {
            provider: provider.into(),
        });
    }
}

/// The host's metrics registry. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    /// Metrics under upstream `k8s.io/cloud-provider`'s own names (no prefix), so
    /// dashboards and alerts written for it keep working.
    upstream: Arc<Mutex<Registry>>,
    provider: Arc<ProviderMetrics>,
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
            cache_requests: Family::default(),
            cache_bytes: Family::default(),
            events: Family::default(),
            credential_logins: Family::default(),
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
        registry.register(
            "provider_cache_requests",
            "Shared provider cache operations, by result (hit, miss, set, evicted)",
            provider.cache_requests.clone(),
        );
        registry.register(
            "provider_cache_bytes",
            "Bytes held in the shared cache of the provider version serving",
            provider.cache_bytes.clone(),
        );
        registry.register(
            "provider_events",
            "Kubernetes Events providers asked to record, by type and result",
            provider.events.clone(),
        );
        registry.register(
            "credential_logins",
            "Logins the host made for providers' credentials (tokens of the kinds that log in), by result",
            provider.credential_logins.clone(),
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
            upstream: Arc::new(Mutex::new(Registry::default())),
            provider: Arc::new(provider),
        }
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

    /// Registers a metric under upstream `k8s.io/cloud-provider`'s name as is (e.g.
    /// `service_controller_loadbalancer_sync`, served with `_total`).
    pub fn register_upstream(&self, name: &str, help: &str, metric: impl Metric) {
        self.upstream
            .lock()
            .expect("metrics registry lock")
            .register(name, help, metric);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        encode_registry(
            &mut out,
            &self.registry.lock().expect("metrics registry lock"),
        )
        .and_then(|()| {
            encode_registry(
                &mut out,
                &self.upstream.lock().expect("metrics registry lock"),
            )
        })
        .and_then(|()| encode_eof(&mut out))
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
