//! The `wasm-ccm:provider/events` import: a provider records Kubernetes Events about
//! the object its current call is about, as upstream providers do through the
//! controller's recorder.
//!
//! This crate knows nothing of Kubernetes: the embedder implements [`EventSink`] (the
//! controller manager publishes through its event recorder, with the provider named
//! in the source). The host checks everything a guest controls first: the reason is
//! CamelCase, the message is sanitized and cut at [`MAX_MESSAGE_BYTES`], the object is
//! one the call is about (a guest cannot put events on arbitrary objects), and each
//! provider version has an event budget ([`EVENTS_PER_SECOND`], [`EVENT_BURST`]).
//!
//! ```
//! use wasm_ccm_host::capabilities::events::{EventSink, ProviderEvent};
//!
//! /// Prints events instead of publishing them.
//! struct Print;
//!
//! impl EventSink for Print {
//!     fn emit(&self, event: ProviderEvent) {
//!         println!("{} {}/{}: {} {}", event.provider, event.object.namespace,
//!                  event.object.name, event.reason, event.message);
//!     }
//! }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::HostState;
use crate::contract::events::{EventError, EventType, Host};
use crate::contract::types::ObjectMeta;
use crate::metrics::{EventLabels, ProviderLabel, ProviderMetrics};

/// The longest event message kept, in bytes (longer ones are cut).
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// The longest reason.
pub const MAX_REASON_BYTES: usize = 128;
/// Events one provider version may record per second, sustained.
pub const EVENTS_PER_SECOND: f64 = 5.0;
/// Events one provider version may record at once.
pub const EVENT_BURST: f64 = 25.0;

/// The kind of object an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// A `v1/Node`.
    Node,
    /// A `v1/Service`.
    Service,
}

/// An object a provider call is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Node or Service.
    pub kind: ObjectKind,
    /// Empty for Nodes.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The object's UID.
    pub uid: String,
}

impl ObjectRef {
    /// The Node described by `meta`.
    pub fn node(meta: &ObjectMeta) -> Self {
        Self::of(ObjectKind::Node, meta)
    }

    /// The Service described by `meta`.
    pub fn service(meta: &ObjectMeta) -> Self {
        Self::of(ObjectKind::Service, meta)
    }

    fn of(kind: ObjectKind, meta: &ObjectMeta) -> Self {
        Self {
            kind,
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: meta.uid.clone(),
        }
    }
}

/// An event a provider asked for, checked by the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEvent {
    /// The provider's name (for the event's source).
    pub provider: String,
    /// The object the event is about.
    pub object: ObjectRef,
    /// Warning (true) or Normal.
    pub warning: bool,
    /// CamelCase.
    pub reason: String,
    /// Sanitized, at most [`MAX_MESSAGE_BYTES`].
    pub message: String,
}

/// Where provider events go; implemented by the embedder.
pub trait EventSink: Send + Sync + 'static {
    /// Publishes `event`. Called from a provider call: must not block (queue or spawn).
    fn emit(&self, event: ProviderEvent);
}

