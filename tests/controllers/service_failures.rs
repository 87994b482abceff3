//! The service controller's failure paths: the cloud's Retry-After and errors retried,
//! a deletion acted on while in back-off, cleanup when the finalizer was removed, and
//! Kubernetes API errors on its patches.

use super::*;

/// A cloud's 429 with `Retry-After` reaches the service controller as a retry-after
/// error (upstream's `api.RetryError`), through the broker and the provider: the
/// failure's event names the delay, and the retry then ensures the load balancer. When
/// the retry comes, on the controller's clock, is tested in process on paused time
/// (`controllers::service::requeue_tests`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_retry_after_reaches_the_controller() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["ra-1"]).await;
    fail_load_balancer_requests(&stack, "PUT", 429, Some(1), 1);
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "throttled").await;
    // Asked to come back later is not a failure: a Normal event says when.
    let failed = notes(&stack.client(), "throttled", "SyncLoadBalancerPending").await;
    assert!(
        failed.iter().any(|n| n.ends_with("(retry after 1s)")),
        "{failed:?}"
    );
    let ensures = stack.cloud.with_state(|s| {
        s.recent
            .iter()
            .filter(|(_, route)| route == "PUT /v1/load-balancers/{name}")
            .count()
    });
    assert_eq!(ensures, 2, "one throttled ensure, one retry");
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "backed-off").await;
    assert_eq!(stack.cloud.with_state(|s| s.load_balancers.len()), 1);

    // The next ensure is throttled for five minutes.
    fail_load_balancer_requests(&stack, "PUT", 429, Some(300), 1);
    let mut changed = services.get("backed-off").await.unwrap();
    changed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 8080;
    services
        .replace("backed-off", &PostParams::default(), &changed)
        .await
        .unwrap();
    wait_for_reason(&stack, "backed-off", "SyncLoadBalancerPending").await;

    services
        .delete("backed-off", &Default::default())
        .await
        .unwrap();
    // Gone within 30 s, ten times sooner than the back-off would allow.
    wait_until(Duration::from_secs(30), "the Service gone", || async {
        services.get("backed-off").await.is_err()
    })
    .await;
    assert!(stack.cloud.with_state(|s| s.load_balancers.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_errors_retry_and_the_finalizer_waits_for_deletion() {
    let stack = Stack::start().await;
    ready_nodes(&stack, &["e-1"]).await;
    // The first ensure is throttled (429, retry after 1 s).
    fail_load_balancer_requests(&stack, "PUT", 429, Some(1), 1);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(stack.client(), "default");
    let port = listening_port();
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
    // Throttled is asked to come back, not failed.
    assert!(
        reasons(&stack.client(), "api")
            .await
            .contains(&"SyncLoadBalancerPending".to_string())
    );

    // Deleting fails once: the Service stays (finalizer) until the provider confirms.
    fail_load_balancer_requests(&stack, "DELETE", 500, None, 1);
    services.delete("api", &Default::default()).await.unwrap();
    // Upstream: a failure on the finalizer path is SyncLoadBalancerFailed
    // (DeleteLoadBalancerFailed is for Services already gone).
    wait_until(TIMEOUT, "the failed delete reported", || async {
        notes(&stack.client(), "api", "SyncLoadBalancerFailed")
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);

    // Deleted without the finalizer; the first delete fails (upstream's
    // DeleteLoadBalancerFailed, then a retry with backoff).
    ensured(&services, "gone").await;
    remove_finalizers(&services, "gone").await;
    fail_load_balancer_requests(&stack, "DELETE", 500, None, 1);
    services.delete("gone", &Default::default()).await.unwrap();
    assert!(services.get_opt("gone").await.unwrap().is_none());
    wait_until(
        TIMEOUT,
        "the deleted Service's load balancer gone",
        || async { load_balancer_names(&stack).is_empty() },
    )
    .await;
    wait_until(TIMEOUT, "Deleting/DeleteFailed/Deleted events", || async {
        let r = reasons(&stack.client(), "gone").await;
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    ensured(&services, "conflicted").await;
    assert_eq!(stack.api.faults_served("services", "patch"), 1);
    assert_eq!(stack.api.faults_served("services/status", "patch"), 1);
    let failures = notes(&stack.client(), "conflicted", "SyncLoadBalancerFailed").await;
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("vanishing", None),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the sync counted as a success", || async {
        occurrences(&stack.client(), "vanishing", "EnsuredLoadBalancer").await >= 1
            && reconciles(&metrics(port).await, "service", "success") >= 1.0
    })
    .await;
    assert_eq!(stack.api.faults_served("services/status", "patch"), 1);
    assert_eq!(reconciles(&metrics(port).await, "service", "error"), 0.0);
    assert_eq!(
        occurrences(&stack.client(), "vanishing", "SyncLoadBalancerFailed").await,
        0
    );
    assert_eq!(load_balancer_names(&stack).len(), 1);
}
