//! occm's security semantics for floating IPs and internal load balancers: only the
//! floating IPs this controller made are deleted, a Service made internal loses its
//! floating IP, an internal Service's `loadBalancerIP` is its VIP, an IPv6 VIP gets no
//! floating IP, and `internal-lb = true` cannot be undone by an annotation. Where a
//! floating IP comes from (occm's floating subnet by ID, name pattern or tags) and a
//! VIP on a port the operator made (`port-id`). The internal annotation read as occm
//! reads booleans.

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{events, listening_port, wait_until};

use super::migration::{load_balancer_service, wait_served};
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};
use wasm_ccm_tests::ingress_ip;

const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floating_ips_follow_occms_rules() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    // A load balancer occm made, with a floating IP someone made by hand.
    let (foreign_lb, foreign_fip) = stack.cloud.with_state(|s| {
        let lb = s.add_load_balancer("kube_service_kubernetes_default_foreign");
        let port = s.load_balancers[&lb].vip_port_id.clone();
        (lb, s.add_floating_ip(&port, "reserved by the network team"))
    });
    let v6_subnet = stack.cloud.with_state(|s| {
        let network = s.network("private6", false);
        s.subnet(&network, "fd00:10::/64")
    });
    for service in [
        load_balancer_service(
            "foreign",
            json!({"loadbalancer.openstack.org/load-balancer-id": foreign_lb}),
        ),
        load_balancer_service("ext", json!({})),
        load_balancer_service(
            "v6",
            json!({"loadbalancer.openstack.org/subnet-id": v6_subnet}),
        ),
    ] {
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
    }
    let mut internal = load_balancer_service("int-ip", json!({ INTERNAL: "true" }));
    internal.spec.as_mut().unwrap().load_balancer_ip = Some("10.0.5.5".into());
    services
        .create(&PostParams::default(), &internal)
        .await
        .unwrap();

    let (_ccm, _log) = stack.controller_manager(listening_port());
    let served = |name: &'static str| {
        let services = services.clone();
        async move { services.get(name).await.ok().and_then(|s| ingress_ip(&s)) }
    };
    for name in ["foreign", "ext", "v6", "int-ip"] {
        wait_until(TIMEOUT, &format!("{name} served"), || async {
            served(name).await.is_some()
        })
        .await;
    }
    assert_eq!(
        served("foreign").await.as_deref(),
        Some(foreign_fip.floating_ip_address.as_str())
    );
    // An internal Service's loadBalancerIP is its VIP.
    assert_eq!(served("int-ip").await.as_deref(), Some("10.0.5.5"));
    stack.cloud.with_state(|s| {
        let lb = s
            .load_balancers
            .values()
            .find(|lb| lb.name == "kube_service_kubernetes_default_int-ip")
            .unwrap();
        assert_eq!(lb.vip_address, "10.0.5.5");
        assert!(
            !s.floating_ips
                .values()
                .any(|f| f.port_id.as_deref() == Some(lb.vip_port_id.as_str()))
        );
    });
    // An IPv6 VIP is the address; no floating IP, and occm's Warning says why.
    let v6 = served("v6").await.unwrap();
    assert!(v6.starts_with("fd00:10::"), "{v6}");
    events::wait_for_reason(
        &stack.client(),
        "v6",
        "LoadBalancerFloatingIPSkipped",
        TIMEOUT,
    )
    .await;
    assert!(
        events::notes(&stack.client(), "v6", "LoadBalancerFloatingIPSkipped")
            .await
            .iter()
            .any(
                |n| n.contains("Floating IP not supported for IPv6 Service default/v6")
                    && n.contains(&v6)
            ),
    );

    // ext becomes internal: its floating IP (made here) is released, the VIP serves.
    let ext_fip = served("ext").await.unwrap();
    services
        .patch(
            "ext",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": { INTERNAL: "true" }}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "ext internal", || async {
        served("ext").await.is_some_and(|ip| ip != ext_fip)
            && stack.cloud.with_state(|s| {
                !s.floating_ips
                    .values()
                    .any(|f| f.floating_ip_address == ext_fip)
            })
    })
    .await;
    assert!(served("ext").await.unwrap().starts_with("10.0."));

    // foreign goes: its load balancer with it, the hand-made floating IP only unbound.
    services
        .delete("foreign", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "foreign deleted", || async {
        services.get_opt("foreign").await.is_ok_and(|s| s.is_none())
    })
    .await;
    stack.cloud.with_state(|s| {
        assert!(!s.load_balancers.contains_key(&foreign_lb));
        let fip = &s.floating_ips[&foreign_fip.id];
        assert_eq!(fip.port_id, None);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_lb_in_the_cloud_config_cannot_be_undone_by_an_annotation() {
    let stack =
        OpenStackStack::start(|cloud| format!("{}internal-lb = true\n", lb_cloud_config(cloud)))
            .await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("web", json!({ INTERNAL: "false" })),
        )
        .await
        .unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "web").await;
    let ip = ingress_ip(&services.get("web").await.unwrap()).unwrap();
    assert!(ip.starts_with("10.0."), "{ip}");
    stack
        .cloud
        .with_state(|s| assert!(s.floating_ips.is_empty()));
    events::wait_for_reason(
        &stack.client(),
        "web",
        "InternalLoadBalancerEnforced",
        TIMEOUT,
    )
    .await;
}

