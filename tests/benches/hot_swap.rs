//! Hot-swap latency: from the kubelet-style rename of `..data` to the first call served
//! by the new version, while a load loop keeps calling the provider (its failed calls
//! are counted): a new version with the same code (new bytes) or rebuilt with a
//! one-line change (the reference provider's `rebuilt` feature, built by this bench
//! into target/bench-rebuilt), compiled in full, with the function cache (only the
//! changed functions compiled), or from a warm compile cache; then the restart-to-ready
//! time of the `wasm-ccm` binary with a cold and a warm compile cache.
//!
//! `scripts/build-guests.sh && cargo build --release --bin wasm-ccm && cargo bench -p wasm-ccm-tests --bench hot_swap`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sim_cloud::model::NewInstance;
use wasm_ccm::hot_swap::{self, ReloadReporter, Reloader};
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::compile_cache::CompileCache;
use wasm_ccm_host::provider::{ProviderLoader, ProviderSource, SharedProvider};
use wasm_ccm_tests::{
    Stack, TempDir, http_get, kubelet_publish, listening_port, node, wasm_ccm_bin,
    with_custom_section,
};

const SWAPS: usize = 12;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// How a new version gets its code.
#[derive(Clone, Copy, PartialEq)]
enum Compile {
    /// Cranelift compiles every function.
    Full,
    /// Functions unchanged since the serving version come from the function cache.
    FunctionCache,
    /// The compiled component is in the compile cache.
    Precompiled,
}

/// The reference provider rebuilt with its `rebuilt` feature (a one-line change), in
/// its own target directory.
fn rebuilt_reference() -> Vec<u8> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = wasm_ccm_tests::target_dir().join("bench-rebuilt");
    let status = std::process::Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "build",
            "--locked",
            "--release",
            "--target",
            "wasm32-wasip2",
        ])
        .args([
            "-p",
            "reference-provider",
            "--features",
            "rebuilt",
            "--target-dir",
        ])
        .arg(&target)
        .status()
        .expect("cargo");
    assert!(status.success(), "building the rebuilt reference provider");
    std::fs::read(target.join("wasm32-wasip2/release/reference_provider.wasm")).unwrap()
}

