//! Chaos runs: the real `wasm-ccm` binary (two replicas), the API server double, the
//! simulated cloud and the reference provider, under randomized operations while
//! replicas are killed, the lease moves and the cloud fails. Prints a table and fails
//! (exit code 1) when an invariant does not hold at the end.
//!
//! ```sh
//! cargo test -p wasm-ccm-tests --test chaos                    # small (CI)
//! CHAOS_SIZE=full CHAOS_SEED=7 cargo test -p wasm-ccm-tests --test chaos
//! ```
//!
//! - **services**: Services of type LoadBalancer created, their ports changed, switched
//!   to ClusterIP and back, deleted — while the leader is SIGKILLed (the standby takes
//!   over, the killed one restarts) and the cloud answers 500, 429 with Retry-After,
//!   slowly, or not at all. At the end: no load balancer without a Service wanting it,
//!   no Service stuck with the finalizer, no wrong status, and the cloud requests per
//!   operation.
//! - **nodes**: Nodes going NotReady, some because their instance is gone, some while
//!   the cloud wrongly says theirs is (hidden instances): no Ready Node deleted,
//!   deletions within the guard's limit per window, every truly gone NotReady Node
//!   deleted in the end.
//! - **aws**: the services scenario, smaller, with the AWS provider against moto
//!   (signatures and the provider's IAM policy checked): Network Load Balancers
//!   created, changed and deleted while the leader is SIGKILLed; at the end every
//!   Service's load balancer exists, and once the Services are deleted no load balancer
//!   or target group is left.
//! - **faulty versions**: versions hot-swapped in mid-run that are garbage, drop an
//!   interface, or say every instance is gone (their cloud config names an empty
//!   cloud), with and without the canary, while NotReady Nodes wait on the lifecycle
//!   controller's answer: which guard stopped each, and Nodes deleted (none).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sim_cloud::model::{Fault, NewInstance};
use wasm_ccm_tests::{
    Stack, default_load_balancer_name, free_port, http_get, initialized, kubelet_node,
    load_balancer_service,
};

/// Sets a Node's Ready condition, as its kubelet would; a Node already deleted is left
/// alone (the run checks deletions on its own).
async fn set_ready(api: &Api<Node>, name: &str, status: &str) {
    let _ = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": status}]}}),
            ),
        )
        .await;
}

/// How long the end state may take to settle.
const SETTLE: Duration = Duration::from_secs(240);

/// A small deterministic generator (xorshift64*), so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Size {
    name: &'static str,
    service_ops: usize,
    aws_ops: usize,
    kills: usize,
    nodes: usize,
    node_rounds: usize,
}

const SMALL: Size = Size {
    name: "small",
    service_ops: 60,
    aws_ops: 12,
    kills: 3,
    nodes: 12,
    node_rounds: 6,
};

const FULL: Size = Size {
    name: "full",
    service_ops: 1_000,
    aws_ops: 80,
    kills: 20,
    nodes: 60,
    node_rounds: 40,
};