/// A `[LoadBalancerClass "name"]` in occm's order (`checkService`,
/// `createOctaviaLoadBalancer`): its floating network beats the Service's annotation,
/// and its `subnet-id` the annotation's for an external Service's VIP (an internal
/// Service's VIP is the annotation's, occm's `getSubnetID`). The members' subnet is
/// `[LoadBalancer] subnet-id`, before the class's and the annotation's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_beats_the_annotations_as_occm() {
    let stack = OpenStackStack::start(|cloud| {
        let (public2, class_subnet) = cloud.with_state(|s| {
            let public2 = s.network("public2", true);
            s.subnet(&public2, "198.18.0.0/24");
            let private2 = s.network("private2", false);
            (public2, s.subnet(&private2, "10.9.0.0/24"))
        });
        format!(
            "{}[LoadBalancerClass \"pinned\"]\nfloating-network-id = {public2}\n\
             subnet-id = {class_subnet}\n",
            lb_cloud_config(cloud)
        )
    })
    .await;
    stack.add_node_a().await;
    let (public, config_subnet, class_subnet) = stack.cloud.with_state(|s| {
        let private = s.network_id("private").unwrap();
        let private2 = s.network_id("private2").unwrap();
        (
            s.network_id("public").unwrap(),
            s.subnet_of(&private).unwrap().id.clone(),
            s.subnet_of(&private2).unwrap().id.clone(),
        )
    });
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let annotations = |internal: &str| {
        json!({"loadbalancer.openstack.org/class": "pinned",
               "loadbalancer.openstack.org/floating-network-id": public,
               "loadbalancer.openstack.org/subnet-id": config_subnet,
               INTERNAL: internal})
    };
    for service in [
        load_balancer_service("pinned", annotations("false")),
        load_balancer_service("inside", annotations("true")),
    ] {
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "pinned").await;
    wait_served(&services, "inside").await;
    let ip = ingress_ip(&services.get("pinned").await.unwrap()).unwrap();
    assert!(
        ip.starts_with("198.18.0."),
        "the class's floating network: {ip}"
    );
    stack.cloud.with_state(|s| {
        let lb = |name: &str| {
            s.load_balancers
                .values()
                .find(|lb| lb.name == format!("kube_service_kubernetes_default_{name}"))
                .unwrap()
        };
        assert_eq!(lb("pinned").vip_subnet_id, class_subnet);
        assert_eq!(lb("inside").vip_subnet_id, config_subnet);
        assert!(!s.members.is_empty());
        for member in s.members.values() {
            assert_eq!(member.subnet_id.as_deref(), Some(config_subnet.as_str()));
        }
    });
}

/// Boolean annotations as occm's `getBoolFromServiceAnnotation` reads them: exactly
/// `true` or `false`. `True` on a Service occm made external is ignored, with a Warning
/// naming it: the Service stays external and keeps occm's floating IP. `true` makes
/// a Service internal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_occms_true_makes_a_service_internal() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
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
    // The load balancer occm made for the external Service, with occm's floating IP.
    let (occm_lb, occm_fip) = stack.cloud.with_state(|s| {
        let lb = s.add_load_balancer("kube_service_kubernetes_default_capital");
        let port = s.load_balancers[&lb].vip_port_id.clone();
        let fip = s.add_floating_ip(
            &port,
            "Floating IP for Kubernetes external service default/capital from cluster kubernetes",
        );
        (lb, fip)
    });
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    for service in [
        load_balancer_service(
            "capital",
            json!({ INTERNAL: "True", "loadbalancer.openstack.org/load-balancer-id": occm_lb }),
        ),
        load_balancer_service("lower", json!({ INTERNAL: "true" })),
    ] {
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "capital").await;
    wait_served(&services, "lower").await;
    wait_until(TIMEOUT, "a Warning naming the annotation", || async {
        events::notes(&stack.client(), "capital", "LoadBalancerAnnotationIgnored")
            .await
            .iter()
            .any(|m| m.contains(INTERNAL) && m.contains("`True`"))
    })
    .await;
    assert_eq!(
        ingress_ip(&services.get("capital").await.unwrap()).as_deref(),
        Some(occm_fip.floating_ip_address.as_str())
    );
    let lower = ingress_ip(&services.get("lower").await.unwrap()).unwrap();
    assert!(lower.starts_with("10.0."), "{lower}");
    stack.cloud.with_state(|s| {
        let kept = s
            .floating_ips
            .get(&occm_fip.id)
            .expect("occm's floating IP");
        assert_eq!(kept.port_id, occm_fip.port_id);
        let lower = s
            .load_balancers
            .values()
            .find(|lb| lb.name == "kube_service_kubernetes_default_lower")
            .unwrap();
        assert!(
            !s.floating_ips
                .values()
                .any(|f| f.port_id.as_deref() == Some(lower.vip_port_id.as_str()))
        );
    });
    assert!(
        events::notes(&stack.client(), "lower", "LoadBalancerAnnotationIgnored")
            .await
            .is_empty()
    );
}

