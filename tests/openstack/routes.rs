//! Routes as occm makes them: the router's extra routes to the Nodes' internal IPs, the
//! ports allowing the pod CIDRs, and Neutron's extensions deciding how.

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use openstack_double::state::NewServer;
use wasm_ccm_tests::{listening_port, network_available, wait_until};

use super::{OpenStackStack, TIMEOUT, kubelet_node_with_cidr};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_are_the_routers_extra_routes_and_the_ports_allow_the_pod_cidrs() {
    let stack = OpenStackStack::start(|cloud| {
        format!(
            "[Route]\nrouter-id = {}\n",
            cloud.with_state(|s| s.router_id())
        )
    })
    .await;
    let (a, b) = stack.cloud.with_state(|s| {
        // A route left behind by a node that is gone: a blackhole.
        let router = s.router_id();
        s.routers
            .get_mut(&router)
            .unwrap()
            .routes
            .push(("10.244.9.0/24".into(), "10.0.9.9".into()));
        (
            s.add_server(NewServer::named("node-a", "10.0.0.11")),
            s.add_server(NewServer::named("node-b", "10.0.0.12")),
        )
    });
    // A Node named apart from its server (found by provider ID), whose port has no port
    // security: routed by its address, no allowed address pair (occm skips it).
    let c = stack.cloud.with_state(|s| {
        let c = s.add_server(NewServer::named("server-c", "10.0.0.13"));
        for port in s.ports.values_mut().filter(|p| p.device_id == c.id) {
            port.port_security_enabled = false;
        }
        c
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for (name, cidr) in [("node-a", "10.244.1.0/24"), ("node-b", "10.244.2.0/24")] {
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node_with_cidr(name, Some(cidr)),
            )
            .await
            .unwrap();
    }
    let mut worker_c = kubelet_node_with_cidr("worker-c", Some("10.244.3.0/24"));
    worker_c.spec.as_mut().unwrap().provider_id = Some(format!("openstack:///{}", c.id));
    nodes
        .create(&PostParams::default(), &worker_c)
        .await
        .unwrap();
    let port = listening_port();
    let (_ccm, _log) = stack.controller_manager(port);
    let routes = || {
        stack
            .cloud
            .with_state(|s| s.routers.values().next().unwrap().routes.clone())
    };
    let pairs = |server: &str| {
        stack.cloud.with_state(|s| {
            s.ports
                .values()
                .filter(|p| p.device_id == server)
                .flat_map(|p| p.allowed_address_pairs.iter().map(|(ip, _)| ip.clone()))
                .collect::<Vec<_>>()
        })
    };
    wait_until(
        TIMEOUT,
        "the three routes, and the blackhole gone",
        || async {
            let mut now = routes();
            now.sort();
            now == [
                ("10.244.1.0/24".to_string(), "10.0.0.11".to_string()),
                ("10.244.2.0/24".to_string(), "10.0.0.12".to_string()),
                ("10.244.3.0/24".to_string(), "10.0.0.13".to_string()),
            ]
        },
    )
    .await;
    // Each port's allowed address pair for its route.
    wait_until(TIMEOUT, "the ports' pairs", || async {
        pairs(&a.id) == ["10.244.1.0/24"] && pairs(&b.id) == ["10.244.2.0/24"]
    })
    .await;
    assert!(pairs(&c.id).is_empty());
    // Routed: worker-c's NetworkUnavailable is False, found by its address.
    wait_until(TIMEOUT, "worker-c's route recognised", || {
        network_available(&nodes, "worker-c")
    })
    .await;

    // node-b leaves the cluster: its route and its port's pair go.
    nodes
        .delete("node-b", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-b's route removed", || async {
        let mut now = routes();
        now.sort();
        now == [
            ("10.244.1.0/24".to_string(), "10.0.0.11".to_string()),
            ("10.244.3.0/24".to_string(), "10.0.0.13".to_string()),
        ]
    })
    .await;
    wait_until(TIMEOUT, "node-b's pair removed", || async {
        pairs(&b.id).is_empty()
    })
    .await;
    assert_eq!(pairs(&a.id), ["10.244.1.0/24"]);
}

/// A Neutron without `extraroute-atomic` and `allowed-address-pairs`, as occm's
/// `NewRoutes` serves it: the router's whole route list written back (four Nodes'
/// routes made at once, each write guarded by `If-Match: revision_number`), the ports
/// left alone; under deploy/openstack's policy exactly as the docs give it (it has the
/// whole-router `PUT` the fallback needs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_atomic_extension_the_routers_list_is_written_back() {
    let stack = OpenStackStack::start(|cloud| {
        cloud.with_state(|s| {
            s.network_extensions = ["router", "extraroute", "external-net", "revision-if-match"]
                .map(String::from)
                .to_vec();
            format!("[Route]\nrouter-id = {}\n", s.router_id())
        })
    })
    .await;
    let documented = std::fs::read_to_string(stack.dir.path().join("openstack.yaml")).unwrap();
    assert!(documented.contains("      - PUT **/v2.0/routers/*\n"));
    let nodes: Api<Node> = Api::all(stack.client());
    let mut wanted = Vec::new();
    for i in 1..=4 {
        let name = format!("node-{i}");
        let address = format!("10.0.0.{}", 10 + i);
        let cidr = format!("10.244.{i}.0/24");
        stack
            .cloud
            .with_state(|s| s.add_server(NewServer::named(&name, &address)));
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node_with_cidr(&name, Some(&cidr)),
            )
            .await
            .unwrap();
        wanted.push((cidr, address));
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    let routes = || {
        stack.cloud.with_state(|s| {
            let mut routes = s.routers.values().next().unwrap().routes.clone();
            routes.sort();
            routes
        })
    };
    wait_until(TIMEOUT, "the four routes", || async { routes() == wanted }).await;
    stack.cloud.with_state(|s| {
        assert!(s.ports.values().all(|p| p.allowed_address_pairs.is_empty()));
        assert!(
            !s.requests.iter().any(|r| r.contains("extraroutes")),
            "{:?}",
            s.requests
        );
        assert!(s.routers.values().next().unwrap().revision_number >= 5);
    });

    nodes
        .delete("node-2", &DeleteParams::default())
        .await
        .unwrap();
    wanted.remove(1);
    wait_until(TIMEOUT, "node-2's route removed", || async {
        routes() == wanted
    })
    .await;
}
