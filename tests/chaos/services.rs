//! The services scenario: LoadBalancer churn on the simulated cloud while the leader is
//! killed and the cloud fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::{FAST_LEASE, Rng, Row, SETTLE, Size, leader, quiet, restart_exited};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sim_cloud::model::{Fault, NewInstance};
use wasm_ccm_tests::{
    Stack, default_load_balancer_name, kubelet_node, listening_port, load_balancer_service,
};

pub(crate) async fn services(size: &Size, rng: &mut Rng) -> Row {
    let stack = Stack::start().await;
    stack.cloud.with_state(|s| {
        for i in 0..3 {
            s.create_instance(NewInstance::named(&format!("n{i}")));
        }
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for i in 0..3 {
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node(&format!("n{i}"), "True"),
            )
            .await
            .unwrap();
    }
    let mut flags = vec!["--controllers=cloud-node,service"];
    flags.extend_from_slice(&FAST_LEASE);
    let ports = [listening_port(), listening_port()];
    let start = |i: usize| quiet(&stack, ports[i], &flags);
    let mut replicas = vec![start(0), start(1)];
    let mut restarted = 0usize;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let started = Instant::now();
    let requests_before = stack.cloud.total_requests();
    let (mut kills, mut failovers, mut faults) = (0usize, 0usize, BTreeMap::<&str, usize>::new());
    let mut last_leader = leader(&ports).await;
    let kill_every = (size.service_ops / (size.kills + 1)).max(1);
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut next_name = 0usize;
    let mut ops = BTreeMap::<&str, usize>::new();
    let mut refused = 0usize;
    for op in 0..size.service_ops {
        // The workload's pace: a few operations per second.
        tokio::time::sleep(Duration::from_millis(50 + rng.below(150))).await;
        if rng.chance(8) {
            let (kind, fault) = match rng.below(4) {
                0 => (
                    "500",
                    Fault {
                        status: Some(500),
                        count: Some(3),
                        ..Fault::default()
                    },
                ),
                1 => (
                    "429",
                    Fault {
                        status: Some(429),
                        retry_after_seconds: Some(1),
                        count: Some(3),
                        ..Fault::default()
                    },
                ),
                2 => (
                    "slow",
                    Fault {
                        latency_ms: 800,
                        count: Some(5),
                        ..Fault::default()
                    },
                ),
                _ => (
                    "hang",
                    Fault {
                        latency_ms: 15_000,
                        count: Some(1),
                        ..Fault::default()
                    },
                ),
            };
            stack.cloud.with_state(|s| s.faults.push(fault));
            *faults.entry(kind).or_default() += 1;
        }
        if op > 0
            && op % kill_every == 0
            && kills < size.kills
            && let Some(i) = leader(&ports).await
        {
            replicas[i].kill().await.ok();
            replicas[i] = start(i);
            kills += 1;
        }
        restarted += restart_exited(&mut replicas, start);
        let now = leader(&ports).await;
        if now.is_some() && now != last_leader {
            failovers += usize::from(last_leader.is_some());
            last_leader = now;
        }
        let existing: Vec<String> = names.iter().cloned().collect();
        let pick = |rng: &mut Rng| existing[rng.below(existing.len() as u64) as usize].clone();
        let action = if existing.is_empty() || (existing.len() < 8 && rng.chance(35)) {
            "create"
        } else {
            ["port", "type", "delete", "port", "type"][rng.below(5) as usize]
        };
        let result = match action {
            "create" => {
                let name = format!("svc-{next_name}");
                next_name += 1;
                names.insert(name.clone());
                services
                    .create(&PostParams::default(), &load_balancer_service(&name, None))
                    .await
                    .map(drop)
            }
            "port" => {
                let name = pick(rng);
                let port = 80 + rng.below(20) as i32;
                services
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080}]}})),
                    )
                    .await
                    .map(drop)
            }
            "type" => {
                let name = pick(rng);
                let current = services.get(&name).await.ok();
                let is_lb = current
                    .and_then(|s| s.spec)
                    .and_then(|s| s.type_)
                    .is_some_and(|t| t == "LoadBalancer");
                let to = if is_lb { "ClusterIP" } else { "LoadBalancer" };
                services
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"type": to}})),
                    )
                    .await
                    .map(drop)
            }
            _ => {
                let name = pick(rng);
                names.remove(&name);
                services
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(drop)
            }
        };
        // A Service still terminating from an earlier delete refuses some changes.
        if result.is_err() {
            refused += 1;
        }
        *ops.entry(action).or_default() += 1;
    }
    stack.cloud.with_state(|s| s.faults.clear());
    let operations = size.service_ops;
    // The end state: every Service as it should be, nothing else in the cloud.
    let deadline = Instant::now() + SETTLE;
    let mut problems;
    loop {
        restarted += restart_exited(&mut replicas, start);
        problems = service_problems(&stack, &services).await;
        if problems.is_empty() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let requests = stack.cloud.total_requests() - requests_before;
    let elapsed = started.elapsed();
    for replica in &mut replicas {
        replica.kill().await.ok();
    }
    let count = |prefix: &str| problems.iter().filter(|p| p.starts_with(prefix)).count();
    Row {
        scenario: "services: LoadBalancer churn, leader killed, cloud faults",
        figures: vec![
            ("operations", operations.to_string()),
            (
                "by kind",
                ops.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            ("of them refused by the API server", refused.to_string()),
            ("leaders killed (SIGKILL)", kills.to_string()),
            (
                "replicas started again after exiting",
                restarted.to_string(),
            ),
            ("lease moves seen", failovers.to_string()),
            (
                "faults injected",
                faults
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            (
                "load balancers without a Service wanting them",
                count("orphan").to_string(),
            ),
            (
                "Services stuck with the finalizer",
                count("stuck").to_string(),
            ),
            ("wrong statuses", count("status").to_string()),
            ("cloud requests", requests.to_string()),
            (
                "cloud requests per operation",
                format!("{:.1}", requests as f64 / operations as f64),
            ),
            ("run time", format!("{:.0} s", elapsed.as_secs_f64())),
        ],
        failures: problems,
    }
}

/// What is wrong with the Services and the cloud's load balancers now.
async fn service_problems(stack: &Stack, services: &Api<Service>) -> Vec<String> {
    let Ok(list) = services.list(&ListParams::default()).await else {
        return vec!["status: cannot list Services".into()];
    };
    let balancers = stack.cloud.with_state(|s| s.load_balancers.clone());
    let mut wanted = BTreeSet::new();
    let mut problems = Vec::new();
    for svc in &list.items {
        let name = svc.metadata.name.clone().unwrap_or_default();
        let spec = svc.spec.clone().unwrap_or_default();
        let is_lb = spec.type_.as_deref() == Some("LoadBalancer");
        let finalizer = svc.metadata.finalizers.as_ref().is_some_and(|f| {
            f.iter()
                .any(|f| f == "service.kubernetes.io/load-balancer-cleanup")
        });
        let ingress = wasm_ccm_tests::ingress_ip(svc);
        let lb_name = default_load_balancer_name(svc);
        if svc.metadata.deletion_timestamp.is_some() {
            problems.push(format!(
                "stuck: {name} being deleted, held by its finalizer"
            ));
            continue;
        }
        if !is_lb {
            if finalizer {
                problems.push(format!(
                    "stuck: {name} is {:?} but keeps the finalizer",
                    spec.type_
                ));
            }
            if ingress.is_some() {
                problems.push(format!(
                    "status: {name} is not a LoadBalancer but has an ingress"
                ));
            }
            continue;
        }
        wanted.insert(lb_name.clone());
        let Some(lb) = balancers.get(&lb_name) else {
            problems.push(format!("status: {name} has no load balancer"));
            continue;
        };
        if ingress.as_deref() != Some(lb.address.as_str()) {
            problems.push(format!(
                "status: {name} shows {ingress:?}, its load balancer is {}",
                lb.address
            ));
        }
        let want: Vec<i32> = spec.ports.iter().flatten().map(|p| p.port).collect();
        let have: Vec<i32> = lb.ports.iter().map(|p| p.port as i32).collect();
        if want != have {
            problems.push(format!(
                "status: {name} wants ports {want:?}, its load balancer has {have:?}"
            ));
        }
        if !finalizer {
            problems.push(format!(
                "status: {name} has a load balancer but no finalizer"
            ));
        }
    }
    for name in balancers.keys() {
        if !wanted.contains(name) {
            problems.push(format!("orphan: load balancer {name}"));
        }
    }
    problems
}
