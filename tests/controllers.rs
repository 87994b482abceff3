//! The controller manager, the real `wasm-ccm` binary, against the API server double,
//! the simulated cloud and the reference provider: each upstream rule of the
//! cloud-node and cloud-node-lifecycle controllers, failure paths included.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Taint};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sim_cloud::model::{Address, Fault, InstancePatch, InstanceState, NewInstance};
use wasm_ccm_tests::{
    Stack, default_load_balancer_name, free_port, http_get, initialized, kubelet_node,
    load_balancer_service, metric, metrics, provider_calls, reconciles, set_ready, taint_keys,
    wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(60);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_node_initializes_tainted_nodes() {
    let stack = Stack::start().await;
    let (a, b) = stack.cloud.with_state(|s| {
        let a = s.create_instance(NewInstance {
            instance_type: Some("sim.large".into()),
            zone: Some("zone-b".into()),
            region: Some("region-2".into()),
            addresses: Some(vec![
                Address::new("InternalIP", "10.1.0.1"),
                Address::new("InternalIP", "10.1.0.9"),
                Address::new("ExternalIP", "198.51.100.1"),
            ]),
            labels: [
                ("tier".to_string(), "cloud".to_string()),
                ("kubernetes.io/role".to_string(), "evil".to_string()),
                ("example.com/rack".to_string(), "r7".to_string()),
            ]
            .into(),
            ..NewInstance::named("n-a")
        });
        let b = s.create_instance(NewInstance::named("n-b"));
        (a, b)
    });
    let nodes: Api<Node> = Api::all(stack.client());
    let mut na = kubelet_node("n-a", "True");
    na.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("tier".into(), "mine".into());
    na.metadata.annotations = Some(
        [(
            "alpha.kubernetes.io/provided-node-ip".to_string(),
            "10.1.0.9".to_string(),
        )]
        .into(),
    );
    nodes.create(&PostParams::default(), &na).await.unwrap();
    let mut nb = kubelet_node("n-b", "True");
    // Kubelet set a provider ID already: it is kept.
    nb.spec.as_mut().unwrap().provider_id = Some(format!("simcloud://{}", b.id));
    nb.spec
        .as_mut()
        .unwrap()
        .taints
        .as_mut()
        .unwrap()
        .push(serde_json::from_value(json!({"key": "keep-me", "effect": "NoSchedule"})).unwrap());
    nodes.create(&PostParams::default(), &nb).await.unwrap();

    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "both nodes initialized", || async {
        initialized(&nodes, "n-a").await && initialized(&nodes, "n-b").await
    })
    .await;

    let node = nodes.get("n-a").await.unwrap();
    let spec = node.spec.clone().unwrap();
    assert_eq!(spec.provider_id, Some(format!("simcloud://{}", a.id)));
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["node.kubernetes.io/instance-type"], "sim.large");
    assert_eq!(labels["beta.kubernetes.io/instance-type"], "sim.large");
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-b");
    assert_eq!(labels["failure-domain.beta.kubernetes.io/zone"], "zone-b");
    assert_eq!(labels["topology.kubernetes.io/region"], "region-2");
    assert_eq!(
        labels["failure-domain.beta.kubernetes.io/region"],
        "region-2"
    );
    assert_eq!(
        labels["tier"], "mine",
        "existing labels are never overwritten"
    );
    assert_eq!(labels["example.com/rack"], "r7");
    assert!(
        !labels.contains_key("kubernetes.io/role"),
        "kubernetes.io labels are discarded"
    );
    // Addresses: the provided node IP first (the only InternalIP), the Hostname kept.
    wait_until(TIMEOUT, "addresses", || async {
        nodes
            .get("n-a")
            .await
            .unwrap()
            .status
            .unwrap()
            .addresses
            .unwrap_or_default()
            .len()
            == 3
    })
    .await;
    let addresses: Vec<(String, String)> = nodes
        .get("n-a")
        .await
        .unwrap()
        .status
        .unwrap()
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP".to_string(), "10.1.0.9".to_string()),
            ("ExternalIP".to_string(), "198.51.100.1".to_string()),
            ("Hostname".to_string(), "n-a".to_string()),
        ]
    );
    // Only the uninitialized taint is removed.
    let nb = nodes.get("n-b").await.unwrap();
    assert_eq!(taint_keys(&nb), ["keep-me"]);
    assert_eq!(
        nb.spec.unwrap().provider_id,
        Some(format!("simcloud://{}", b.id))
    );

    let events: Api<CoreEvent> = Api::namespaced(stack.client(), "default");
    wait_until(TIMEOUT, "Synced events", || async {
        events
            .list(&ListParams::default().fields("reason=Synced"))
            .await
            .is_ok_and(|l| l.items.len() == 2)
    })
    .await;
    let m = metrics(port).await;
    assert!(reconciles(&m, "cloud-node", "success") >= 2.0, "{m}");
    assert!(
        metric(
            &m,
            "wasm_ccm_node_controller_initial_node_sync_delay_seconds_count"
        ) >= 2.0,
        "{m}"
    );
    // Upstream's names too (k8s.io/cloud-provider controllers/node/metrics.go).
    for series in [
        "node_controller_initial_node_sync_delay_seconds_count",
        "node_controller_cloud_provider_taint_removal_delay_seconds_count",
    ] {
        assert!(metric(&m, series) >= 2.0, "{series}: {m}");
    }
    assert!(m.contains("node_controller_initial_node_sync_delay_seconds_bucket{le=\"1024.0\"}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_errors_and_bad_node_ips_keep_the_taint() {
    let stack = Stack::start().await;
    stack.cloud.with_state(|s| {
        s.create_instance(NewInstance::named("n-ok"));
        s.create_instance(NewInstance::named("n-ip"));
        // The next two cloud requests fail: the first sync attempt errors.
        s.faults.push(Fault {
            status: Some(500),
            count: Some(2),
            ..Fault::default()
        });
    });
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("n-ok", "True"))
        .await
        .unwrap();
    let mut bad_ip = kubelet_node("n-ip", "True");
    bad_ip.metadata.annotations = Some(
        [(
            "alpha.kubernetes.io/provided-node-ip".to_string(),
            "10.99.99.99".to_string(),
        )]
        .into(),
    );
    nodes.create(&PostParams::default(), &bad_ip).await.unwrap();
    // A node with no instance at all.
    nodes
        .create(&PostParams::default(), &kubelet_node("n-ghost", "True"))
        .await
        .unwrap();

    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "n-ok initialized after the 500s", || {
        initialized(&nodes, "n-ok")
    })
    .await;
    wait_until(TIMEOUT, "several failed syncs", || async {
        reconciles(&metrics(port).await, "cloud-node", "error") >= 4.0
    })
    .await;
    // Both failing nodes wait in the retry queue; the initialized one left it.
    wait_until(TIMEOUT, "two nodes pending a retry", || async {
        metric(
            &metrics(port).await,
            r#"wasm_ccm_controller_retries_pending{controller="cloud-node"}"#,
        ) == 2.0
    })
    .await;
    for name in ["n-ip", "n-ghost"] {
        let node = nodes.get(name).await.unwrap();
        assert!(
            taint_keys(&node).contains(&UNINITIALIZED.to_string()),
            "{name} must stay tainted"
        );
        assert_eq!(
            node.spec.unwrap().provider_id,
            None,
            "{name} got no provider ID"
        );
    }
    // Deleted while waiting for their retry: they leave the retry queue at once.
    for name in ["n-ip", "n-ghost"] {
        nodes.delete(name, &Default::default()).await.unwrap();
    }
    wait_until(TIMEOUT, "no node pending a retry", || async {
        metric(
            &metrics(port).await,
            r#"wasm_ccm_controller_retries_pending{controller="cloud-node"}"#,
        ) == 0.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_deletes_only_not_ready_nodes_whose_instance_is_gone() {
    let stack = Stack::start().await;
    let (gone_ready, gone, stopped) = stack.cloud.with_state(|s| {
        (
            s.create_instance(NewInstance::named("gone-ready")),
            s.create_instance(NewInstance::named("gone")),
            s.create_instance(NewInstance::named("stopped")),
        )
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in ["gone-ready", "gone", "stopped"] {
        nodes
            .create(&PostParams::default(), &kubelet_node(name, "True"))
            .await
            .unwrap();
    }
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    for name in ["gone-ready", "gone", "stopped"] {
        wait_until(TIMEOUT, "initialized", || initialized(&nodes, name)).await;
    }

    // The cloud says: two instances are gone, one is stopped; the cloud API also
    // fails for a while, during which nothing may be deleted.
    stack.cloud.with_state(|s| {
        s.delete_instance(&gone_ready.id);
        s.delete_instance(&gone.id);
        s.patch_instance(
            &stopped.id,
            InstancePatch {
                state: Some(InstanceState::Stopped),
                ..Default::default()
            },
        );
        s.faults.push(Fault {
            status: Some(500),
            ..Fault::default()
        });
    });
    set_ready(&nodes, "gone", "Unknown").await;
    set_ready(&nodes, "stopped", "False").await;
    let errors_before = reconciles(&metrics(port).await, "cloud-node-lifecycle", "error");
    wait_until(
        TIMEOUT,
        "lifecycle passes failing on the cloud API",
        || async {
            reconciles(&metrics(port).await, "cloud-node-lifecycle", "error") >= errors_before + 4.0
        },
    )
    .await;
    assert!(
        nodes.get("gone").await.is_ok(),
        "a provider error must never delete a node"
    );
    assert!(!taint_keys(&nodes.get("stopped").await.unwrap()).contains(&SHUTDOWN.to_string()));

    stack.cloud.with_state(|s| s.faults.clear());
    wait_until(
        TIMEOUT,
        "the not-Ready node of a gone instance is deleted",
        || async { nodes.get("gone").await.is_err() },
    )
    .await;
    wait_until(TIMEOUT, "the shut-down node is tainted", || async {
        taint_keys(&nodes.get("stopped").await.unwrap()).contains(&SHUTDOWN.to_string())
    })
    .await;
    // A Ready node is never deleted, whatever the cloud says.
    let passes = reconciles(&metrics(port).await, "cloud-node-lifecycle", "success");
    wait_until(TIMEOUT, "more lifecycle passes", || async {
        reconciles(&metrics(port).await, "cloud-node-lifecycle", "success") >= passes + 4.0
    })
    .await;
    assert!(nodes.get("gone-ready").await.is_ok());

    // Ready again: the shutdown taint goes.
    set_ready(&nodes, "stopped", "True").await;
    wait_until(TIMEOUT, "the shutdown taint removed", || async {
        !taint_keys(&nodes.get("stopped").await.unwrap()).contains(&SHUTDOWN.to_string())
    })
    .await;
    let events: Api<CoreEvent> = Api::namespaced(stack.client(), "default");
    let deleting = events
        .list(&ListParams::default().fields("reason=DeletingNode"))
        .await
        .unwrap();
    assert_eq!(deleting.items.len(), 1);
    assert_eq!(
        deleting.items[0].involved_object.name.as_deref(),
        Some("gone")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_hands_over_to_the_second_replica() {
    let stack = Stack::start().await;
    stack.cloud.with_state(|s| {
        s.create_instance(NewInstance::named("n1"));
        s.create_instance(NewInstance::named("n2"));
    });
    let fast = [
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-renew-deadline",
        "1500ms",
        "--leader-elect-retry-period",
        "200ms",
    ];
    let ((mut first, p1), (_second, p2)) = stack.two_replicas(&fast).await;
    assert_eq!(http_get(p1, "/healthz").await.unwrap(), (200, "ok".into()));
    let (status, verbose) = http_get(p1, "/healthz?verbose").await.unwrap();
    assert_eq!(status, 200, "{verbose}");
    for check in [
        "[+]leaderElection ok",
        "[+]controller/cloud-node ok",
        "[+]controller/cloud-node-lifecycle ok",
        "[+]controller/service ok",
        "[+]controller/route ok",
        "healthz check passed",
    ] {
        assert!(verbose.contains(check), "{check} in {verbose}");
    }
    assert_eq!(
        http_get(p1, "/healthz/controller/service").await.unwrap(),
        (200, "ok".into())
    );
    assert_eq!(
        http_get(p1, "/healthz/controller/nope").await.unwrap().0,
        404
    );
    // The standby runs no controllers yet: only leader election is checked.
    let (_, standby) = http_get(p2, "/healthz?verbose").await.unwrap();
    assert!(!standby.contains("controller/"), "{standby}");

    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("n1", "True"))
        .await
        .unwrap();
    wait_until(TIMEOUT, "n1 initialized by the leader", || {
        initialized(&nodes, "n1")
    })
    .await;

    first.kill().await.unwrap();
    wait_until(TIMEOUT, "second replica takes over", || async {
        http_get(p2, "/readyz")
            .await
            .is_ok_and(|(_, b)| b.contains("controllers running"))
    })
    .await;
    nodes
        .create(&PostParams::default(), &kubelet_node("n2", "True"))
        .await
        .unwrap();
    wait_until(TIMEOUT, "n2 initialized by the new leader", || {
        initialized(&nodes, "n2")
    })
    .await;
}

/// A leader stopped by SIGTERM stops its controllers, then releases the Lease: the
/// standby takes over at its next retry, long before the 30 s lease would expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_by_sigterm_hands_the_lease_over_at_once() {
    let stack = Stack::start().await;
    let election = [
        "--leader-elect-lease-duration",
        "30s",
        "--leader-elect-renew-deadline",
        "20s",
        "--leader-elect-retry-period",
        "200ms",
    ];
    let ((mut first, _), (_second, p2)) = stack.two_replicas(&election).await;

    let pid = first.id().expect("running").to_string();
    let signalled = std::time::Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(20), first.wait())
        .await
        .expect("the leader stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    // Well inside the lease duration: only a released Lease is taken this soon.
    wait_until(
        Duration::from_secs(15),
        "the standby takes over",
        || async {
            http_get(p2, "/readyz")
                .await
                .is_ok_and(|(_, b)| b.contains("controllers running"))
        },
    )
    .await;
    println!(
        "SIGTERM to the standby running the controllers: {:?} (lease duration 30 s, retry period 200 ms)",
        signalled.elapsed()
    );
}

/// `--kube-api-qps` and `--kube-api-burst` pace every request of the client (client-go's
/// token bucket): with 10 per second and a burst of 1, the N requests the API server
/// got from wasm-ccm before 12 joining Nodes were initialized cannot have come in less
/// than (N - 1) / 10 seconds. A slow machine only makes it take longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_keeps_to_kube_api_qps_and_burst() {
    let stack = Stack::start().await;
    let names: Vec<String> = (0..12).map(|i| format!("paced-{i}")).collect();
    stack.cloud.with_state(|s| {
        for name in &names {
            s.create_instance(NewInstance::named(name));
        }
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in &names {
        nodes
            .create(&PostParams::default(), &kubelet_node(name, "True"))
            .await
            .unwrap();
    }
    let from_wasm_ccm = || -> u64 {
        stack
            .api
            .request_counts()
            .into_iter()
            .filter(|(access, _)| access.user_agent.starts_with("wasm-ccm/"))
            .map(|(_, n)| n)
            .sum()
    };
    let started = std::time::Instant::now();
    let _cm = stack.controller_manager(
        free_port(),
        &["--kube-api-qps", "10", "--kube-api-burst", "1"],
    );
    for name in &names {
        wait_until(TIMEOUT, "every Node initialized", || {
            initialized(&nodes, name)
        })
        .await;
    }
    let requests = from_wasm_ccm();
    let elapsed = started.elapsed().as_secs_f64();
    println!("{requests} requests from wasm-ccm in {elapsed:.2} s at --kube-api-qps 10");
    assert!(requests >= 24, "{requests} requests: too few to tell");
    assert!(
        requests as f64 <= 1.0 + 10.0 * elapsed,
        "{requests} requests in {elapsed:.2} s: faster than 10 per second"
    );

    // Protobuf, upstream's default content type, is refused with the reason.
    let out = stack
        .controller_manager_command(
            free_port(),
            &[
                "--kube-api-content-type",
                "application/vnd.kubernetes.protobuf",
            ],
        )
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--kube-api-content-type") && stderr.contains("application/json"),
        "{stderr}"
    );
}

/// `--log-format json` (README, "Logs"): one JSON object per line with `timestamp`,
/// `level`, `target` and `fields.message`, the record's own fields under `fields`, and
/// a fatal error as an `ERROR` record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_with_the_documented_fields() {
    let stack = Stack::start().await;
    let nodes = stack.joining_node("n1").await;
    let mut command = stack.controller_manager_command(free_port(), &["--log-format", "json"]);
    command.env("RUST_LOG", "info");
    let (_cm, log) = wasm_ccm_tests::spawn_logged(command);
    wait_until(TIMEOUT, "n1 initialized", || initialized(&nodes, "n1")).await;
    wait_until(TIMEOUT, "the initialization logged", || async {
        log.lock()
            .unwrap()
            .contains("successfully initialized node")
    })
    .await;
    let text = log.lock().unwrap().clone();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    for record in &records {
        for field in ["timestamp", "level", "target"] {
            assert!(record[field].is_string(), "{field} in {record}");
        }
        assert!(record["fields"]["message"].is_string(), "{record}");
    }
    let initialized = records
        .iter()
        .find(|r| {
            r["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("successfully initialized node"))
        })
        .unwrap();
    assert_eq!(initialized["level"], "INFO");
    assert_eq!(initialized["fields"]["node"], "n1");
    assert_eq!(initialized["target"], "wasm_ccm::controllers::node");

    let out = stack
        .controller_manager_command(
            free_port(),
            &[
                "--log-format",
                "json",
                "--kube-api-content-type",
                "application/vnd.kubernetes.protobuf",
            ],
        )
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("--kube-api-content-type")),
        "{last}"
    );
}

#[tokio::test]
async fn bad_flags_fail_fast_with_a_clear_message() {
    let stack = Stack::start().await;
    let out = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin())
        .args([
            "--cloud-provider",
            "nosuch",
            "--secure-port",
            "0",
            "--configure-cloud-routes=false",
            "--providers-dir",
        ])
        .arg(stack.dir.dir.path())
        .arg("--kubeconfig")
        .arg(&stack.kubeconfig)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no provider named \"nosuch\""), "{err}");
    assert!(err.contains("simcloud"), "it lists what it found: {err}");

    let out = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin())
        .args([
            "--cloud-provider",
            "simcloud",
            "--controllers",
            "cloud-node,nodes",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown controller \"nodes\""));
}

