//! occm's Service settings served as occm serves them: session affinity, the legacy
//! source ranges annotation, listener timeouts back to their defaults; classes and
//! status host names; members, monitors and listener kinds; load balancers turned off
//! (`[LoadBalancer] enabled = false`).

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{listening_port, wait_for, wait_until};

use super::migration::{load_balancer_service, wait_served};
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};

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

/// occm's `LoadBalancer()` answers false for `[LoadBalancer] enabled = false`, so its
/// service controller does not run: the provider declines `load-balancer` and the
/// controller manager does not start it. A LoadBalancer Service is left alone (no
/// finalizer, no event) and no Octavia call is made; the Nodes are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_turned_off_leave_services_alone_as_occm() {
    let stack = OpenStackStack::start(|_| "[LoadBalancer]\nenabled = false\n".into()).await;
    stack.add_node_a().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("web", json!({})),
        )
        .await
        .unwrap();
    let (_ccm, log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "the service controller left out", || async {
        let log = log.lock().unwrap();
        log.contains("declines these interfaces")
            && log.contains("started controller controller=\"cloud-node\"")
    })
    .await;
    let log = log.lock().unwrap().clone();
    assert!(
        log.contains(r#"declined=["load-balancer", "load-balancer-name"]"#),
        "{log}"
    );
    assert!(
        !log.contains("started controller controller=\"service\""),
        "{log}"
    );
    let web = services.get("web").await.unwrap();
    assert!(web.metadata.finalizers.is_none(), "{web:?}");
    assert!(
        wasm_ccm_tests::events::reasons(&stack.client(), "web")
            .await
            .is_empty(),
        "no event about the Service"
    );
    stack
        .cloud
        .with_state(|s| assert!(s.load_balancers.is_empty()));
}

/// A new cloud config turning load balancers off while the service controller runs is
/// refused by hot swap, saying the configuration declines `load-balancer`: the running
/// version keeps serving the controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_load_balancers_off_by_hot_swap_is_refused_as_declined() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
    let (_ccm, log) = stack.controller_manager(listening_port());
    wait_until(TIMEOUT, "the service controller started", || async {
        log.lock()
            .unwrap()
            .contains("started controller controller=\"service\"")
    })
    .await;
    let config = std::fs::read_to_string(&stack.cloud_config).unwrap();
    std::fs::write(&stack.cloud_config, format!("{config}enabled = false\n")).unwrap();
    wait_until(TIMEOUT, "the new cloud config refused", || async {
        log.lock().unwrap().contains(
            "its configuration declines load-balancer, which the running service controller uses",
        )
    })
    .await;
}