/// Whether `reason` is CamelCase as Kubernetes event reasons are: `^[A-Z][A-Za-z0-9]*$`.
pub fn is_camel_case(reason: &str) -> bool {
    reason.len() <= MAX_REASON_BYTES
        && reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The events capability of one provider version: its sink and its budget.
pub struct Events {
    sink: Option<Arc<dyn EventSink>>,
    bucket: Mutex<(f64, Instant)>,
    provider: Arc<ProviderLabel>,
    metrics: Arc<ProviderMetrics>,
}

impl Events {
    /// Events going to `sink` (none: logged only), recorded under `provider`.
    pub fn new(
        sink: Option<Arc<dyn EventSink>>,
        provider: Arc<ProviderLabel>,
        metrics: Arc<ProviderMetrics>,
    ) -> Self {
        Self {
            sink,
            bucket: Mutex::new((EVENT_BURST, Instant::now())),
            provider,
            metrics,
        }
    }

    fn admit(&self) -> bool {
        let mut bucket = self.bucket.lock().expect("event budget lock");
        let now = Instant::now();
        let (tokens, last) = *bucket;
        let tokens =
            (tokens + now.duration_since(last).as_secs_f64() * EVENTS_PER_SECOND).min(EVENT_BURST);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            false
        }
    }

    /// Checks and publishes one event about one of `objects` (the current call's).
    pub fn emit(
        &self,
        objects: &[ObjectRef],
        event_type: EventType,
        reason: &str,
        message: &str,
        node: Option<&str>,
    ) -> Result<(), EventError> {
        let type_label = match event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let provider = self.provider.get().to_string();
        let result = self.check(objects, reason, node);
        let label = match &result {
            Ok(_) => "recorded",
            Err(EventError::InvalidReason) => "invalid_reason",
            Err(EventError::NoObject) => "no_object",
            Err(EventError::RateLimited) => "rate_limited",
        };
        self.metrics
            .events
            .get_or_create(&EventLabels {
                provider: provider.clone(),
                r#type: type_label.into(),
                result: label.into(),
            })
            .inc();
        let object = result?;
        let mut message = super::logging::sanitize(message);
        if message.len() > MAX_MESSAGE_BYTES {
            let mut cut = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        tracing::debug!(provider, object = %object.name, reason, r#type = type_label, %message, "provider event");
        if let Some(sink) = &self.sink {
            sink.emit(ProviderEvent {
                provider,
                object,
                warning: event_type == EventType::Warning,
                reason: reason.to_owned(),
                message,
            });
        }
        Ok(())
    }

    fn check(
        &self,
        objects: &[ObjectRef],
        reason: &str,
        node: Option<&str>,
    ) -> Result<ObjectRef, EventError> {
        if !is_camel_case(reason) {
            return Err(EventError::InvalidReason);
        }
        let object = match node {
            Some(name) => objects
                .iter()
                .find(|o| o.kind == ObjectKind::Node && o.name == name),
            None if objects.len() == 1 => objects.first(),
            None => None,
        }
        .ok_or(EventError::NoObject)?;
        if !self.admit() {
            return Err(EventError::RateLimited);
        }
        Ok(object.clone())
    }
}

impl Host for HostState {
    async fn emit(
        &mut self,
        event_type: EventType,
        reason: String,
        message: String,
        node: Option<String>,
    ) -> Result<(), EventError> {
        self.shared.events.emit(
            &self.call.objects,
            event_type,
            &reason,
            &message,
            node.as_deref(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Mutex<Vec<ProviderEvent>>);

    impl EventSink for Collect {
        fn emit(&self, event: ProviderEvent) {
            self.0.lock().unwrap().push(event);
        }
    }

    fn node(name: &str) -> ObjectRef {
        ObjectRef::node(&ObjectMeta::named(name))
    }

    #[test]
    fn events_are_checked_and_budgeted() {
        let sink = Arc::new(Collect(Mutex::new(Vec::new())));
        let events = Events::new(
            Some(sink.clone()),
            ProviderLabel::new("p"),
            crate::metrics::Metrics::new().provider().clone(),
        );
        let one = [node("n1")];
        let two = [node("n1"), node("n2")];
        assert_eq!(
            events.emit(&one, EventType::Warning, "bad reason", "m", None),
            Err(EventError::InvalidReason)
        );
        assert_eq!(
            events.emit(&[], EventType::Normal, "Fine", "m", None),
            Err(EventError::NoObject)
        );
        assert_eq!(
            events.emit(&two, EventType::Normal, "Fine", "m", None),
            Err(EventError::NoObject),
            "a call about two Nodes must name one"
        );
        assert_eq!(
            events.emit(&two, EventType::Normal, "Fine", "m", Some("n3")),
            Err(EventError::NoObject)
        );
        events
            .emit(
                &two,
                EventType::Warning,
                "Slow",
                &"x\n".repeat(2000),
                Some("n2"),
            )
            .unwrap();
        let got = sink.0.lock().unwrap()[0].clone();
        assert_eq!(got.object.name, "n2");
        assert!(got.warning);
        assert!(got.message.len() <= MAX_MESSAGE_BYTES && !got.message.contains('\n'));
        let mut limited = 0;
        for _ in 0..100 {
            if events.emit(&one, EventType::Normal, "Spam", "m", None)
                == Err(EventError::RateLimited)
            {
                limited += 1;
            }
        }
        assert!(limited >= 70, "{limited}");
    }

    #[test]
    fn reasons_are_camel_case() {
        for ok in ["Synced", "EnsuringLoadBalancer", "A1"] {
            assert!(is_camel_case(ok), "{ok}");
        }
        for bad in [
            "",
            "synced",
            "Not Camel",
            "With-Dash",
            "Ünicode",
            &"A".repeat(129),
        ] {
            assert!(!is_camel_case(bad), "{bad}");
        }
    }
}
