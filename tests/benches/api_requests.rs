//! What an idle cluster costs the API server: `wasm-ccm` (the real binary, every
//! controller, upstream's default periods) with the reference provider against the API
//! server double holding 1,000 initialized, Ready Nodes and their instances in the
//! simulated cloud. After the controllers settle, the double counts the requests it
//! serves for a window; the bench prints requests per minute by verb and resource, and
//! the total.
//!
//! `scripts/build-guests.sh && cargo build --release --bin wasm-ccm && cargo bench -p wasm-ccm-tests --bench api_requests`
//! (`NODES=…` and `WINDOW_SECS=…` change the defaults, 1000 and 60; `WASM_CCM_BIN=…`
//! runs another build, e.g. `target/debug/wasm-ccm`: request counts do not depend on
//! the profile).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube_double::{Access, resources};
use serde_json::json;
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::{Stack, http_get, listening_port};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn delta(after: &BTreeMap<Access, u64>, before: &BTreeMap<Access, u64>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (access, count) in after {
        let n = count - before.get(access).copied().unwrap_or(0);
        if n > 0 {
            *out.entry(format!("{} {}", access.verb, access.resource))
                .or_insert(0) += n;
        }
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasm_ccm_tests::print_bench_heading("api_requests");
    let nodes = env_number("NODES", 1000) as usize;
    let window = Duration::from_secs(env_number("WINDOW_SECS", 60));
    let stack = Stack::start().await;
    let node_resource = resources::find("", "v1", "nodes").unwrap();
    for i in 0..nodes {
        let name = format!("idle-{i:04}");
        let instance = stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(&name)));
        let addresses: Vec<_> = instance
            .addresses
            .iter()
            .map(|a| json!({"type": a.kind, "address": a.address}))
            .collect();
        stack
            .api
            .store()
            .create(
                node_resource,
                "",
                json!({
                    "metadata": {"name": name},
                    "spec": {"providerID": format!("simcloud://{}", instance.id)},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": addresses}
                }),
            )
            .unwrap();
    }
    let port = listening_port();
    let bin = wasm_ccm_tests::bench_wasm_ccm_bin();
    let mut command = tokio::process::Command::new(bin);
    let _ccm = wasm_ccm_tests::serve_on(&mut command, port)
        .args([
            "--cloud-provider",
            &stack.provider,
            "--cluster-cidr",
            "10.0.0.0/8",
        ])
        .arg("--serve-plain-http=true")
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
    let deadline = Instant::now() + Duration::from_secs(120);
    while !matches!(http_get(port, "/readyz").await, Ok((200, _))) {
        assert!(Instant::now() < deadline, "wasm-ccm did not become ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Settle: the first passes (and their watches' initial lists) are not idle cost.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let before = stack.api.request_counts();
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed();
    let counts = delta(&stack.api.request_counts(), &before);
    let per_minute = |n: u64| n as f64 * 60.0 / elapsed.as_secs_f64();
    println!(
        "API requests per minute, {nodes} idle nodes, {:.0} s window, default periods",
        elapsed.as_secs_f64()
    );
    println!("| request | per minute |\n| --- | ---: |");
    for (kind, n) in &counts {
        println!("| {kind} | {:.1} |", per_minute(*n));
    }
    println!("| total | {:.1} |", per_minute(counts.values().sum()));
}
