//! occm's `manage-security-groups` (`pkg/openstack/loadbalancer_sg.go`): each Service
//! gets the security group `lb-sg-<uid>-<namespace>-<name>`, its rules opening the
//! node ports (and the health check node port) from the members' subnet, on its member
//! Nodes' ports beside their other groups; a Node joining gets it; the group goes with
//! the Service, and with the setting off a group occm left is deleted at the next
//! ensure. Nodes and routes are served throughout, and no group of another name (the
//! project's `default`, an operator's) is ever touched.

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use openstack_double::OpenStackDouble;
use openstack_double::state::NewServer;
use serde_json::json;
use wasm_ccm_tests::{initialized, kubelet_node_with_node_ip, listening_port, wait_until};

use super::migration::wait_served;
use super::{OpenStackStack, TIMEOUT, kubelet_node_with_cidr, lb_cloud_config};

/// The cloud config's `[LoadBalancer]` (with `extra`) and the router for routes.
fn cloud_config(cloud: &OpenStackDouble, extra: &str) -> String {
    format!(
        "{}{extra}[Route]\nrouter-id = {}\n",
        lb_cloud_config(cloud),
        cloud.with_state(|s| s.router_id())
    )
}

/// Service `web`: TCP 80 and UDP 53, `externalTrafficPolicy: Local` (a health check
/// node port).
fn web() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                           {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]}
    }))
    .unwrap()
}

/// The security groups of `server`'s ports.
fn groups_of(stack: &OpenStackStack, server: &str) -> Vec<String> {
    stack.cloud.with_state(|s| {
        s.ports
            .values()
            .filter(|p| p.device_id == server)
            .flat_map(|p| p.security_groups.clone())
            .collect()
    })
}

/// The router's routes, sorted.
fn routes(stack: &OpenStackStack) -> Vec<(String, String)> {
    stack.cloud.with_state(|s| {
        let mut routes = s.routers.values().next().unwrap().routes.clone();
        routes.sort();
        routes
    })
}

/// A rule as the tests compare it: (direction, ethertype, protocol, port, remote).
type RuleView = (String, String, Option<String>, Option<u32>, Option<String>);

fn rules(stack: &OpenStackStack, group: &str) -> Vec<RuleView> {
    stack.cloud.with_state(|s| {
        let mut rules: Vec<RuleView> = s
            .rules_of(group)
            .into_iter()
            .map(|r| {
                assert_eq!(r.port_range_min, r.port_range_max);
                (
                    r.direction,
                    r.ethertype,
                    r.protocol,
                    r.port_range_min,
                    r.remote_ip_prefix,
                )
            })
            .collect();
        rules.sort();
        rules
    })
}

