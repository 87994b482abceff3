//! occm's Service settings served as occm serves them: session affinity, the legacy
//! source ranges annotation, listener timeouts back to their defaults.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{free_port, wait_until};

use super::migration::{ingress_ip, load_balancer_service};
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_source_ranges_and_timeouts_as_occm() {
    let stack = OpenStackStack::start(lb_cloud_config).await;
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
    let (_ccm, _log) = stack.controller_manager(free_port());
    wait_until(TIMEOUT, "web served", || async {
        services
            .get("web")
            .await
            .ok()
            .and_then(|s| ingress_ip(&s))
            .is_some()
    })
    .await;
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
}

/// `[LoadBalancerClass "name"]` sections picked by `loadbalancer.openstack.org/class`,
/// and the status as occm's `createLoadBalancerStatus`: the `hostname` annotation,
/// `<address>.<suffix>` for a PROXY protocol Service with `enable-ingress-hostname`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_and_status_hostnames_as_occm() {
    let stack = OpenStackStack::start(|cloud| {
        let other = cloud.with_state(|s| {
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
    let (_ccm, _log) = stack.controller_manager(free_port());
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
    for name in ["classy", "proxied", "named"] {
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
    wait_until(TIMEOUT, "tagged refused by name", || async {
        super::floating_ips::reasons(stack.client(), "tagged")
            .await
            .contains(&"UnsupportedLoadBalancerSetting".to_string())
    })
    .await;
    assert!(ingress("tagged").await.is_none());
    stack.cloud.with_state(|s| {
        assert!(
            !s.load_balancers
                .values()
                .any(|lb| lb.name.ends_with("_tagged"))
        )
    });
}
