//! occm's Service settings served as occm serves them: session affinity, the legacy
//! source ranges annotation, listener timeouts back to their defaults; a cloud config
//! with what occm ignores; a cluster without Nodes.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{listening_port, wait_for, wait_until};

use super::migration::{load_balancer_service, wait_served};
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};
use wasm_ccm_tests::ingress_ip;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_source_ranges_and_timeouts_as_occm() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut web = load_balancer_service(
        "web",
        json!({
            "service.beta.kubernetes.io/load-balancer-source-ranges": "198.51.100.0/24, 203.0.113.7/32",
            "loadbalancer.openstack.org/timeout-client-data": "9000",
        }),
    );
    web.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    services.create(&PostParams::default(), &web).await.unwrap();
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served(&services, "web").await;
    stack.cloud.with_state(|s| {
        let listener = s.listeners.values().next().unwrap();
        assert_eq!(
            listener.allowed_cidrs,
            ["198.51.100.0/24", "203.0.113.7/32"]
        );
        assert_eq!(listener.settings.get("timeout_client_data"), Some(&9000));
        let pool = s.pools.values().next().unwrap();
        assert_eq!(pool.session_persistence.as_deref(), Some("SOURCE_IP"));
    });

    // Affinity off, the timeout annotation removed: no persistence, Octavia's default.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"loadbalancer.openstack.org/timeout-client-data": null}},
                "spec": {"sessionAffinity": "None"}})),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "persistence and timeout back to defaults",
        || async {
            stack.cloud.with_state(|s| {
                let listener = s.listeners.values().next().unwrap();
                let pool = s.pools.values().next().unwrap();
                pool.session_persistence.is_none()
                    && listener.settings.get("timeout_client_data") == Some(&50000)
            })
        },
    )
    .await;

    // x-forwarded-for turned on: the TCP listener on port 80 is replaced by an HTTP one
    // (Octavia holds one listener per port and transport).
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"loadbalancer.openstack.org/x-forwarded-for": "true"}}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "one HTTP listener", || async {
        stack.cloud.with_state(|s| {
            s.listeners.len() == 1
                && s.listeners.values().next().unwrap().protocol == "HTTP"
                && s.pools.len() == 1
                && s.pools.values().next().unwrap().protocol == "HTTP"
        })
    })
    .await;
}

/// `[LoadBalancerClass "name"]` sections picked by `loadbalancer.openstack.org/class`,
/// and the status as occm's `createLoadBalancerStatus`: the `hostname` annotation,
/// `<address>.<suffix>` for a PROXY protocol Service with `enable-ingress-hostname`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_and_status_hostnames_as_occm() {
    let stack = OpenStackStack::start(|cloud| {
        let other = cloud.with_state(|s| {
            let public = s.network_id("public").unwrap();
            let tagged = s.subnet(&public, "198.18.9.0/24");
            s.subnets.get_mut(&tagged).unwrap().tags = vec!["x".into()];
            let network = s.network("public2", true);
            s.subnet(&network, "198.18.0.0/24");
            network
        });
        format!(
            "{}enable-ingress-hostname = true\ningress-hostname-suffix = example.net\n\
             [LoadBalancerClass \"other\"]\nfloating-network-id = {other}\n\
             [LoadBalancerClass \"tagged\"]\nfloating-subnet-tags = x\n",
            lb_cloud_config(cloud)
        )
    })
    .await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    for service in [
        load_balancer_service(
            "classy",
            json!({"loadbalancer.openstack.org/class": "other"}),
        ),
        load_balancer_service(
            "tagged",
            json!({"loadbalancer.openstack.org/class": "tagged"}),
        ),
        load_balancer_service(
            "proxied",
            json!({"loadbalancer.openstack.org/proxy-protocol": "true"}),
        ),
        load_balancer_service(
            "named",
            json!({"loadbalancer.openstack.org/hostname": "lb.example.org"}),
        ),
    ] {
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    let ingress = |name: &'static str| {
        let services = services.clone();
        async move {
            services
                .get(name)
                .await
                .ok()
                .and_then(|s| s.status?.load_balancer?.ingress?.into_iter().next())
        }
    };
    for name in ["classy", "proxied", "named", "tagged"] {
        wait_until(TIMEOUT, &format!("{name} served"), || async {
            ingress(name).await.is_some()
        })
        .await;
    }
    let classy = ingress("classy").await.unwrap().ip.unwrap();
    assert!(classy.starts_with("198.18.0."), "{classy}");
    let proxied = ingress("proxied").await.unwrap();
    assert_eq!(proxied.ip, None);
    let hostname = proxied.hostname.unwrap();
    assert!(
        hostname.starts_with("203.0.113.") && hostname.ends_with(".example.net"),
        "{hostname}"
    );
    let named = ingress("named").await.unwrap();
    assert_eq!(
        (named.ip, named.hostname.as_deref()),
        (None, Some("lb.example.org"))
    );
    // The class's floating subnet tags: the subnet tagged `x`.
    let tagged = ingress("tagged").await.unwrap().ip.unwrap();
    assert!(tagged.starts_with("198.18.9."), "{tagged}");
}

