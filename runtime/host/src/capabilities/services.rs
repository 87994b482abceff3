//! The `wasm-ccm:provider/services` import (contract 0.3): the cluster's Services of
//! type `LoadBalancer`, read-only, for a provider that hands out addresses itself and
//! must know which are taken (after a restart, or beside its other instances).
//!
//! This crate knows nothing of Kubernetes: the embedder implements [`ServiceSource`]
//! (the controller manager reads its service controller's informer). The host shows a
//! provider only the annotations under its policy's `serviceAnnotations` prefixes, and
//! answers `not-ready` while the source has not listed the Services yet: an empty
//! answer would say "nothing is taken", which only a synced source can say.
//!
//! ```
//! use wasm_ccm_host::capabilities::services::{LoadBalancerService, ServiceSource};
//!
//! /// A fixed set of Services (a test's, or a tool's outside any cluster).
//! struct Fixed(Vec<LoadBalancerService>);
//!
//! impl ServiceSource for Fixed {
//!     fn load_balancer_services(
//!         &self,
//!         _annotation: &dyn Fn(&str) -> bool,
//!     ) -> Option<Vec<LoadBalancerService>> {
//!         Some(self.0.clone())
//!     }
//! }
//! ```

use std::sync::Arc;

use super::HostState;
pub use crate::contract::services::LoadBalancerService;
use crate::contract::services::{Host, ServicesError};

/// Where the Services come from; implemented by the embedder.
pub trait ServiceSource: Send + Sync + 'static {
    /// Every Service of type `LoadBalancer`, or `None` while they have not been listed
    /// yet. Of each Service's annotations only the keys `annotation` accepts need be
    /// given (the host drops the others anyway): the source need not copy the rest.
    /// Must not block.
    fn load_balancer_services(
        &self,
        annotation: &dyn Fn(&str) -> bool,
    ) -> Option<Vec<LoadBalancerService>>;
}

/// No cluster: no Service holds anything. For tools that call a provider outside a
/// cluster (`wasm-ccm call`); a controller manager gives its informer instead.
pub struct NoServices;

impl ServiceSource for NoServices {
    fn load_balancer_services(
        &self,
        _annotation: &dyn Fn(&str) -> bool,
    ) -> Option<Vec<LoadBalancerService>> {
        Some(Vec::new())
    }
}

/// The services capability of one provider version: the source and the policy's
/// annotation prefixes.
pub struct Services {
    source: Option<Arc<dyn ServiceSource>>,
    prefixes: Vec<String>,
}

impl Services {
    /// Services from `source` (none: never ready), showing annotations under `prefixes`.
    pub fn new(source: Option<Arc<dyn ServiceSource>>, prefixes: Vec<String>) -> Self {
        Self { source, prefixes }
    }

    /// The Services a provider sees, ordered by namespace and name.
    pub fn list(&self) -> Result<Vec<LoadBalancerService>, ServicesError> {
        let shown = |key: &str| crate::policy::annotations::key_allowed(&self.prefixes, key);
        let mut services = self
            .source
            .as_ref()
            .and_then(|s| s.load_balancer_services(&shown))
            .ok_or(ServicesError::NotReady)?;
        for service in &mut services {
            service.annotations.retain(|(key, _)| shown(key));
        }
        services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(services)
    }
}

impl Host for HostState {
    async fn list_services(&mut self) -> Result<Vec<LoadBalancerService>, ServicesError> {
        let listed = self.shared.services.list();
        if let Err(e) = &listed {
            tracing::debug!(provider = &*self.provider.get(), error = ?e, "services not listed yet");
        }
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(namespace: &str, name: &str, annotations: &[(&str, &str)]) -> LoadBalancerService {
        LoadBalancerService {
            namespace: namespace.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            load_balancer_class: None,
            ports: Vec::new(),
            load_balancer_ip: None,
            ingress: Vec::new(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            deleting: false,
        }
    }

    struct Fixed(Option<Vec<LoadBalancerService>>);

    impl ServiceSource for Fixed {
        fn load_balancer_services(
            &self,
            _annotation: &dyn Fn(&str) -> bool,
        ) -> Option<Vec<LoadBalancerService>> {
            self.0.clone()
        }
    }

    #[test]
    fn only_the_policy_prefixes_annotations_are_shown_in_order() {
        let source = Fixed(Some(vec![
            service("web", "b", &[("kube-vip.io/loadbalancerIPs", "10.0.0.1")]),
            service(
                "app",
                "a",
                &[
                    ("kube-vip.io/loadbalancerIPs", "10.0.0.2"),
                    ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
                    ("example.com/secret", "x"),
                ],
            ),
        ]));
        let services = Services::new(Some(Arc::new(source)), vec!["kube-vip.io/".into()]);
        let listed = services.list().unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|s| format!("{}/{}", s.namespace, s.name))
                .collect::<Vec<_>>(),
            ["app/a", "web/b"]
        );
        assert_eq!(
            listed[0].annotations,
            [(
                "kube-vip.io/loadbalancerIPs".to_string(),
                "10.0.0.2".to_string()
            )]
        );
    }

    #[test]
    fn an_unsynced_or_missing_source_is_not_ready_never_empty() {
        let unsynced = Services::new(Some(Arc::new(Fixed(None))), Vec::new());
        assert_eq!(unsynced.list(), Err(ServicesError::NotReady));
        let missing = Services::new(None, Vec::new());
        assert_eq!(missing.list(), Err(ServicesError::NotReady));
        let empty = Services::new(Some(Arc::new(NoServices)), Vec::new());
        assert_eq!(empty.list(), Ok(Vec::new()));
    }

    #[test]
    fn without_prefixes_no_annotation_is_shown() {
        let source = Fixed(Some(vec![service("a", "b", &[("kube-vip.io/x", "1")])]));
        let listed = Services::new(Some(Arc::new(source)), Vec::new())
            .list()
            .unwrap();
        assert!(listed[0].annotations.is_empty());
    }
}
