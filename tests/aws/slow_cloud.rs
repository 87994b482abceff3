//! A slow AWS under the documented policy (a call 30 s, a request 10 s): every API
//! request answered in 1 to 3 s, ten times AWS's usual. The host starts no request that
//! could outlive its call, so none is cut; a Network and a Classic load balancer made
//! over one call or more each are found again by name or tag, nothing is made twice,
//! and the Services' deletion leaves nothing in AWS.

use super::*;

/// How long the slow cloud may take to serve or release the Services.
const SLOW: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_aws_is_served_without_a_call_cut() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let a = world.launch(moto, 0).await;
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node(&a, "10.244.1.0/24"))
        .await
        .unwrap();
    stack.policy(Auth::Static(&world.provider));
    moto.enable_auth(0).await;
    moto.set_latency(Duration::from_secs(1), Duration::from_secs(3))
        .await;
    let mut command = stack.controller_manager(listening_port(), &["--leader-elect=false"]);
    command.env("RUST_LOG", "info");
    let (_ccm, log) = wasm_ccm_tests::spawn_logged(command);
    wait_until(SLOW, "the node initialized", || {
        initialized(&nodes, &a.private_dns_name)
    })
    .await;

    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let (_, _, nlb) = create_service(
        &services,
        &service_with("slow-nlb", annotations(&[("type", json!("nlb"))]), 80),
    )
    .await;
    let (_, _, classic) = create_service(&services, &service_with("slow-clb", json!({}), 80)).await;
    wait_until(SLOW, "both Services served", || async {
        let mut served = 0;
        for name in ["slow-nlb", "slow-clb"] {
            if services.get(name).await.is_ok_and(|s| {
                s.status
                    .and_then(|s| s.load_balancer)
                    .and_then(|lb| lb.ingress)
                    .is_some_and(|i| !i.is_empty())
            }) {
                served += 1;
            }
        }
        served == 2
    })
    .await;
    assert_eq!(load_balancer_names(moto).await, [nlb]);
    assert_eq!(
        target_group_names(moto).await.len(),
        1,
        "one target group for the one port"
    );
    assert!(classic_load_balancer(moto, &classic).await.is_some());
    assert_eq!(moto.classic_load_balancer_names().await.unwrap(), [classic]);
    for name in ["slow-nlb", "slow-clb"] {
        let client = stack.client();
        let failed = wasm_ccm_tests::events::notes(&client, name, "SyncLoadBalancerFailed").await;
        assert!(failed.is_empty(), "{name} failed: {failed:?}");
    }

    for name in ["slow-nlb", "slow-clb"] {
        services
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_until(SLOW, "both Services gone, nothing left in AWS", || async {
        services.list(&Default::default()).await.is_ok_and(|l| {
            !l.items.iter().any(|s| {
                s.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("slow-"))
            })
        }) && load_balancer_names(moto).await.is_empty()
            && target_group_names(moto).await.is_empty()
            && moto.classic_load_balancer_names().await.unwrap().is_empty()
    })
    .await;
    moto.set_latency(Duration::ZERO, Duration::ZERO).await;
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start()),
        "the nodes' rules as they were"
    );
    let log = log.lock().unwrap().clone();
    assert!(
        !log.contains("provider call timed out"),
        "a call was cut at its deadline"
    );
}
