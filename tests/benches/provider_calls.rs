//! Provider call costs, printed as a table of medians measured in one run.
//!
//! - a call with no I/O (`instance-metadata` of a provider answering from memory: a Node
//!   record in, an instance record out; and the bare `provider-name`)
//!   through a pooled instance, vs the same computation in native Rust;
//! - `instance-metadata` through the simulated cloud at the controller manager's cloud
//!   seam (Node conversion -> guest -> egress hook -> reqwest -> answer conversion),
//!   vs the native port plugged in at the same seam (the same GET + JSON decode with
//!   reqwest);
//! - one plain GET through the full broker (policy check, credential injection,
//!   metrics) from the `hostile` fixture's `fetch`, vs native reqwest sending the same
//!   header to the same loopback server;
//! - the broker's policy check alone (`Egress::authorize`).
//!
//! Needs the guests: `scripts/build-guests.sh`, then
//! `cargo bench -p wasm-ccm-tests --bench provider_calls`.
//!
//! As a regression check (CI runs it in the test profile, `scripts/test.sh`):
//! `BENCH_SIZE=small BENCH_MAX_RATIO=6 cargo test -p wasm-ccm-tests --bench provider_calls`
//! measures a tenth of the batches and exits 1 when a call through the sandbox and the
//! broker costs more than `BENCH_MAX_RATIO` times its native side — a large ratio
//! regression, never an absolute time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;
use wasm_ccm_host::contract::types::{Node, ObjectMeta};
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::ProviderLoader;

#[path = "common/native_simcloud.rs"]
mod native_simcloud;

use native_simcloud::NativeSimcloud;
use wasm_ccm::cloud::{Cloud, ProviderCloud};
use wasm_ccm_host::capabilities::http_egress::Destination;

const TOKEN: &str = "bench-token";

fn guest(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = target.join(format!("wasm32-wasip2/release/{name}.wasm"));
    assert!(
        path.exists(),
        "{} missing: run scripts/build-guests.sh",
        path.display()
    );
    path
}

/// Per-call times of `batches` batches of `per_batch` calls each.
struct Samples(Vec<f64>);

impl Samples {
    fn percentile(&self, p: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
    fn median(&self) -> f64 {
        self.percentile(0.5)
    }
}

/// `n` batches, or a tenth of them with `BENCH_SIZE=small`.
fn batches(n: usize) -> usize {
    if std::env::var("BENCH_SIZE").as_deref() == Ok("small") {
        (n / 10).max(5)
    } else {
        n
    }
}

async fn measure<F, Fut>(batches: usize, per_batch: usize, mut f: F) -> Samples
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..per_batch * 2 {
        f().await; // warm up
    }
    let mut samples = Vec::with_capacity(batches);
    for _ in 0..batches {
        let start = Instant::now();
        for _ in 0..per_batch {
            f().await;
        }
        samples.push(start.elapsed().as_secs_f64() * 1e6 / per_batch as f64);
    }
    Samples(samples)
}

/// What the `hostile` fixture answers `instance-metadata` with when asked nothing
/// special, built natively.
fn native_metadata(_node: &Node) -> wasm_ccm_host::contract::types::InstanceInfo {
    wasm_ccm_host::contract::types::InstanceInfo {
        provider_id: "hostile://1".into(),
        instance_type: "hostile".into(),
        node_addresses: Vec::new(),
        zone: String::new(),
        region: String::new(),
        additional_labels: vec![("behaved".into(), "true".into())],
    }
}