/// Creates cloud instances and matching initialized, Ready Nodes.
async fn ready_nodes(stack: &Stack, names: &[&str]) -> Vec<String> {
    let nodes: Api<Node> = Api::all(stack.client());
    let mut ids = Vec::new();
    for name in names {
        let instance = stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        let mut node = kubelet_node(name, "True");
        let spec = node.spec.as_mut().unwrap();
        spec.taints = None;
        spec.provider_id = Some(format!("simcloud://{}", instance.id));
        nodes.create(&PostParams::default(), &node).await.unwrap();
        ids.push(instance.id);
    }
    ids
}

async fn reasons(stack: &Stack, service: &str) -> Vec<String> {
    let events: Api<CoreEvent> = Api::namespaced(stack.client(), "default");
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={service}")))
        .await
        .map(|l| l.items.into_iter().filter_map(|e| e.reason).collect())
        .unwrap_or_default()
}

/// The notes of a Service's events with `reason`.
async fn notes(stack: &Stack, service: &str, reason: &str) -> Vec<String> {
    let events: Api<CoreEvent> = Api::namespaced(stack.client(), "default");
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={service}")))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.message)
                .collect()
        })
        .unwrap_or_default()
}

fn ingress_ip(svc: &k8s_openapi::api::core::v1::Service) -> Option<String> {
    svc.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_load_balancers_follow_services_and_nodes() {
    let stack = Stack::start().await;
    let mut ids = ready_nodes(&stack, &["lb-1", "lb-2"]).await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let nodes: Api<Node> = Api::all(stack.client());
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);

    let created = services
        .create(&PostParams::default(), &load_balancer_service("web", None))
        .await
        .unwrap();
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("other", Some("example.com/lb")),
        )
        .await
        .unwrap();
    let lb_name = default_load_balancer_name(&created);
    wait_until(TIMEOUT, "an ingress IP", || async {
        services
            .get("web")
            .await
            .is_ok_and(|s| ingress_ip(&s).is_some_and(|ip| ip.starts_with("203.0.113.")))
    })
    .await;
    let web = services.get("web").await.unwrap();
    assert!(
        web.metadata
            .finalizers
            .unwrap()
            .contains(&"service.kubernetes.io/load-balancer-cleanup".to_string())
    );
    let backends = |stack: &Stack| {
        stack
            .cloud
            .with_state(|s| s.load_balancers.get(&lb_name).map(|lb| lb.backends.clone()))
    };
    ids.sort();
    assert_eq!(backends(&stack), Some(ids.clone()));
    wait_until(TIMEOUT, "Ensuring/Ensured events", || async {
        let r = reasons(&stack, "web").await;
        r.contains(&"EnsuringLoadBalancer".to_string())
            && r.contains(&"EnsuredLoadBalancer".to_string())
    })
    .await;
    // A Service with another load balancer class is not ours.
    assert!(
        services
            .get("other")
            .await
            .unwrap()
            .metadata
            .finalizers
            .is_none()
    );
    assert_eq!(stack.cloud.with_state(|s| s.load_balancers.len()), 1);

    // Node set changes: an excluded node does not join; a normal one does.
    let mut excluded = kubelet_node("lb-x", "False");
    excluded.spec.as_mut().unwrap().taints = None;
    excluded.metadata.labels.as_mut().unwrap().insert(
        "node.kubernetes.io/exclude-from-external-load-balancers".into(),
        "true".into(),
    );
    stack
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("lb-x")));
    nodes
        .create(&PostParams::default(), &excluded)
        .await
        .unwrap();
    let more = ready_nodes(&stack, &["lb-3"]).await;
    ids.extend(more);
    ids.sort();
    wait_until(TIMEOUT, "the new node behind the load balancer", || async {
        backends(&stack) == Some(ids.clone())
    })
    .await;
    wait_for_reason(&stack, "web", "UpdatedLoadBalancer").await;

    // The type changes away: the load balancer goes, then the finalizer, and the status clears.
    to_cluster_ip(&services, "web").await;
    wait_released(&services, "web").await;
    assert_eq!(backends(&stack), None);
    let r = reasons(&stack, "web").await;
    assert!(
        r.contains(&"DeletingLoadBalancer".to_string())
            && r.contains(&"DeletedLoadBalancer".to_string()),
        "{r:?}"
    );
}

