//! Shared ELBs (`kubernetes.io/elb.class: shared`) through the service controller:
//! upstream's names, a listener, pool, members and health monitor per port, an EIP
//! created and bound as status; a port change, Nodes joining and leaving, deletion
//! releasing the EIP; `keep-eip`; an existing ELB adopted with `elb.id` and kept.

use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, Patch, PatchParams};
use wasm_ccm_tests::ingress_ip;

use super::*;

const SHARED: &str = "kubernetes.io/elb.class";
const AUTO_EIP: &str = "kubernetes.io/elb.eip-auto-create-option";

/// A LoadBalancer Service `name` with one TCP port at `port`, node port `node_port`.
fn service(name: &str, annotations: serde_json::Value, port: i32, node_port: i32) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "port": port, "targetPort": 8080,
                            "nodePort": node_port, "protocol": "TCP"}]}
    }))
    .unwrap()
}

/// `[Vpc] subnet-id`: the double's subnet, where load balancers get their VIP.
fn vpc_config(world: &HuaweiWorld) -> String {
    let subnet = world.cloud.with_state(|s| s.default_subnet().id.clone());
    format!("[Vpc]\nsubnet-id = {subnet}\n")
}

/// The stack with servers and their Nodes; every change to a load balancer leaves it
/// `PENDING_UPDATE` for a read, as ELB does, so a change made before it is ACTIVE again
/// is refused (409).
async fn start_with_nodes(names: &[(&str, &str)]) -> HuaweiStack {
    let stack = HuaweiStack::start(vpc_config).await;
    stack.world.cloud.with_state(|s| s.pending_on_change = true);
    let nodes: Api<Node> = Api::all(stack.client());
    for (name, ip) in names {
        stack
            .world
            .cloud
            .with_state(|s| s.add_server(NewServer::named(name, ip)));
        nodes
            .create(&PostParams::default(), &kubelet_node_with_ip(name, ip))
            .await
            .unwrap();
    }
    stack
}

/// The addresses and ports of the members of the pool of the listener on `port`.
fn members_at(world: &HuaweiWorld, port: u16) -> Vec<(String, u16)> {
    world.cloud.with_state(|s| {
        let Some(listener) = s.listeners().into_iter().find(|l| l.protocol_port == port) else {
            return Vec::new();
        };
        let Some(pool) = s
            .pools()
            .into_iter()
            .find(|p| p.listener_id.as_deref() == Some(listener.id.as_str()))
        else {
            return Vec::new();
        };
        let mut members: Vec<(String, u16)> = s
            .members()
            .into_iter()
            .filter(|m| m.pool_id == pool.id)
            .map(|m| (m.address, m.protocol_port))
            .collect();
        members.sort();
        members
    })
}

