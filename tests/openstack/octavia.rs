//! What occm asks of Octavia by its provider and version: OVN's 501s left out, amphora
//! asked for when `lb-provider` is unset, an older or unreadable Octavia version's
//! optional features, a provider that needs serial member calls.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use wasm_ccm_tests::{listening_port, wait_until};

use super::migration::{load_balancer_service, wait_served};
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};

/// Octavia's OVN provider answers 501 for what it lacks; occm leaves those out (timeouts
/// and flavors silently, source ranges and zones with a Warning, HTTP monitors for a
/// monitor of the port's protocol).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ovn_provider_gets_what_it_supports() {
    let stack = OpenStackStack::start(|cloud| {
        format!(
            "{}lb-provider = ovn\ncreate-monitor = true\navailability-zone = az1\n\
             flavor-id = f1\n",
            lb_cloud_config(cloud)
        )
    })
    .await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut web = load_balancer_service(
        "web",
        json!({"loadbalancer.openstack.org/timeout-client-data": "9000"}),
    );
    let spec = web.spec.as_mut().unwrap();
    spec.load_balancer_source_ranges = Some(vec!["198.51.100.0/24".into()]);
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32_001);
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "web").await;
    stack.cloud.with_state(|s| {
        let lb = s.load_balancers.values().next().unwrap();
        assert_eq!(lb.provider, "ovn");
        let listener = s.listeners.values().next().unwrap();
        assert!(listener.allowed_cidrs.is_empty());
        assert!(listener.settings.keys().all(|k| !k.starts_with("timeout_")));
        assert_eq!(s.monitors.values().next().unwrap().kind, "TCP");
    });
    wasm_ccm_tests::events::wait_for_reasons(
        &stack.client(),
        "web",
        &[
            "LoadBalancerSourceRangesIgnored",
            "LoadBalancerAvailabilityZonesIgnored",
        ],
        super::TIMEOUT,
    )
    .await;
}

/// Without `lb-provider`, occm asks for `amphora` (its `ReadConfig` default): a cloud
/// whose Octavia default provider is OVN still gets an amphora load balancer, with the
/// source ranges and listener timeouts OVN would refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amphora_is_asked_for_when_lb_provider_is_unset() {
    let stack = OpenStackStack::start(|cloud| {
        cloud.with_state(|s| s.default_provider = "ovn".into());
        lb_cloud_config(cloud)
    })
    .await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut web = load_balancer_service(
        "web",
        json!({"loadbalancer.openstack.org/timeout-client-data": "9000"}),
    );
    web.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["198.51.100.0/24".into()]);
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "web").await;
    stack.cloud.with_state(|s| {
        let lb = s.load_balancers.values().next().unwrap();
        assert_eq!(lb.provider, "amphora");
        let listener = s.listeners.values().next().unwrap();
        assert_eq!(listener.allowed_cidrs, ["198.51.100.0/24"]);
        assert_eq!(listener.settings.get("timeout_client_data"), Some(&9000));
    });
}

/// An older Octavia (2.11, Train), as occm's `IsOctaviaFeatureSupported` gates it:
/// source ranges and an availability zone left out with occm's Warnings, and a UDP
/// port's monitor stays UDP-CONNECT with `externalTrafficPolicy: Local`. The double
/// refuses every field newer than its version, so nothing newer was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_octavia_gets_what_its_version_supports() {
    let stack = OpenStackStack::start(|cloud| {
        cloud.with_state(|s| s.octavia_version = (2, 11));
        format!("{}create-monitor = true\n", lb_cloud_config(cloud))
    })
    .await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut web = load_balancer_service(
        "web",
        json!({"loadbalancer.openstack.org/availability-zone": "az1"}),
    );
    let spec = web.spec.as_mut().unwrap();
    spec.load_balancer_source_ranges = Some(vec!["198.51.100.0/24".into()]);
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32_001);
    spec.ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "web").await;
    stack.cloud.with_state(|s| {
        let listener = s.listeners.values().next().unwrap();
        assert_eq!(listener.protocol, "UDP");
        assert!(listener.allowed_cidrs.is_empty());
        assert_eq!(s.monitors.values().next().unwrap().kind, "UDP-CONNECT");
        assert!(s.members.values().all(|m| m.monitor_port.is_none()));
    });
    wasm_ccm_tests::events::wait_for_reasons(
        &stack.client(),
        "web",
        &[
            "LoadBalancerSourceRangesIgnored",
            "LoadBalancerAvailabilityZonesIgnored",
        ],
        super::TIMEOUT,
    )
    .await;
}

