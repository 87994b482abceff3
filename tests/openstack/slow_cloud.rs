//! A slow cloud under the documented policy (a call 60 s, a request 20 s): every
//! request answered in 2 to 8 s and a load balancer `PENDING_CREATE` for longer than a
//! call, or the answers of creations lost. The host starts no request that could
//! outlive its call, so no call is cut; a create sequence spread over several calls
//! finds what it made by name (or port) and makes nothing twice; the Service's deletion
//! leaves nothing behind.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{events, ingress_ip, listening_port, wait_until};

use super::migration::load_balancer_service;
use super::{OpenStackStack, lb_cloud_config};

/// How long a slow cloud may take to serve or release one Service.
const SLOW: Duration = Duration::from_secs(600);

/// What the double holds for the load balancer named `name`: (load balancers,
/// listeners, pools, members, floating IPs on its VIP port).
fn objects(stack: &OpenStackStack, name: &str) -> (usize, usize, usize, usize, usize) {
    stack.cloud.with_state(|s| {
        let lbs: Vec<_> = s
            .load_balancers
            .values()
            .filter(|lb| lb.name == name)
            .collect();
        let ids: Vec<&str> = lbs.iter().map(|lb| lb.id.as_str()).collect();
        let ports: Vec<&str> = lbs.iter().map(|lb| lb.vip_port_id.as_str()).collect();
        let pools: Vec<&str> = s
            .pools
            .values()
            .filter(|p| ids.contains(&p.loadbalancer_id.as_str()))
            .map(|p| p.id.as_str())
            .collect();
        (
            lbs.len(),
            s.listeners
                .values()
                .filter(|l| ids.contains(&l.loadbalancer_id.as_str()))
                .count(),
            pools.len(),
            s.members
                .values()
                .filter(|m| pools.contains(&m.pool_id.as_str()))
                .count(),
            s.floating_ips
                .values()
                .filter(|f| f.port_id.as_deref().is_some_and(|p| ports.contains(&p)))
                .count(),
        )
    })
}

/// Serves Service `name` with the double slowed by `slow`, then deletes it: one of each
/// object while served, none after; returns the controller's log.
async fn serve_and_delete(name: &str, slow: impl FnOnce(&mut openstack_double::State)) -> String {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.add_node_a().await;
    let floating_ips = stack.cloud.with_state(|s| s.floating_ips.len());
    stack.cloud.with_state(slow);
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service(name, json!({})),
        )
        .await
        .unwrap();
    let (_ccm, log) = stack.controller_manager(listening_port());
    wait_until(SLOW, &format!("{name} served"), || async {
        services
            .get(name)
            .await
            .ok()
            .and_then(|s| ingress_ip(&s))
            .is_some()
    })
    .await;
    let lb = format!("kube_service_kubernetes_default_{name}");
    assert_eq!(
        objects(&stack, &lb),
        (1, 1, 1, 1, 1),
        "one load balancer, listener, pool, member and floating IP"
    );
    services
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(SLOW, &format!("{name} released"), || async {
        services.get(name).await.is_err()
    })
    .await;
    wait_until(SLOW, "its load balancer gone", || async {
        objects(&stack, &lb).0 == 0
    })
    .await;
    stack.cloud.with_state(|s| {
        assert!(
            s.listeners.is_empty() && s.pools.is_empty() && s.members.is_empty(),
            "children left"
        );
        assert_eq!(s.floating_ips.len(), floating_ips, "a floating IP left");
    });
    let events = (
        events::notes(&stack.client(), name, "SyncLoadBalancerPending").await,
        events::notes(&stack.client(), name, "SyncLoadBalancerFailed").await,
    );
    let log = log.lock().unwrap().clone();
    assert!(
        !log.contains("provider call timed out"),
        "a call was cut at its deadline"
    );
    format!("{events:?}\n{log}")
}

/// Every request 2 to 8 s and a load balancer `PENDING_CREATE` for 75 s (each child's
/// `PENDING_UPDATE` 15 s): the Service is served over several calls, each answering
/// `retry-after` in time (Normal `SyncLoadBalancerPending`, no failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_cloud_is_served_without_a_call_cut() {
    let log = serve_and_delete("slow", |s| {
        s.latency = Some((Duration::from_secs(2), Duration::from_secs(8)));
        s.creation_time = Some(Duration::from_secs(75));
        s.provisioning_time = Duration::from_secs(15);
    })
    .await;
    let (events, _) = log.split_once('\n').unwrap();
    assert!(
        events.contains("is PENDING_CREATE") && !events.contains("Error syncing"),
        "the events say the load balancer is being created, not failing: {events}"
    );
}

/// The answers of the first four creations (load balancer, listener, pool, floating
/// IP) come after the policy's request timeout: each request fails on the provider's
/// side although the object exists, and the next call finds it instead of making a
/// second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_make_nothing_twice() {
    let log = serve_and_delete("lost", |s| {
        s.lost_answers = 4;
        s.lost_answer_delay = Duration::from_secs(25);
    })
    .await;
    let (events, _) = log.split_once('\n').unwrap();
    assert!(events.contains("timed out"), "{events}");
}
