//! The K3s provider (`guests/k3s`) on the real kube-apiserver: Nodes registered and
//! annotated as the K3s agent annotates them (`k3s.io/internal-ip`, `external-ip`,
//! `internal-dns`, `external-dns`, `hostname`, and the labels K3s falls back to) get
//! the fields K3s's embedded cloud provider gives them; a Node annotated late is
//! initialized once annotated; a Node K3s's own cloud controller initialized before
//! keeps its provider ID and stays (it always exists). The provider reaches nothing:
//! its policy allows no host. (K3s's agent annotates its Node only while K3s's cloud
//! controller is on, which is why deploy/k3s keeps it on with its Node controllers
//! off.)

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::kube_apiserver::KubeApiServer;
use wasm_ccm_tests::{
    TempDir, controller_manager_command, guest, initialized, listening_port, node_addresses,
    wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(120);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A Node as the K3s agent registers it (kubelet with `--cloud-provider=external`),
/// with `annotations` and `labels`.
fn agent_node(name: &str, annotations: serde_json::Value, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations, "labels": labels},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap()
}

fn label(node: &Node, key: &str) -> Option<String> {
    node.metadata.labels.as_ref()?.get(key).cloned()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_k3s_s_fields_from_the_agent_s_annotations() {
    let server = KubeApiServer::start().await;
    let dir = TempDir::new("k3s");
    std::fs::copy(guest("k3s_provider"), dir.path().join("k3s.wasm")).unwrap();
    // The provider reaches nothing: no host, no credential.
    std::fs::write(dir.path().join("k3s.yaml"), "allowedOutboundHosts: []\n").unwrap();
    let cloud_config = dir.path().join("cloud.conf");
    std::fs::write(&cloud_config, "").unwrap();
    let nodes: Api<Node> = Api::all(server.client().await);
    let created = [
        // Dual stack, an external address and the agent's hostname; topology and type
        // labels the operator set.
        agent_node(
            "agent-a",
            json!({"k3s.io/internal-ip": "10.0.0.5,fd00::5", "k3s.io/external-ip": "203.0.113.5",
                   "k3s.io/hostname": "agent-a.local"}),
            json!({"topology.kubernetes.io/region": "dc-1", "topology.kubernetes.io/zone": "rack-2",
                   "node.kubernetes.io/instance-type": "m5.large"}),
        ),
        // The labels K3s falls back to, and no type: the program's name.
        agent_node(
            "agent-b",
            json!({}),
            json!({"k3s.io/internal-ip": "10.0.0.6", "k3s.io/hostname": "agent-b"}),
        ),
        // DNS names.
        agent_node(
            "agent-c",
            json!({"k3s.io/internal-ip": "10.0.0.7", "k3s.io/internal-dns": "c.internal",
                   "k3s.io/external-dns": "c.example.com,c2.example.com"}),
            json!({}),
        ),
        // Not annotated yet.
        agent_node("agent-late", json!({}), json!({})),
    ];
    // Initialized by K3s's own cloud controller before wasm-ccm took over, and NotReady.
    let before: Node = serde_json::from_value(json!({
        "metadata": {"name": "agent-before", "annotations": {"k3s.io/internal-ip": "10.0.0.8"}},
        "spec": {"providerID": "k3s://agent-before"},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &before).await.unwrap();
    for node in &created {
        nodes.create(&PostParams::default(), node).await.unwrap();
    }
    let port = listening_port();
    let mut command = controller_manager_command(
        "k3s",
        dir.path(),
        &cloud_config,
        &server.kubeconfig(),
        port,
        // As deploy/k3s runs it: K3s's provider tags nothing with a cluster ID.
        &[
            "--leader-elect=false",
            "--configure-cloud-routes=false",
            "--allow-untagged-cloud",
        ],
    );
    command.env("RUST_LOG", "info");
    let (_ccm, log) = wasm_ccm_tests::spawn_logged(command);
    for name in ["agent-a", "agent-b", "agent-c"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
        wait_until(TIMEOUT, &format!("{name}'s addresses"), || async {
            !node_addresses(&nodes, name).await.is_empty()
        })
        .await;
    }
    let a = nodes.get("agent-a").await.unwrap();
    assert_eq!(
        a.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("k3s://agent-a")
    );
    assert_eq!(
        label(&a, "node.kubernetes.io/instance-type").as_deref(),
        Some("m5.large")
    );
    assert_eq!(
        label(&a, "topology.kubernetes.io/region").as_deref(),
        Some("dc-1")
    );
    assert_eq!(
        label(&a, "topology.kubernetes.io/zone").as_deref(),
        Some("rack-2")
    );
    assert_eq!(
        node_addresses(&nodes, "agent-a").await,
        pairs(&[
            ("InternalIP", "10.0.0.5"),
            ("InternalIP", "fd00::5"),
            ("ExternalIP", "203.0.113.5"),
            ("Hostname", "agent-a.local"),
        ])
    );
    let b = nodes.get("agent-b").await.unwrap();
    assert_eq!(
        label(&b, "node.kubernetes.io/instance-type").as_deref(),
        Some("k3s")
    );
    assert_eq!(
        node_addresses(&nodes, "agent-b").await,
        pairs(&[("InternalIP", "10.0.0.6"), ("Hostname", "agent-b")])
    );
    assert_eq!(
        node_addresses(&nodes, "agent-c").await,
        pairs(&[
            ("InternalIP", "10.0.0.7"),
            ("InternalDNS", "c.internal"),
            ("ExternalDNS", "c.example.com"),
            ("ExternalDNS", "c2.example.com"),
        ])
    );
    // agent-late waits for its annotations, then is initialized.
    let late = nodes.get("agent-late").await.unwrap();
    assert!(
        late.spec.as_ref().unwrap().provider_id.is_none(),
        "{late:?}"
    );
    nodes
        .patch(
            "agent-late",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"k3s.io/internal-ip": "10.0.0.9"}}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "agent-late initialized once annotated", || {
        initialized(&nodes, "agent-late")
    })
    .await;
    wait_until(TIMEOUT, "agent-late's address", || async {
        node_addresses(&nodes, "agent-late").await == pairs(&[("InternalIP", "10.0.0.9")])
    })
    .await;
    // The Node K3s initialized keeps its provider ID and is not deleted: its instance
    // always exists, whatever its readiness.
    let before = nodes.get("agent-before").await.unwrap();
    assert_eq!(
        before.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("k3s://agent-before")
    );
    let log = log.lock().unwrap().clone();
    assert!(log.contains("address annotations not yet set"), "{log}");
}

/// `kubectl kustomize deploy/k3s/` renders, and the provider loads with its policy (no
/// host) and cloud config; the Deployment runs it as K3s runs its cloud controller.
#[tokio::test]
async fn the_deploy_k3s_example_renders_and_loads() {
    let wasm_ccm_tests::RenderedExample {
        policy,
        cloud_conf,
        deployment,
    } = wasm_ccm_tests::rendered_example("k3s", "k3s");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    for flag in ["--allow-untagged-cloud", "--configure-cloud-routes=false"] {
        assert!(args.contains(flag), "{flag}: {args}");
    }
    let dir = TempDir::new("deploy-k3s");
    std::fs::copy(guest("k3s_provider"), dir.path().join("k3s.wasm")).unwrap();
    std::fs::write(dir.path().join("k3s.yaml"), &policy).unwrap();
    let provider = wasm_ccm_tests::loader()
        .load(&dir.path().join("k3s.wasm"), cloud_conf.into_bytes())
        .await
        .unwrap_or_else(|e| panic!("loading the K3s provider with deploy/k3s's files: {e}"));
    assert_eq!(provider.name(), "k3s");
}

/// A LoadBalancer Service in `namespace` serving `port`, optionally asking for `ip`
/// with kube-vip's annotation.
fn lb_service(namespace: &str, name: &str, port: i32, ip: Option<&str>) -> Service {
    let annotations = match ip {
        Some(ip) => json!({"kube-vip.io/loadbalancerIPs": ip}),
        None => json!({}),
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"port": port, "protocol": "TCP"}]},
    }))
    .unwrap()
}