/// Ported from upstream `TestServiceQueueDelay` ("retry error"): the cloud's
/// Retry-After (`api.RetryError`) schedules the next attempt — not sooner, even though
/// the controller's own finalizer write changes the Service meanwhile — instead of the
/// exponential backoff (whose count it does not grow: `backoff::service_queue_delay`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_retry_after_schedules_the_next_attempt() {
    // Longer than the first backoff step (5 s), so a controller that ignored it fails.
    const RETRY_AFTER: u64 = 7;
    let stack = Stack::start().await;
    ready_nodes(&stack, &["ra-1"]).await;
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("PUT".into()),
            status: Some(429),
            retry_after_seconds: Some(RETRY_AFTER),
            count: Some(1),
            ..Fault::default()
        })
    });
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "throttled").await;
    let puts: Vec<std::time::Instant> = stack.cloud.with_state(|s| {
        s.recent
            .iter()
            .filter(|(_, route)| route == "PUT /v1/load-balancers/{name}")
            .map(|(at, _)| *at)
            .collect()
    });
    assert_eq!(puts.len(), 2, "one throttled ensure, one retry");
    let waited = puts[1] - puts[0];
    assert!(
        waited >= Duration::from_secs(RETRY_AFTER),
        "retried after {waited:?}, sooner than the cloud's Retry-After"
    );
    assert_eq!(
        occurrences(&stack, "throttled", "SyncLoadBalancerFailed").await,
        1
    );
}

/// A Service deleted while its sync sits in back-off is acted on at once, as upstream
/// enqueues a deletion with `queue.Add` (no rate limiter) and `processServiceDeletion`
/// runs on the next worker: here an update throttled with a 5-minute Retry-After, then
/// the Service deleted; its load balancer goes and the finalizer is removed within
/// seconds, not after the back-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_is_acted_on_at_once_even_in_back_off() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["bo-1"]).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "backed-off").await;
    assert_eq!(stack.cloud.with_state(|s| s.load_balancers.len()), 1);

    // The next ensure is throttled for five minutes.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("PUT".into()),
            status: Some(429),
            retry_after_seconds: Some(300),
            count: Some(1),
            ..Fault::default()
        })
    });
    let mut changed = services.get("backed-off").await.unwrap();
    changed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 8080;
    services
        .replace("backed-off", &PostParams::default(), &changed)
        .await
        .unwrap();
    wait_for_reason(&stack, "backed-off", "SyncLoadBalancerFailed").await;

    let deleted = std::time::Instant::now();
    services
        .delete("backed-off", &Default::default())
        .await
        .unwrap();
    wait_until(Duration::from_secs(30), "the Service gone", || async {
        services.get("backed-off").await.is_err()
    })
    .await;
    assert!(stack.cloud.with_state(|s| s.load_balancers.is_empty()));
    assert!(
        deleted.elapsed() < Duration::from_secs(30),
        "acted on after {:?}",
        deleted.elapsed()
    );
}

