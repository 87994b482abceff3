//! Time to initialize tainted nodes: the API server double and the simulated cloud on
//! loopback, the cloud-node controller, with the reference provider's component and
//! with a native Rust port of its `instances-v2` logic (`common/native_simcloud.rs`)
//! plugged into the same controllers at the cloud seam. Prints a table: nodes, workers, seconds until
//! every node is initialized for both, their ratio, and cloud calls per node; then the
//! peak RSS of a `wasm-ccm` process initializing 1,000
//! nodes (when `target/release/wasm-ccm` is built).
//!
//! `scripts/build-guests.sh && cargo build --release --bin wasm-ccm && cargo bench -p wasm-ccm-tests --bench node_init`
//! (`NODES=1000` for one size instead of 1,000, 5,000 and 10,000; `RSS_ONLY=1` for the
//! memory tables alone; `RSS_ARGS="--flag=value ..."` adds flags to the daemon measured).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_double::{ApiServer, Settings, resources};
use serde_json::json;
use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;
use wasm_ccm::cloud::SharedCloud;
use wasm_ccm::controllers::{self, Context};
use wasm_ccm::metrics::ControllerMetrics;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{ProviderLoader, SharedProvider};

#[path = "common/native_simcloud.rs"]
mod native_simcloud;
use native_simcloud::NativeSimcloud;

const TOKEN: &str = "bench-token";

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

struct World {
    api: ApiServer,
    cloud: SimCloud,
    dir: PathBuf,
}