/// One row of the table.
struct Row {
    scenario: &'static str,
    figures: Vec<(&'static str, String)>,
    failures: Vec<String>,
}

fn main() {
    // `cargo test` passes its own arguments (filters, --nocapture): filters select
    // the scenarios whose names contain them (`chaos` selects all); filters naming
    // none skip the run, as a harness would.
    const SCENARIOS: [&str; 4] = ["services", "nodes", "aws", "faulty_versions"];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<&str> = SCENARIOS
        .into_iter()
        .filter(|name| {
            filter.is_empty()
                || filter
                    .iter()
                    .any(|f| name.contains(f.as_str()) || "chaos".contains(f.as_str()))
        })
        .collect();
    if selected.is_empty() {
        return;
    }
    let size = match std::env::var("CHAOS_SIZE").as_deref() {
        Ok("full") => FULL,
        _ => SMALL,
    };
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "\nchaos, size {} (seed {seed}), {} cores, {}",
        size.name,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        wasm_ccm_tests::bench_stamp(),
    );
    let mut failed = false;
    for scenario in selected {
        let row = runtime.block_on(async {
            match scenario {
                "services" => services(&size, &mut Rng(seed | 1)).await,
                "nodes" => nodes(&size, &mut Rng(seed.rotate_left(17) | 1)).await,
                "aws" => aws(&size, &mut Rng(seed.rotate_left(33) | 1)).await,
                _ => faulty_versions().await,
            }
        });
        println!("\n{}", row.scenario);
        println!("| figure | value |\n| --- | ---: |");
        for (name, value) in &row.figures {
            println!("| {name} | {value} |");
        }
        for failure in &row.failures {
            println!("FAILED: {failure}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}

/// `wasm-ccm` for `stack` with `flags`, its log discarded (the table is the output).
fn quiet(stack: &Stack, port: u16, flags: &[&str]) -> tokio::process::Child {
    stack
        .controller_manager_command(port, flags)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start wasm-ccm")
}

/// Which of the replicas on `ports` leads now.
async fn leader(ports: &[u16]) -> Option<usize> {
    for (i, port) in ports.iter().enumerate() {
        if http_get(*port, "/readyz")
            .await
            .is_ok_and(|(_, body)| body.contains("controllers running"))
        {
            return Some(i);
        }
    }
    None
}

const FAST_LEASE: [&str; 6] = [
    "--leader-elect-lease-duration",
    "2s",
    "--leader-elect-renew-deadline",
    "1500ms",
    "--leader-elect-retry-period",
    "200ms",
];

async fn services(size: &Size, rng: &mut Rng) -> Row {
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
    let ports = [free_port(), free_port()];
    let mut replicas = vec![
        quiet(&stack, ports[0], &flags),
        quiet(&stack, ports[1], &flags),
    ];
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
            replicas[i] = quiet(&stack, ports[i], &flags);
            kills += 1;
        }
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
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .and_then(|i| i.first())
            .and_then(|i| i.ip.clone());
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

async fn nodes(size: &Size, rng: &mut Rng) -> Row {
    let stack = Stack::start().await;
    let count = size.nodes;
    let ids: Vec<String> = stack.cloud.with_state(|s| {
        (0..count)
            .map(|i| s.create_instance(NewInstance::named(&format!("n{i}"))).id)
            .collect()
    });
    let api: Api<Node> = Api::all(stack.client());
    for i in 0..count {
        api.create(
            &PostParams::default(),
            &kubelet_node(&format!("n{i}"), "True"),
        )
        .await
        .unwrap();
    }
    let window = Duration::from_secs(4);
    let limit = 2usize;
    let port = free_port();
    let mut ccm = quiet(
        &stack,
        port,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
            "--node-deletion-window=4s",
            "--node-deletion-limit=2",
            "--node-deletion-limit-percent=0",
        ],
    );
    for i in 0..count {
        let name = format!("n{i}");
        let deadline = Instant::now() + SETTLE;
        while !initialized(&api, &name).await && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let started = Instant::now();
    // Node state as the run made it.
    let mut ready: BTreeSet<usize> = (0..count).collect();
    let mut gone: BTreeSet<usize> = BTreeSet::new();
    let mut deleted_at: BTreeMap<usize, Instant> = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut storms, mut partitions, mut terminations) = (0usize, 0usize, 0usize);
    let mut healed: BTreeMap<usize, Instant> = BTreeMap::new();
    let observe = async |ready: &BTreeSet<usize>,
                         healed: &BTreeMap<usize, Instant>,
                         deleted_at: &mut BTreeMap<usize, Instant>,
                         failures: &mut Vec<String>| {
        let Ok(list) = api.list(&ListParams::default()).await else {
            return;
        };
        let present: BTreeSet<String> = list
            .items
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        for i in 0..count {
            if !present.contains(&format!("n{i}")) && !deleted_at.contains_key(&i) {
                deleted_at.insert(i, Instant::now());
                // A Node made Ready less than a second ago may have been judged
                // NotReady by a pass already under way.
                if ready.contains(&i)
                    && healed
                        .get(&i)
                        .is_none_or(|at: &Instant| at.elapsed() > Duration::from_secs(1))
                {
                    failures.push(format!("Ready node n{i} deleted"));
                }
            }
        }
    };
    for _ in 0..size.node_rounds {
        // A storm: the cloud says "not found" for random existing instances.
        let hidden: BTreeSet<String> = (0..count)
            .filter(|i| !gone.contains(i) && rng.chance(30))
            .map(|i| ids[i].clone())
            .collect();
        storms += 1;
        // Some Nodes go NotReady: a partition (instance exists) or a termination.
        for (i, id) in ids.iter().enumerate() {
            if deleted_at.contains_key(&i) || !ready.contains(&i) || !rng.chance(20) {
                continue;
            }
            ready.remove(&i);
            set_ready(&api, &format!("n{i}"), "Unknown").await;
            if rng.chance(50) {
                gone.insert(i);
                terminations += 1;
                stack.cloud.with_state(|s| s.delete_instance(id));
            } else {
                partitions += 1;
            }
        }
        stack
            .cloud
            .with_state(|s| s.hidden_instances = hidden.clone());
        let until = Instant::now() + Duration::from_millis(1_500 + rng.below(2_000));
        while Instant::now() < until {
            observe(&ready, &healed, &mut deleted_at, &mut failures).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stack.cloud.with_state(|s| s.hidden_instances.clear());
        // Partitions heal now and then.
        for i in 0..count {
            if !ready.contains(&i)
                && !gone.contains(&i)
                && !deleted_at.contains_key(&i)
                && rng.chance(50)
            {
                set_ready(&api, &format!("n{i}"), "True").await;
                ready.insert(i);
                healed.insert(i, Instant::now());
            }
        }
    }
    // Afterwards: every truly gone NotReady Node is deleted.
    let deadline = Instant::now() + SETTLE;
    while gone.iter().any(|i| !deleted_at.contains_key(i)) && Instant::now() < deadline {
        observe(&ready, &healed, &mut deleted_at, &mut failures).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in &gone {
        if !deleted_at.contains_key(i) {
            failures.push(format!("truly gone node n{i} not deleted"));
        }
    }
    // Deletions per window, as observed (polling adds up to ~0.1 s of slack).
    let times: Vec<Instant> = deleted_at.values().copied().collect();
    let mut most = 0;
    for t in &times {
        let within = times
            .iter()
            .filter(|u| **u >= *t && u.duration_since(*t) < window - Duration::from_millis(300))
            .count();
        most = most.max(within);
    }
    if most > limit {
        failures.push(format!("{most} deletions within one window, limit {limit}"));
    }
    let text = wasm_ccm_tests::metrics(port).await;
    let holds = wasm_ccm_tests::metric(&text, "wasm_ccm_node_deletion_guard_holds_total");
    ccm.kill().await.ok();
    let wrongly = deleted_at.keys().filter(|i| !gone.contains(i)).count();
    Row {
        scenario: "nodes: NotReady churn, terminations, not-found storms (window 4 s, limit 2)",
        figures: vec![
            ("Nodes", count.to_string()),
            ("storms (random instances hidden)", storms.to_string()),
            (
                "partitions (NotReady, instance exists)",
                partitions.to_string(),
            ),
            (
                "terminations (NotReady, instance gone)",
                terminations.to_string(),
            ),
            ("Nodes deleted", deleted_at.len().to_string()),
            ("of them with an existing instance", wrongly.to_string()),
            ("Ready Nodes deleted", "0 (checked)".into()),
            ("most deletions in one window", most.to_string()),
            ("holds by the guard", holds.to_string()),
            (
                "run time",
                format!("{:.0} s", started.elapsed().as_secs_f64()),
            ),
        ],
        failures,
    }
}

/// The result of one faulty version.
struct Faulty {
    version: &'static str,
    stopped_by: String,
    deleted: usize,
}

async fn faulty_versions() -> Row {
    let stack = Stack::start().await;
    let empty = sim_cloud::SimCloud::start("127.0.0.1:0", wasm_ccm_tests::TOKEN)
        .await
        .unwrap();
    let dir = stack.dir.dir.path().to_owned();
    let reference = std::fs::read(&stack.dir.wasm).unwrap();
    std::fs::remove_file(&stack.dir.wasm).unwrap();
    std::fs::remove_file(dir.join("simcloud.yaml")).unwrap();
    // One policy reaching both clouds, published as kubelet publishes a ConfigMap.
    let policy = format!(
        "allowedOutboundHosts: ['{a}', '{b}']\ncredentials:\n  - destination: '{a}'\n    bearerTokenFile: token\n  - destination: '{b}'\n    bearerTokenFile: token\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n",
        a = stack.cloud.url(),
        b = empty.url()
    );
    let publish = |wasm: &[u8]| {
        wasm_ccm_tests::kubelet_publish(
            &dir,
            &[
                ("simcloud.wasm", wasm),
                ("simcloud.yaml", policy.as_bytes()),
            ],
        )
    };
    let config = |url: &str| {
        let tmp = stack.cloud_config.with_extension("tmp");
        std::fs::write(&tmp, format!(r#"{{"endpoint": "{url}"}}"#)).unwrap();
        std::fs::rename(&tmp, &stack.cloud_config).unwrap();
    };
    publish(&reference);
    let count = 6;
    stack.cloud.with_state(|s| {
        for i in 0..count {
            s.create_instance(NewInstance::named(&format!("n{i}")));
        }
    });
    let api: Api<Node> = Api::all(stack.client());
    for i in 0..count {
        api.create(
            &PostParams::default(),
            &kubelet_node(&format!("n{i}"), "True"),
        )
        .await
        .unwrap();
    }
    let started = Instant::now();
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for canary in [true, false] {
        let port = free_port();
        let mut flags = vec![
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
        ];
        if canary {
            flags.push("--provider-canary-period=3s");
        }
        config(&stack.cloud.url());
        publish(&reference);
        let mut ccm = quiet(&stack, port, &flags);
        // Serving (its provider loaded from the files as they are now) and leading.
        let deadline = Instant::now() + SETTLE;
        while !http_get(port, "/readyz")
            .await
            .is_ok_and(|(_, body)| body.contains("controllers running"))
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for i in 0..count {
            let name = format!("n{i}");
            let deadline = Instant::now() + SETTLE;
            while !initialized(&api, &name).await && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // A partition: half the Nodes NotReady; their instances exist.
        for i in 0..count / 2 {
            set_ready(&api, &format!("n{i}"), "Unknown").await;
        }
        let text = async || wasm_ccm_tests::metrics(port).await;
        let reloads = |text: &str, result: &str| {
            wasm_ccm_tests::metric(
                text,
                &format!(
                    "wasm_ccm_provider_reloads_total{{provider=\"simcloud\",result=\"{result}\"}}"
                ),
            )
        };
        let present = async || {
            api.list(&ListParams::default())
                .await
                .map(|l| l.items.len())
                .unwrap_or(count)
        };
        let wait_for = async |result: &str| {
            let deadline = Instant::now() + SETTLE;
            loop {
                let t = text().await;
                if reloads(&t, result) >= 1.0 {
                    return true;
                }
                if Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let outcome = async |version: &'static str, reason: &str, stopped_by: &str| Faulty {
            version,
            stopped_by: if wait_for(reason).await {
                stopped_by.into()
            } else {
                "NOT STOPPED".into()
            },
            deleted: count - present().await,
        };
        if canary {
            publish(b"not a component");
            results.push(outcome("garbage bytes", "not_wasm", "load checks (not_wasm)").await);
            let stub = std::fs::read(wasm_ccm_tests::guest("fixture_simcloud_stub")).unwrap();
            publish(&stub);
            let dropped = "load checks (interface_dropped)";
            results.push(outcome("drops instances-v2", "interface_dropped", dropped).await);
            config(&empty.url());
            publish(&reference);
            let stopped = "canary (refused after 3 s)";
            results.push(outcome("every instance gone, canary on", "canary", stopped).await);
        } else {
            config(&empty.url());
            publish(&reference);
            let swapped = wait_for("success").await;
            // Ten lifecycle passes over the NotReady Nodes with the faulty version
            // serving.
            let fresh = "wasm_ccm_node_deletion_guard_answers_total{answer=\"fresh_version\"}";
            let deadline = Instant::now() + SETTLE;
            let mut ignored = 0.0;
            while ignored < (10 * (count / 2)) as f64 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                ignored = wasm_ccm_tests::metric(&text().await, fresh);
            }
            results.push(Faulty {
                version: "every instance gone, canary off",
                stopped_by: if swapped {
                    format!(
                        "node deletion guard (swapped in; {ignored:.0} \"gone\" answers of the fresh version ignored)"
                    )
                } else {
                    "NOT SWAPPED".into()
                },
                deleted: count - present().await,
            });
        }
        ccm.kill().await.ok();
        for i in 0..count / 2 {
            set_ready(&api, &format!("n{i}"), "True").await;
        }
    }
    for r in &results {
        if r.deleted > 0 || r.stopped_by.starts_with("NOT") {
            failures.push(format!(
                "{}: {} ({} Nodes deleted)",
                r.version, r.stopped_by, r.deleted
            ));
        }
    }
    let mut figures: Vec<(&'static str, String)> = results
        .iter()
        .map(|r| {
            (
                r.version,
                format!("{}; {} Nodes deleted", r.stopped_by, r.deleted),
            )
        })
        .collect();
    figures.push((
        "run time",
        format!("{:.0} s", started.elapsed().as_secs_f64()),
    ));
    Row {
        scenario: "faulty versions hot-swapped in (6 Nodes, 3 NotReady with existing instances)",
        figures,
        failures,
    }
}

async fn aws(size: &Size, rng: &mut Rng) -> Row {
    use wasm_ccm_tests::aws::{Auth, AwsStack, kubelet_node};
    use wasm_ccm_tests::moto;
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
    let ports = [free_port(), free_port()];
    let start = |port: u16| {
        stack
            .controller_manager(port, &flags)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start wasm-ccm")
    };
    let mut replicas = vec![start(ports[0]), start(ports[1])];
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
            replicas[i] = start(ports[i]);
            kills += 1;
        }
        let existing: Vec<String> = names.iter().cloned().collect();
        if existing.is_empty() || (existing.len() < 3 && rng.chance(50)) {
            let name = format!("svc-{next}");
            next += 1;
            let _ = services
                .create(&PostParams::default(), &load_balancer_service(&name, None))
                .await;
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
    let lb_names = async || {
        moto.call_as(
            &moto.keys,
            moto::Service::Elbv2,
            "DescribeLoadBalancers",
            &[],
        )
        .await
        .map(|xml| moto::texts(&xml, "LoadBalancerName"))
        .unwrap_or_default()
    };
    let group_names = async || match moto
        .call_as(
            &moto.keys,
            moto::Service::Elbv2,
            "DescribeTargetGroups",
            &[],
        )
        .await
    {
        Ok(xml) => moto::texts(&xml, "TargetGroupName"),
        Err(_) => Vec::new(),
    };
    // Settled: each Service has its load balancer, and there is no other.
    let deadline = Instant::now() + SETTLE;
    let mut problems;
    loop {
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