async fn ingress(services: &Api<Service>, name: &str) -> Option<String> {
    services.get(name).await.ok().and_then(|s| ingress_ip(&s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_service_gets_its_elb_listeners_members_and_an_eip() {
    let stack = start_with_nodes(&[("node-a", "192.168.0.11")]).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let web = service(
        "web",
        json!({SHARED: "shared",
               AUTO_EIP: r#"{"ip_type": "5_bgp", "bandwidth_size": 5, "share_type": "PER"}"#,
               "kubernetes.io/elb.health-check-flag": "on",
               "kubernetes.io/elb.lb-algorithm": "LEAST_CONNECTIONS"}),
        80,
        30080,
    );
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, log) = stack.controller_manager(listening_port(), &[]);
    wait_until(TIMEOUT, "web served", || async {
        ingress(&services, "web").await.is_some()
    })
    .await;
    let world = &stack.world;
    let (lb, eip) = world.cloud.with_state(|s| {
        let lbs = s.load_balancers();
        assert_eq!(lbs.len(), 1, "{lbs:?}");
        let eips = s.eips();
        assert_eq!(eips.len(), 1, "{eips:?}");
        (lbs[0].clone(), eips[0].clone())
    });
    // Upstream's names; the EIP bound to the VIP's port is the status.
    assert_eq!(lb.name, "k8s_service_kubernetes_default_web");
    assert_eq!(lb.provisioning_status, "ACTIVE");
    assert_eq!(eip.port_id.as_deref(), Some(lb.vip_port_id.as_str()));
    assert_eq!(
        ingress(&services, "web").await.as_deref(),
        Some(eip.public_ip_address.as_str())
    );
    world.cloud.with_state(|s| {
        let listeners = s.listeners();
        assert_eq!(listeners.len(), 1);
        assert_eq!(listeners[0].name, "web_TCP_80");
        assert_eq!(listeners[0].protocol, "TCP");
        let pools = s.pools();
        assert_eq!(pools.len(), 1);
        assert_eq!(pools[0].name, "sg_web_TCP_80");
        assert_eq!(pools[0].lb_algorithm, "LEAST_CONNECTIONS");
        assert_eq!(s.healthmonitors().len(), 1);
    });
    assert_eq!(members_at(world, 80), [("192.168.0.11".to_string(), 30080)]);

    // A Node joins: its server becomes a member.
    world
        .cloud
        .with_state(|s| s.add_server(NewServer::named("node-b", "192.168.0.12")));
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(
            &PostParams::default(),
            &kubelet_node_with_ip("node-b", "192.168.0.12"),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-b a member", || async {
        members_at(world, 80).len() == 2
    })
    .await;

    // The port changes: a listener on the new port, the old one gone with its pool.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 8443,
                "targetPort": 8080, "nodePort": 30081, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the listener on 8443", || async {
        world.cloud.with_state(|s| {
            let listeners = s.listeners();
            listeners.len() == 1 && listeners[0].protocol_port == 8443
        })
    })
    .await;
    wait_until(TIMEOUT, "both members on 30081", || async {
        members_at(world, 8443)
            == [
                ("192.168.0.11".to_string(), 30081),
                ("192.168.0.12".to_string(), 30081),
            ]
    })
    .await;
    assert_eq!(world.cloud.with_state(|s| s.pools().len()), 1);

    // Only the node port changes: the listener is updated, then the members move.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 8443,
                "targetPort": 8080, "nodePort": 30082, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "both members on 30082", || async {
        members_at(world, 8443)
            == [
                ("192.168.0.11".to_string(), 30082),
                ("192.168.0.12".to_string(), 30082),
            ]
    })
    .await;

    // A Node leaves: its member goes.
    nodes
        .delete("node-b", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-b no longer a member", || async {
        members_at(world, 8443) == [("192.168.0.11".to_string(), 30082)]
    })
    .await;

    // Deleted: the ELB goes, and the EIP made for it is released.
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the ELB and its EIP gone", || async {
        world
            .cloud
            .with_state(|s| s.load_balancers().is_empty() && s.eips().is_empty())
    })
    .await;
    wait_until(TIMEOUT, "the Service gone", || async {
        services.get_opt("web").await.is_ok_and(|s| s.is_none())
    })
    .await;
    let journal = world.cloud.journal();
    assert!(journal.iter().all(|r| r.refused.is_none()));
    let log = log.lock().unwrap().clone();
    assert!(!log.contains(&world.key.secret_access_key), "{log}");
}