/// An Octavia whose version document cannot be read (it answers 500): no optional
/// feature is assumed, as occm's `IsOctaviaFeatureSupported` answers false when
/// `getOctaviaVersion` fails. The listener gets neither allowed CIDRs nor the timeout
/// asked for, and the source ranges and availability zone are left out with occm's
/// Warnings; the load balancer is served all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_octavia_version_assumes_no_feature_as_occm() {
    let stack = OpenStackStack::start(|cloud| {
        cloud.with_state(|s| s.octavia_versions_fail = true);
        lb_cloud_config(cloud)
    })
    .await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut web = load_balancer_service(
        "web",
        json!({"loadbalancer.openstack.org/availability-zone": "az1",
               "loadbalancer.openstack.org/timeout-client-data": "9000"}),
    );
    let spec = web.spec.as_mut().unwrap();
    spec.load_balancer_source_ranges = Some(vec!["198.51.100.0/24".into()]);
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "web").await;
    stack.cloud.with_state(|s| {
        let listener = s.listeners.values().next().unwrap();
        assert!(listener.allowed_cidrs.is_empty());
        assert!(!listener.settings.contains_key("timeout_client_data"));
        assert_eq!(listener.tags, ["kube_service_kubernetes_default_web"]);
    });
    wasm_ccm_tests::events::wait_for_reasons(
        &stack.client(),
        "web",
        &[
            "LoadBalancerSourceRangesIgnored",
            "LoadBalancerAvailabilityZonesIgnored",
        ],
        super::TIMEOUT,
    )
    .await;
}

/// `provider-requires-serial-api-calls = true`, for an Octavia provider without batch
/// calls (the double answers 501 to `PUT /lbaas/pools/{id}/members` on its load
/// balancers): members are created and deleted one call at a time, as occm's
/// `SeriallyReconcilePoolMembers` makes them: a `POST` per Node, one more for a Node
/// joining, one `DELETE` for a Node leaving, never the batch update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_api_calls_make_members_one_call_at_a_time_as_occm() {
    use k8s_openapi::api::core::v1::Node;
    use openstack_double::state::NewServer;
    let stack = OpenStackStack::start(|cloud| {
        cloud.with_state(|s| s.serial_providers = vec!["vendor".into()]);
        format!(
            "{}lb-provider = vendor\nprovider-requires-serial-api-calls = true\n",
            lb_cloud_config(cloud)
        )
    })
    .await;
    stack.cloud.with_state(|s| {
        for (name, ip) in [
            ("node-a", "10.0.0.11"),
            ("node-b", "10.0.0.12"),
            ("node-c", "10.0.0.13"),
        ] {
            s.add_server(NewServer::named(name, ip));
        }
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in ["node-a", "node-b"] {
        nodes
            .create(&PostParams::default(), &super::kubelet_node(name))
            .await
            .unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    for name in ["node-a", "node-b"] {
        wait_until(TIMEOUT, &format!("{name}'s addresses"), || async {
            !wasm_ccm_tests::node_addresses(&nodes, name)
                .await
                .is_empty()
        })
        .await;
    }
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let created = services
        .create(
            &PostParams::default(),
            &load_balancer_service("web", json!({})),
        )
        .await
        .unwrap();
    let node_port = created.spec.unwrap().ports.unwrap()[0].node_port.unwrap() as u16;
    // The members (address, name), and the member calls asked of the double: creations,
    // deletions, batch updates.
    let members = |s: &openstack_double::State| {
        let mut m: Vec<(String, String)> = s
            .members
            .values()
            .map(|m| (m.address.clone(), m.name.clone()))
            .collect();
        m.sort();
        m
    };
    let calls = |s: &openstack_double::State| {
        let count = |method: &str, member: bool| {
            s.requests
                .iter()
                .filter(|r| {
                    r.starts_with(method)
                        && if member {
                            r.contains("/members/")
                        } else {
                            r.ends_with("/members")
                        }
                })
                .count()
        };
        (
            count("POST ", false),
            count("DELETE ", true),
            count("PUT ", false),
        )
    };
    let member = |node: &str, ip: &str| (ip.to_string(), format!("member_{node}_{ip}_{node_port}"));

    wasm_ccm_tests::events::wait_for_reason(&stack.client(), "web", "EnsuredLoadBalancer", TIMEOUT)
        .await;
    wait_until(TIMEOUT, "node-a and node-b members", || async {
        stack.cloud.with_state(|s| members(s).len() == 2)
    })
    .await;
    stack.cloud.with_state(|s| {
        assert_eq!(s.load_balancers.values().next().unwrap().provider, "vendor");
        assert_eq!(
            members(s),
            [member("node-a", "10.0.0.11"), member("node-b", "10.0.0.12")]
        );
        assert_eq!(calls(s), (2, 0, 0), "{:?}", s.requests);
    });

    // A Node joins: one member created.
    nodes
        .create(
            &PostParams::default(),
            &wasm_ccm_tests::kubelet_node_with_node_ip("node-c", None, "10.0.0.13"),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-c a member", || async {
        stack.cloud.with_state(|s| members(s).len() == 3)
    })
    .await;
    stack
        .cloud
        .with_state(|s| assert_eq!(calls(s), (3, 0, 0), "{:?}", s.requests));

    // A Node leaves: its member deleted, the others kept.
    nodes
        .delete("node-b", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-b's member gone", || async {
        stack.cloud.with_state(|s| members(s).len() == 2)
    })
    .await;
    wasm_ccm_tests::events::wait_for_reasons(
        &stack.client(),
        "web",
        &["EnsuredLoadBalancer", "UpdatedLoadBalancer"],
        TIMEOUT,
    )
    .await;
    stack.cloud.with_state(|s| {
        assert_eq!(
            members(s),
            [member("node-a", "10.0.0.11"), member("node-c", "10.0.0.13")]
        );
        assert_eq!(calls(s), (3, 1, 0), "{:?}", s.requests);
    });
}