/// A Node joining while a Service's load balancer is being deleted: the node sync that
/// waited for the Service's turn finds it gone and updates no hosts (upstream's
/// `nodeSyncService` checks the cache); before, the queued update went to a load
/// balancer deleted a moment earlier (and a provider whose update creates made a new
/// one that nothing would delete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_sync_queued_behind_a_deletion_updates_nothing() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["race-1"]).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "racing").await;
    let syncs = || async {
        metric(
            &metrics(port).await,
            "service_controller_nodesync_latency_seconds_count",
        )
    };
    let before = syncs().await;
    // The delete takes 3 s at the cloud: the node sync waits for it.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("DELETE".into()),
            latency_ms: 3000,
            count: Some(1),
            ..Fault::default()
        })
    });
    services
        .delete("racing", &Default::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the delete under way", || async {
        stack.cloud.with_state(|s| {
            s.recent
                .iter()
                .any(|(_, route)| route == "DELETE /v1/load-balancers/{name}")
        })
    })
    .await;
    ready_nodes(&stack, &["race-2"]).await;
    wait_until(TIMEOUT, "the Service gone", || async {
        services.get("racing").await.is_err()
    })
    .await;
    wait_until(TIMEOUT, "the node sync done", || async {
        syncs().await > before
    })
    .await;
    let backends = stack.cloud.with_state(|s| {
        s.recent
            .iter()
            .filter(|(_, route)| route == "PUT /v1/load-balancers/{name}/backends")
            .count()
    });
    assert_eq!(backends, 0, "hosts updated for a deleted Service");
    assert!(stack.cloud.with_state(|s| s.load_balancers.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_errors_retry_and_the_finalizer_waits_for_deletion() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["e-1"]).await;
    // The first ensure is throttled (429, retry after 1 s).
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("PUT".into()),
            status: Some(429),
            retry_after_seconds: Some(1),
            count: Some(1),
            ..Fault::default()
        })
    });
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    services
        .create(&PostParams::default(), &load_balancer_service("api", None))
        .await
        .unwrap();
    wait_until(TIMEOUT, "ensured after the retry", || async {
        services
            .get("api")
            .await
            .is_ok_and(|s| ingress_ip(&s).is_some())
    })
    .await;
    assert!(
        reasons(&stack, "api")
            .await
            .contains(&"SyncLoadBalancerFailed".to_string())
    );

    // Deleting fails once: the Service stays (finalizer) until the provider confirms.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("DELETE".into()),
            status: Some(500),
            count: Some(1),
            ..Fault::default()
        })
    });
    services.delete("api", &Default::default()).await.unwrap();
    // Upstream: a failure on the finalizer path is SyncLoadBalancerFailed
    // (DeleteLoadBalancerFailed is for Services already gone).
    wait_until(TIMEOUT, "the failed delete reported", || async {
        notes(&stack, "api", "SyncLoadBalancerFailed")
            .await
            .iter()
            .any(|n| n.starts_with("Error syncing load balancer: failed to delete load balancer:"))
    })
    .await;
    assert!(
        services.get("api").await.is_ok(),
        "the finalizer holds the Service while the load balancer exists"
    );
    assert_eq!(stack.cloud.with_state(|s| s.load_balancers.len()), 1);
    wait_until(TIMEOUT, "the Service gone after the retry", || async {
        services.get("api").await.is_err()
    })
    .await;
    assert!(stack.cloud.with_state(|s| s.load_balancers.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_follow_node_pod_cidrs_within_the_cluster_cidr() {
    let stack = Stack::start().await;
    let nodes: Api<Node> = Api::all(stack.client());
    let mut ids = Vec::new();
    for (i, name) in ["r-1", "r-2"].iter().enumerate() {
        let instance = stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        let mut node = kubelet_node(name, "True");
        let spec = node.spec.as_mut().unwrap();
        spec.taints = None;
        spec.provider_id = Some(format!("simcloud://{}", instance.id));
        spec.pod_cidrs = Some(vec![format!("10.244.{}.0/24", i + 1)]);
        nodes.create(&PostParams::default(), &node).await.unwrap();
        ids.push(instance.id);
    }
    // Routes the controller does not own (outside 10.244.0.0/16), and a stale one inside.
    stack.cloud.with_state(|s| {
        for (name, cidr) in [("foreign", "192.168.7.0/24"), ("stale", "10.244.99.0/24")] {
            s.create_route(sim_cloud::model::NewRoute {
                name: name.into(),
                cluster: "kubernetes".into(),
                destination_cidr: cidr.into(),
                target_instance: ids[0].clone(),
            });
        }
    });
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    let cidrs = |stack: &Stack| {
        let mut v: Vec<String> = stack.cloud.with_state(|s| {
            s.routes
                .values()
                .map(|r| r.destination_cidr.clone())
                .collect()
        });
        v.sort();
        v
    };
    wait_until(
        TIMEOUT,
        "routes for both nodes, the stale one gone",
        || async { cidrs(&stack) == ["10.244.1.0/24", "10.244.2.0/24", "192.168.7.0/24"] },
    )
    .await;
    wait_until(
        TIMEOUT,
        "NetworkUnavailable=False on both nodes",
        || async {
            let mut ok = true;
            for name in ["r-1", "r-2"] {
                let node = nodes.get(name).await.unwrap();
                let c = node.status.unwrap().conditions.unwrap_or_default();
                ok &= c.iter().any(|c| {
                    c.type_ == "NetworkUnavailable"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("RouteCreated")
                });
            }
            ok
        },
    )
    .await;
    // Upstream's route_controller_route_sync_total counts reconciliations.
    assert!(metric(&metrics(port).await, "route_controller_route_sync_total") >= 1.0);
    // A blackholed route is replaced; a deleted node loses its route.
    let r1_route = stack.cloud.with_state(|s| {
        s.routes
            .values()
            .find(|r| r.destination_cidr == "10.244.1.0/24")
            .unwrap()
            .name
            .clone()
    });
    stack
        .cloud
        .with_state(|s| s.forced_blackholes.insert(r1_route.clone()));
    nodes.delete("r-2", &Default::default()).await.unwrap();
    wait_until(TIMEOUT, "r-2's route removed, r-1's re-created", || async {
        cidrs(&stack) == ["10.244.1.0/24", "192.168.7.0/24"]
            && stack
                .cloud
                .with_state(|s| s.list_routes(None).iter().all(|r| !r.blackhole))
    })
    .await;
}

/// Upstream `startRouteController`: the route controller starts only with
/// `--configure-cloud-routes` and a provider exporting routes, and only then needs
/// `--cluster-cidr` (one or two CIDRs, two of different families). Upstream has no test
/// of it (`app/` tests cover controller names, leader election and webhooks only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_cidr_is_needed_only_when_the_route_controller_runs() {
    let command = |stack: &Stack, port: u16, extra: &[&str]| {
        let mut command = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin());
        command
            .args(["--cloud-provider", &stack.provider, "--secure-port"])
            .arg(port.to_string())
            .args(["--bind-address", "127.0.0.1", "--serve-plain-http=true"])
            .arg("--leader-elect=false")
            .arg("--providers-dir")
            .arg(stack.dir.dir.path())
            .arg("--credentials-dir")
            .arg(stack.dir.dir.path())
            .arg("--cloud-config")
            .arg(&stack.cloud_config)
            .arg("--kubeconfig")
            .arg(&stack.kubeconfig)
            .args(extra)
            .kill_on_drop(true);
        command
    };
    // A provider with routes and default flags: a clear error.
    let stack = Stack::start().await;
    let out = command(&stack, free_port(), &[]).output().await.unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the route controller needs --cluster-cidr"),
        "{stderr}"
    );
    // Two CIDRs of one family are not dual stack.
    let out = command(
        &stack,
        free_port(),
        &["--cluster-cidr=10.0.0.0/16,10.1.0.0/16"],
    )
    .output()
    .await
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("one IPv4 and one IPv6"));
    // Without --configure-cloud-routes, or with a provider exporting no routes, the
    // controller manager starts with default flags.
    let ready = |port: u16| async move {
        wait_until(TIMEOUT, "the controller manager ready", || async move {
            http_get(port, "/readyz")
                .await
                .is_ok_and(|(status, _)| status == 200)
        })
        .await
    };
    let port = free_port();
    let _routes_off = command(&stack, port, &["--configure-cloud-routes=false"])
        .spawn()
        .unwrap();
    ready(port).await;
    // Upstream reads --cluster-cidr only when the route controller starts: without it,
    // CIDRs it would refuse are not an error.
    let port = free_port();
    let _routes_off_cidrs = command(
        &stack,
        port,
        &[
            "--configure-cloud-routes=false",
            "--cluster-cidr=10.0.0.0/16,10.1.0.0/16",
        ],
    )
    .spawn()
    .unwrap();
    ready(port).await;
    let legacy = Stack::with_provider("fixture_legacy", "simcloud").await;
    let port = free_port();
    let _no_routes = command(&legacy, port, &[]).spawn().unwrap();
    ready(port).await;
}

