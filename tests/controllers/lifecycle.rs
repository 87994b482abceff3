//! The cloud-node-lifecycle controller: deleting Nodes whose instance is gone, the
//! shutdown taint, as upstream's.

use super::*;

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
    let port = listening_port();
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
    let deleting = events::with_reason(&stack.client(), "DeletingNode").await;
    assert_eq!(deleting.len(), 1);
    assert_eq!(deleting[0].involved_object.name.as_deref(), Some("gone"));
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
    let port = listening_port();
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
    wait_until(
        TIMEOUT,
        "DeletingNodeFailed, then the node deleted",
        || async {
            let failed = !events::with_reason(&stack.client(), "DeletingNodeFailed")
                .await
                .is_empty();
            failed && nodes.get_opt("legacy-gone").await.unwrap().is_none()
        },
    )
    .await;
    assert_eq!(stack.api.faults_served("nodes", "delete"), 1);
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
    let port = listening_port();
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
