//! The event recorder of the controllers and of the providers' events:
//! `events.k8s.io/v1` Events, a repeat of the same event (same object, type, reason and
//! message) counted in its `series` instead of a new object, as client-go's correlator
//! deduplicates identical events.
//!
//! Unlike `kube`'s `Recorder`, the message is part of what makes two events the same:
//! a `SyncLoadBalancerFailed` with a new error is a new event that shows the new error,
//! not a repeat of the first one.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{Event, EventType};

/// How long an event stays a candidate for repeats (client-go's and kube's: 6 min).
const REPEAT_WINDOW: Duration = Duration::from_secs(6 * 60);

/// What makes two events the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    type_: &'static str,
    reason: String,
    action: String,
    note: Option<String>,
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
}

/// Publishes events as one controller (`reportingController`) of one replica
/// (`reportingInstance`).
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    recent: std::sync::Mutex<HashMap<Key, K8sEvent>>,
}

impl Recorder {
    /// A recorder for `controller`, on replica `instance`.
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.into(),
            instance: instance.into(),
            recent: Default::default(),
        }
    }

    /// Records `event` about `regarding`: a new Event, or a repeat counted in the series
    /// of the same one recorded in the last 6 minutes.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let type_ = match event.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let key = Key {
            type_,
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
        };
        let window = jiff_span(REPEAT_WINDOW);
        // Not held across the request: one slow write does not hold up the others.
        let previous = {
            let mut recent = self.recent.lock().expect("events lock");
            recent.retain(|_, e| {
                let last = e
                    .series
                    .as_ref()
                    .map(|s| s.last_observed_time.0)
                    .or(e.event_time.as_ref().map(|t| t.0));
                last.is_some_and(|t| t.saturating_add(window).is_ok_and(|until| until > now))
            });
            recent.get(&key).cloned()
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let recorded = match previous {
            Some(previous) => {
                // Only the series, as upstream's recorder patches it: a patch carrying
                // the whole object would carry its resourceVersion too, and conflict
                // with the previous repeat's write.
                let series = EventSeries {
                    count: previous.series.as_ref().map_or(2, |s| s.count + 1),
                    last_observed_time: MicroTime(now),
                };
                let name = previous.metadata.name.clone().unwrap_or_default();
                let patch = serde_json::json!({ "series": series });
                let mut repeat = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                if repeat.series.is_none() {
                    repeat.series = Some(series);
                }
                repeat
            }
            None => {
                let new = K8sEvent {
                    action: Some(event.action.clone()),
                    reason: Some(event.reason.clone()),
                    event_time: Some(MicroTime(now)),
                    regarding: Some(regarding.clone()),
                    related: event.secondary.clone(),
                    note: event.note.clone(),
                    metadata: ObjectMeta {
                        namespace: Some(namespace.to_owned()),
                        name: Some(format!(
                            "{}.{:x}",
                            regarding.name.as_deref().unwrap_or(&self.controller),
                            now.as_nanosecond()
                        )),
                        ..ObjectMeta::default()
                    },
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    type_: Some(type_.to_owned()),
                    ..K8sEvent::default()
                };
                api.create(&PostParams::default(), &new).await?
            }
        };
        self.recent
            .lock()
            .expect("events lock")
            .insert(key, recorded);
        Ok(())
    }
}

fn jiff_span(d: Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}
