//! A cluster moving from occm: the load balancers occm made are the Services' own,
//! found as occm finds them (`loadbalancer.openstack.org/load-balancer-id`, occm's name,
//! the legacy `a<uid>`), recorded on the Service as occm records them; one in ERROR is
//! kept as occm's `ensureOctaviaLoadBalancer` keeps it, and only one this controller has
//! just made that lands in ERROR is made again (occm's `createOctaviaLoadBalancer`).

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use openstack_double::state::NewServer;
use serde_json::json;
use wasm_ccm_tests::{events, ingress_ip, initialized, listening_port, wait_until};

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
    let (legacy, legacy_fip, legacy_listener) = stack.cloud.with_state(|s| {
        let lb = s.add_load_balancer(&legacy_name);
        let fip = occm_fip(s, &lb, "legacy");
        let listener = add_in_tree_listener(s, &lb, &legacy_name);
        (lb, fip, listener)
    });
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
    stack.cloud.with_state(|s| {
        // by-id and legacy: nothing else was made.
        assert_eq!(s.load_balancers.len(), 2, "{:?}", s.load_balancers);
        // occm's ensureOctaviaListener: the in-tree listener, found by port and
        // protocol, keeps its name and gets the Service's tag.
        let listener = &s.listeners[&legacy_listener];
        assert_eq!(listener.name, format!("listener_{legacy_name}_0"));
        assert_eq!(listener.tags, ["kube_service_kubernetes_default_legacy"]);
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

/// A listener and its pool on port 80 as the in-tree provider named them on its load
/// balancer `lb` named `name` (`listener_<name>_<index>`, `pool_<name>_<index>`,
/// untagged). The listener's ID.
fn add_in_tree_listener(s: &mut openstack_double::State, lb: &str, name: &str) -> String {
    use openstack_double::state::{Listener, Pool};
    let (listener, pool) = (s.id(), s.id());
    s.listeners.insert(
        listener.clone(),
        Listener {
            id: listener.clone(),
            name: format!("listener_{name}_0"),
            loadbalancer_id: lb.to_owned(),
            protocol: "TCP".into(),
            protocol_port: 80,
            default_pool_id: Some(pool.clone()),
            allowed_cidrs: Vec::new(),
            tags: Vec::new(),
            insert_headers: Default::default(),
            default_tls_container_ref: None,
            settings: Default::default(),
        },
    );
    s.pools.insert(
        pool.clone(),
        Pool {
            id: pool,
            name: format!("pool_{name}_0"),
            loadbalancer_id: lb.to_owned(),
            listener_id: Some(listener.clone()),
            protocol: "TCP".into(),
            lb_algorithm: "ROUND_ROBIN".into(),
            healthmonitor_id: None,
            session_persistence: None,
        },
    );
    listener
}

/// A Service whose `load-balancer-id` names a load balancer that is gone (deleted by
/// hand) is refused while it wants one (as occm), and its deletion completes: the
/// finalizer goes, nothing is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_naming_a_gone_load_balancer_can_be_deleted() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.add_node_a().await;
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

/// The writes to Octavia and to floating IPs the double recorded (`METHOD path`).
fn load_balancer_writes(s: &openstack_double::State) -> Vec<String> {
    s.requests
        .iter()
        .filter(|r| !r.starts_with("GET "))
        .filter(|r| r.contains("/lbaas/") || r.contains("/floatingips"))
        .cloned()
        .collect()
}

/// occm's `ensureOctaviaLoadBalancer`: a load balancer occm made that is in ERROR is
/// kept. The Service's sync fails ("not ACTIVE", `SyncLoadBalancerFailed`), again at each
/// retry, its address stays, and nothing is deleted, unbound or made; once Octavia has
/// it ACTIVE again (repaired), it is served as it is, at the same address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_occm_made_in_error_is_kept_until_repaired() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.cloud.with_state(|s| {
        s.add_server(NewServer::named("node-a", "10.0.0.11"));
    });
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("node-a"))
        .await
        .unwrap();
    // What occm left: its load balancer (now in ERROR) with its floating IP, the ID and
    // the address on the Service, the address in its status.
    let (lb, fip) = stack.cloud.with_state(|s| {
        let lb = s.add_load_balancer("kube_service_kubernetes_default_broken");
        let port = s.load_balancers[&lb].vip_port_id.clone();
        let fip = s.add_floating_ip(
            &port,
            "Floating IP for Kubernetes external service default/broken from cluster kubernetes",
        );
        s.load_balancers.get_mut(&lb).unwrap().provisioning_status = "ERROR".into();
        (lb, fip)
    });
    let address = fip.floating_ip_address.clone();
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("broken", json!({ ID: lb, ADDRESS: address })),
        )
        .await
        .unwrap();
    services
        .patch_status(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [
                {"ip": address, "ipMode": "VIP"}
            ]}}})),
        )
        .await
        .unwrap();

    let (_ccm, _log) = stack.controller_manager(listening_port());
    let client = stack.client();
    // Two syncs at least (the first and a retry), each ending one way or the other.
    wait_until(TIMEOUT, "broken synced twice", || async {
        events::occurrences(&client, "broken", "SyncLoadBalancerFailed").await >= 2
            || events::reasons(&client, "broken")
                .await
                .iter()
                .any(|r| r == "EnsuredLoadBalancer")
    })
    .await;
    let reasons = events::reasons(&client, "broken").await;
    assert!(
        !reasons.iter().any(|r| r == "EnsuredLoadBalancer"),
        "a load balancer in ERROR was served (made again?): {reasons:?}"
    );
    let notes = events::notes(&client, "broken", "SyncLoadBalancerFailed").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&lb)
                && n.contains("is not ACTIVE, current provisioning status: ERROR")),
        "{notes:?}"
    );
    stack.cloud.with_state(|s| {
        assert_eq!(load_balancer_writes(s), Vec::<String>::new());
        assert_eq!(s.load_balancers.keys().collect::<Vec<_>>(), [&lb]);
        assert_eq!(s.load_balancers[&lb].provisioning_status, "ERROR");
        assert_eq!(s.floating_ips.len(), 1, "{:?}", s.floating_ips);
        assert_eq!(s.floating_ips[&fip.id].port_id, fip.port_id);
    });
    let service = services.get("broken").await.unwrap();
    assert_eq!(ingress_ip(&service).as_deref(), Some(address.as_str()));
    assert_eq!(annotation(&service, ID).as_deref(), Some(lb.as_str()));

    // Repaired in Octavia: served as it is, at the same address.
    stack.cloud.with_state(|s| {
        s.load_balancers.get_mut(&lb).unwrap().provisioning_status = "ACTIVE".into();
    });
    events::wait_for_reason(&client, "broken", "EnsuredLoadBalancer", TIMEOUT).await;
    let service = services.get("broken").await.unwrap();
    assert_eq!(ingress_ip(&service).as_deref(), Some(address.as_str()));
    assert_eq!(annotation(&service, ID).as_deref(), Some(lb.as_str()));
    assert_eq!(
        annotation(&service, ADDRESS).as_deref(),
        Some(address.as_str())
    );
    stack.cloud.with_state(|s| {
        let deletions: Vec<&String> = s
            .requests
            .iter()
            .filter(|r| r.starts_with("DELETE "))
            .collect();
        assert!(deletions.is_empty(), "{deletions:?}");
        assert_eq!(s.load_balancers.keys().collect::<Vec<_>>(), [&lb]);
        assert_eq!(s.floating_ips.len(), 1, "{:?}", s.floating_ips);
        assert_eq!(s.floating_ips[&fip.id].port_id, fip.port_id);
        let listeners = s
            .listeners
            .values()
            .filter(|l| l.loadbalancer_id == lb)
            .count();
        assert_eq!(listeners, 1);
    });
}