/// A provider without instances-v2: upstream's fallback through instances and zones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_instances_and_zones_path() {
    let stack = Stack::with_provider("fixture_legacy", "simcloud").await;
    let (keep, gone) = stack.cloud.with_state(|s| {
        let keep = s.create_instance(NewInstance {
            instance_type: Some("sim.medium".into()),
            zone: Some("zone-c".into()),
            region: Some("region-3".into()),
            ..NewInstance::named("v1-a")
        });
        (keep, s.create_instance(NewInstance::named("v1-b")))
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in ["v1-a", "v1-b"] {
        nodes
            .create(&PostParams::default(), &kubelet_node(name, "True"))
            .await
            .unwrap();
    }
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    for name in ["v1-a", "v1-b"] {
        wait_until(TIMEOUT, "initialized through instances v1", || {
            initialized(&nodes, name)
        })
        .await;
    }
    let node = nodes.get("v1-a").await.unwrap();
    assert_eq!(
        node.spec.clone().unwrap().provider_id,
        Some(format!("simcloud://{}", keep.id)),
        "provider ID from instance-id"
    );
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["node.kubernetes.io/instance-type"], "sim.medium");
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-c");
    assert_eq!(labels["topology.kubernetes.io/region"], "region-3");
    let m = metrics(port).await;
    assert!(
        m.contains(r#"interface="instances",function="instance-id",result="ok""#),
        "{m}"
    );
    assert!(
        m.contains(r#"interface="zones",function="get-zone-by-provider-id",result="ok""#),
        "{m}"
    );
    assert!(!m.contains(r#"interface="instances-v2""#), "{m}");

    // Lifecycle through instance-exists-by-provider-id.
    stack.cloud.with_state(|s| s.delete_instance(&gone.id));
    set_ready(&nodes, "v1-b", "False").await;
    wait_until(TIMEOUT, "v1-b deleted", || async {
        nodes.get("v1-b").await.is_err()
    })
    .await;
    assert!(nodes.get("v1-a").await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_cloud_times_out_and_leaves_nodes_alone() {
    let stack = Stack::start().await;
    // Calls give up after 1 s; the cloud answers after 3 s.
    let policy = stack.dir.dir.path().join("simcloud.yaml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(&policy, text.replace("callTimeout: 10s", "callTimeout: 1s")).unwrap();
    let gone = ready_nodes(&stack, &["slow-gone"]).await.remove(0);
    let nodes = stack.joining_node("slow-new").await;
    set_ready(&nodes, "slow-gone", "False").await;
    stack.cloud.with_state(|s| {
        s.delete_instance(&gone);
        s.faults.push(Fault {
            latency_ms: 3000,
            ..Fault::default()
        });
    });

    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(
        TIMEOUT,
        "calls timing out in both node controllers",
        || async {
            let m = metrics(port).await;
            provider_calls(&m, &["timeout"]) >= 4.0
                && reconciles(&m, "cloud-node-lifecycle", "error") >= 1.0
        },
    )
    .await;
    assert!(
        nodes.get("slow-gone").await.is_ok(),
        "a timeout must never delete a node"
    );
    assert!(taint_keys(&nodes.get("slow-new").await.unwrap()).contains(&UNINITIALIZED.to_string()));

    // The cloud recovers: the gone instance's node is deleted, the new one initialized.
    stack.cloud.with_state(|s| s.faults.clear());
    wait_until(TIMEOUT, "slow-new initialized", || {
        initialized(&nodes, "slow-new")
    })
    .await;
    wait_until(TIMEOUT, "slow-gone deleted", || async {
        nodes.get_opt("slow-gone").await.is_ok_and(|n| n.is_none())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_routes_cover_both_cluster_cidrs() {
    let stack = Stack::start().await;
    let instance = stack
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("ds-1")));
    let mut node = kubelet_node("ds-1", "True");
    let spec = node.spec.as_mut().unwrap();
    spec.taints = None;
    spec.provider_id = Some(format!("simcloud://{}", instance.id));
    spec.pod_cidrs = Some(vec!["10.244.5.0/24".into(), "fd00:10:244:5::/64".into()]);
    let nodes: Api<Node> = Api::all(stack.client());
    nodes.create(&PostParams::default(), &node).await.unwrap();
    // Inside the IPv6 cluster CIDR but no Node's: stale. Outside: not ours.
    stack.cloud.with_state(|s| {
        for (name, cidr) in [
            ("stale6", "fd00:10:244:99::/64"),
            ("foreign6", "fd00:99::/64"),
        ] {
            s.create_route(sim_cloud::model::NewRoute {
                name: name.into(),
                cluster: "kubernetes".into(),
                destination_cidr: cidr.into(),
                target_instance: instance.id.clone(),
            });
        }
    });
    let port = free_port();
    // The harness passes --cluster-cidr 10.244.0.0/16; this adds the IPv6 one.
    let _ccm = stack.controller_manager(
        port,
        &["--leader-elect=false", "--cluster-cidr", "fd00:10:244::/56"],
    );
    wait_until(
        TIMEOUT,
        "an IPv4 and an IPv6 route, the stale one gone",
        || async {
            let mut cidrs: Vec<String> = stack.cloud.with_state(|s| {
                s.routes
                    .values()
                    .map(|r| r.destination_cidr.clone())
                    .collect()
            });
            cidrs.sort();
            cidrs == ["10.244.5.0/24", "fd00:10:244:5::/64", "fd00:99::/64"]
        },
    )
    .await;

    // A third cluster CIDR is refused at startup.
    let out = stack
        .controller_manager_command(
            free_port(),
            &[
                "--cluster-cidr",
                "fd00:10:244::/56",
                "--cluster-cidr",
                "10.0.0.0/8",
            ],
        )
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at most two CIDRs"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_updates_retry_on_conflict() {
    let stack = Stack::start().await;
    let nodes: Api<Node> = Api::all(stack.client());
    stack.cloud.with_state(|s| {
        s.create_instance(NewInstance::named("c-1"));
        s.create_instance(NewInstance::named("c-2"));
    });
    // Another writer wins the first three updates: the sync re-reads and retries.
    stack.api.inject_conflicts("nodes", "update", 3);
    nodes
        .create(&PostParams::default(), &kubelet_node("c-1", "True"))
        .await
        .unwrap();
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "c-1 initialized despite conflicts", || {
        initialized(&nodes, "c-1")
    })
    .await;
    let errors = |m: &str| reconciles(m, "cloud-node", "error");
    assert_eq!(
        errors(&metrics(port).await),
        0.0,
        "conflicts retried within the sync"
    );

    // More conflicts than one sync retries (20): the sync fails, is requeued with
    // backoff, and the next one succeeds.
    stack.api.inject_conflicts("nodes", "update", 25);
    nodes
        .create(&PostParams::default(), &kubelet_node("c-2", "True"))
        .await
        .unwrap();
    wait_until(TIMEOUT, "c-2 initialized after a requeue", || {
        initialized(&nodes, "c-2")
    })
    .await;
    assert!(errors(&metrics(port).await) >= 1.0);
}

/// One view of Nodes: the periodic passes (lifecycle, routes, node status) and the
/// service controller read the shared Node informer, so the API server sees one paged
/// list and a watch, not a list of every Node per pass. A watch that expires (410
/// after compaction) lists again, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_passes_read_the_shared_node_informer() {
    let stack = Stack::start().await;
    let nodes_resource = kube_double::resources::find("", "v1", "nodes").unwrap();
    // More than one page of the watch's initial list (500).
    let total = 517;
    for i in 0..total {
        stack
            .api
            .store()
            .create(
                nodes_resource,
                "",
                json!({"metadata": {"name": format!("p-{i:04}")},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            )
            .unwrap();
    }
    let node_lists = || {
        stack
            .api
            .request_counts()
            .iter()
            .filter(|(a, _)| a.resource == "nodes" && a.verb == "list")
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    let passes = |m: &str| reconciles(m, "cloud-node-lifecycle", "success") / total as f64;
    wait_until(
        TIMEOUT,
        "three lifecycle passes over every Node",
        || async { passes(&metrics(port).await) >= 3.0 },
    )
    .await;
    let lists = node_lists();
    assert_eq!(lists, 2, "one paged list: 500 + 17");
    let seen = passes(&metrics(port).await);
    wait_until(TIMEOUT, "three more passes", || async {
        passes(&metrics(port).await) >= seen + 3.0
    })
    .await;
    assert_eq!(node_lists(), lists, "passes do not list Nodes");

    // The watch expires (another write moves the server past the watch's resource
    // version, then history is compacted): one list again. A Node added afterwards is
    // visited. (Added before the relist, it could reach the old watch before that
    // watch notices the disconnect, and the watch would resume past it without a 410.)
    stack
        .api
        .store()
        .create(
            kube_double::resources::find("coordination.k8s.io", "v1", "leases").unwrap(),
            "default",
            json!({"metadata": {"name": "bump"}}),
        )
        .unwrap();
    stack.api.store().compact();
    stack.api.disconnect_watches();
    wait_until(TIMEOUT, "the relist", || async {
        node_lists() >= lists + 2
    })
    .await;
    stack
        .api
        .store()
        .create(
            nodes_resource,
            "",
            json!({"metadata": {"name": "p-late"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .unwrap();
    let before = reconciles(&metrics(port).await, "cloud-node-lifecycle", "success");
    wait_until(
        TIMEOUT,
        "a pass over every Node and the new one",
        || async {
            reconciles(&metrics(port).await, "cloud-node-lifecycle", "success")
                >= before + 2.0 * (total + 1) as f64
        },
    )
    .await;
}

/// Upstream `syncLoadBalancerIfNeeded` and `lockedUpdateLoadBalancerHosts` with a
/// provider answering `ImplementedElsewhere` (as cloud-provider-aws does for
/// `aws-load-balancer-type: external`): ensure, host updates and delete are left to the
/// other controller, none of them an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_implemented_elsewhere_is_left_alone() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["ie-1"]).await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let mut svc = load_balancer_service("external", None);
    svc.metadata.annotations = Some(
        [(
            "simcloud.example/load-balancer-implementation".to_string(),
            "external".to_string(),
        )]
        .into(),
    );
    let created = services.create(&PostParams::default(), &svc).await.unwrap();
    // The other controller's load balancer, under the name ours would have.
    let theirs = default_load_balancer_name(&created);
    stack.cloud.with_state(|s| {
        s.put_load_balancer(
            &theirs,
            sim_cloud::model::LoadBalancerSpec {
                ports: Vec::new(),
                backends: Vec::new(),
                source_ranges: Vec::new(),
                description: "another controller's".into(),
            },
        )
    });
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_for_reason(&stack, "external", "EnsuringLoadBalancer").await;
    wait_until(
        TIMEOUT,
        "the service reconcile counted as a success",
        || async { reconciles(&metrics(port).await, "service", "success") >= 1.0 },
    )
    .await;
    // Upstream: the provider says another controller owns it; no status, no error,
    // no retry, no cloud load balancer.
    let m = metrics(port).await;
    assert_eq!(reconciles(&m, "service", "error"), 0.0);
    let got = services.get("external").await.unwrap();
    assert!(ingress_ip(&got).is_none());
    let reasons = reasons(&stack, "external").await;
    assert!(
        !reasons
            .iter()
            .any(|r| r == "SyncLoadBalancerFailed" || r == "EnsuredLoadBalancer"),
        "{reasons:?}"
    );
    assert_eq!(load_balancer_names(&stack), std::slice::from_ref(&theirs));
    // A node joins: the host update is implemented elsewhere too, which upstream's
    // lockedUpdateLoadBalancerHosts counts as success (no UpdateLoadBalancerFailed, no
    // retry through a full sync).
    ready_nodes(&stack, &["ie-2"]).await;
    wait_until(TIMEOUT, "the node sync", || async {
        metric(
            &metrics(port).await,
            "service_controller_update_loadbalancer_host_latency_seconds_count",
        ) >= 1.0
    })
    .await;
    // Deleting it completes: get finds the other controller's load balancer
    // (DeletingLoadBalancer), the delete is implemented elsewhere (not an error), the
    // finalizer goes, and their load balancer stays.
    services
        .delete("external", &Default::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the Service gone", || async {
        services
            .get_opt("external")
            .await
            .is_ok_and(|s| s.is_none())
    })
    .await;
    let reasons = self::reasons(&stack, "external").await;
    for reason in ["DeletingLoadBalancer", "DeletedLoadBalancer"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
    for reason in [
        "SyncLoadBalancerFailed",
        "UpdateLoadBalancerFailed",
        "EnsuredLoadBalancer",
    ] {
        assert!(
            !reasons.iter().any(|r| r == reason),
            "{reason}: {reasons:?}"
        );
    }
    assert_eq!(
        occurrences(&stack, "external", "EnsuringLoadBalancer").await,
        1
    );
    assert_eq!(reconciles(&metrics(port).await, "service", "error"), 0.0);
    assert_eq!(load_balancer_names(&stack), [theirs]);
}

/// Upstream `syncNode` → `updateNodeAddress`: the address update after initialization
/// failing is logged, the Node stays initialized with its `Synced` event, and the
/// periodic status update writes the addresses later. Upstream's `Test_syncNode` never
/// fails the patch (its reactor always succeeds); this is the case it leaves out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_address_update_after_initialization_is_not_a_failed_sync() {
    let stack = Stack::start().await;
    stack.cloud.with_state(|s| {
        s.create_instance(NewInstance {
            addresses: Some(vec![Address::new("InternalIP", "10.1.0.7")]),
            ..NewInstance::named("n-addr")
        })
    });
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("n-addr", "True"))
        .await
        .unwrap();
    // The first status patch (the addresses, right after the taint is removed) fails.
    stack.api.inject_conflicts("nodes/status", "patch", 1);
    let port = free_port();
    let _ccm = stack.controller_manager(
        port,
        &["--leader-elect=false", "--node-status-update-frequency=1s"],
    );
    wait_until(TIMEOUT, "initialized", || initialized(&nodes, "n-addr")).await;
    let events: Api<CoreEvent> = Api::namespaced(stack.client(), "default");
    wait_until(TIMEOUT, "a Synced event", || async {
        events
            .list(&ListParams::default().fields("involvedObject.name=n-addr"))
            .await
            .is_ok_and(|l| {
                l.items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("Synced"))
            })
    })
    .await;
    wait_until(
        TIMEOUT,
        "the addresses set by the status update",
        || async {
            nodes.get("n-addr").await.is_ok_and(|n| {
                n.status
                    .and_then(|s| s.addresses)
                    .is_some_and(|a| a.iter().any(|a| a.address == "10.1.0.7"))
            })
        },
    )
    .await;
}

/// Upstream cloud-node-lifecycle corners: with the legacy `instances` interface, a
/// NotReady Node without a provider ID gets one through `instance-id` for the
/// shutdown check (`shutdownInCloudProvider`); the shutdown taint is matched by key
/// and effect (`MatchTaint`), so a same-key taint with another effect is left alone;
/// a failed delete records `DeletingNodeFailed` and is retried.
///
/// Ported from upstream `Test_NodesShutdown` ("node with empty spec providerID is not
/// ready and was shutdown, but exists", "node with non-existing providerID (missing in
/// cloud provider) gets deleted") and `Test_GetProviderID` ("cloud implemented with
/// Instances"); upstream has no test of a failed delete or of a same-key taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_corners_as_upstream() {
    let stack = Stack::with_provider("fixture_legacy", "simcloud").await;
    let (stopped, gone) = stack.cloud.with_state(|s| {
        (
            s.create_instance(NewInstance::named("legacy-stopped")),
            s.create_instance(NewInstance::named("legacy-gone")),
        )
    });
    stack.cloud.with_state(|s| {
        s.patch_instance(
            &stopped.id,
            InstancePatch {
                state: Some(InstanceState::Stopped),
                ..Default::default()
            },
        );
        s.delete_instance(&gone.id);
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in ["legacy-stopped", "legacy-gone"] {
        let mut node = kubelet_node(name, "False");
        // Initialized long ago, by a version that set no provider ID; someone else's
        // taint shares the shutdown key with another effect.
        node.spec.as_mut().unwrap().taints = Some(vec![Taint {
            key: SHUTDOWN.into(),
            effect: "NoExecute".into(),
            ..Taint::default()
        }]);
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    stack.api.inject_conflicts("nodes", "delete", 1);
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    let shutdown_taints = |node: &Node| -> Vec<String> {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key == SHUTDOWN)
            .map(|t| t.effect)
            .collect()
    };
    wait_until(
        TIMEOUT,
        "the shutdown taint on the stopped node",
        || async {
            nodes
                .get("legacy-stopped")
                .await
                .is_ok_and(|n| shutdown_taints(&n).contains(&"NoSchedule".to_string()))
        },
    )
    .await;
    let events: Api<CoreEvent> = Api::namespaced(stack.client(), "default");
    wait_until(
        TIMEOUT,
        "DeletingNodeFailed, then the node deleted",
        || async {
            let failed = events
                .list(&ListParams::default().fields("reason=DeletingNodeFailed"))
                .await
                .is_ok_and(|l| !l.items.is_empty());
            failed && nodes.get_opt("legacy-gone").await.unwrap().is_none()
        },
    )
    .await;
    // Ready again: our taint goes, the NoExecute one with the same key stays.
    set_ready(&nodes, "legacy-stopped", "True").await;
    wait_until(TIMEOUT, "the shutdown taint removed", || async {
        nodes
            .get("legacy-stopped")
            .await
            .is_ok_and(|n| shutdown_taints(&n) == ["NoExecute"])
    })
    .await;
}

/// Upstream `shutdownInCloudProvider` (no case of upstream `Test_NodesShutdown`
/// covers it): a legacy provider's `not-implemented` from
/// `InstanceShutdownByProviderID` means "not shut down", not an error: the NotReady
/// Node of a stopped instance whose cloud cannot tell is neither tainted nor deleted,
/// and every lifecycle pass over it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_check_not_implemented_is_not_shut_down() {
    let stack = Stack::with_provider("fixture_legacy", "simcloud").await;
    let mut new = NewInstance::named("legacy-unknown");
    new.state = Some(InstanceState::Stopped);
    new.labels
        .insert("fixture/shutdown-check".into(), "not-implemented".into());
    stack.cloud.with_state(|s| s.create_instance(new));
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(
            &PostParams::default(),
            &kubelet_node("legacy-unknown", "False"),
        )
        .await
        .unwrap();
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "three lifecycle passes over the node", || async {
        reconciles(&metrics(port).await, "cloud-node-lifecycle", "success") >= 3.0
    })
    .await;
    let m = metrics(port).await;
    assert_eq!(
        reconciles(&m, "cloud-node-lifecycle", "error"),
        0.0,
        "not-implemented is not an error: {m}"
    );
    let node = nodes.get("legacy-unknown").await.unwrap();
    assert!(
        !taint_keys(&node).contains(&SHUTDOWN.to_string()),
        "not shut down: {node:?}"
    );
}

/// Waits until `reason` was recorded for Service `service`.
async fn wait_for_reason(stack: &Stack, service: &str, reason: &str) {
    wait_until(TIMEOUT, &format!("{reason} for {service}"), || async {
        reasons(stack, service).await.iter().any(|r| r == reason)
    })
    .await;
}

/// How many times `reason` was recorded for the Service (repeats of one event are
/// aggregated into its series count).
async fn occurrences(stack: &Stack, service: &str, reason: &str) -> i32 {
    let events: Api<CoreEvent> = Api::namespaced(stack.client(), "default");
    events
        .list(
            &ListParams::default()
                .fields(&format!("involvedObject.name={service},reason={reason}")),
        )
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|e| {
                    e.series
                        .as_ref()
                        .and_then(|s| s.count)
                        .or(e.count)
                        .unwrap_or(1)
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Upstream `needsUpdate`: only changes the service controller cares about sync a
/// Service — not its own finalizer and status writes, nor a label — so each sync emits
/// `EnsuringLoadBalancer`/`EnsuredLoadBalancer` once; an annotation change syncs again.
/// End to end beside the port of upstream `TestNeedsUpdate` (`service::predicates::tests`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_changes_upstream_cares_about_sync_a_service() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["quiet-1"]).await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("quiet", None),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the load balancer ensured", || async {
        occurrences(&stack, "quiet", "EnsuredLoadBalancer").await >= 1
    })
    .await;
    // A label: not something upstream syncs on. Then an annotation: it is.
    for patch in [
        json!({"metadata": {"labels": {"team": "a"}}}),
        json!({"metadata": {"annotations": {"example.com/note": "1"}}}),
    ] {
        services
            .patch("quiet", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
    wait_until(TIMEOUT, "the second sync", || async {
        occurrences(&stack, "quiet", "EnsuredLoadBalancer").await >= 2
    })
    .await;
    assert_eq!(
        occurrences(&stack, "quiet", "EnsuringLoadBalancer").await,
        2,
        "one sync for the creation, one for the annotation"
    );
}

type Service = k8s_openapi::api::core::v1::Service;

/// The simulated cloud's load balancer names.
fn load_balancer_names(stack: &Stack) -> Vec<String> {
    stack
        .cloud
        .with_state(|s| s.load_balancers.keys().cloned().collect())
}

/// Creates a LoadBalancer Service and waits for its ingress; returns the Service.
async fn ensured(services: &Api<Service>, name: &str) -> Service {
    services
        .create(&PostParams::default(), &load_balancer_service(name, None))
        .await
        .unwrap();
    wait_until(TIMEOUT, "the load balancer ensured", || async {
        services.get(name).await.is_ok_and(|s| {
            ingress_ip(&s).is_some()
                && s.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| !f.is_empty())
        })
    })
    .await;
    services.get(name).await.unwrap()
}

/// Switches a Service to ClusterIP.
async fn to_cluster_ip(services: &Api<Service>, name: &str) {
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
        )
        .await
        .unwrap();
}

/// Waits until a Service has neither the finalizer nor an ingress.
async fn wait_released(services: &Api<Service>, name: &str) {
    wait_until(TIMEOUT, "finalizer and status gone", || async {
        services.get(name).await.is_ok_and(|s| {
            ingress_ip(&s).is_none() && s.metadata.finalizers.unwrap_or_default().is_empty()
        })
    })
    .await;
}

async fn remove_finalizers(services: &Api<Service>, name: &str) {
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
}

/// Ported from upstream `TestProcessServiceDeletion` and the UID case of
/// `TestProcessServiceCreateOrUpdate`: cleanup does not depend on the finalizer. A
/// Service whose finalizer was removed by hand, then deleted, has its load balancer
/// deleted from the last state synced; one deleted and re-created under its name gets
/// the old load balancer deleted and a new one; one switched to ClusterIP without the
/// finalizer loses its load balancer. Nothing leaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_service_deletion_without_the_finalizer() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["fin-1"]).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);

    // Deleted without the finalizer; the first delete fails (upstream's
    // DeleteLoadBalancerFailed, then a retry with backoff).
    ensured(&services, "gone").await;
    remove_finalizers(&services, "gone").await;
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("DELETE".into()),
            status: Some(500),
            count: Some(1),
            ..Fault::default()
        })
    });
    services.delete("gone", &Default::default()).await.unwrap();
    assert!(services.get_opt("gone").await.unwrap().is_none());
    wait_until(
        TIMEOUT,
        "the deleted Service's load balancer gone",
        || async { load_balancer_names(&stack).is_empty() },
    )
    .await;
    wait_until(TIMEOUT, "Deleting/DeleteFailed/Deleted events", || async {
        let r = reasons(&stack, "gone").await;
        [
            "DeletingLoadBalancer",
            "DeleteLoadBalancerFailed",
            "DeletedLoadBalancer",
        ]
        .iter()
        .all(|want| r.iter().any(|got| got == want))
    })
    .await;

    // Deleted and re-created under the same name (a new UID).
    let old = ensured(&services, "again").await;
    let old_lb = load_balancer_names(&stack);
    assert_eq!(old_lb.len(), 1);
    remove_finalizers(&services, "again").await;
    services.delete("again", &Default::default()).await.unwrap();
    let new = services
        .create(
            &PostParams::default(),
            &load_balancer_service("again", None),
        )
        .await
        .unwrap();
    assert_ne!(old.metadata.uid, new.metadata.uid);
    wait_until(TIMEOUT, "one load balancer, the new Service's", || async {
        let names = load_balancer_names(&stack);
        names.len() == 1 && names != old_lb
    })
    .await;
    wait_until(TIMEOUT, "the new Service's ingress", || async {
        services
            .get("again")
            .await
            .is_ok_and(|s| ingress_ip(&s).is_some())
    })
    .await;

    // Switched to ClusterIP without the finalizer, in one update (two would race the
    // controller putting the finalizer back between them).
    services
        .patch(
            "again",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"finalizers": null},
                "spec": {"type": "ClusterIP"},
            })),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "the load balancer deleted, the status cleared",
        || async {
            load_balancer_names(&stack).is_empty()
                && services
                    .get("again")
                    .await
                    .is_ok_and(|s| ingress_ip(&s).is_none())
        },
    )
    .await;
    // The injected failure is the only failed cloud call. Reconciles may also fail on
    // an API conflict: the controller puts back a finalizer the test removes.
    let m = metrics(port).await;
    assert_eq!(
        provider_calls(&m, &["cloud_error"]),
        1.0,
        "the one failed delete"
    );
    assert!(reconciles(&m, "service", "error") >= 1.0);
}

