//! occm's shared load balancers: a second Service naming the first one's load balancer
//! in `loadbalancer.openstack.org/load-balancer-id` adds its own listeners to it,
//! `max-shared-lb` bounds the Services on one, and deleting a Service removes only its
//! own listeners until the last one deletes the load balancer.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{listening_port, wait_until};

use super::migration::load_balancer_service;
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};
use wasm_ccm_tests::ingress_ip;

const ID: &str = "loadbalancer.openstack.org/load-balancer-id";

fn on_port(mut service: Service, port: i32) -> Service {
    service.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = port;
    service
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_share_a_load_balancer_as_occm() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("owner", json!({})),
        )
        .await
        .unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    let served = |name: &'static str| {
        let services = services.clone();
        async move { services.get(name).await.ok().and_then(|s| ingress_ip(&s)) }
    };
    wait_until(TIMEOUT, "owner served", || async {
        served("owner").await.is_some()
    })
    .await;
    let address = served("owner").await.unwrap();
    let id = stack
        .cloud
        .with_state(|s| s.load_balancers.keys().next().unwrap().clone());

    services
        .create(
            &PostParams::default(),
            &on_port(load_balancer_service("guest", json!({ ID: id })), 8080),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "guest served on the owner's address", || async {
        served("guest").await.as_deref() == Some(address.as_str())
    })
    .await;
    let owner_tag = "kube_service_kubernetes_default_owner";
    let guest_tag = "kube_service_kubernetes_default_guest";
    stack.cloud.with_state(|s| {
        assert_eq!(s.load_balancers.len(), 1);
        assert_eq!(s.load_balancers[&id].tags, [owner_tag, guest_tag]);
        let mut listeners: Vec<(u16, Vec<String>)> = s
            .listeners
            .values()
            .map(|l| (l.protocol_port, l.tags.clone()))
            .collect();
        listeners.sort();
        assert_eq!(
            listeners,
            [
                (80, vec![owner_tag.to_string()]),
                (8080, vec![guest_tag.to_string()])
            ]
        );
        assert_eq!(s.floating_ips.len(), 1);
    });

    // max-shared-lb (default 2): a third Service is refused.
    services
        .create(
            &PostParams::default(),
            &on_port(load_balancer_service("third", json!({ ID: id })), 9090),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "third refused", || async {
        wasm_ccm_tests::events::notes(&stack.client(), "third", "SyncLoadBalancerFailed")
            .await
            .iter()
            .any(|m| m.contains("already shared with 2 Services"))
    })
    .await;
    services
        .delete("third", &DeleteParams::default())
        .await
        .unwrap();

    // The owner goes: only its listener; the load balancer and its address stay.
    services
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "owner gone, its listener with it", || async {
        services.get_opt("owner").await.is_ok_and(|s| s.is_none())
            && stack
                .cloud
                .with_state(|s| s.listeners.len() == 1 && s.load_balancers[&id].tags == [guest_tag])
    })
    .await;
    stack.cloud.with_state(|s| {
        assert_eq!(s.listeners.values().next().unwrap().protocol_port, 8080);
        assert_eq!(s.floating_ips.len(), 1);
    });
    assert_eq!(served("guest").await.as_deref(), Some(address.as_str()));

    // The last Service deletes it, and the floating IP made for it.
    services
        .delete("guest", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "the load balancer deleted with the last Service",
        || async {
            services.get_opt("guest").await.is_ok_and(|s| s.is_none())
                && stack
                    .cloud
                    .with_state(|s| s.load_balancers.is_empty() && s.floating_ips.is_empty())
        },
    )
    .await;
}
