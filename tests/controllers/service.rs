//! The service controller: load balancers following Services and Nodes, one
//! implemented elsewhere left alone, which changes sync a Service, and its events in
//! upstream's order and as one series.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_load_balancers_follow_services_and_nodes() {
    let stack = Stack::start().await;
    let mut ids = ready_nodes(&stack, &["lb-1", "lb-2"]).await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let nodes: Api<Node> = Api::all(stack.client());
    let port = listening_port();
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
        let r = reasons(&stack.client(), "web").await;
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
    let r = reasons(&stack.client(), "web").await;
    assert!(
        r.contains(&"DeletingLoadBalancer".to_string())
            && r.contains(&"DeletedLoadBalancer".to_string()),
        "{r:?}"
    );
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
    let port = listening_port();
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
    let reasons = reasons(&stack.client(), "external").await;
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
    let reasons = events::reasons(&stack.client(), "external").await;
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
        occurrences(&stack.client(), "external", "EnsuringLoadBalancer").await,
        1
    );
    assert_eq!(reconciles(&metrics(port).await, "service", "error"), 0.0);
    assert_eq!(load_balancer_names(&stack), [theirs]);
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("quiet", None),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the load balancer ensured", || async {
        occurrences(&stack.client(), "quiet", "EnsuredLoadBalancer").await >= 1
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
        occurrences(&stack.client(), "quiet", "EnsuredLoadBalancer").await >= 2
    })
    .await;
    assert_eq!(
        occurrences(&stack.client(), "quiet", "EnsuringLoadBalancer").await,
        2,
        "one sync for the creation, one for the annotation"
    );
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "lonely").await;
    wait_for_reason(&stack, "lonely", "EnsuredLoadBalancer").await;
    assert_eq!(
        reasons_in_order(&stack.client(), "lonely").await,
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
        reasons_in_order(&stack.client(), "lonely").await,
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
    fail_load_balancer_requests(&stack, "PUT", 429, Some(1), 3);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let port = listening_port();
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
        occurrences(&stack.client(), "repeats", "EnsuringLoadBalancer").await >= 4
    })
    .await;
    assert_eq!(
        occurrences(&stack.client(), "repeats", "SyncLoadBalancerPending").await,
        3
    );
    let reasons = reasons(&stack.client(), "repeats").await;
    for reason in ["EnsuringLoadBalancer", "SyncLoadBalancerPending"] {
        assert_eq!(
            reasons.iter().filter(|r| *r == reason).count(),
            1,
            "{reason} is not one Event: {reasons:?}"
        );
    }
}
