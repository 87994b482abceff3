//! A cluster moving from occm: the load balancers occm made are the Services' own,
//! found as occm finds them (`loadbalancer.openstack.org/load-balancer-id`, occm's name,
//! the legacy `a<uid>`), recorded on the Service as occm records them, and one in ERROR
//! is made again, as occm's `EnsureLoadBalancer` does.

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{ingress_ip, initialized, listening_port, wait_until};

use super::{OpenStackStack, TIMEOUT, kubelet_node, lb_cloud_config};

const ID: &str = "loadbalancer.openstack.org/load-balancer-id";
const ADDRESS: &str = "loadbalancer.openstack.org/load-balancer-address";

pub(super) fn load_balancer_service(name: &str, annotations: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    }))
    .unwrap()
}

fn annotation(service: &Service, key: &str) -> Option<String> {
    service.metadata.annotations.as_ref()?.get(key).cloned()
}

/// Waits until Service `name` has an ingress address.
pub(super) async fn wait_served(services: &Api<Service>, name: &str) {
    wait_until(TIMEOUT, &format!("{name} served"), || async {
        services
            .get(name)
            .await
            .ok()
            .and_then(|s| ingress_ip(&s))
            .is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_occm_made_are_adopted_and_recorded_as_occm_records_them() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.cloud.with_state(|s| {
        s.add_server(openstack_double::state::NewServer::named(
            "node-a",
            "10.0.0.11",
        ));
    });
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("node-a"))
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let occm_fip = |s: &mut openstack_double::State, lb: &str, service: &str| {
        let port = s.load_balancers[lb].vip_port_id.clone();
        s.add_floating_ip(
            &port,
            &format!("Floating IP for Kubernetes external service default/{service} from cluster kubernetes"),
        )
    };
    // occm ≥ 1.23: the ID on the Service, the load balancer of occm's name.
    let (by_id, by_id_fip) = stack.cloud.with_state(|s| {
        let lb = s.add_load_balancer("kube_service_kubernetes_default_by-id");
        let fip = occm_fip(s, &lb, "by-id");
        (lb, fip)
    });
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("by-id", json!({ ID: by_id })),
        )
        .await
        .unwrap();
    // The in-tree provider's name, `a<uid>`, and no annotation.
    let legacy_service = services
        .create(
            &PostParams::default(),
            &load_balancer_service("legacy", json!({})),
        )
        .await
        .unwrap();
    let uid = legacy_service.metadata.uid.clone().unwrap();
    let legacy_name: String = format!("a{}", uid.replace('-', ""))
        .chars()
        .take(32)
        .collect();
    let (legacy, legacy_fip) = stack.cloud.with_state(|s| {
        let lb = s.add_load_balancer(&legacy_name);
        let fip = occm_fip(s, &lb, "legacy");
        (lb, fip)
    });
    // A load balancer in ERROR: occm deletes it and makes another.
    let broken = stack.cloud.with_state(|s| {
        let lb = s.add_load_balancer("kube_service_kubernetes_default_broken");
        s.load_balancers.get_mut(&lb).unwrap().provisioning_status = "ERROR".into();
        lb
    });
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("broken", json!({ ID: broken })),
        )
        .await
        .unwrap();

    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "node-a initialized", || {
        initialized(&nodes, "node-a")
    })
    .await;
    for (name, id, fip) in [
        ("by-id", &by_id, &by_id_fip),
        ("legacy", &legacy, &legacy_fip),
    ] {
        wait_until(TIMEOUT, &format!("{name} served and recorded"), || async {
            services.get(name).await.is_ok_and(|s| {
                ingress_ip(&s).as_deref() == Some(fip.floating_ip_address.as_str())
                    && annotation(&s, ID).as_deref() == Some(id.as_str())
                    && annotation(&s, ADDRESS).as_deref() == Some(fip.floating_ip_address.as_str())
            })
        })
        .await;
        stack.cloud.with_state(|s| {
            let listeners: Vec<&str> = s
                .listeners
                .values()
                .filter(|l| &l.loadbalancer_id == id)
                .map(|l| l.name.as_str())
                .collect();
            assert_eq!(listeners.len(), 1, "{name}: {listeners:?}");
            assert_eq!(s.floating_ips[&fip.id].port_id, fip.port_id, "{name}");
        });
    }
    wait_until(TIMEOUT, "broken made again and recorded", || async {
        services.get("broken").await.is_ok_and(|s| {
            let id = annotation(&s, ID);
            ingress_ip(&s).is_some()
                && id.is_some()
                && id.as_deref() != Some(broken.as_str())
                && stack
                    .cloud
                    .with_state(|st| !st.load_balancers.contains_key(&broken))
        })
    })
    .await;
    stack.cloud.with_state(|s| {
        // by-id, legacy and broken's new one: nothing else was made.
        assert_eq!(s.load_balancers.len(), 3, "{:?}", s.load_balancers);
    });

    // The legacy-named load balancer goes with its Service.
    services
        .delete("legacy", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "legacy's load balancer deleted", || async {
        services.get_opt("legacy").await.is_ok_and(|s| s.is_none())
            && stack
                .cloud
                .with_state(|s| !s.load_balancers.contains_key(&legacy))
    })
    .await;
}

/// A Service whose `load-balancer-id` names a load balancer that is gone (deleted by
/// hand) is refused while it wants one (as occm), and its deletion completes: the
/// finalizer goes, nothing is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_naming_a_gone_load_balancer_can_be_deleted() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service(
                "orphan",
                json!({ ID: "0a5e0000-0000-4000-8000-0000000000ff" }),
            ),
        )
        .await
        .unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "orphan refused", || async {
        wasm_ccm_tests::events::reasons(&stack.client(), "orphan")
            .await
            .contains(&"SyncLoadBalancerFailed".to_string())
    })
    .await;
    services
        .delete("orphan", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "orphan deleted", || async {
        services.get_opt("orphan").await.is_ok_and(|s| s.is_none())
    })
    .await;
    stack
        .cloud
        .with_state(|s| assert!(s.load_balancers.is_empty()));
}
