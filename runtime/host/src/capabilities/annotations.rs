//! The `wasm-ccm:provider/annotations` import: a provider writes annotations on the
//! Service its load-balancer call is about, as upstream providers do with their own
//! client (cloud-provider-openstack records the load balancer's ID there).
//!
//! This crate knows nothing of Kubernetes: the embedder implements [`AnnotationSink`]
//! (the controller manager patches the Service). The host checks everything the guest
//! controls first: the call is about one Service, the key is under a prefix of the
//! policy's `serviceAnnotations` ([`crate::policy::annotations`]), the value is at most
//! [`MAX_VALUE_BYTES`], a call sets at most [`MAX_PER_CALL`]. What a call set is handed
//! to the sink once, when the call returns, whatever it returns.
//!
//! ```
//! use wasm_ccm_host::capabilities::annotations::{AnnotationSink, ServiceAnnotations};
//!
//! /// Prints annotations instead of writing them.
//! struct Print;
//!
//! impl AnnotationSink for Print {
//!     fn apply(&self, set: ServiceAnnotations) {
//!         for (key, value) in &set.annotations {
//!             println!("{}/{}: {key}={value}", set.service.namespace, set.service.name);
//!         }
//!     }
//! }
//! ```

use std::sync::Arc;

use super::HostState;
use super::events::{ObjectKind, ObjectRef};
use crate::contract::annotations::{AnnotationError, Host};
pub use crate::policy::annotations::{MAX_PER_CALL, MAX_VALUE_BYTES};

/// What one call set on its Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAnnotations {
    /// The provider's name.
    pub provider: String,
    /// The Service (its UID included: a Service made again under the name is another).
    pub service: ObjectRef,
    /// Keys and values, in the order first set (a key set twice keeps its last value).
    pub annotations: Vec<(String, String)>,
}

/// Where annotations go; implemented by the embedder.
pub trait AnnotationSink: Send + Sync + 'static {
    /// Writes `set`. Called when a provider call returns: must not block (queue or spawn).
    fn apply(&self, set: ServiceAnnotations);
}

/// The annotations capability of one provider version: its sink and the policy's
/// prefixes.
pub struct Annotations {
    sink: Option<Arc<dyn AnnotationSink>>,
    prefixes: Vec<String>,
}

impl Annotations {
    /// Annotations under `prefixes` going to `sink` (none: logged only).
    pub fn new(sink: Option<Arc<dyn AnnotationSink>>, prefixes: Vec<String>) -> Self {
        Self { sink, prefixes }
    }

    /// Checks one annotation of a call about `objects`, which already set `pending`.
    pub fn check(
        &self,
        objects: &[ObjectRef],
        pending: &[(String, String)],
        key: &str,
        value: &str,
    ) -> Result<(), AnnotationError> {
        match objects {
            [one] if one.kind == ObjectKind::Service => {}
            _ => return Err(AnnotationError::NoObject),
        }
        if !crate::policy::annotations::key_allowed(&self.prefixes, key) {
            return Err(AnnotationError::NotAllowed);
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(AnnotationError::TooLong);
        }
        if pending.len() >= MAX_PER_CALL && !pending.iter().any(|(k, _)| k == key) {
            return Err(AnnotationError::TooMany);
        }
        Ok(())
    }

    /// Hands what a call set to the sink.
    pub fn flush(&self, provider: &str, objects: &[ObjectRef], set: Vec<(String, String)>) {
        let Some(service) = objects.first().filter(|_| !set.is_empty()) else {
            return;
        };
        tracing::debug!(provider, service = %service.name, ?set, "provider annotations");
        if let Some(sink) = &self.sink {
            sink.apply(ServiceAnnotations {
                provider: provider.to_owned(),
                service: service.clone(),
                annotations: set,
            });
        }
    }
}

impl HostState {
    /// Hands the annotations the finished call set to the sink, and forgets them.
    pub(crate) fn flush_annotations(&mut self) {
        let set = std::mem::take(&mut self.call.annotations);
        let provider = self.provider.get().to_string();
        if provider == crate::metrics::ProviderLabel::CANDIDATE {
            // A canary's calls are comparisons: what it would write is not written
            // (once promoted, it writes under its name).
            return;
        }
        self.shared
            .annotations
            .flush(&provider, &self.call.objects, set);
    }
}

impl Host for HostState {
    async fn set(&mut self, key: String, value: String) -> Result<(), AnnotationError> {
        let result =
            self.shared
                .annotations
                .check(&self.call.objects, &self.call.annotations, &key, &value);
        if let Err(e) = &result {
            tracing::warn!(provider = &*self.provider.get(), key, error = ?e, "provider annotation refused");
            return result;
        }
        match self.call.annotations.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.call.annotations.push((key, value)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::types::ObjectMeta;

    fn service() -> ObjectRef {
        ObjectRef::service(&ObjectMeta::named("web"))
    }

    #[test]
    fn only_a_service_call_under_the_policys_prefixes() {
        let annotations = Annotations::new(None, vec!["lb.example.org/".into()]);
        let key = "lb.example.org/id";
        assert_eq!(annotations.check(&[service()], &[], key, "1"), Ok(()));
        assert_eq!(
            annotations.check(&[], &[], key, "1"),
            Err(AnnotationError::NoObject)
        );
        assert_eq!(
            annotations.check(&[ObjectRef::node(&ObjectMeta::named("n"))], &[], key, "1"),
            Err(AnnotationError::NoObject)
        );
        assert_eq!(
            annotations.check(&[service()], &[], "other.org/id", "1"),
            Err(AnnotationError::NotAllowed)
        );
        assert_eq!(
            annotations.check(&[service()], &[], key, &"x".repeat(MAX_VALUE_BYTES + 1)),
            Err(AnnotationError::TooLong)
        );
        let full: Vec<(String, String)> = (0..MAX_PER_CALL)
            .map(|i| (format!("lb.example.org/k{i}"), String::new()))
            .collect();
        assert_eq!(
            annotations.check(&[service()], &full, key, "1"),
            Err(AnnotationError::TooMany)
        );
        assert_eq!(
            annotations.check(&[service()], &full, "lb.example.org/k0", "again"),
            Ok(())
        );
    }
}