/// `keep-eip`: the EIP made for a Service outlives its ELB, unbound. `elb.id`: an
/// existing ELB gets the Service's listener, and only that listener goes with the
/// Service (another Service's listener on it stays). A Service without `elb.class` gets upstream's error as a Warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_eip_keeps_the_address_and_an_adopted_elb_stays() {
    let stack = start_with_nodes(&[("node-a", "192.168.0.11")]).await;
    let world = &stack.world;
    let existing = world
        .cloud
        .with_state(|s| s.add_load_balancer("shared-ingress"));
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    for svc in [
        service(
            "kept",
            json!({SHARED: "shared", AUTO_EIP: r#"{"ip_type": "5_bgp", "bandwidth_size": 1, "share_type": "PER"}"#,
                   "kubernetes.io/elb.keep-eip": "true"}),
            80,
            30080,
        ),
        service(
            "adopted",
            json!({SHARED: "shared", "kubernetes.io/elb.id": existing.id}),
            8080,
            30090,
        ),
        service(
            "neighbour",
            json!({SHARED: "shared", "kubernetes.io/elb.id": existing.id}),
            9090,
            30091,
        ),
        service("classless", json!({}), 80, 30100),
    ] {
        services.create(&PostParams::default(), &svc).await.unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port(), &[]);
    for name in ["kept", "adopted", "neighbour"] {
        wait_until(TIMEOUT, &format!("{name} served"), || async {
            ingress(&services, name).await.is_some()
        })
        .await;
    }
    assert_eq!(
        ingress(&services, "adopted").await.as_deref(),
        Some(existing.vip_address.as_str())
    );
    assert_eq!(
        members_at(world, 8080),
        [("192.168.0.11".to_string(), 30090)]
    );
    wasm_ccm_tests::events::wait_for_reasons(
        &stack.client(),
        "classless",
        &["UnknownELBClass"],
        TIMEOUT,
    )
    .await;
    let kept_eip = world.cloud.with_state(|s| s.eips()[0].clone());

    for name in ["kept", "adopted"] {
        services
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    // kept's ELB goes; of the adopted ELB's listeners, only the deleted Service's.
    wait_until(
        TIMEOUT,
        "kept's ELB gone, the adopted one's listener gone",
        || async {
            world.cloud.with_state(|s| {
                let listeners = s.listeners();
                s.load_balancers().len() == 1
                    && listeners.len() == 1
                    && listeners[0].protocol_port == 9090
            })
        },
    )
    .await;
    world.cloud.with_state(|s| {
        assert_eq!(
            s.load_balancers()[0].id,
            existing.id,
            "the adopted ELB stays"
        );
        assert_eq!(s.listeners()[0].loadbalancer_id, existing.id);
        let eips = s.eips();
        assert_eq!(eips.len(), 1, "the kept EIP stays");
        assert_eq!(eips[0].id, kept_eip.id);
        assert_eq!(eips[0].port_id, None, "unbound");
    });
}

/// Changed annotations change the ELB in place: the pool's algorithm, the health
/// monitor's timing and the listener's connection limit; an EIP named by `elb.eip-id`
/// is bound as the status and, with the Service gone, unbound but kept (it is the
/// user's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_annotations_change_the_elb_in_place_and_a_named_eip_is_kept() {
    let stack = start_with_nodes(&[("node-a", "192.168.0.11")]).await;
    let world = &stack.world;
    let eip = world.cloud.with_state(|s| s.add_eip(None));
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let web = service(
        "web",
        json!({SHARED: "shared", "kubernetes.io/elb.eip-id": eip.id,
               "kubernetes.io/elb.health-check-flag": "on"}),
        80,
        30080,
    );
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port(), &[]);
    wait_until(TIMEOUT, "web served", || async {
        ingress(&services, "web").await.is_some()
    })
    .await;
    assert_eq!(
        ingress(&services, "web").await.as_deref(),
        Some(eip.public_ip_address.as_str())
    );
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "kubernetes.io/elb.lb-algorithm": "SOURCE_IP",
                "kubernetes.io/elb.health-check-option":
                    r#"{"delay": 7, "timeout": 4, "max_retries": 2}"#,
                "kubernetes.io/elb.connection-limit": "100"}}})),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "the pool, monitor and listener changed",
        || async {
            world.cloud.with_state(|s| {
                let pool = s.pools();
                let monitor = s.healthmonitors();
                let listener = s.listeners();
                pool.len() == 1
                    && pool[0].lb_algorithm == "SOURCE_IP"
                    && monitor.len() == 1
                    && (monitor[0].delay, monitor[0].timeout, monitor[0].max_retries) == (7, 4, 2)
                    && listener.len() == 1
                    && listener[0].connection_limit == 100
            })
        },
    )
    .await;
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the ELB gone", || async {
        world.cloud.with_state(|s| s.load_balancers().is_empty())
    })
    .await;
    world.cloud.with_state(|s| {
        let eips = s.eips();
        assert_eq!(eips.len(), 1, "the named EIP is the user's: kept");
        assert_eq!(eips[0].port_id, None, "unbound");
    });
}