async fn world(nodes: usize) -> World {
    let api = ApiServer::start(Settings {
        history: nodes * 8 + 1000,
        ..Settings::default()
    })
    .await
    .unwrap();
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let node_resource = resources::find("", "v1", "nodes").unwrap();
    for i in 0..nodes {
        let name = format!("node-{i}");
        cloud.with_state(|s| s.create_instance(NewInstance::named(&name)));
        api.store()
            .create(
                node_resource,
                "",
                json!({
                    "metadata": {"name": name},
                    "spec": {"taints": [{"key": controllers::TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "Hostname", "address": name}]}
                }),
            )
            .unwrap();
    }
    let dir = std::env::temp_dir().join(format!(
        "wasm-ccm-node-bench-{}-{nodes}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        target().join("wasm32-wasip2/release/reference_provider.wasm"),
        dir.join("simcloud.wasm"),
    )
    .expect("scripts/build-guests.sh builds the reference provider");
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    std::fs::write(
        dir.join("simcloud.yaml"),
        format!(
            "allowedOutboundHosts: ['{u}']\ncredentials: [{{destination: '{u}', bearerTokenFile: token}}]\nlimits: {{poolSize: 8, memoryMiB: 32}}\n",
            u = cloud.url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("cloud-config.json"),
        format!(r#"{{"endpoint": "{}"}}"#, cloud.url()),
    )
    .unwrap();
    api.write_kubeconfig(&dir.join("kubeconfig")).unwrap();
    World { api, cloud, dir }
}

/// Nodes the cloud-node controller initialized, from its init-delay histogram.
fn initialized(metrics: &Metrics) -> usize {
    metrics
        .encode()
        .lines()
        .find_map(|l| {
            l.strip_prefix("wasm_ccm_node_controller_initial_node_sync_delay_seconds_count ")
        })
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as usize
}

fn remaining(api: &ApiServer) -> usize {
    let nodes = resources::find("", "v1", "nodes").unwrap();
    let (items, _) = api
        .store()
        .list(nodes, "", &Default::default(), &Default::default());
    items
        .iter()
        .filter(|n| {
            n.pointer("/spec/taints")
                .and_then(|t| t.as_array())
                .is_some_and(|t| {
                    t.iter()
                        .any(|t| t["key"] == controllers::TAINT_UNINITIALIZED)
                })
        })
        .count()
}

/// Initializes `nodes` tainted nodes with the reference provider's component, or with
/// its native port (`native`), a call per Node or in batches (`batch`); returns the
/// time taken and cloud requests per node.
async fn initialize(nodes: usize, workers: u16, native: bool, batch: bool) -> (Duration, f64) {
    let w = world(nodes).await;
    let loader = ProviderLoader::new(&EngineSettings::default()).unwrap();
    let cloud = if native {
        let port = NativeSimcloud::new(loader.broker().client().clone(), &w.cloud.url(), TOKEN);
        SharedCloud::fixed(Arc::new(if batch { port.batched() } else { port }))
    } else {
        let config = std::fs::read(w.dir.join("cloud-config.json")).unwrap();
        let provider = loader
            .load(&w.dir.join("simcloud.wasm"), config)
            .await
            .unwrap();
        SharedCloud::provider(SharedProvider::from(provider))
    };
    let client = {
        wasm_ccm_host::tls::install_crypto_provider();
        kube::Client::try_from(kube::Config::new(w.api.url().parse().unwrap())).unwrap()
    };
    let metrics = Metrics::new();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let (nodes_view, informer) =
        controllers::node_informer::NodeInformer::new(client.clone(), stop_rx.clone());
    tokio::spawn(informer);
    let ctx = Context {
        nodes: nodes_view,
        client,
        cloud,
        metrics: Arc::new(ControllerMetrics::register(
            &metrics,
            &controllers::node_lifecycle::guard::Answer::LABELS,
        )),
        instance: "bench".into(),
        services: Default::default(),
    };
    let before = w.cloud.total_requests();
    let started = Instant::now();
    let task = tokio::spawn(controllers::node::run(
        ctx,
        controllers::node::Options {
            status_update_frequency: Duration::from_secs(3600),
            workers,
            batch_size: if batch { 500 } else { 1 },
            batch_window: Duration::from_millis(200),
        },
        stop_rx,
    ));
    // Polled cheaply (listing thousands of Nodes would compete with the controller
    // for the two cores): the controller observes the init-delay histogram once per
    // initialized Node.
    while initialized(&metrics) < nodes {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "initialization stalled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The delay is observed as a Node's answer comes; its update may still be in
    // flight (a batch's updates are sent together).
    while remaining(&w.api) > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "initialization stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let calls = (w.cloud.total_requests() - before) as f64 / nodes as f64;
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    let _ = std::fs::remove_dir_all(&w.dir);
    (elapsed, calls)
}

/// Peak RSS (VmHWM) of a `wasm-ccm` process that initialized `nodes` nodes, with
/// `--compile-cache-dir cache` when given.
async fn daemon_peak_rss(
    nodes: usize,
    cache: Option<&Path>,
) -> Option<(u64, Vec<(&'static str, u64)>)> {
    let bin = target().join("release/wasm-ccm");
    if !bin.exists() {
        return None;
    }
    let w = world(nodes).await;
    let port = wasm_ccm_tests::listening_port();
    let mut command = tokio::process::Command::new(bin);
    let mut child = wasm_ccm_tests::serve_on(&mut command, port)
        .args([
            "--cloud-provider",
            "simcloud",
            "--leader-elect=false",
            "--configure-cloud-routes=false",
            "--serve-plain-http=true",
        ])
        .arg("--providers-dir")
        .arg(&w.dir)
        .arg("--credentials-dir")
        .arg(&w.dir)
        .arg("--cloud-config")
        .arg(w.dir.join("cloud-config.json"))
        .arg("--kubeconfig")
        .arg(w.dir.join("kubeconfig"))
        .args(cache.map(|dir| format!("--compile-cache-dir={}", dir.display())))
        .args(
            std::env::var("RSS_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let pid = child.id()?;
    let started = Instant::now();
    while remaining(&w.api) > 0 && started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the lifecycle controller make a pass over all nodes too.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let breakdown = wasm_ccm_tests::rss_breakdown(pid);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&w.dir);
    Some((kib, breakdown))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasm_ccm_tests::print_bench_heading("node_init");
    println!("node initialization (cloud-node controller, loopback): the reference provider's");
    println!("component (wasm) vs its instances-v2 logic ported to native Rust, same controllers");
    println!(
        "| {:>6} | {:>7} | {:>7} | {:>8} | {:>10} | {:>10} | {:>12} | {:>13} |",
        "nodes", "workers", "calls", "wasm s", "native s", "wasm/nat", "wasm nodes/s", "calls/node"
    );
    println!(
        "|{:->8}|{:->9}|{:->9}|{:->10}|{:->12}|{:->12}|{:->14}|{:->15}|",
        "", "", "", "", "", "", "", ""
    );
    let sizes: Vec<usize> = match std::env::var("NODES") {
        Ok(n) => vec![n.parse().expect("NODES: a number")],
        Err(_) => vec![1000, 5000, 10_000],
    };
    let times = std::env::var_os("RSS_ONLY").is_none();
    for batch in [false, true].into_iter().filter(|_| times) {
        for &nodes in &sizes {
            for workers in [1, 8] {
                // Run in turn, wasm first then native, then once more the other way
                // round: the best of each is the row, so drift hits both alike.
                let mut wasm = Vec::new();
                let mut native = Vec::new();
                for native_first in [false, true] {
                    for is_native in [native_first, !native_first] {
                        let run = initialize(nodes, workers, is_native, batch).await;
                        if is_native {
                            native.push(run)
                        } else {
                            wasm.push(run)
                        }
                    }
                }
                let best = |runs: &[(Duration, f64)]| {
                    *runs.iter().min_by_key(|(d, _)| *d).expect("two runs")
                };
                let ((wasm, calls), (native, native_calls)) = (best(&wasm), best(&native));
                println!(
                    "| {nodes:>6} | {workers:>7} | {:>7} | {:>8.2} | {:>10.2} | {:>9.2}x | {:>12.0} | {:>5.3} / {:<5.3} |",
                    if batch { "batched" } else { "per node" },
                    wasm.as_secs_f64(),
                    native.as_secs_f64(),
                    wasm.as_secs_f64() / native.as_secs_f64(),
                    nodes as f64 / wasm.as_secs_f64(),
                    calls,
                    native_calls,
                );
            }
        }
    }
    println!(
        "(per node: --instances-batch-size 1, a call per Node on both sides; batched: the \
         component's instances-batch and the native port's listing, 500 per batch; \
         calls/node: cloud requests per node, wasm / native; each side run twice, the \
         best shown)"
    );
    let Some(cold) = daemon_peak_rss(1000, None).await else {
        println!("peak RSS: build target/release/wasm-ccm to measure it");
        return;
    };
    // The same with a warm compile cache (the first run fills it): no compile peak.
    let cache = std::env::temp_dir().join(format!("wasm-ccm-rss-cache-{}", std::process::id()));
    let _ = daemon_peak_rss(1000, Some(&cache)).await;
    let warm = daemon_peak_rss(1000, Some(&cache)).await;
    let _ = std::fs::remove_dir_all(&cache);
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    println!(
        "\npeak RSS of wasm-ccm initializing 1000 nodes: {} MiB (compiling the provider), {} (warm compile cache)",
        mib(cold.0),
        warm.as_ref()
            .map_or("-".into(), |(kib, _)| format!("{} MiB", mib(*kib)))
    );
    println!("\nresident memory after initializing them, by kind (MiB)");
    println!("| kind | compiling | warm cache |\n| --- | ---: | ---: |");
    for (i, (kind, kib)) in cold.1.iter().enumerate() {
        let warm = warm.as_ref().map_or("-".into(), |(_, b)| mib(b[i].1));
        println!("| {kind} | {} | {warm} |", mib(*kib));
    }
}