/// Ported from upstream `TestSyncLoadBalancerIfNeeded`: a Service that does not want a
/// load balancer and has no finalizer causes no cloud call and no event; a Service
/// with the finalizer that no longer wants one, whose load balancer is already gone
/// from the cloud, is not deleted again (`GetLoadBalancer` first: no
/// `DeletingLoadBalancer`) but still loses the finalizer and its status, with
/// `DeletedLoadBalancer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_load_balancer_if_needed_as_upstream() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["sync-1"]).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let cluster_ip: Service = serde_json::from_value(json!({
        "metadata": {"name": "plain", "namespace": "default"},
        "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &cluster_ip)
        .await
        .unwrap();
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "vanished").await;
    assert!(reasons(&stack, "plain").await.is_empty());
    assert!(
        services
            .get("plain")
            .await
            .unwrap()
            .metadata
            .finalizers
            .is_none()
    );

    // The load balancer disappears from the cloud behind the controller's back.
    stack.cloud.with_state(|s| s.load_balancers.clear());
    to_cluster_ip(&services, "vanished").await;
    wait_released(&services, "vanished").await;
    let r = reasons(&stack, "vanished").await;
    assert!(r.contains(&"DeletedLoadBalancer".to_string()), "{r:?}");
    assert!(!r.contains(&"DeletingLoadBalancer".to_string()), "{r:?}");
}