/// Every Service's (namespace/name, port, ingress address) in `namespaces`.
async fn assigned(
    client: &kube::Client,
    namespaces: &[&str],
) -> Vec<(String, i32, Option<String>)> {
    let mut out = Vec::new();
    for ns in namespaces {
        let services: Api<Service> = Api::namespaced(client.clone(), ns);
        for s in services.list(&Default::default()).await.unwrap() {
            if s.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
                continue;
            }
            let port = s.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port;
            out.push((
                format!("{ns}/{}", s.metadata.name.clone().unwrap()),
                port,
                wasm_ccm_tests::ingress_ip(&s),
            ));
        }
    }
    out
}

/// The writes of Service status the audit log has seen: `namespace/name` each.
fn status_writes(server: &KubeApiServer) -> Vec<String> {
    server
        .audit()
        .iter()
        .filter(|a| a.resource == "services/status" && (a.verb == "patch" || a.verb == "update"))
        .map(|a| format!("{}/{}", a.namespace, a.name))
        .collect()
}

/// Addresses from the pools, as kube-vip-cloud-provider hands them out: 30 Services in
/// a namespace with its own shared pool and in `default` with the global range get
/// distinct addresses (shared in the namespace only by Services with disjoint ports);
/// the controller manager restarted midway assigns nothing again (the audit log shows no
/// status write) and nothing twice; a new version hot-swapped in keeps every address;
/// an address asked for that another Service holds is refused with a Warning; the
/// addresses are recorded in `kube-vip.io/loadbalancerIPs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_addresses_come_from_the_pools_once_across_a_restart() {
    let server = KubeApiServer::start().await;
    let client = server.client().await;
    let dir = TempDir::new("k3s-lb");
    // Published as the kubelet publishes the ConfigMap, with the policy deploy/k3s gives.
    let v1 = std::fs::read(guest("k3s_provider")).unwrap();
    let policy = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k3s/providers/k3s.yaml"),
    )
    .unwrap();
    wasm_ccm_tests::kubelet_publish(dir.path(), &[("k3s.wasm", &v1), ("k3s.yaml", &policy)]);
    let cloud_config = dir.path().join("cloud.conf");
    std::fs::write(
        &cloud_config,
        "[Pools \"apps\"]\ncidr = 10.10.0.0/28\nallow-share = true\n\
         [Pools]\nrange-global = 10.20.0.1-10.20.0.40\n",
    )
    .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "apps"}})).unwrap(),
        )
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &agent_node(
                "agent-a",
                json!({"k3s.io/internal-ip": "10.0.0.5"}),
                json!({}),
            ),
        )
        .await
        .unwrap();
    let apps: Api<Service> = Api::namespaced(client.clone(), "apps");
    let default: Api<Service> = Api::namespaced(client.clone(), "default");
    let create = |i: usize| {
        let (apps, default) = (apps.clone(), default.clone());
        async move {
            // In apps, ports alternate 80/443: two Services may share an address.
            let port = if i.is_multiple_of(2) { 80 } else { 443 };
            apps.create(
                &PostParams::default(),
                &lb_service("apps", &format!("app-{i}"), port, None),
            )
            .await
            .unwrap();
            default
                .create(
                    &PostParams::default(),
                    &lb_service("default", &format!("web-{i}"), 80, None),
                )
                .await
                .unwrap();
        }
    };
    let start = |port: u16| {
        let mut command = controller_manager_command(
            "k3s",
            dir.path(),
            &cloud_config,
            &server.kubeconfig(),
            port,
            &[
                "--leader-elect=false",
                "--configure-cloud-routes=false",
                "--allow-untagged-cloud",
            ],
        );
        command.env("RUST_LOG", "info");
        wasm_ccm_tests::spawn_logged(command)
    };
    let all_assigned = |want: usize| {
        let client = client.clone();
        async move {
            let got = assigned(&client, &["apps", "default"]).await;
            got.len() == want && got.iter().all(|(_, _, ip)| ip.is_some())
        }
    };
    for i in 0..8 {
        create(i).await;
    }
    let (mut first, first_log) = start(listening_port());
    wait_until(TIMEOUT, "16 Services assigned", || all_assigned(16)).await;
    first.kill().await.unwrap();
    let before = assigned(&client, &["apps", "default"]).await;
    let writes = status_writes(&server);

    // Restarted: every Service is synced again, and keeps its address.
    let port = listening_port();
    let (_second, second_log) = start(port);
    wait_until(
        TIMEOUT,
        "the restarted manager synced every Service",
        || async {
            second_log
                .lock()
                .unwrap()
                .matches("address assigned")
                .count()
                >= 16
        },
    )
    .await;
    assert_eq!(assigned(&client, &["apps", "default"]).await, before);
    assert_eq!(
        status_writes(&server)[writes.len()..],
        [] as [String; 0],
        "a status was written again after the restart"
    );

    for i in 8..15 {
        create(i).await;
    }
    wait_until(TIMEOUT, "30 Services assigned", || all_assigned(30)).await;
    let after = assigned(&client, &["apps", "default"]).await;
    let mut by_ip: std::collections::BTreeMap<String, Vec<(String, i32)>> = Default::default();
    for (name, port, ip) in &after {
        by_ip
            .entry(ip.clone().unwrap())
            .or_default()
            .push((name.clone(), *port));
    }
    for (ip, holders) in &by_ip {
        if ip.starts_with("10.20.0.") {
            assert_eq!(holders.len(), 1, "{ip} given twice: {holders:?}");
            assert!(holders[0].0.starts_with("default/"), "{holders:?}");
        } else {
            assert!(ip.starts_with("10.10.0."), "{ip} is in no pool");
            let mut ports: Vec<i32> = holders.iter().map(|h| h.1).collect();
            ports.dedup();
            assert_eq!(
                ports.len(),
                holders.len(),
                "{ip} shared by Services with the same port: {holders:?}"
            );
            assert!(
                holders.iter().all(|h| h.0.starts_with("apps/")),
                "{holders:?}"
            );
        }
    }
    // 15 in default, one address each; 15 in apps, paired.
    assert_eq!(by_ip.len(), 15 + 8, "{by_ip:?}");
    let web0 = default.get("web-0").await.unwrap();
    let held = wasm_ccm_tests::ingress_ip(&web0).unwrap();
    assert_eq!(
        web0.metadata
            .annotations
            .unwrap()
            .get("kube-vip.io/loadbalancerIPs"),
        Some(&held)
    );

    // A new version hot-swapped in (its cache empty) keeps every address, and hands out
    // the next free one.
    let v2 = wasm_ccm_tests::with_custom_section(&v1, "v2");
    let sha = wasm_ccm_host::provider::compile_cache::sha256_hex(&v2);
    wasm_ccm_tests::kubelet_publish(dir.path(), &[("k3s.wasm", &v2), ("k3s.yaml", &policy)]);
    wait_until(TIMEOUT, "the new version serving", || async {
        wasm_ccm_tests::metrics(port).await.contains(&format!(
            "wasm_ccm_provider_info{{provider=\"k3s\",sha256=\"{sha}\"}} 1"
        ))
    })
    .await;
    default
        .create(
            &PostParams::default(),
            &lb_service("default", "after-swap", 80, None),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "31 Services assigned", || all_assigned(31)).await;
    let swapped = assigned(&client, &["apps", "default"]).await;
    for entry in &after {
        assert!(swapped.contains(entry), "{entry:?} changed in the swap");
    }
    let fresh = swapped
        .iter()
        .find(|(n, _, _)| n == "default/after-swap")
        .unwrap();
    assert!(!by_ip.contains_key(fresh.2.as_ref().unwrap()), "{fresh:?}");

    // Asking for an address another Service holds: refused with a Warning, unassigned.
    default
        .create(
            &PostParams::default(),
            &lb_service("default", "greedy", 80, Some(&held)),
        )
        .await
        .unwrap();
    wasm_ccm_tests::events::wait_for_reason(&client, "greedy", "RequestedAddressInUse", TIMEOUT)
        .await;
    let greedy = default.get("greedy").await.unwrap();
    assert_eq!(wasm_ccm_tests::ingress_ip(&greedy), None);
    let first_log = first_log.lock().unwrap().clone();
    assert!(first_log.contains("address assigned"), "{first_log}");
}

