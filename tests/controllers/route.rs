//! The route controller: routes following the Nodes' pod CIDRs within the cluster
//! CIDRs, as upstream's.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_follow_node_pod_cidrs_within_the_cluster_cidr() {
    let stack = Stack::start().await;
    let nodes: Api<Node> = Api::all(stack.client());
    let ids = [
        ready_node(&stack, "r-1", &["10.244.1.0/24"]).await,
        ready_node(&stack, "r-2", &["10.244.2.0/24"]).await,
    ];
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
    let port = listening_port();
    let _ccm = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(
        TIMEOUT,
        "routes for both nodes, the stale one gone",
        || async { route_cidrs(&stack) == ["10.244.1.0/24", "10.244.2.0/24", "192.168.7.0/24"] },
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
        route_cidrs(&stack) == ["10.244.1.0/24", "192.168.7.0/24"]
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
        wasm_ccm_tests::serve_on(&mut command, port)
            .args(["--cloud-provider", &stack.provider])
            .arg("--serve-plain-http=true")
            .arg("--leader-elect=false")
            .arg("--providers-dir")
            .arg(stack.dir.dir.path())
            .arg("--credentials-dir")
            .arg(stack.dir.dir.path())
            .arg("--cloud-config")
            .arg(&stack.cloud_config)
            .arg("--kubeconfig")
            .arg(&stack.kubeconfig)
            .arg("--compile-cache-dir")
            .arg(wasm_ccm_tests::shared_compile_cache())
            .args(extra)
            .kill_on_drop(true);
        command
    };
    // A provider with routes and default flags: a clear error.
    let stack = Stack::start().await;
    let out = command(&stack, listening_port(), &[])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the route controller needs --cluster-cidr"),
        "{stderr}"
    );
    // Two CIDRs of one family are not dual stack.
    let out = command(
        &stack,
        listening_port(),
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
    let port = listening_port();
    let _routes_off = command(&stack, port, &["--configure-cloud-routes=false"])
        .spawn()
        .unwrap();
    ready(port).await;
    // Upstream reads --cluster-cidr only when the route controller starts: without it,
    // CIDRs it would refuse are not an error.
    let port = listening_port();
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
    let port = listening_port();
    let _no_routes = command(&legacy, port, &[]).spawn().unwrap();
    ready(port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_routes_cover_both_cluster_cidrs() {
    let stack = Stack::start().await;
    let instance = ready_node(&stack, "ds-1", &["10.244.5.0/24", "fd00:10:244:5::/64"]).await;
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
                target_instance: instance.clone(),
            });
        }
    });
    let port = listening_port();
    // The harness passes --cluster-cidr 10.244.0.0/16; this adds the IPv6 one.
    let _ccm = stack.controller_manager(
        port,
        &["--leader-elect=false", "--cluster-cidr", "fd00:10:244::/56"],
    );
    wait_until(
        TIMEOUT,
        "an IPv4 and an IPv6 route, the stale one gone",
        || async { route_cidrs(&stack) == ["10.244.5.0/24", "fd00:10:244:5::/64", "fd00:99::/64"] },
    )
    .await;

    // A third cluster CIDR is refused at startup.
    let out = stack
        .controller_manager_command(
            listening_port(),
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
    for (name, cidrs) in [("nr-1", &["10.244.1.0/24"][..]), ("nr-2", &[])] {
        ids.push(ready_node(&stack, name, cidrs).await);
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
    let port = listening_port();
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
        || async { route_cidrs(&stack) == ["10.0.0.0/8", "10.244.1.0/24"] },
    )
    .await;
    wait_until(TIMEOUT, "the conditions as upstream", || async {
        network_unavailable(&nodes, "nr-1").await == Some(("False".into(), "RouteCreated".into()))
            && network_unavailable(&nodes, "nr-2").await
                == Some(("True".into(), "NoRouteCreated".into()))
    })
    .await;
}