/// Ported from upstream `TestProcessServiceCreateOrUpdateK8sError` and
/// `TestPatchStatus`: a Kubernetes API error on the finalizer patch or on the status
/// patch is a failed sync (`SyncLoadBalancerFailed` naming the step), retried until
/// the Service has its finalizer and status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_service_create_or_update_k8s_error() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["k8s-1"]).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    stack.api.inject_conflicts("services", "patch", 1);
    stack.api.inject_conflicts("services/status", "patch", 1);
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "conflicted").await;
    let failures = notes(&stack, "conflicted", "SyncLoadBalancerFailed").await;
    for step in [
        "failed to add load balancer cleanup finalizer",
        "failed to update load balancer status",
    ] {
        assert!(
            failures
                .iter()
                .any(|n| n.starts_with(&format!("Error syncing load balancer: {step}"))),
            "{step}: {failures:?}"
        );
    }
}

/// Upstream `processServiceCreateOrUpdate`: a NotFound on the status patch (the
/// Service disappeared right after the ensure) is not an error: no
/// `SyncLoadBalancerFailed`, no retry, the sync counts as a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_patch_not_found_is_not_an_error() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["nf-1"]).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    stack.api.inject_not_found("services/status", "patch", 1);
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("vanishing", None),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the sync counted as a success", || async {
        occurrences(&stack, "vanishing", "EnsuredLoadBalancer").await >= 1
            && reconciles(&metrics(port).await, "service", "success") >= 1.0
    })
    .await;
    assert_eq!(reconciles(&metrics(port).await, "service", "error"), 0.0);
    assert_eq!(
        occurrences(&stack, "vanishing", "SyncLoadBalancerFailed").await,
        0
    );
    assert_eq!(load_balancer_names(&stack).len(), 1);
}

/// Ported from upstream `TestNodeChangesInExternalLoadBalancer`,
/// `Test_shouldSyncUpdatedNode_*` and `TestNodesNotEqual`: a node tainted for deletion
/// leaves the load balancer at the next node sync; an exclusion label is parsed as Go's
/// `strconv.ParseBool` (`FaLsE` is not false: excluded); a failed host update is retried
/// as a full sync of that Service, with `UpdateLoadBalancerFailed` first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_changes_in_external_load_balancer() {
    let stack = Stack::start().await;
    let mut ids = ready_nodes(&stack, &["nc-1", "nc-2", "nc-3"]).await;
    ids.sort();
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let nodes: Api<Node> = Api::all(stack.client());
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "hosts").await;
    let lb = load_balancer_names(&stack).pop().unwrap();
    let backends = || {
        stack
            .cloud
            .with_state(|s| s.load_balancers.get(&lb).map(|lb| lb.backends.clone()))
            .unwrap_or_default()
    };
    assert_eq!(backends(), ids);

    // Tainted for deletion, then an exclusion label that Go does not parse as false:
    // the label syncs, and the tainted node leaves too.
    nodes
        .patch(
            "nc-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}})),
        )
        .await
        .unwrap();
    nodes
        .patch(
            "nc-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "FaLsE"}}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "only nc-1 behind the load balancer", || async {
        backends() == vec![ids[0].clone()]
    })
    .await;

    // The next host update fails: UpdateLoadBalancerFailed, then the Service's own
    // sync (Ensuring again) puts the label-cleared node back.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: format!("/v1/load-balancers/{lb}/backends"),
            method: Some("PUT".into()),
            status: Some(500),
            count: Some(1),
            ..Fault::default()
        })
    });
    let ensuring = occurrences(&stack, "hosts", "EnsuringLoadBalancer").await;
    nodes
        .patch(
            "nc-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "false"}}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the failed update reported", || async {
        occurrences(&stack, "hosts", "UpdateLoadBalancerFailed").await >= 1
    })
    .await;
    wait_until(TIMEOUT, "nc-3 back after the full sync", || async {
        let mut want = vec![ids[0].clone(), ids[2].clone()];
        want.sort();
        backends() == want
    })
    .await;
    assert!(occurrences(&stack, "hosts", "EnsuringLoadBalancer").await > ensuring);
    let failed = notes(&stack, "hosts", "UpdateLoadBalancerFailed").await;
    assert!(
        failed[0].contains("[node names limited, total number of nodes: 2]"),
        "{failed:?}"
    );
    // Upstream's service controller metrics (controllers/service/metrics.go): two host
    // updates (one failed), each node sync timed.
    let m = metrics(port).await;
    assert!(
        metric(&m, "service_controller_loadbalancer_sync_total") >= 2.0,
        "{m}"
    );
    assert!(
        metric(&m, "service_controller_nodesync_error_total") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "service_controller_nodesync_latency_seconds_count") >= 2.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "service_controller_update_loadbalancer_host_latency_seconds_count"
        ) >= 2.0,
        "{m}"
    );
}

/// Upstream `TestNodesNotEqual` (a provider ID set after the Node joined changes the
/// node set) and `lockedUpdateLoadBalancerHosts` / `nodeSyncInternal` with two
/// Services: only the Service whose host update failed is retried (through its own
/// full sync), the other is not synced again; a load balancer that vanished from the
/// cloud makes its failed update a success (not re-created by the node sync); zero
/// hosts is `UnAvailableLoadBalancer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_load_balancer_hosts_as_upstream() {
    let stack = Stack::start().await;
    let first = ready_nodes(&stack, &["uh-1"]).await.remove(0);
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let nodes: Api<Node> = Api::all(stack.client());
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false", "--controllers=service"]);
    let one = default_load_balancer_name(&ensured(&services, "one").await);
    let two = default_load_balancer_name(&ensured(&services, "two").await);
    let backends = |lb: &str| {
        stack.cloud.with_state(|s| {
            s.load_balancers
                .get(lb)
                .map(|lb| lb.backends.clone())
                .unwrap_or_default()
        })
    };

    // A Node joins without a provider ID, under a name that is not its instance's:
    // the provider cannot place it yet.
    let second = stack
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("uh-2-instance")))
        .id;
    let mut joining = kubelet_node("uh-2", "True");
    joining.spec.as_mut().unwrap().taints = None;
    nodes
        .create(&PostParams::default(), &joining)
        .await
        .unwrap();
    wait_until(TIMEOUT, "both load balancers updated for uh-2", || async {
        occurrences(&stack, "one", "UpdatedLoadBalancer").await >= 1
            && occurrences(&stack, "two", "UpdatedLoadBalancer").await >= 1
    })
    .await;
    assert_eq!(backends(&one), std::slice::from_ref(&first));

    // Its provider ID is set (as cloud-node does): the node set changed. The update of
    // "two" fails once: only "two" is synced again, and both end with both instances.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: format!("/v1/load-balancers/{two}/backends"),
            method: Some("PUT".into()),
            status: Some(500),
            count: Some(1),
            ..Fault::default()
        })
    });
    nodes
        .patch(
            "uh-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": format!("simcloud://{second}")}})),
        )
        .await
        .unwrap();
    let mut both = vec![first.clone(), second.clone()];
    both.sort();
    wait_until(
        TIMEOUT,
        "both instances behind both load balancers",
        || async { backends(&one) == both && backends(&two) == both },
    )
    .await;
    assert!(occurrences(&stack, "two", "UpdateLoadBalancerFailed").await >= 1);
    assert_eq!(occurrences(&stack, "two", "EnsuringLoadBalancer").await, 2);
    assert_eq!(
        occurrences(&stack, "one", "UpdateLoadBalancerFailed").await,
        0
    );
    assert_eq!(
        occurrences(&stack, "one", "EnsuringLoadBalancer").await,
        1,
        "a Service whose update succeeded is not synced again"
    );

    // "one" vanishes from the cloud; then every node is excluded. Its failed update is
    // a success (the load balancer no longer exists) and it is not re-created; "two"
    // has no hosts: UnAvailableLoadBalancer.
    stack.cloud.with_state(|s| s.load_balancers.remove(&one));
    for name in ["uh-1", "uh-2"] {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "true"}}})),
            )
            .await
            .unwrap();
    }
    wait_until(TIMEOUT, "two without hosts", || async {
        backends(&two).is_empty()
            && occurrences(&stack, "two", "UnAvailableLoadBalancer").await >= 1
    })
    .await;
    assert_eq!(
        occurrences(&stack, "one", "UpdateLoadBalancerFailed").await,
        0
    );
    assert_eq!(occurrences(&stack, "one", "EnsuringLoadBalancer").await, 1);
    assert_eq!(load_balancer_names(&stack), [two]);
}

