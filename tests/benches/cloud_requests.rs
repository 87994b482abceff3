//! What the controllers cost the cloud: `wasm-ccm` (the real binary, every controller,
//! upstream's default periods) with the reference provider against the simulated
//! cloud, which counts the requests it serves by route.
//!
//! 1. **Joining**: `NODES` instances and their Nodes, tainted as kubelet registers them
//!    with `--cloud-provider=external`, all there when the controller manager starts:
//!    the requests (and the time) until every Node is initialized.
//! 2. **Steady state**: the same cluster, initialized and Ready, for `WINDOW_SECS`
//!    (default 330 s: one node status pass, every 5 min, and 33 route passes, every
//!    10 s): requests per node per hour, by route.
//!
//! `scripts/build-guests.sh && cargo build --bin wasm-ccm && WASM_CCM_BIN=target/debug/wasm-ccm cargo bench -p wasm-ccm-tests --bench cloud_requests`
//! (`NODES=…`, `WINDOW_SECS=…`; request counts do not depend on the build profile).
//! Upstream's arithmetic for the same cluster is ~12.4 requests per node per hour (12
//! address refreshes per node, 360 route listings).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube_double::resources;
use serde_json::json;
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::{Stack, free_port, http_get, metric, wasm_ccm_bin};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Requests the simulated cloud served, by route, and forgets them.
fn take_requests(stack: &Stack) -> BTreeMap<String, u64> {
    stack
        .cloud
        .with_state(|s| std::mem::take(&mut s.requests).into_iter().collect())
}

fn print_table(
    title: &str,
    counts: &BTreeMap<String, u64>,
    scale: impl Fn(u64) -> f64,
    unit: &str,
) {
    println!("{title}");
    println!("| cloud request | {unit} |\n| --- | ---: |");
    for (route, n) in counts {
        println!("| {route} | {:.3} |", scale(*n));
    }
    println!("| total | {:.3} |", scale(counts.values().sum()));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let nodes = env_number("NODES", 1000) as usize;
    let window = Duration::from_secs(env_number("WINDOW_SECS", 330));
    let stack = Stack::start().await;
    let node_resource = resources::find("", "v1", "nodes").unwrap();
    for i in 0..nodes {
        let name = format!("join-{i:04}");
        stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(&name)));
        stack
            .api
            .store()
            .create(
                node_resource,
                "",
                json!({
                    "metadata": {"name": name},
                    "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                                         "value": "true", "effect": "NoSchedule"}]},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}
                }),
            )
            .unwrap();
    }
    take_requests(&stack);
    let port = free_port();
    let bin = std::env::var_os("WASM_CCM_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(wasm_ccm_bin);
    let started = Instant::now();
    let _ccm = tokio::process::Command::new(bin)
        .args(["--cloud-provider", &stack.provider, "--leader-elect=false"])
        .args(["--cluster-cidr", "10.0.0.0/8"])
        .args([
            "--secure-port",
            &port.to_string(),
            "--bind-address",
            "127.0.0.1",
        ])
        .arg("--providers-dir")
        .arg(stack.dir.dir.path())
        .arg("--credentials-dir")
        .arg(stack.dir.dir.path())
        .arg("--cloud-config")
        .arg(&stack.cloud_config)
        .arg("--kubeconfig")
        .arg(&stack.kubeconfig)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("start wasm-ccm");
    let synced = "wasm_ccm_node_controller_initial_node_sync_delay_seconds_count";
    loop {
        let text = http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        if metric(&text, synced) as usize >= nodes {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "not every node initialized in 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let joined_in = started.elapsed();
    let joining = take_requests(&stack);
    println!(
        "{nodes} nodes joining at once: all initialized {:.1} s after start (cores: {}, commit: {})",
        joined_in.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        option_env!("GIT_COMMIT").unwrap_or("see git log"),
    );
    print_table("", &joining, |n| n as f64, "requests");

    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed().as_secs_f64();
    let steady = take_requests(&stack);
    println!();
    print_table(
        &format!(
            "steady state, {nodes} initialized Ready nodes, {elapsed:.0} s window, default periods"
        ),
        &steady,
        |n| n as f64 * 3600.0 / elapsed / nodes as f64,
        "per node per hour",
    );
}
