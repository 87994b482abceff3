//! The aws scenario: Network Load Balancer churn against moto while the leader is
//! killed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::{FAST_LEASE, Rng, Row, SETTLE, Size, leader, restart_exited};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::{default_load_balancer_name, listening_port, load_balancer_service};

pub(crate) async fn aws(size: &Size, rng: &mut Rng) -> Row {
    use wasm_ccm_tests::aws::{Auth, AwsStack, kubelet_node};
    let stack = AwsStack::start("chaos").await;
    let (moto, world) = (&stack.moto, &stack.world);
    let api: Api<Node> = Api::all(stack.client());
    for i in 0..2 {
        let instance = world.launch(moto, i).await;
        api.create(
            &PostParams::default(),
            &kubelet_node(&instance, &format!("10.244.{i}.0/24")),
        )
        .await
        .unwrap();
    }
    stack.policy(Auth::Static(&world.provider));
    moto.enable_auth(0).await;
    let mut flags = vec!["--controllers=cloud-node,service"];
    flags.extend_from_slice(&FAST_LEASE);
    let ports = [listening_port(), listening_port()];
    let start = |i: usize| {
        stack
            .controller_manager(ports[i], &flags)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start wasm-ccm")
    };
    let mut replicas = vec![start(0), start(1)];
    let mut restarted = 0usize;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let started = Instant::now();
    let mut names: BTreeSet<String> = BTreeSet::new();
    let (mut next, mut kills) = (0usize, 0usize);
    let kill_every = (size.aws_ops / 4).max(2);
    for op in 0..size.aws_ops {
        tokio::time::sleep(Duration::from_millis(200 + rng.below(800))).await;
        if op > 0
            && op % kill_every == 0
            && let Some(i) = leader(&ports).await
        {
            replicas[i].kill().await.ok();
            replicas[i] = start(i);
            kills += 1;
        }
        restarted += restart_exited(&mut replicas, start);
        let existing: Vec<String> = names.iter().cloned().collect();
        if existing.is_empty() || (existing.len() < 3 && rng.chance(50)) {
            let name = format!("svc-{next}");
            next += 1;
            let mut service = load_balancer_service(&name, None);
            service.metadata.annotations = Some(
                [(
                    "service.beta.kubernetes.io/aws-load-balancer-type".to_owned(),
                    "nlb".to_owned(),
                )]
                .into(),
            );
            let _ = services.create(&PostParams::default(), &service).await;
            names.insert(name);
            continue;
        }
        let name = existing[rng.below(existing.len() as u64) as usize].clone();
        let _ = if rng.chance(50) {
            let port = 80 + rng.below(5) as i32;
            services
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]}})),
                )
                .await
                .map(drop)
        } else {
            names.remove(&name);
            services
                .delete(&name, &DeleteParams::default())
                .await
                .map(drop)
        };
    }
    let lb_names = async || moto.load_balancer_names().await.unwrap_or_default();
    let group_names = async || moto.target_group_names().await.unwrap_or_default();
    // Settled: each Service has its load balancer, and there is no other.
    let deadline = Instant::now() + SETTLE;
    let mut problems;
    loop {
        restarted += restart_exited(&mut replicas, start);
        problems = Vec::new();
        let list = services
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let balancers = lb_names().await;
        let wanted: BTreeSet<String> = list.iter().map(default_load_balancer_name).collect();
        for svc in &list {
            let hostname = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .and_then(|i| i.first())
                .and_then(|i| i.hostname.clone());
            if hostname.is_none() || !balancers.contains(&default_load_balancer_name(svc)) {
                problems.push(format!(
                    "status: {:?} has no load balancer",
                    svc.metadata.name
                ));
            }
        }
        for lb in &balancers {
            if !wanted.contains(lb) {
                problems.push(format!("orphan: load balancer {lb}"));
            }
        }
        if problems.is_empty() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Everything deleted: nothing may be left in AWS.
    for name in &names {
        let _ = services.delete(name, &DeleteParams::default()).await;
    }
    let deadline = Instant::now() + SETTLE;
    let (mut left_lbs, mut left_groups);
    loop {
        restarted += restart_exited(&mut replicas, start);
        left_lbs = lb_names().await;
        left_groups = group_names().await;
        let remaining = services
            .list(&ListParams::default())
            .await
            .map_or(1, |l| l.items.len());
        if (remaining == 0 && left_lbs.is_empty() && left_groups.is_empty())
            || Instant::now() > deadline
        {
            if remaining > 0 {
                problems.push(format!("stuck: {remaining} Services not released"));
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for lb in &left_lbs {
        problems.push(format!(
            "orphan: load balancer {lb} after every Service was deleted"
        ));
    }
    for group in &left_groups {
        problems.push(format!(
            "orphan: target group {group} after every Service was deleted"
        ));
    }
    for replica in &mut replicas {
        replica.kill().await.ok();
    }
    let count = |prefix: &str| problems.iter().filter(|p| p.starts_with(prefix)).count();
    Row {
        scenario: "aws: Network Load Balancer churn against moto, leader killed",
        figures: vec![
            ("operations", size.aws_ops.to_string()),
            ("Services created", next.to_string()),
            ("leaders killed (SIGKILL)", kills.to_string()),
            (
                "replicas started again after exiting",
                restarted.to_string(),
            ),
            (
                "load balancers or target groups left behind",
                count("orphan").to_string(),
            ),
            ("Services stuck", count("stuck").to_string()),
            ("wrong statuses", count("status").to_string()),
            (
                "run time",
                format!("{:.0} s", started.elapsed().as_secs_f64()),
            ),
        ],
        failures: problems,
    }
}