/// occm's `createOctaviaLoadBalancer`: a load balancer this controller has just made
/// that lands in ERROR before it ever served is deleted (that sync fails saying so), and
/// the next sync makes it again; the Service is served by the new one alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_made_here_that_lands_in_error_is_made_again() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.cloud.with_state(|s| {
        s.add_server(NewServer::named("node-a", "10.0.0.11"));
        // Octavia fails to build the first load balancer asked for.
        s.failing_creations = 1;
    });
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("node-a"))
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("web", json!({})),
        )
        .await
        .unwrap();

    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "web served and recorded", || async {
        services.get("web").await.is_ok_and(|s| {
            ingress_ip(&s).is_some() && annotation(&s, ID).is_some_and(|id| !id.is_empty())
        })
    })
    .await;
    let client = stack.client();
    let notes = events::notes(&client, "web", "SyncLoadBalancerFailed").await;
    assert!(
        notes.iter().any(|n| n.contains("has gone into ERROR state")
            && n.contains("its creation will be retried")),
        "{notes:?}"
    );
    let service = services.get("web").await.unwrap();
    let id = annotation(&service, ID).expect("the new load balancer's ID");
    let address = ingress_ip(&service).unwrap();
    stack.cloud.with_state(|s| {
        let created = s
            .requests
            .iter()
            .filter(|r| r.starts_with("POST ") && r.ends_with("/lbaas/loadbalancers"))
            .count();
        assert_eq!(created, 2, "{:?}", s.requests);
        let deleted: Vec<&String> = s
            .requests
            .iter()
            .filter(|r| r.starts_with("DELETE ") && r.contains("/lbaas/loadbalancers/"))
            .collect();
        assert_eq!(deleted.len(), 1, "{deleted:?}");
        assert!(!deleted[0].ends_with(&id), "{deleted:?}");
        assert_eq!(s.load_balancers.keys().collect::<Vec<_>>(), [&id]);
        assert_eq!(s.load_balancers[&id].provisioning_status, "ACTIVE");
        let fips: Vec<&str> = s
            .floating_ips
            .values()
            .map(|f| f.floating_ip_address.as_str())
            .collect();
        assert_eq!(fips, [address.as_str()]);
    });
}
