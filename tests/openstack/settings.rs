//! occm's Service settings served as occm serves them: session affinity, the legacy
//! source ranges annotation, listener timeouts back to their defaults.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{free_port, wait_until};

use super::migration::{ingress_ip, load_balancer_service};
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_source_ranges_and_timeouts_as_occm() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut web = load_balancer_service(
        "web",
        json!({
            "service.beta.kubernetes.io/load-balancer-source-ranges": "198.51.100.0/24, 203.0.113.7/32",
            "loadbalancer.openstack.org/timeout-client-data": "9000",
        }),
    );
    web.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(free_port());
    wait_until(TIMEOUT, "web served", || async {
        services
            .get("web")
            .await
            .ok()
            .and_then(|s| ingress_ip(&s))
            .is_some()
    })
    .await;
    stack.cloud.with_state(|s| {
        let listener = s.listeners.values().next().unwrap();
        assert_eq!(
            listener.allowed_cidrs,
            ["198.51.100.0/24", "203.0.113.7/32"]
        );
        assert_eq!(listener.settings.get("timeout_client_data"), Some(&9000));
        let pool = s.pools.values().next().unwrap();
        assert_eq!(pool.session_persistence.as_deref(), Some("SOURCE_IP"));
    });

    // Affinity off, the timeout annotation removed: no persistence, Octavia's default.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"loadbalancer.openstack.org/timeout-client-data": null}},
                "spec": {"sessionAffinity": "None"}})),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "persistence and timeout back to defaults",
        || async {
            stack.cloud.with_state(|s| {
                let listener = s.listeners.values().next().unwrap();
                let pool = s.pools.values().next().unwrap();
                pool.session_persistence.is_none()
                    && listener.settings.get("timeout_client_data") == Some(&50000)
            })
        },
    )
    .await;
}
