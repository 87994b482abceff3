//! The providers' events (the contract's `events` import), published as Kubernetes
//! Events: the host's [`EventSink`] implemented with the event recorder.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use wasm_ccm_host::capabilities::events::{EventSink, ObjectKind, ProviderEvent};

use crate::events::{Event, EventType, Recorder};

/// Publishes the events providers record (the contract's `events` import): each
/// provider is its own `reportingController`, `wasm-ccm.io/provider-<name>`, so an
/// event says which provider wrote it. Publishing happens off the provider call.
pub struct ProviderEvents {
    client: kube::Client,
    instance: String,
    recorders: std::sync::Mutex<HashMap<String, std::sync::Arc<Recorder>>>,
}

impl ProviderEvents {
    /// Events published with `client` as replica `instance`.
    pub fn new(client: kube::Client, instance: &str) -> Self {
        Self {
            client,
            instance: instance.into(),
            recorders: Default::default(),
        }
    }

    fn recorder(&self, provider: &str) -> std::sync::Arc<Recorder> {
        self.recorders
            .lock()
            .expect("recorders lock")
            .entry(provider.to_owned())
            .or_insert_with(|| {
                std::sync::Arc::new(Recorder::new(
                    self.client.clone(),
                    &format!("wasm-ccm.io/provider-{provider}"),
                    &self.instance,
                ))
            })
            .clone()
    }
}

impl EventSink for ProviderEvents {
    fn emit(&self, event: ProviderEvent) {
        let recorder = self.recorder(&event.provider);
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(
                match event.object.kind {
                    ObjectKind::Node => "Node",
                    ObjectKind::Service => "Service",
                }
                .into(),
            ),
            namespace: (!event.object.namespace.is_empty()).then(|| event.object.namespace.clone()),
            name: Some(event.object.name.clone()),
            uid: (!event.object.uid.is_empty()).then(|| event.object.uid.clone()),
            ..ObjectReference::default()
        };
        let published = Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.clone(),
            note: Some(event.message),
            action: event.reason,
            secondary: None,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Err(err) = recorder.publish(&published, &regarding).await {
                tracing::warn!(object = regarding.name.as_deref().unwrap_or(""), reason = %published.reason, error = %err, "cannot record a provider event");
            }
        });
    }
}
