//! The service controller's Services as providers see them through the contract's
//! `services` import: every Service of type `LoadBalancer` in the controller's
//! informer, read-only. Empty until the controller starts (on the leader) and its
//! watch has listed the cluster once (its `InitDone`); until then the host answers
//! `not-ready`, so a provider never takes "not listed yet" for "nothing is taken".

use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::Store;
use wasm_ccm_host::capabilities::services::{LoadBalancerService, ServiceSource};

use crate::cloud::convert;

/// The informer's Services, filled once they are listed. Cheap to clone; clones share.
#[derive(Clone, Default)]
pub struct ServiceView(Arc<RwLock<Option<Store<Service>>>>);

impl ServiceView {
    /// Serves `store` from now on; called once it has listed the cluster.
    pub fn fill(&self, store: Store<Service>) {
        *self.0.write().expect("the view's lock is never poisoned") = Some(store);
    }
}

impl ServiceSource for ServiceView {
    fn load_balancer_services(
        &self,
        annotation: &dyn Fn(&str) -> bool,
    ) -> Option<Vec<LoadBalancerService>> {
        let store = self.0.read().expect("the view's lock is never poisoned");
        let store = store.as_ref()?;
        Some(
            store
                .state()
                .iter()
                .filter(|s| {
                    s.spec.as_ref().and_then(|spec| spec.type_.as_deref()) == Some("LoadBalancer")
                })
                .map(|s| convert::load_balancer_service(s, annotation))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;

    fn service(name: &str, type_: &str) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                         "annotations": {"kube-vip.io/loadbalancerIPs": "10.0.0.1"}},
            "spec": {"type": type_, "ports": [{"port": 80, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}},
        }))
        .unwrap()
    }

    #[test]
    fn not_ready_until_listed_then_only_load_balancers() {
        let view = ServiceView::default();
        assert!(view.load_balancer_services(&|_| true).is_none());
        let (reader, mut writer) = kube::runtime::reflector::store::<Service>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(service("lb", "LoadBalancer")));
        writer.apply_watcher_event(&watcher::Event::InitApply(service("web", "ClusterIP")));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        // The controller fills the view on InitDone.
        view.fill(reader);
        let listed = view.load_balancer_services(&|_| true).expect("listed");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, "lb");
        assert_eq!(listed[0].uid, "u-lb");
        assert_eq!(listed[0].ingress[0].ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(listed[0].ports[0].port, 80);
        assert!(!listed[0].deleting);
        assert_eq!(listed[0].annotations.len(), 1);
        let none = view.load_balancer_services(&|_| false).expect("listed");
        assert!(
            none[0].annotations.is_empty(),
            "only the annotations asked for are copied"
        );
    }
}
