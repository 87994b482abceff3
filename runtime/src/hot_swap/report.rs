//! How reloads are made visible: metrics, and Kubernetes Events on the controller
//! manager's own Pod.
//!
//! Events go to the Pod named by the `POD_NAME` and `POD_NAMESPACE` environment
//! variables (set from the downward API in `deploy/`), so
//! `kubectl describe pod -n kube-system wasm-ccm-...` and
//! `kubectl get events --field-selector involvedObject.kind=Pod` show them. Every
//! replica reloads (a standby must be ready to lead), and each reports on its own Pod.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;

/// Event reason: a new provider version is serving.
pub const REASON_RELOADED: &str = "ProviderReloaded";
/// Event reason: a new version was refused; the previous one keeps serving.
pub const REASON_RELOAD_FAILED: &str = "ProviderReloadFailed";
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
    events: Option<(Recorder, ObjectReference)>,
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
            let recorder = Recorder::new(
                client,
                Reporter {
                    controller: "wasm-ccm".into(),
                    instance: pod.name.clone(),
                },
            );
            (recorder, pod)
        });
        Self {
            reloads,
            info,
            events,
        }
    }

    /// Marks `sha256` as the serving version of `provider` (and `previous` as not).
    pub fn serving(&self, provider: &str, sha256: &str, previous: Option<&str>) {
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
    pub fn event(&self, type_: EventType, reason: &'static str, note: String) {
        let Some((recorder, pod)) = self.events.clone() else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(note)),
            action: "ReloadProvider".into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(err) = recorder.publish(&event, &pod).await {
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
