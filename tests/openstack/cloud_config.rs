//! The cloud config and the cluster as occm takes them: networks found when the config
//! names none, what occm's reader ignores, a cluster without Nodes.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use wasm_ccm_tests::{listening_port, wait_until};

use super::migration::{load_balancer_service, wait_served};
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};
use wasm_ccm_tests::ingress_ip;

/// With no network in the cloud config, occm finds them: the VIP subnet of a Node's
/// address, the first external network with an IPv4 subnet for the floating IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn networks_are_found_when_the_config_names_none() {
    use k8s_openapi::api::core::v1::Node;
    let stack = OpenStackStack::start(|_| String::new()).await;
    stack.cloud.with_state(|s| {
        s.add_server(openstack_double::state::NewServer::named(
            "node-a",
            "10.0.0.11",
        ));
    });
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &super::kubelet_node("node-a"))
        .await
        .unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "node-a initialized", || {
        wasm_ccm_tests::initialized(&nodes, "node-a")
    })
    .await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("web", json!({})),
        )
        .await
        .unwrap();
    wait_served(&services, "web").await;
    let address = ingress_ip(&services.get("web").await.unwrap()).unwrap();
    stack.cloud.with_state(|s| {
        let private = s.network_id("private").unwrap();
        let subnet = s.subnet_of(&private).unwrap().id.clone();
        let public = s.network_id("public").unwrap();
        let lb = s.load_balancers.values().next().unwrap();
        assert_eq!(lb.vip_subnet_id, subnet);
        let fip = s.floating_ips.values().next().unwrap();
        assert_eq!(fip.floating_network_id, public);
        assert_eq!(fip.floating_ip_address, address);
    });
}

/// occm reads its cloud.conf with `gcfg.FatalOnly` (`ReadConfig`): a section, a
/// subsection or a variable it has no place for is dropped, not an error. Here one in
/// `[LoadBalancer]`, one in a `[LoadBalancerClass "name"]`, a `[Nope]` section and a
/// `[Global "extra"]` subsection (whose `region` would break every endpoint if read):
/// wasm-ccm starts with the file as occm does, the class serves with the variables it
/// has, and a warning names each one ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_sections_and_variables_are_ignored_with_a_warning_as_occm() {
    let stack = OpenStackStack::start(|cloud| {
        let other = cloud.with_state(|s| {
            let network = s.network("public2", true);
            s.subnet(&network, "198.18.0.0/24");
            network
        });
        format!(
            "{}lb-typo-setting = 1\n\
             [LoadBalancerClass \"other\"]\nfloating-network-id = {other}\n\
             not-a-class-setting = x\n\
             [Nope]\nx = 1\n\
             [Global \"extra\"]\nregion = elsewhere\n",
            lb_cloud_config(cloud)
        )
    })
    .await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service(
                "classy",
                json!({"loadbalancer.openstack.org/class": "other"}),
            ),
        )
        .await
        .unwrap();
    let (_ccm, log) = stack.controller_manager(listening_port());
    wait_served(&services, "classy").await;
    let ip = ingress_ip(&services.get("classy").await.unwrap()).unwrap();
    assert!(ip.starts_with("198.18.0."), "{ip}");
    let said = || log.lock().unwrap().clone();
    wait_until(TIMEOUT, "a warning naming each one ignored", || async {
        let text = said();
        [
            "variable=lbtyposetting",
            "has no such variable",
            "variable=notaclasssetting",
            "section not known",
            "section=nope",
            "has subsections",
        ]
        .iter()
        .all(|words| text.contains(words))
    })
    .await;
}

/// occm's `checkService` (`ensureOctaviaLoadBalancer`): a LoadBalancer Service in a
/// cluster without Nodes gets no load balancer ("there are no available nodes for
/// LoadBalancer service"), and nothing is written to Octavia or Neutron; once a Node
/// joins, a retry serves it (the VIP subnet found from the Node, the cloud config naming
/// none). When the last Node leaves, the update empties the pool and keeps the load
/// balancer and its address, as occm's `updateOctaviaLoadBalancer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_load_balancer_without_nodes_as_occm() {
    use k8s_openapi::api::core::v1::Node;
    let stack = OpenStackStack::start(|_| String::new()).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut web = load_balancer_service("web", json!({}));
    web.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(30080);
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "web refused for want of Nodes", || async {
        wasm_ccm_tests::events::notes(&stack.client(), "web", "SyncLoadBalancerFailed")
            .await
            .iter()
            .any(|m| {
                m.contains("there are no available nodes for LoadBalancer service default/web")
            })
    })
    .await;
    stack.cloud.with_state(|s| {
        assert!(s.load_balancers.is_empty());
        assert!(s.floating_ips.is_empty());
        let writes: Vec<&String> = s
            .requests
            .iter()
            .filter(|r| !r.starts_with("GET "))
            .filter(|r| r.contains("/lbaas/") || r.contains("/floatingips"))
            .collect();
        assert!(writes.is_empty(), "{writes:?}");
    });
    assert_eq!(ingress_ip(&services.get("web").await.unwrap()), None);

    // A Node joins: a retry serves the Service, the Node its member.
    stack.add_node_a().await;
    wait_served(&services, "web").await;
    let members = || {
        stack.cloud.with_state(|s| {
            s.members
                .values()
                .map(|m| (m.address.clone(), m.protocol_port))
                .collect::<Vec<_>>()
        })
    };
    wait_until(TIMEOUT, "node-a's member", || async {
        members() == [("10.0.0.11".to_string(), 30080)]
    })
    .await;
    let address = ingress_ip(&services.get("web").await.unwrap()).unwrap();

    // The last Node leaves: the pool is emptied, the load balancer and its address stay.
    Api::<Node>::all(stack.client())
        .delete("node-a", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-a's member removed", || async {
        members().is_empty()
    })
    .await;
    stack.cloud.with_state(|s| {
        assert_eq!(s.load_balancers.len(), 1);
        assert_eq!(s.floating_ips.len(), 1);
    });
    assert_eq!(
        ingress_ip(&services.get("web").await.unwrap()).as_deref(),
        Some(address.as_str())
    );
}