/// `wasm-ccm conformance` passes for the K3s provider with deploy/k3s's policy and cloud
/// config: Nodes as the agent annotates them (`--node-json`), a LoadBalancer Service
/// from the pool, and `--every-node-exists` (its instances are the Nodes). The checks
/// that need a request to throttle are skipped: it sends none.
#[tokio::test]
async fn conformance_passes_with_deploy_k3s_s_policy_and_cloud_config() {
    let dir = TempDir::new("k3s-conformance");
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k3s");
    let wasm = dir.path().join("k3s.wasm");
    std::fs::copy(guest("k3s_provider"), &wasm).unwrap();
    let mut args: Vec<std::ffi::OsString> = vec![
        "--policy".into(),
        deploy.join("providers/k3s.yaml").into(),
        "--cloud-config".into(),
        deploy.join("cloud-config/cloud.conf").into(),
        "--every-node-exists".into(),
    ];
    for (i, name) in ["agent-a", "agent-b"].into_iter().enumerate() {
        let file = dir.path().join(format!("{name}.json"));
        let node = agent_node(
            name,
            json!({"k3s.io/internal-ip": format!("10.0.0.{}", 5 + i), "k3s.io/hostname": name}),
            json!({}),
        );
        std::fs::write(&file, serde_json::to_vec(&node).unwrap()).unwrap();
        args.extend(["--node-json".into(), file.into()]);
    }
    let service = dir.path().join("service.json");
    std::fs::write(
        &service,
        serde_json::to_vec(&lb_service("default", "conformance", 80, None)).unwrap(),
    )
    .unwrap();
    args.extend(["--service".into(), service.into()]);
    let table = wasm_ccm_tests::conformance(&wasm, &args).await;
    assert!(
        table.contains("| instance-exists(agent-a) is true | pass |"),
        "{table}"
    );
    assert!(
        table.contains("| ensure-load-balancer twice gives the same status | pass |"),
        "{table}"
    );
    assert!(
        table.contains("| get-load-balancer finds it | pass |"),
        "{table}"
    );
    assert!(
        table.contains("| a node that does not exist is false or instance-not-found | skip |"),
        "{table}"
    );
    assert!(table.contains("0 failed"), "{table}");
}
