//! The service controller's node sync: load balancers following the Nodes (added,
//! deleted, excluded, provider ID changed), upstream's `TestUpdateNodesInExternalLoadBalancer`
//! and host-update tables ported, and a node sync queued behind a Service's deletion.

use super::*;

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
    let port = listening_port();
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
    let port = listening_port();
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
    let ensuring = occurrences(&stack.client(), "hosts", "EnsuringLoadBalancer").await;
    nodes
        .patch(
            "nc-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "false"}}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the failed update reported", || async {
        occurrences(&stack.client(), "hosts", "UpdateLoadBalancerFailed").await >= 1
    })
    .await;
    wait_until(TIMEOUT, "nc-3 back after the full sync", || async {
        let mut want = vec![ids[0].clone(), ids[2].clone()];
        want.sort();
        backends() == want
    })
    .await;
    assert!(occurrences(&stack.client(), "hosts", "EnsuringLoadBalancer").await > ensuring);
    let failed = notes(&stack.client(), "hosts", "UpdateLoadBalancerFailed").await;
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
    let port = listening_port();
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
        occurrences(&stack.client(), "one", "UpdatedLoadBalancer").await >= 1
            && occurrences(&stack.client(), "two", "UpdatedLoadBalancer").await >= 1
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
    assert!(occurrences(&stack.client(), "two", "UpdateLoadBalancerFailed").await >= 1);
    assert_eq!(
        occurrences(&stack.client(), "two", "EnsuringLoadBalancer").await,
        2
    );
    assert_eq!(
        occurrences(&stack.client(), "one", "UpdateLoadBalancerFailed").await,
        0
    );
    assert_eq!(
        occurrences(&stack.client(), "one", "EnsuringLoadBalancer").await,
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
            && occurrences(&stack.client(), "two", "UnAvailableLoadBalancer").await >= 1
    })
    .await;
    assert_eq!(
        occurrences(&stack.client(), "one", "UpdateLoadBalancerFailed").await,
        0
    );
    assert_eq!(
        occurrences(&stack.client(), "one", "EnsuringLoadBalancer").await,
        1
    );
    assert_eq!(load_balancer_names(&stack), [two]);
}
