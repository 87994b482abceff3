//! How reloads are made visible: metrics, and Kubernetes Events on the controller
//! manager's own Pod.
//!
//! Events go to the Pod named by the `POD_NAME` and `POD_NAMESPACE` environment
//! variables (set from the downward API in `deploy/`), so
//! `kubectl describe pod -n kube-system wasm-ccm-...` and
//! `kubectl get events --field-selector involvedObject.kind=Pod` show them. Every
//! replica reloads (a standby must be ready to lead), and each reports on its own Pod.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::events::EventType;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::LoadError;

/// `reportingController` of the events.
pub const REPORTING_CONTROLLER: &str = "wasm-ccm";
/// Event reason: a new provider version is serving.
pub const REASON_RELOADED: &str = "ProviderReloaded";
/// Event reason: a new version was refused; the previous one keeps serving.
pub const REASON_RELOAD_FAILED: &str = "ProviderReloadFailed";
/// Event reason: a changed policy was put in force on the serving version although
/// its new component was refused.
pub const REASON_POLICY_APPLIED: &str = "ProviderPolicyApplied";
/// Event reason: a new version shadows the serving one before it may serve.
pub const REASON_CANARY: &str = "ProviderCanaryStarted";
/// Event reason: the component file disappeared; the loaded version keeps serving.
pub const REASON_MISSING: &str = "ProviderFileMissing";

/// Labels of `wasm_ccm_provider_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    provider: String,
    /// `success`, or why the version was refused (`compile`, `initialize`,
    /// `interface_dropped`, ...).
    result: String,
}

/// Labels of `wasm_ccm_provider_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    provider: String,
    sha256: String,
}

/// Where the reloader reports.
pub struct ReloadReporter {
    reloads: Family<ReloadLabels, Counter>,
    info: Family<InfoLabels, Gauge>,
    events: Option<(Api<events::v1::Event>, ObjectReference)>,
}

impl ReloadReporter {
    /// Registers the reload metrics; events are published about `pod` when given.
    pub fn new(metrics: &Metrics, events: Option<(kube::Client, ObjectReference)>) -> Self {
        let reloads = Family::<ReloadLabels, Counter>::default();
        metrics.register(
            "provider_reloads",
            "Provider hot-swap attempts, by result (success or the reason it was refused)",
            reloads.clone(),
        );
        let info = Family::<InfoLabels, Gauge>::default();
        metrics.register(
            "provider_info",
            "The provider version serving (1), by SHA-256 of its component",
            info.clone(),
        );
        let events = events.map(|(client, pod)| {
            let api = Api::namespaced(client, pod.namespace.as_deref().unwrap_or("default"));
            (api, pod)
        });
        Self {
            reloads,
            info,
            events,
        }
    }

    /// Marks `sha256` as the serving version of `provider` (and `previous` as not).
    pub fn serving(&self, provider: &str, sha256: &str, previous: Option<&str>) {
        // Every result at 0 from the first version on: exported before the first
        // reload, and an alert's increase() sees the first refusal.
        let results = [
            "success",
            "policy_applied",
            "interface_dropped",
            "untagged_cloud",
            "canary",
        ];
        for result in results
            .into_iter()
            .chain(LoadError::REASONS)
            .chain(wasm_ccm_host::provider::oci::OciError::REASONS)
            .chain(wasm_ccm_host::provider::signature::SignatureError::REASONS)
        {
            let _ = self.reloads.get_or_create(&ReloadLabels {
                provider: provider.into(),
                result: result.into(),
            });
        }
        if let Some(previous) = previous.filter(|p| *p != sha256) {
            self.info.remove(&InfoLabels {
                provider: provider.into(),
                sha256: previous.into(),
            });
        }
        self.info
            .get_or_create(&InfoLabels {
                provider: provider.into(),
                sha256: sha256.into(),
            })
            .set(1);
    }

    /// Counts one reload attempt.
    pub fn count(&self, provider: &str, result: &str) {
        self.reloads
            .get_or_create(&ReloadLabels {
                provider: provider.into(),
                result: result.into(),
            })
            .inc();
    }

    /// Publishes an event on the Pod in the background, logging (not failing) when
    /// that is impossible: an unreachable API server never delays a reload.
    ///
    /// Each call creates its own Event. (kube's `Recorder` would fold events with one
    /// reason into a series that keeps the first note, hiding which version failed
    /// and why; reload events are rare, one per distinct content, so they need no
    /// aggregation.)
    pub fn event(&self, type_: EventType, reason: &'static str, note: String) {
        let Some((api, pod)) = self.events.clone() else {
            return;
        };
        let now = Timestamp::now();
        let pod_name = pod.name.clone().unwrap_or_default();
        let event = events::v1::Event {
            metadata: ObjectMeta {
                name: Some(format!("{pod_name}.{:x}", now.as_nanosecond())),
                namespace: pod.namespace.clone(),
                ..Default::default()
            },
            action: Some("ReloadProvider".into()),
            reason: Some(reason.into()),
            note: Some(truncate(note)),
            event_time: Some(MicroTime(now)),
            regarding: Some(pod),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(pod_name),
            type_: Some(
                match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        };
        tokio::spawn(async move {
            if let Err(err) = api.create(&PostParams::default(), &event).await {
                tracing::warn!(reason, error = %err, "cannot record event");
            }
        });
    }
}

/// Event notes are limited to 1 KiB by the API server.
fn truncate(mut note: String) -> String {
    const MAX: usize = 1024;
    if note.len() > MAX {
        let mut end = MAX - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

/// The Pod this process runs in, from the downward API environment.
pub fn own_pod() -> Option<ObjectReference> {
    let name = std::env::var("POD_NAME").ok().filter(|v| !v.is_empty())?;
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|v| !v.is_empty())?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name),
        namespace: Some(namespace),
        uid: std::env::var("POD_UID").ok().filter(|v| !v.is_empty()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let note = truncate("é".repeat(1000));
        assert!(note.len() <= 1024);
        assert!(note.ends_with("..."));
        assert_eq!(truncate("short".into()), "short");
    }
}