/// The double's public network with three more subnets: `public-full` (tagged `lb`,
/// out of addresses), `public-b` (tagged `lb`) and `other` (tagged `x`); the cloud
/// config asks for subnets tagged `lb`.
fn with_floating_subnets(cloud: &openstack_double::OpenStackDouble) -> String {
    cloud.with_state(|s| {
        let public = s.network_id("public").unwrap();
        for (name, cidr, tag, exhausted) in [
            ("public-full", "198.18.1.0/24", "lb", true),
            ("public-b", "198.18.2.0/24", "lb", false),
            ("other", "198.18.3.0/24", "x", false),
        ] {
            let id = s.subnet(&public, cidr);
            let subnet = s.subnets.get_mut(&id).unwrap();
            subnet.name = name.into();
            subnet.tags = vec![tag.into()];
            subnet.exhausted = exhausted;
        }
    });
    format!("{}floating-subnet-tags = lb\n", lb_cloud_config(cloud))
}

/// occm's `floatingSubnetSpec`: the cloud config's subnet tags (the first matching
/// subnet out of addresses, the next one used), an annotation's name pattern in their
/// place, a pattern nothing matches refused naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floating_subnets_as_occm() {
    let stack = OpenStackStack::start(with_floating_subnets).await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    for service in [
        load_balancer_service("tagged", json!({})),
        load_balancer_service(
            "by-name",
            json!({"loadbalancer.openstack.org/floating-subnet": "~oth.r"}),
        ),
        load_balancer_service(
            "nowhere",
            json!({"loadbalancer.openstack.org/floating-subnet": "none-*"}),
        ),
    ] {
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    for (name, prefix) in [("tagged", "198.18.2."), ("by-name", "198.18.3.")] {
        wait_served(&services, name).await;
        let ip = ingress_ip(&services.get(name).await.unwrap()).unwrap();
        assert!(ip.starts_with(prefix), "{name}: {ip}");
    }
    wait_until(TIMEOUT, "nowhere refused naming its pattern", || async {
        events::messages(&stack.client(), "nowhere")
            .await
            .iter()
            .any(|m| m.contains("no subnet matching name pattern `none-*`"))
    })
    .await;
    assert_eq!(ingress_ip(&services.get("nowhere").await.unwrap()), None);
}

/// `port-id`: the operator's port is the VIP (its floating IP from the subnet the
/// `floating-subnet-id` annotation names, in place of the cloud config's tags), and
/// the port stays when the Service goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vip_on_the_operators_port_as_occm() {
    let stack = OpenStackStack::start(with_floating_subnets).await;
    stack.add_node_a().await;
    let (first_public, port) = stack.cloud.with_state(|s| {
        let public = s.network_id("public").unwrap();
        (
            s.subnet_of(&public).unwrap().id.clone(),
            s.add_port("private"),
        )
    });
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service(
                "on-port",
                json!({"loadbalancer.openstack.org/port-id": port.id,
                       "loadbalancer.openstack.org/floating-subnet-id": first_public}),
            ),
        )
        .await
        .unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "on-port").await;
    let ip = ingress_ip(&services.get("on-port").await.unwrap()).unwrap();
    assert!(ip.starts_with("203.0.113."), "{ip}");
    stack.cloud.with_state(|s| {
        let lb = s
            .load_balancers
            .values()
            .find(|lb| lb.name.ends_with("_on-port"))
            .unwrap();
        assert_eq!(lb.vip_port_id, port.id);
        assert_eq!(lb.vip_address, port.fixed_ips[0].1);
        assert!(
            s.floating_ips
                .values()
                .any(|f| f.port_id.as_deref() == Some(port.id.as_str()))
        );
    });

    // The Service goes: its load balancer and floating IP with it, the port stays.
    services
        .delete("on-port", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "on-port deleted", || async {
        services.get_opt("on-port").await.is_ok_and(|s| s.is_none())
    })
    .await;
    stack.cloud.with_state(|s| {
        assert!(
            !s.load_balancers
                .values()
                .any(|lb| lb.name.ends_with("_on-port"))
        );
        assert!(
            !s.floating_ips
                .values()
                .any(|f| f.port_id.as_deref() == Some(port.id.as_str()))
        );
        assert!(s.ports[&port.id].device_id.is_empty());
    });
}
