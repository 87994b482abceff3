//! Hot-swap latency: from the kubelet-style rename of `..data` to the first call served
//! by the new version, with and without the compile cache, while a load loop keeps
//! calling the provider (its failed calls are counted); then the restart-to-ready
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
use wasm_ccm_host::provider::cache::CompileCache;
use wasm_ccm_host::provider::{ProviderLoader, ProviderSource, SharedProvider};
use wasm_ccm_tests::{
    Stack, TempDir, free_port, http_get, kubelet_publish, node, wasm_ccm_bin, with_custom_section,
};

const SWAPS: usize = 12;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// Swap latencies, and the calls of the load loop (when `load`) and how many failed.
async fn swap_latencies(cache: bool, load: bool) -> (Vec<Duration>, u64, u64) {
    let stack = Stack::start().await;
    let dir = stack.dir.dir.path().to_owned();
    let reference = std::fs::read(&stack.dir.wasm).unwrap();
    let policy = std::fs::read(dir.join("simcloud.yaml")).unwrap();
    std::fs::remove_file(&stack.dir.wasm).unwrap();
    std::fs::remove_file(dir.join("simcloud.yaml")).unwrap();
    let publish = |wasm: &[u8]| {
        kubelet_publish(&dir, &[("simcloud.wasm", wasm), ("simcloud.yaml", &policy)]);
    };
    publish(&reference);
    stack
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("bench-node")));

    let metrics = Metrics::new();
    let cache_dir = TempDir::new("bench-cache");
    let mut loader = ProviderLoader::with_options(
        &EngineSettings::default(),
        &Default::default(),
        metrics.clone(),
    )
    .unwrap();
    let versions: Vec<Vec<u8>> = (0..SWAPS)
        .map(|i| with_custom_section(&reference, &format!("v{i}")))
        .collect();
    if cache {
        let compile_cache = CompileCache::open(cache_dir.path(), &metrics).unwrap();
        // Warm: every version was compiled before (a rollback, a restart, a replica).
        for version in &versions {
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
    for version in &versions {
        let expected = wasm_ccm_host::provider::cache::sha256_hex(version);
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
        let port = free_port();
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
    println!(
        "| compile cache | load loop | median ms | min ms | max ms | load calls | failed calls |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (cache, load) in [(false, false), (false, true), (true, false), (true, true)] {
        let (latencies, calls, failed) = swap_latencies(cache, load).await;
        let min = *latencies.iter().min().unwrap();
        let max = *latencies.iter().max().unwrap();
        let cache = if cache {
            "warm (hit)"
        } else {
            "none (compile)"
        };
        let load = if load { "busy (both cores)" } else { "idle" };
        println!(
            "| {cache} | {load} | {} | {} | {} | {calls} | {failed} |",
            ms(median(latencies)),
            ms(min),
            ms(max),
        );
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