/// The NetworkUnavailable condition of a Node.
async fn network_unavailable(nodes: &Api<Node>, name: &str) -> Option<(String, String)> {
    let node = nodes.get(name).await.ok()?;
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "NetworkUnavailable")
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

/// Ported from upstream `TestReconcile` and `TestIsResponsibleForRoute`
/// (controllers/route): a route is ours when its first or last address is in the
/// cluster CIDR (a /15 around the /16 is; 10.0.0.0/8 is not); a Node without a pod
/// CIDR that an existing route targets loses the route and gets
/// `NetworkUnavailable=True/NoRouteCreated`; a routed Node gets `False/RouteCreated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_routes_as_upstream() {
    let stack = Stack::start().await;
    let nodes: Api<Node> = Api::all(stack.client());
    let mut ids = Vec::new();
    for (name, cidr) in [("nr-1", Some("10.244.1.0/24")), ("nr-2", None)] {
        let instance = stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        let mut node = kubelet_node(name, "True");
        let spec = node.spec.as_mut().unwrap();
        spec.taints = None;
        spec.provider_id = Some(format!("simcloud://{}", instance.id));
        spec.pod_cidrs = cidr.map(|c| vec![c.to_string()]);
        nodes.create(&PostParams::default(), &node).await.unwrap();
        ids.push(instance.id);
    }
    let elsewhere = stack
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("not-a-node")));
    stack.cloud.with_state(|s| {
        for (name, cidr, target) in [
            ("for-nr-2", "10.244.9.0/24", &ids[1]),
            ("wider", "10.244.0.0/15", &elsewhere.id),
            ("outside", "10.0.0.0/8", &elsewhere.id),
        ] {
            s.create_route(sim_cloud::model::NewRoute {
                name: name.into(),
                cluster: "kubernetes".into(),
                destination_cidr: cidr.into(),
                target_instance: target.clone(),
            });
        }
    });
    // The first create fails: FailedToCreateRoute on the Node, from upstream's event
    // source, and NoRouteCreated until the retry succeeds.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/routes".into(),
            method: Some("POST".into()),
            status: Some(500),
            count: Some(1),
            ..Fault::default()
        })
    });
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(
        TIMEOUT,
        "FailedToCreateRoute from route_controller",
        || async {
            let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(stack.client());
            events.list(&ListParams::default()).await.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some("FailedToCreateRoute")
                        && e.reporting_controller.as_deref() == Some("route_controller")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("nr-1")
                        && e.note.as_deref().is_some_and(|n| {
                            n.starts_with("Could not create route ")
                                && n.contains(" 10.244.1.0/24 for node nr-1 after ")
                        })
                })
            })
        },
    )
    .await;
    wait_until(
        TIMEOUT,
        "nr-1 routed; the routes we own and no Node wants gone",
        || async {
            let mut v: Vec<String> = stack.cloud.with_state(|s| {
                s.routes
                    .values()
                    .map(|r| r.destination_cidr.clone())
                    .collect()
            });
            v.sort();
            v == ["10.0.0.0/8", "10.244.1.0/24"]
        },
    )
    .await;
    wait_until(TIMEOUT, "the conditions as upstream", || async {
        network_unavailable(&nodes, "nr-1").await == Some(("False".into(), "RouteCreated".into()))
            && network_unavailable(&nodes, "nr-2").await
                == Some(("True".into(), "NoRouteCreated".into()))
    })
    .await;
}

/// Ported from upstream `TestGetNodeAddressesFromNodeIP` and component-helpers'
/// `ParseNodeIPAnnotation` through the real controller: a provided node IP written
/// differently (leading zeros) matches the cloud's address as an IP and is enforced
/// (the other InternalIP dropped, the ExternalIP kept); one with a space does not
/// parse, and that Node stays uninitialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provided_node_ip_as_upstream() {
    let stack = Stack::start().await;
    for name in ["pip-sloppy", "pip-space"] {
        stack.cloud.with_state(|s| {
            s.create_instance(NewInstance {
                addresses: Some(vec![
                    Address::new("InternalIP", "10.1.0.1"),
                    Address::new("InternalIP", "10.1.0.9"),
                    Address::new("ExternalIP", "198.51.100.1"),
                ]),
                ..NewInstance::named(name)
            })
        });
    }
    let nodes: Api<Node> = Api::all(stack.client());
    for (name, ip) in [
        ("pip-sloppy", "010.001.000.009"),
        ("pip-space", "10.1.0.9 "),
    ] {
        let mut node = kubelet_node(name, "True");
        node.metadata.annotations = Some(
            [(
                "alpha.kubernetes.io/provided-node-ip".to_string(),
                ip.to_string(),
            )]
            .into(),
        );
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "pip-sloppy initialized", || {
        initialized(&nodes, "pip-sloppy")
    })
    .await;
    let addresses: Vec<(String, String)> = nodes
        .get("pip-sloppy")
        .await
        .unwrap()
        .status
        .unwrap()
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    let want = |t: &str, a: &str| (t.to_string(), a.to_string());
    assert!(
        addresses.contains(&want("InternalIP", "10.1.0.9")),
        "{addresses:?}"
    );
    assert!(
        addresses.contains(&want("ExternalIP", "198.51.100.1")),
        "{addresses:?}"
    );
    assert!(
        !addresses.contains(&want("InternalIP", "10.1.0.1")),
        "{addresses:?}"
    );
    wait_until(TIMEOUT, "pip-space failing to sync", || async {
        metric(
            &metrics(port).await,
            r#"wasm_ccm_controller_retries_pending{controller="cloud-node"}"#,
        ) == 1.0
    })
    .await;
    assert!(
        taint_keys(&nodes.get("pip-space").await.unwrap()).contains(&UNINITIALIZED.to_string())
    );
}

/// The reasons recorded for Service `name`, in the order they were recorded.
async fn reasons_in_order(stack: &Stack, name: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(stack.client(), "default");
    let mut list: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.name.as_deref() == Some(name))
        })
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list.into_iter().filter_map(|e| e.reason).collect()
}

/// Upstream's event order on the ensure path (`syncLoadBalancerIfNeeded` then
/// `ensureLoadBalancer`): `EnsuringLoadBalancer` before the finalizer and the node
/// list, `UnAvailableLoadBalancer` when no node is eligible, then
/// `EnsuredLoadBalancer`; and on the delete path: `DeletingLoadBalancer` before the
/// provider's delete, `DeletedLoadBalancer` once the finalizer is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_events_in_upstream_order() {
    let stack = Stack::start().await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "lonely").await;
    wait_for_reason(&stack, "lonely", "EnsuredLoadBalancer").await;
    assert_eq!(
        reasons_in_order(&stack, "lonely").await,
        [
            "EnsuringLoadBalancer",
            "UnAvailableLoadBalancer",
            "EnsuredLoadBalancer"
        ]
    );
    to_cluster_ip(&services, "lonely").await;
    wait_released(&services, "lonely").await;
    wait_for_reason(&stack, "lonely", "DeletedLoadBalancer").await;
    assert_eq!(
        reasons_in_order(&stack, "lonely").await,
        [
            "EnsuringLoadBalancer",
            "UnAvailableLoadBalancer",
            "EnsuredLoadBalancer",
            "DeletingLoadBalancer",
            "DeletedLoadBalancer"
        ]
    );
}

/// A repeated event is one Event whose series counts the repeats, however many: each
/// repeat patches only the series (a patch carrying the stored object's
/// resourceVersion would conflict from the third occurrence on, and be lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_events_are_one_series() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["rep-1"]).await;
    // Three throttled ensures in a row (retry after 1 s each), then success.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("PUT".into()),
            status: Some(429),
            retry_after_seconds: Some(1),
            count: Some(3),
            ..Fault::default()
        })
    });
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let port = free_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("repeats", None),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "ensured after three throttled attempts",
        || async {
            services
                .get("repeats")
                .await
                .is_ok_and(|s| ingress_ip(&s).is_some())
        },
    )
    .await;
    wait_until(TIMEOUT, "four EnsuringLoadBalancer recorded", || async {
        occurrences(&stack, "repeats", "EnsuringLoadBalancer").await >= 4
    })
    .await;
    assert_eq!(
        occurrences(&stack, "repeats", "SyncLoadBalancerFailed").await,
        3
    );
    let reasons = reasons(&stack, "repeats").await;
    for reason in ["EnsuringLoadBalancer", "SyncLoadBalancerFailed"] {
        assert_eq!(
            reasons.iter().filter(|r| *r == reason).count(),
            1,
            "{reason} is not one Event: {reasons:?}"
        );
    }
}
