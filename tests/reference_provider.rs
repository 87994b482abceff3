//! The reference provider, loaded by the host, against a running simulated cloud:
//! every exported function, and the mapping of cloud failures to contract errors.

use std::collections::BTreeMap;
use std::time::Duration;

use sim_cloud::model::{Address, Cluster, Fault, InstancePatch, InstanceState, NewInstance};
use wasm_ccm_host::provider::CloudError;
use wasm_ccm_tests::types::{NodeAddress, NodeAddressType, Route};
use wasm_ccm_tests::{Simulated, lb_service, node};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn identity_and_exports() {
    let sim = Simulated::start().await;
    let p = &sim.provider;
    assert_eq!(p.name(), "simcloud");
    assert!(p.has_cluster_id());
    assert_eq!(
        p.exports().names(),
        vec![
            "instances-v2",
            "instances-batch",
            "instances",
            "zones",
            "load-balancer",
            "routes",
            "clusters"
        ]
    );
    assert_eq!(p.call_provider_name().await.unwrap(), "simcloud");
}

#[tokio::test]
async fn instances_v2_by_name_and_by_provider_id() {
    let sim = Simulated::start().await;
    let i = sim.cloud.with_state(|s| {
        s.create_instance(NewInstance {
            instance_type: Some("sim.large".into()),
            zone: Some("zone-b".into()),
            region: Some("region-2".into()),
            addresses: Some(vec![
                Address::new("InternalIP", "10.1.2.3"),
                Address::new("ExternalIP", "198.51.100.7"),
                Address::new("Hostname", "worker-1"),
            ]),
            labels: labels(&[("example.com/rack", "r12"), ("tier", "gold")]),
            ..NewInstance::named("worker-1")
        })
    });
    let v2 = sim.provider.instances_v2().expect("instances-v2 exported");

    let by_name = node("worker-1", None, &[]);
    assert!(v2.instance_exists(&by_name).await.unwrap());
    assert!(!v2.instance_shutdown(&by_name).await.unwrap());
    let meta = v2.instance_metadata(&by_name).await.unwrap();
    assert_eq!(meta.provider_id, format!("simcloud://{}", i.id));
    assert_eq!(meta.instance_type, "sim.large");
    assert_eq!(meta.zone, "zone-b");
    assert_eq!(meta.region, "region-2");
    assert_eq!(
        meta.node_addresses,
        vec![
            NodeAddress {
                address_type: NodeAddressType::InternalIp,
                address: "10.1.2.3".into()
            },
            NodeAddress {
                address_type: NodeAddressType::ExternalIp,
                address: "198.51.100.7".into()
            },
            NodeAddress {
                address_type: NodeAddressType::Hostname,
                address: "worker-1".into()
            },
        ]
    );
    assert_eq!(
        meta.additional_labels,
        vec![
            ("example.com/rack".to_string(), "r12".to_string()),
            ("tier".to_string(), "gold".to_string())
        ]
    );

    // By provider ID, even when the node name differs from the instance name.
    let pid = format!("simcloud://{}", i.id);
    let by_id = node("renamed", Some(&pid), &[]);
    assert!(v2.instance_exists(&by_id).await.unwrap());

    // A stopped instance exists and is shut down.
    sim.cloud.with_state(|s| {
        s.patch_instance(
            &i.id,
            InstancePatch {
                state: Some(InstanceState::Stopped),
                ..Default::default()
            },
        )
    });
    assert!(v2.instance_exists(&by_id).await.unwrap());
    assert!(v2.instance_shutdown(&by_id).await.unwrap());

    // Terminated or deleted: does not exist; metadata says instance-not-found.
    sim.cloud.with_state(|s| {
        s.patch_instance(
            &i.id,
            InstancePatch {
                state: Some(InstanceState::Terminated),
                ..Default::default()
            },
        )
    });
    assert!(!v2.instance_exists(&by_id).await.unwrap());
    sim.cloud.with_state(|s| s.delete_instance(&i.id));
    assert!(!v2.instance_exists(&by_id).await.unwrap());
    assert!(
        !v2.instance_exists(&node("never-existed", None, &[]))
            .await
            .unwrap()
    );
    let err = v2.instance_metadata(&by_id).await.unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");
    let err = v2.instance_shutdown(&by_id).await.unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");

    // A provider ID of another cloud is an error, not "not found".
    let err = v2
        .instance_exists(&node("x", Some("aws:///i-1"), &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(err.cloud(), Some(CloudError::Other(m)) if m.contains("not of the form")),
        "{err}"
    );
}

#[tokio::test]
async fn legacy_instances_and_zones() {
    let sim = Simulated::start().await;
    let i = sim.cloud.with_state(|s| {
        s.create_instance(NewInstance {
            instance_type: Some("sim.medium".into()),
            zone: Some("zone-c".into()),
            ..NewInstance::named("worker-2")
        })
    });
    let pid = format!("simcloud://{}", i.id);
    let v1 = sim.provider.instances().expect("instances exported");

    assert_eq!(v1.instance_id("worker-2").await.unwrap(), i.id);
    assert_eq!(v1.instance_type("worker-2").await.unwrap(), "sim.medium");
    assert_eq!(
        v1.instance_type_by_provider_id(&pid).await.unwrap(),
        "sim.medium"
    );
    let addrs = v1.node_addresses("worker-2").await.unwrap();
    assert_eq!(addrs[0].address_type, NodeAddressType::InternalIp);
    assert_eq!(v1.node_addresses_by_provider_id(&pid).await.unwrap(), addrs);
    assert_eq!(
        v1.current_node_name("worker-2.local").await.unwrap(),
        "worker-2.local"
    );
    assert!(v1.instance_exists_by_provider_id(&pid).await.unwrap());
    assert!(!v1.instance_shutdown_by_provider_id(&pid).await.unwrap());
    assert!(
        v1.add_ssh_key_to_all_instances("core", b"ssh-ed25519 AAAA")
            .await
            .unwrap_err()
            .is_not_implemented()
    );
    assert!(
        v1.instance_id("ghost")
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert!(
        v1.node_addresses("ghost")
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert!(
        !v1.instance_exists_by_provider_id("simcloud://i-ffffffff")
            .await
            .unwrap()
    );

    let zones = sim.provider.zones().expect("zones exported");
    let z = zones.get_zone_by_provider_id(&pid).await.unwrap();
    assert_eq!(
        (z.failure_domain.as_str(), z.region.as_str()),
        ("zone-c", "region-1")
    );
    let z = zones.get_zone_by_node_name("worker-2").await.unwrap();
    assert_eq!(z.failure_domain, "zone-c");
    let home = zones.get_zone().await.unwrap();
    assert_eq!(
        (home.failure_domain.as_str(), home.region.as_str()),
        ("zone-home", "region-home")
    );
    assert!(
        zones
            .get_zone_by_node_name("ghost")
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
}

/// The reference provider's load balancers against the simulated cloud: create,
/// update, delete; a node whose instance is gone is left out (logged) instead of
/// failing every load balancer, as real providers do (cloud-provider-aws's
/// `findInstancesForELB` skips instances it cannot find; no upstream test to port).
#[tokio::test]
async fn load_balancer_lifecycle() {
    let sim = Simulated::start().await;
    let (a, b) = sim.cloud.with_state(|s| {
        (
            s.create_instance(NewInstance::named("n-a")),
            s.create_instance(NewInstance::named("n-b")),
        )
    });
    let lb = sim
        .provider
        .load_balancer()
        .expect("load-balancer exported");
    let svc = lb_service("default", "web", "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab");
    let expected_name = "a6f1c2d3eaaaabbbbcccc0123456789a";
    // No `load-balancer-name` export: the host's name is upstream's default.
    assert!(sim.provider.load_balancer_name().is_none());
    assert_eq!(
        wasm_ccm_host::contract::default_load_balancer_name(&svc),
        expected_name
    );
    assert_eq!(
        lb.get_load_balancer("kubernetes", &svc).await.unwrap(),
        None
    );

    // Nodes by provider ID and by name.
    let pid_a = format!("simcloud://{}", a.id);
    let nodes = vec![node("n-a", Some(&pid_a), &[]), node("n-b", None, &[])];
    let status = lb
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    let ip = status.ingress[0].ip.clone().expect("an ingress IP");
    assert!(ip.starts_with("203.0.113."), "{ip}");
    let cloud_lb = sim
        .cloud
        .with_state(|s| s.load_balancers[expected_name].clone());
    assert_eq!(cloud_lb.backends, {
        let mut v = vec![a.id.clone(), b.id.clone()];
        v.sort();
        v
    });
    assert_eq!(cloud_lb.ports[0].port, 80);
    assert_eq!(cloud_lb.ports[0].node_port, 30080);
    assert_eq!(cloud_lb.description, "kubernetes service default/web");

    // Idempotent: same address.
    let again = lb
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(again.ingress[0].ip.as_deref(), Some(ip.as_str()));
    assert_eq!(
        lb.get_load_balancer("kubernetes", &svc).await.unwrap(),
        Some(again)
    );

    lb.update_load_balancer("kubernetes", &svc, &nodes[..1])
        .await
        .unwrap();
    let backends = sim
        .cloud
        .with_state(|s| s.load_balancers[expected_name].backends.clone());
    assert_eq!(backends, vec![a.id.clone()]);

    // A node whose instance vanished is left out; the others keep being served.
    sim.cloud.with_state(|s| s.delete_instance(&b.id));
    let pid_b = format!("simcloud://{}", b.id);
    let with_gone = vec![
        node("n-a", Some(&pid_a), &[]),
        node("n-b", Some(&pid_b), &[]),
    ];
    lb.update_load_balancer("kubernetes", &svc, &with_gone)
        .await
        .unwrap();
    let backends = sim
        .cloud
        .with_state(|s| s.load_balancers[expected_name].backends.clone());
    assert_eq!(backends, vec![a.id.clone()]);

    lb.ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    assert!(sim.cloud.with_state(|s| s.load_balancers.is_empty()));
    // Deleting what is gone succeeds.
    lb.ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    assert_eq!(
        lb.get_load_balancer("kubernetes", &svc).await.unwrap(),
        None
    );
    // Updating what is gone fails.
    assert!(
        lb.update_load_balancer("kubernetes", &svc, &nodes)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn routes_lifecycle() {
    let sim = Simulated::start().await;
    let i = sim
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("n-r")));
    let routes = sim.provider.routes().expect("routes exported");
    assert!(routes.list_routes("kubernetes").await.unwrap().is_empty());

    let wanted = Route {
        name: String::new(),
        target_node: "n-r".into(),
        target_node_addresses: Vec::new(),
        destination_cidr: "10.244.1.0/24".into(),
        blackhole: false,
        enable_node_addresses: true,
        target_node_provider_id: None,
    };
    routes
        .create_route("kubernetes", "uid-n-r", &wanted)
        .await
        .unwrap();
    let listed = routes.list_routes("kubernetes").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "kubernetes-uid-n-r");
    assert_eq!(listed[0].target_node, "n-r");
    assert_eq!(listed[0].destination_cidr, "10.244.1.0/24");
    assert!(!listed[0].blackhole);
    // Listed routes name their target's provider ID (the cloud routes by instance ID).
    assert_eq!(
        listed[0].target_node_provider_id.as_deref(),
        Some(format!("simcloud://{}", i.id).as_str())
    );
    assert!(
        routes
            .list_routes("other-cluster")
            .await
            .unwrap()
            .is_empty()
    );

    // The target instance disappears: the route is a blackhole with no target node.
    sim.cloud.with_state(|s| s.delete_instance(&i.id));
    let listed = routes.list_routes("kubernetes").await.unwrap();
    assert!(listed[0].blackhole);
    assert_eq!(listed[0].target_node, "");

    routes.delete_route("kubernetes", &listed[0]).await.unwrap();
    assert!(routes.list_routes("kubernetes").await.unwrap().is_empty());
    routes.delete_route("kubernetes", &listed[0]).await.unwrap();

    let err = routes
        .create_route("kubernetes", "x", &wanted)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no such instance"), "{err}");
}

/// A route to Node `node` as the route controller asks for one before the Node has a
/// provider ID.
fn route_by_name(node: &str, cidr: &str) -> Route {
    Route {
        name: String::new(),
        target_node: node.into(),
        target_node_addresses: Vec::new(),
        destination_cidr: cidr.into(),
        blackhole: false,
        enable_node_addresses: false,
        target_node_provider_id: None,
    }
}

/// Routes for Nodes not initialized yet (no provider ID: the pod CIDR came first) find
/// their instances by name: for a cluster joining at once, one listing kept in the
/// shared cache, not a lookup each; a name the cache holds for an instance since
/// replaced is looked up again.
#[tokio::test]
async fn routes_by_node_name_cost_one_listing() {
    let sim = Simulated::start().await;
    let routes = sim.provider.routes().expect("routes exported");
    for i in 0..20 {
        sim.cloud
            .with_state(|s| s.create_instance(NewInstance::named(&format!("n-{i}"))));
    }
    sim.cloud.with_state(|s| s.requests.clear());
    for i in 0..20 {
        let route = route_by_name(&format!("n-{i}"), &format!("10.244.{i}.0/24"));
        routes
            .create_route("kubernetes", &format!("uid-{i}"), &route)
            .await
            .unwrap();
    }
    let requests = sim.cloud.with_state(|s| s.requests.clone());
    assert_eq!(requests.get("GET /v1/instances"), Some(&1), "{requests:?}");
    assert_eq!(requests.get("POST /v1/routes"), Some(&20), "{requests:?}");

    // n-0's instance is terminated and replaced by another of the same name, and n-1's
    // deleted and replaced: the cached IDs are stale, and each route goes to the new
    // instance.
    for (name, cidr, terminate) in [
        ("n-0", "10.245.0.0/24", true),
        ("n-1", "10.245.1.0/24", false),
    ] {
        let old = sim
            .cloud
            .with_state(|s| s.list_instances(Some(name)))
            .remove(0);
        sim.cloud.with_state(|s| {
            if terminate {
                s.patch_instance(
                    &old.id,
                    InstancePatch {
                        state: Some(InstanceState::Terminated),
                        ..InstancePatch::default()
                    },
                );
            } else {
                s.delete_instance(&old.id);
            }
        });
        let new = sim
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        let route = route_by_name(name, cidr);
        routes
            .create_route("kubernetes", &format!("uid-again-{name}"), &route)
            .await
            .unwrap();
        let listed = routes.list_routes("kubernetes").await.unwrap();
        let again = listed
            .iter()
            .find(|r| r.destination_cidr == cidr)
            .expect("the route");
        assert_eq!(
            again.target_node_provider_id.as_deref(),
            Some(format!("simcloud://{}", new.id).as_str()),
            "{name}"
        );
    }
}

#[tokio::test]
async fn clusters() {
    let sim = Simulated::start().await;
    sim.cloud.with_state(|s| {
        s.clusters.push(Cluster {
            name: "prod".into(),
            master: "https://10.0.0.1:6443".into(),
        });
    });
    let clusters = sim.provider.clusters().expect("clusters exported");
    assert_eq!(clusters.list_clusters().await.unwrap(), vec!["prod"]);
    assert_eq!(
        clusters.master("prod").await.unwrap(),
        "https://10.0.0.1:6443"
    );
    assert!(
        clusters
            .master("dev")
            .await
            .unwrap_err()
            .to_string()
            .contains("unknown cluster")
    );
}

#[tokio::test]
async fn cloud_failures_map_to_contract_errors() {
    let sim = Simulated::start().await;
    sim.cloud
        .with_state(|s| s.create_instance(NewInstance::named("n-e")));
    let v2 = sim.provider.instances_v2().unwrap();
    let n = node("n-e", None, &[]);

    // 429 with Retry-After -> retry-after with that delay.
    sim.cloud.with_state(|s| {
        s.faults.push(Fault {
            status: Some(429),
            retry_after_seconds: Some(7),
            count: Some(1),
            ..Fault::default()
        })
    });
    let err = v2.instance_exists(&n).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)), "{err}");

    // 429 without Retry-After -> the provider's default delay.
    sim.cloud.with_state(|s| {
        s.faults.push(Fault {
            status: Some(429),
            count: Some(1),
            ..Fault::default()
        })
    });
    let err = v2.instance_exists(&n).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(5)), "{err}");

    // 500 -> other, with the status in the message; not "not found".
    sim.cloud.with_state(|s| {
        s.faults.push(Fault {
            status: Some(500),
            count: Some(1),
            ..Fault::default()
        })
    });
    let err = v2.instance_exists(&n).await.unwrap_err();
    assert!(!err.is_instance_not_found());
    assert!(
        matches!(err.cloud(), Some(CloudError::Other(m)) if m.contains("HTTP 500")),
        "{err}"
    );

    // Faults are used up: the next call succeeds on the same pool.
    assert!(v2.instance_exists(&n).await.unwrap());
}

#[tokio::test]
async fn instance_pool_serves_concurrent_calls() {
    let sim = Simulated::start().await;
    sim.cloud.with_state(|s| {
        for i in 0..8 {
            s.create_instance(NewInstance::named(&format!("c-{i}")));
        }
    });
    let calls = (0..32).map(|i| {
        let provider = sim.provider.clone();
        tokio::spawn(async move {
            let n = node(&format!("c-{}", i % 8), None, &[]);
            provider.instances_v2().unwrap().instance_metadata(&n).await
        })
    });
    for call in calls {
        let meta = call.await.unwrap().unwrap();
        assert!(meta.provider_id.starts_with("simcloud://"));
    }
    // The policy's poolSize is 2: never more idle instances than that.
    assert!(sim.provider.idle_instances() <= 2);
    assert!(sim.provider.idle_instances() >= 1);
}