fn listener_on(s: &openstack_double::State, lb_name: &str) -> openstack_double::state::Listener {
    let lb = s
        .load_balancers
        .values()
        .find(|lb| lb.name == lb_name)
        .unwrap();
    s.listeners
        .values()
        .find(|l| l.loadbalancer_id == lb.id)
        .unwrap()
        .clone()
}

/// Members, monitors and listener kinds as occm builds them: `node-selector` (config,
/// replaced by the annotation), `externalTrafficPolicy: Local`'s HTTP monitor on the
/// health check node port, `x-forwarded-for`, `default-tls-container-ref`, SCTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_monitors_and_listener_kinds_as_occm() {
    use k8s_openapi::api::core::v1::Node;
    let stack = OpenStackStack::start(|cloud| {
        format!(
            "{}create-monitor = true\nnode-selector = pool=web, zone\n",
            lb_cloud_config(cloud)
        )
    })
    .await;
    stack.cloud.with_state(|s| {
        s.add_server(openstack_double::state::NewServer::named(
            "node-a",
            "10.0.0.11",
        ));
        s.add_server(openstack_double::state::NewServer::named(
            "node-b",
            "10.0.0.12",
        ));
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for (name, labels) in [
        ("node-a", json!({"pool": "web", "zone": "z1"})),
        ("node-b", json!({"pool": "batch", "zone": "z1"})),
    ] {
        let mut node = super::kubelet_node(name);
        node.metadata.labels = serde_json::from_value(labels).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let mut local = load_balancer_service("local", json!({}));
    let spec = local.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32_000);
    let mut sctp = load_balancer_service("sctp", json!({}));
    sctp.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("SCTP".into());
    for service in [
        local,
        sctp,
        load_balancer_service(
            "xff",
            json!({"loadbalancer.openstack.org/x-forwarded-for": "true"}),
        ),
        load_balancer_service(
            "tls",
            json!({"loadbalancer.openstack.org/default-tls-container-ref":
                   "https://barbican.example.com/v1/containers/abc"}),
        ),
        load_balancer_service(
            "everyone",
            json!({"loadbalancer.openstack.org/node-selector": ""}),
        ),
    ] {
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    for name in ["local", "sctp", "xff", "tls", "everyone"] {
        wait_served(&services, name).await;
    }
    let lb = |name: &str| format!("kube_service_kubernetes_default_{name}");
    let members_in = |s: &openstack_double::State, name: &str| -> Vec<(String, Option<u16>)> {
        let listener = listener_on(s, &lb(name));
        let pool = listener.default_pool_id.clone().unwrap();
        let mut m: Vec<_> = s
            .members
            .values()
            .filter(|m| m.pool_id == pool)
            .map(|m| (m.address.clone(), m.monitor_port))
            .collect();
        m.sort();
        m
    };
    // A Service ensured before its Nodes were initialized gets its members with the
    // node sync that follows their initialization.
    wait_for(
        TIMEOUT,
        "the members of local and everyone",
        || async {
            stack
                .cloud
                .with_state(|s| (members_in(s, "local"), members_in(s, "everyone")))
        },
        |(local, everyone)| local.len() == 1 && everyone.len() == 2,
    )
    .await;
    stack.cloud.with_state(|s| {
        let members_of = |name: &str| members_in(s, name);
        let monitor_of = |name: &str| {
            let listener = listener_on(s, &lb(name));
            let pool = listener.default_pool_id.clone().unwrap();
            s.monitors
                .values()
                .find(|h| h.pool_id == pool)
                .unwrap()
                .clone()
        };
        // The config's selector: node-a only; the annotation's empty one: both.
        assert_eq!(
            members_of("local"),
            [("10.0.0.11".to_string(), Some(32_000))]
        );
        assert_eq!(
            members_of("everyone"),
            [
                ("10.0.0.11".to_string(), None),
                ("10.0.0.12".to_string(), None)
            ]
        );
        let local = monitor_of("local");
        assert_eq!(
            (
                local.kind.as_str(),
                local.url_path.as_deref(),
                local.http_method.as_deref()
            ),
            ("HTTP", Some("/healthz"), Some("GET"))
        );
        assert_eq!(local.expected_codes.as_deref(), Some("200"));
        assert_eq!(monitor_of("everyone").kind, "TCP");
        let sctp = listener_on(s, &lb("sctp"));
        assert_eq!(sctp.protocol, "SCTP");
        assert_eq!(monitor_of("sctp").kind, "SCTP");
        let xff = listener_on(s, &lb("xff"));
        assert_eq!(xff.protocol, "HTTP");
        assert_eq!(
            xff.insert_headers
                .get("X-Forwarded-For")
                .map(String::as_str),
            Some("true")
        );
        let pool = &s.pools[xff.default_pool_id.as_ref().unwrap()];
        assert_eq!(pool.protocol, "HTTP");
        let tls = listener_on(s, &lb("tls"));
        assert_eq!(tls.protocol, "TERMINATED_HTTPS");
        assert_eq!(
            tls.default_tls_container_ref.as_deref(),
            Some("https://barbican.example.com/v1/containers/abc")
        );
    });
}

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