fn ingress(protocol: &str, port: i32) -> RuleView {
    (
        "ingress".into(),
        "IPv4".into(),
        Some(protocol.into()),
        Some(port as u32),
        Some("10.0.0.0/16".into()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_services_security_group_is_on_its_nodes_ports_and_goes_with_it() {
    let stack =
        OpenStackStack::start(|cloud| cloud_config(cloud, "manage-security-groups = true\n")).await;
    // node-a's port is also in an operator's group, which stays.
    let (a, b, operators) = stack.cloud.with_state(|s| {
        let a = s.add_server(NewServer::named("node-a", "10.0.0.11"));
        let b = s.add_server(NewServer::named("node-b", "10.0.0.12"));
        let operators = s.add_security_group("lb-sg-operator", "an operator's").id;
        for port in s.ports.values_mut().filter(|p| p.device_id == a.id) {
            port.security_groups.push(operators.clone());
        }
        (a, b, operators)
    });
    let default_group = stack.cloud.with_state(|s| s.default_security_group());
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(
            &PostParams::default(),
            &kubelet_node_with_cidr("node-a", Some("10.244.1.0/24")),
        )
        .await
        .unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "node-a initialized", || {
        initialized(&nodes, "node-a")
    })
    .await;

    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let created = services
        .create(&PostParams::default(), &web())
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let spec = created.spec.clone().unwrap();
    let node_port = |i: usize| spec.ports.as_ref().unwrap()[i].node_port.unwrap();
    let health_check = spec.health_check_node_port.unwrap();
    wait_served(&services, "web").await;

    // occm's group, description and rules (Neutron's default egress rules deleted, as
    // occm deletes every rule it does not want); node-a's port keeps its groups.
    let name = format!("lb-sg-{uid}-default-web");
    let group = stack.cloud.with_state(|s| {
        let groups = s.security_groups_named(&name);
        assert_eq!(groups.len(), 1, "{:?}", s.security_groups);
        assert_eq!(
            groups[0].description,
            "Security Group for default/web Service LoadBalancer in cluster kubernetes"
        );
        groups[0].id.clone()
    });
    let mut expected = vec![
        ingress("tcp", health_check),
        ingress("tcp", node_port(0)),
        ingress("udp", node_port(1)),
    ];
    expected.sort();
    assert_eq!(rules(&stack, &group), expected);
    assert_eq!(
        groups_of(&stack, &a.id),
        [default_group.clone(), operators.clone(), group.clone()]
    );

    // node-b joins: its port gets the group; its route comes as ever.
    nodes
        .create(
            &PostParams::default(),
            &kubelet_node_with_node_ip("node-b", Some("10.244.2.0/24"), "10.0.0.12"),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-b's port in the group", || async {
        groups_of(&stack, &b.id) == [default_group.clone(), group.clone()]
    })
    .await;
    wait_until(TIMEOUT, "both routes", || async {
        routes(&stack)
            == [
                ("10.244.1.0/24".to_string(), "10.0.0.11".to_string()),
                ("10.244.2.0/24".to_string(), "10.0.0.12".to_string()),
            ]
    })
    .await;
    // Nothing made twice across the syncs.
    assert_eq!(
        stack
            .cloud
            .with_state(|s| s.security_groups_named(&name).len()),
        1
    );
    assert_eq!(rules(&stack, &group), expected);

    // The Service goes: its group off both ports, then deleted; the other groups, the
    // Nodes and the routes stay.
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the Service gone", || async {
        services.get_opt("web").await.is_ok_and(|s| s.is_none())
    })
    .await;
    stack.cloud.with_state(|s| {
        assert!(s.security_groups_named(&name).is_empty());
        assert!(s.ports_in_group(&group).is_empty());
        assert!(s.security_groups.contains_key(&operators));
        assert!(s.security_groups.contains_key(&default_group));
        assert!(
            s.security_group_rules
                .values()
                .all(|r| r.security_group_id != group)
        );
        assert_eq!(s.load_balancer_resources(), 0);
    });
    assert_eq!(
        groups_of(&stack, &a.id),
        [default_group.clone(), operators.clone()]
    );
    assert_eq!(
        groups_of(&stack, &b.id),
        std::slice::from_ref(&default_group)
    );
    assert_eq!(routes(&stack).len(), 2);
    for name in ["node-a", "node-b"] {
        assert!(initialized(&nodes, name).await, "{name}");
    }
}

/// occm's `ensureOctaviaLoadBalancer` with `manage-security-groups` off deletes the
/// Service's group (one a former configuration made) so a reconfiguration leaves
/// nothing: taken off the port that has it, then deleted; an operator's group whose
/// name only starts like it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_setting_off_an_ensure_deletes_the_group_occm_left() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let created = services
        .create(&PostParams::default(), &web())
        .await
        .unwrap();
    let name = format!("lb-sg-{}-default-web", created.metadata.uid.unwrap());
    stack.add_node_a().await;
    let (left, similar, server) = stack.cloud.with_state(|s| {
        let left = s
            .add_security_group(&name, "Security Group for default/web")
            .id;
        let similar = s.add_security_group(&format!("{name}-x"), "not occm's").id;
        let server = s.servers.values().next().unwrap().id.clone();
        for port in s.ports.values_mut().filter(|p| p.device_id == server) {
            port.security_groups.push(left.clone());
            port.tags.push(left.clone());
        }
        (left, similar, server)
    });
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "web").await;
    wait_until(TIMEOUT, "the group occm left deleted", || async {
        stack
            .cloud
            .with_state(|s| !s.security_groups.contains_key(&left))
    })
    .await;
    let default_group = stack.cloud.with_state(|s| s.default_security_group());
    assert_eq!(groups_of(&stack, &server), [default_group]);
    stack.cloud.with_state(|s| {
        assert!(s.security_groups.contains_key(&similar));
        assert!(
            s.ports
                .values()
                .filter(|p| p.device_id == server)
                .all(|p| p.tags.is_empty())
        );
    });
}
