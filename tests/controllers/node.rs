//! The cloud-node controller: initialization (provider ID, addresses, labels, the
//! taint), failures that keep the taint, the legacy instances path, the periodic status
//! pass, `--node-ip`, as upstream's.

use super::*;

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

    let port = listening_port();
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
    let addresses = node_addresses(&nodes, "n-a").await;
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

    wait_until(TIMEOUT, "two Synced events", || async {
        events::with_reason(&stack.client(), "Synced").await.len() == 2
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

    let port = listening_port();
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
    let port = listening_port();
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
    // Calls end after 1 s, so a request gives up after 450 ms (the default for such a
    // call: two fit in it); the cloud answers after 3 s. The request times out, the
    // call answers an error in time, and the host has no call to cut.
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

    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(
        TIMEOUT,
        "calls timing out in both node controllers",
        || async {
            let m = metrics(port).await;
            provider_calls(&m, &["cloud_error"]) >= 4.0
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "c-1 initialized despite conflicts", || {
        initialized(&nodes, "c-1")
    })
    .await;
    let errors = |m: &str| reconciles(m, "cloud-node", "error");
    assert_eq!(stack.api.faults_served("nodes", "update"), 3);
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
    assert_eq!(stack.api.faults_served("nodes", "update"), 3 + 25);
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
    let port = listening_port();
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
    let port = listening_port();
    let _ccm = stack.controller_manager(
        port,
        &["--leader-elect=false", "--node-status-update-frequency=1s"],
    );
    wait_until(TIMEOUT, "initialized", || initialized(&nodes, "n-addr")).await;
    wait_until(TIMEOUT, "the injected conflict answered", || async {
        stack.api.faults_served("nodes/status", "patch") == 1
    })
    .await;
    events::wait_for_reason(&stack.client(), "n-addr", "Synced", TIMEOUT).await;
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "pip-sloppy initialized", || {
        initialized(&nodes, "pip-sloppy")
    })
    .await;
    let addresses = node_addresses(&nodes, "pip-sloppy").await;
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