/// Swap latencies from `initial` to each of `versions` in turn, and the calls of the
/// load loop (when `load`) and how many failed.
async fn swap_latencies(
    compile: Compile,
    load: bool,
    initial: &[u8],
    versions: &[Vec<u8>],
) -> (Vec<Duration>, u64, u64) {
    let stack = Stack::start().await;
    let dir = stack.dir.dir.path().to_owned();
    let policy = std::fs::read(dir.join("simcloud.yaml")).unwrap();
    std::fs::remove_file(&stack.dir.wasm).unwrap();
    std::fs::remove_file(dir.join("simcloud.yaml")).unwrap();
    let publish = |wasm: &[u8]| {
        kubelet_publish(&dir, &[("simcloud.wasm", wasm), ("simcloud.yaml", &policy)]);
    };
    publish(initial);
    stack
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("bench-node")));

    let metrics = Metrics::new();
    let cache_dir = TempDir::new("bench-cache");
    let mut loader = ProviderLoader::with_options(
        &EngineSettings {
            function_cache: compile == Compile::FunctionCache,
            ..EngineSettings::default()
        },
        &Default::default(),
        metrics.clone(),
    )
    .unwrap();
    if compile == Compile::Precompiled {
        let compile_cache = CompileCache::open(cache_dir.path(), &metrics).unwrap();
        // Warm: every version was compiled before (a rollback, a restart, a replica).
        for version in versions {
            compile_cache
                .component(loader.engine().engine(), version)
                .unwrap();
        }
        loader = loader.with_compile_cache(compile_cache);
    }
    let component = dir.join("simcloud.wasm");
    let config = std::fs::read(&stack.cloud_config).unwrap();
    let provider = loader.load(&component, config).await.unwrap();
    let serving = ProviderSource::read(&component, Some(&stack.cloud_config))
        .unwrap()
        .fingerprint;
    let shared = SharedProvider::from(provider);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let reloader = Reloader::new(
        hot_swap::Settings {
            component: component.clone(),
            cloud_config: Some(stack.cloud_config.clone()),
            provider_name: "simcloud".into(),
            controllers: wasm_ccm::controllers::ALL.iter().collect(),
            rescan_period: Duration::from_secs(30),
            debounce: hot_swap::DEBOUNCE,
            allow_untagged_cloud: false,
            canary: None,
        },
        loader.clone(),
        shared.clone(),
        serving,
        Arc::new(ReloadReporter::new(&metrics, None)),
    );
    tokio::spawn(reloader.run(stop_rx));

    // Load: back-to-back instance-metadata calls on whatever version is current.
    let done = Arc::new(AtomicBool::new(false));
    let (calls, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (shared, done, calls, failed) =
            (shared.clone(), done.clone(), calls.clone(), failed.clone());
        tokio::spawn(async move {
            let target = node("bench-node", None, &[]);
            while load && !done.load(Ordering::Relaxed) {
                let provider = shared.current();
                let result = provider
                    .instances_v2()
                    .unwrap()
                    .instance_metadata(&target)
                    .await;
                calls.fetch_add(1, Ordering::Relaxed);
                if result.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // Let the watcher start.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut latencies = Vec::new();
    let probe = node("bench-node", None, &[]);
    for version in versions {
        let expected = wasm_ccm_host::provider::compile_cache::sha256_hex(version);
        let started = Instant::now();
        publish(version);
        loop {
            let provider = shared.current();
            if provider.sha256() == expected {
                provider
                    .instances_v2()
                    .unwrap()
                    .instance_metadata(&probe)
                    .await
                    .expect("first call on the new version");
                latencies.push(started.elapsed());
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "swap never happened"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    done.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let _ = stop_tx.send(true);
    (
        latencies,
        calls.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    )
}

/// Spawn-to-`/readyz` of the binary, `runs` times with one cache directory; with
/// `leader`, until it has taken a free lease and runs the controllers.
async fn restarts(stack: &Stack, cache: &TempDir, runs: usize, leader: bool) -> Vec<Duration> {
    static LEASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let flag = format!("--compile-cache-dir={}", cache.path().display());
    let mut times = Vec::new();
    for _ in 0..runs {
        let port = listening_port();
        // A lease nobody holds: a new name each start.
        let lease = format!(
            "--leader-elect-resource-name=bench-{}",
            LEASE.fetch_add(1, Ordering::Relaxed)
        );
        let election = if leader {
            lease.as_str()
        } else {
            "--leader-elect=false"
        };
        let started = Instant::now();
        let mut child = stack.controller_manager(port, &[election, &flag]);
        loop {
            if http_get(port, "/readyz").await.is_ok_and(|(status, body)| {
                status == 200 && (!leader || body.contains("controllers running"))
            }) {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "never ready");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        times.push(started.elapsed());
        child.kill().await.unwrap();
    }
    times
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasm_ccm_tests::print_bench_heading("hot_swap");
    println!("hot swap: kubelet rename of ..data -> first call served by the new version");
    println!("(reference provider, {SWAPS} swaps each; the load loop calls instance-metadata");
    println!("back to back, keeping both cores busy)\n");
    let reference = std::fs::read(wasm_ccm_tests::guest("reference_provider")).unwrap();
    let rebuilt = rebuilt_reference();
    // New bytes each time (a custom section), so no swap is a no-op.
    let same_code: Vec<Vec<u8>> = (0..SWAPS)
        .map(|i| with_custom_section(&reference, &format!("v{i}")))
        .collect();
    let new_code: Vec<Vec<u8>> = (0..SWAPS)
        .map(|i| with_custom_section(&rebuilt, &format!("v{i}")))
        .collect();
    println!(
        "| new version | compiled | load loop | median ms | min ms | max ms | load calls | failed calls |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let rows = [
        ("same code, new bytes", Compile::Full),
        ("rebuilt: a one-line change", Compile::Full),
        ("rebuilt: a one-line change", Compile::FunctionCache),
        ("same code, new bytes", Compile::FunctionCache),
        ("same code, new bytes", Compile::Precompiled),
    ];
    for (what, compile) in rows {
        for load in [false, true] {
            let (latencies, calls, failed) = if what.starts_with("rebuilt") {
                // Each swap from a process serving the reference provider (whose
                // functions the function cache holds) to the rebuilt one.
                let (mut all, mut calls, mut failed) = (Vec::new(), 0, 0);
                for version in &new_code {
                    let (l, c, f) =
                        swap_latencies(compile, load, &reference, std::slice::from_ref(version))
                            .await;
                    all.extend(l);
                    calls += c;
                    failed += f;
                }
                (all, calls, failed)
            } else {
                swap_latencies(compile, load, &reference, &same_code).await
            };
            let min = *latencies.iter().min().unwrap();
            let max = *latencies.iter().max().unwrap();
            let compiled = match compile {
                Compile::Full => "every function",
                Compile::FunctionCache => "changed functions (function cache)",
                Compile::Precompiled => "none (compile cache hit)",
            };
            let load = if load { "busy (both cores)" } else { "idle" };
            println!(
                "| {what} | {compiled} | {load} | {} | {} | {} | {calls} | {failed} |",
                ms(median(latencies)),
                ms(min),
                ms(max),
            );
        }
    }

    let bin = wasm_ccm_bin();
    if !bin.exists() {
        println!(
            "\nrestart-to-ready skipped: build {} first (cargo build --release --bin wasm-ccm)",
            bin.display()
        );
        return;
    }
    let stack = Stack::start().await;
    let cache = TempDir::new("restart-cache");
    // The first start fills the cache; the later ones hit it.
    println!("\nstart: spawn of {} -> /readyz 200\n", bin.display());
    println!("| compile cache | leader election | runs | median ms |");
    println!("|---|---|---|---|");
    for leader in [false, true] {
        let mut times = restarts(&stack, &cache, 6, leader).await;
        if !leader {
            // The first start filled the cache.
            times.remove(0);
        }
        let mut cold_runs = Vec::new();
        for _ in 0..5 {
            let fresh = TempDir::new("restart-cold");
            cold_runs.extend(restarts(&stack, &fresh, 1, leader).await);
        }
        let election = if leader {
            "on, a free lease: until the controllers run"
        } else {
            "off"
        };
        println!(
            "| cold (empty) | {election} | {} | {} |",
            cold_runs.len(),
            ms(median(cold_runs))
        );
        println!(
            "| warm | {election} | {} | {} |",
            times.len(),
            ms(median(times))
        );
    }
}