/// The hostile fixture's egress time in the broker's forward, as its metric has it:
/// (seconds in all, requests).
fn forward_time(metrics: &str) -> (f64, f64) {
    let sum = |suffix: &str| {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with(&format!(
                    "wasm_ccm_egress_request_duration_seconds_{suffix}{{provider=\"hostile\""
                ))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    (sum("sum"), sum("count"))
}

/// Prints a row; returns its ratio.
fn row(name: &str, wasm: &Samples, native: &Samples) -> f64 {
    println!(
        "| {name:<46} | {:>10.2} | {:>10.2} | {:>10.2} | {:>6.2}x |",
        wasm.median(),
        wasm.percentile(0.9),
        native.median(),
        wasm.median() / native.median()
    );
    wasm.median() / native.median()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasm_ccm_tests::print_bench_heading("provider_calls");
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("bench-node")));

    let dir = std::env::temp_dir().join(format!("wasm-ccm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wasm = dir.join("simcloud.wasm");
    let hostile_wasm = dir.join("hostile.wasm");
    std::fs::copy(guest("reference_provider"), &wasm).unwrap();
    std::fs::copy(guest("fixture_hostile"), &hostile_wasm).unwrap();
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    let policy = format!(
        "allowedOutboundHosts: ['https://api.example.com', '{url}']\ncredentials:\n- destination: '{url}'\n  bearerTokenFile: token\n",
        url = cloud.url()
    );
    std::fs::write(dir.join("simcloud.yaml"), &policy).unwrap();
    std::fs::write(dir.join("hostile.yaml"), &policy).unwrap();
    let loader = ProviderLoader::new(&EngineSettings::default()).unwrap();
    let config = format!(r#"{{"endpoint": "{}"}}"#, cloud.url()).into_bytes();
    let provider = loader.load(&wasm, config).await.unwrap();
    let hostile = loader.load(&hostile_wasm, Vec::new()).await.unwrap();
    let node = Node::named("bench-node");

    let memory = hostile.instances_v2().unwrap();
    let name_wasm = measure(batches(200), 200, || async {
        std::hint::black_box(memory.instance_metadata(&node).await.unwrap());
    })
    .await;
    let name_native = measure(batches(200), 200, || async {
        std::hint::black_box(native_metadata(std::hint::black_box(&node)));
    })
    .await;
    let ident_wasm = measure(batches(200), 200, || async {
        std::hint::black_box(provider.call_provider_name().await.unwrap());
    })
    .await;
    let ident_native = measure(batches(200), 200, || async {
        std::hint::black_box(String::from(std::hint::black_box("simcloud")));
    })
    .await;

    let base = cloud.url();
    let client = loader.broker().client().clone();
    let native = NativeSimcloud::new(client.clone(), &base, TOKEN);
    let seam = ProviderCloud::new(provider.clone());
    let mut k8s_node = k8s_openapi::api::core::v1::Node::default();
    k8s_node.metadata.name = Some("bench-node".into());
    let meta_wasm = measure(batches(100), 20, || async {
        std::hint::black_box(seam.instance_metadata(&k8s_node).await.unwrap());
    })
    .await;
    let meta_native = measure(batches(100), 20, || async {
        std::hint::black_box(native.instance_metadata(&k8s_node).await.unwrap());
    })
    .await;
    // Interleave the two again to even out drift on a noisy machine.
    let meta_wasm2 = measure(batches(100), 20, || async {
        std::hint::black_box(seam.instance_metadata(&k8s_node).await.unwrap());
    })
    .await;
    let meta_native2 = measure(batches(100), 20, || async {
        std::hint::black_box(native.instance_metadata(&k8s_node).await.unwrap());
    })
    .await;
    let meta_wasm = Samples([meta_wasm.0, meta_wasm2.0].concat());
    let meta_native = Samples([meta_native.0, meta_native2.0].concat());

    // One plain GET through the full broker vs native reqwest with the same header.
    let get_url = format!("{base}/v1/clusters");
    let fetch_node = Node {
        metadata: ObjectMeta {
            annotations: vec![
                ("hostile/action".into(), "fetch".into()),
                ("hostile/url".into(), get_url.clone()),
            ],
            ..node.metadata.clone()
        },
        ..node.clone()
    };
    let hostile_v2 = hostile.instances_v2().unwrap();
    let get_once_wasm = || async {
        let info = hostile_v2.instance_metadata(&fetch_node).await.unwrap();
        assert_eq!(info.additional_labels[0].1, "200");
    };
    let get_once_native = || async {
        let response = client
            .get(&get_url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        std::hint::black_box(response.bytes().await.unwrap());
    };
    let mut get_wasm = Vec::new();
    let mut get_native = Vec::new();
    let forward_before = forward_time(&loader.metrics().encode());
    for _ in 0..2 {
        get_wasm.extend(measure(batches(100), 20, get_once_wasm).await.0);
        get_native.extend(measure(batches(100), 20, get_once_native).await.0);
    }
    let (get_wasm, get_native) = (Samples(get_wasm), Samples(get_native));
    let forward_after = forward_time(&loader.metrics().encode());
    let forward_mean =
        (forward_after.0 - forward_before.0) * 1e6 / (forward_after.1 - forward_before.1).max(1.0);

    // The policy check alone: parsing the destination once, the address rules, the
    // allowlist match and the credential header (cached file).
    let egress = loader
        .broker()
        .egress(
            wasm_ccm_host::metrics::ProviderLabel::new("bench"),
            std::sync::Arc::new(
                wasm_ccm_host::policy::Policy::parse(&policy, &dir.join("bench.yaml")).unwrap(),
            ),
        )
        .unwrap();
    let uri: http::Uri = get_url.parse().unwrap();
    let headers = http::HeaderMap::new();
    let method = http::Method::GET;
    let authorize = measure(batches(200), 1000, || async {
        let destination = Destination::parse(std::hint::black_box(&uri)).unwrap();
        std::hint::black_box(egress.authorize(&method, &destination, &headers).unwrap());
    })
    .await;

    println!(
        "provider calls (µs per call; median and p90 over batches; pooling allocator: {})",
        loader.engine().is_pooling()
    );
    println!(
        "| {:<46} | {:>10} | {:>10} | {:>10} | {:>7} |",
        "call", "wasm p50", "wasm p90", "native p50", "ratio"
    );
    println!(
        "|{:-<48}|{:->12}|{:->12}|{:->12}|{:->9}|",
        "", "", "", "", ""
    );
    let _ = row(
        "identity.provider-name (no I/O)",
        &ident_wasm,
        &ident_native,
    );
    let _ = row(
        "instances-v2.instance-metadata from memory (no I/O)",
        &name_wasm,
        &name_native,
    );
    let seam = row(
        "instance-metadata at the cloud seam (1 GET + JSON)",
        &meta_wasm,
        &meta_native,
    );
    let broker = row("plain GET through the full broker", &get_wasm, &get_native);
    println!(
        "broker policy check alone (allowlist + credential): median {:.3} µs, p90 {:.3} µs",
        authorize.median(),
        authorize.percentile(0.9)
    );
    println!(
        "no-I/O call overhead (name, wasm - native): {:.2} µs; HTTP call overhead: {:.1} µs",
        name_wasm.median() - name_native.median(),
        meta_wasm.median() - meta_native.median()
    );
    // Where a GET through the broker spends its time: the broker's own clock
    // (`wasm_ccm_egress_request_duration_seconds`: limits, credential, the upstream
    // request and reading the answer) against the call's total.
    let total = get_wasm.median();
    let upstream = get_native.median();
    println!("\nwhere a GET through the broker goes (µs per request)");
    println!("| part | µs |\n| --- | ---: |");
    println!("| the call in all (median) | {total:.1} |");
    println!("| the same GET with native reqwest (median) | {upstream:.1} |");
    println!(
        "| in the broker's forward: limits, credential, the request, reading the answer (mean) | {forward_mean:.1} |"
    );
    println!(
        "| of which beyond the native GET: credential, limits, buffering, metrics | {:.1} |",
        forward_mean - upstream
    );
    println!("| the policy check (median) | {:.1} |", authorize.median());
    println!(
        "| the rest: the guest, wasi:http resources and body streams, task hops | {:.1} |",
        total - forward_mean - authorize.median()
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(max) = std::env::var("BENCH_MAX_RATIO")
        .ok()
        .and_then(|m| m.parse::<f64>().ok())
    {
        for (what, ratio) in [("the cloud seam", seam), ("the broker", broker)] {
            if ratio > max {
                println!(
                    "REGRESSION: a call through {what} costs {ratio:.2}x native, more than {max}x"
                );
                std::process::exit(1);
            }
        }
        println!("ratios within {max}x native");
    }
}
