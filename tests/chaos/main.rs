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

mod aws;
mod faulty_versions;
mod nodes;
mod services;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use wasm_ccm_tests::{Stack, http_get};

/// Sets a Node's Ready condition, as its kubelet would; a Node already deleted is left
/// alone (the run checks deletions on its own).
pub(crate) async fn set_ready(api: &Api<Node>, name: &str, status: &str) {
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
pub(crate) const SETTLE: Duration = Duration::from_secs(240);

/// A small deterministic generator (xorshift64*), so a seed replays a run.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub(crate) struct Size {
    pub(crate) name: &'static str,
    pub(crate) service_ops: usize,
    pub(crate) aws_ops: usize,
    pub(crate) kills: usize,
    pub(crate) nodes: usize,
    pub(crate) node_rounds: usize,
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
pub(crate) struct Row {
    pub(crate) scenario: &'static str,
    pub(crate) figures: Vec<(&'static str, String)>,
    pub(crate) failures: Vec<String>,
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
                "services" => services::services(&size, &mut Rng(seed | 1)).await,
                "nodes" => nodes::nodes(&size, &mut Rng(seed.rotate_left(17) | 1)).await,
                "aws" => aws::aws(&size, &mut Rng(seed.rotate_left(33) | 1)).await,
                _ => faulty_versions::faulty_versions().await,
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
pub(crate) fn quiet(stack: &Stack, port: u16, flags: &[&str]) -> tokio::process::Child {
    stack
        .controller_manager_command(port, flags)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start wasm-ccm")
}

/// Starts again, with `start(i)`, every replica that exited on its own, as kubelet
/// restarts a container: a leader that cannot renew its lease within the renew deadline
/// exits, as upstream's controller managers do, and with [`FAST_LEASE`] a loaded
/// machine can make it miss that deadline. How many were started again.
pub(crate) fn restart_exited(
    replicas: &mut [tokio::process::Child],
    start: impl Fn(usize) -> tokio::process::Child,
) -> usize {
    let mut restarted = 0;
    for (i, replica) in replicas.iter_mut().enumerate() {
        if matches!(replica.try_wait(), Ok(Some(_))) {
            *replica = start(i);
            restarted += 1;
        }
    }
    restarted
}

/// Which of the replicas on `ports` leads now. A replica that does not answer within
/// 300 ms (one restarting: its port stays bound by the test) does not.
pub(crate) async fn leader(ports: &[u16]) -> Option<usize> {
    for (i, port) in ports.iter().enumerate() {
        let probe = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            http_get(*port, "/readyz"),
        );
        if probe
            .await
            .is_ok_and(|answer| answer.is_ok_and(|(_, body)| body.contains("controllers running")))
        {
            return Some(i);
        }
    }
    None
}

pub(crate) const FAST_LEASE: [&str; 6] = [
    "--leader-elect-lease-duration",
    "2s",
    "--leader-elect-renew-deadline",
    "1500ms",
    "--leader-elect-retry-period",
    "200ms",
];
