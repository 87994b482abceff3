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
//!   header to the same loopback server: through the SDK's default transport (the
//!   host's buffered `wasm-ccm:http/client`) and over `wasi:http/outgoing-handler`;
//! - a SigV4-signed POST through the broker (static keys read from files) vs native
//!   reqwest signing the same request with aws-sigv4;
//! - a Keystone-authenticated GET through the broker (an application credential's
//!   token from a real Keystone, cached by the host, sent as `X-Auth-Token` to an
//!   endpoint of its catalog) vs native reqwest sending the same token, when the
//!   Keystone venv is there (`source scripts/ensure-keystone.sh`);
//! - the broker's policy check alone (`Egress::authorize`).
//!
//! Needs the guests: `scripts/build-guests.sh`, then
//! `cargo bench -p wasm-ccm-tests --bench provider_calls`.
//!
//! As a regression check (CI runs it in the test profile, `scripts/test.sh`):
//! `BENCH_SIZE=small BENCH_MAX_RATIO=6 cargo test -p wasm-ccm-tests --bench provider_calls`
//! measures a tenth of the batches and exits 1 when a call through the sandbox and the
//! broker costs more than `BENCH_MAX_RATIO` times its native side — a large ratio
//! regression, never an absolute time — or when a GET through the broker costs more
//! heap allocations beyond native reqwest's than [`MAX_EXTRA_ALLOCATIONS`] (a count,
//! every thread's, kept by the bench's counting allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;
use wasm_ccm_host::contract::types::{Node, ObjectMeta};
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::ProviderLoader;

// Shared with node_init, which also uses its batching.
#[path = "common/native_simcloud.rs"]
#[allow(dead_code)]
mod native_simcloud;

use native_simcloud::NativeSimcloud;
use wasm_ccm::cloud::{Cloud, ProviderCloud};
use wasm_ccm_host::capabilities::http_egress::Destination;

const TOKEN: &str = "bench-token";

/// The process's heap allocations so far (every thread's: the broker's, the runtime's,
/// the loopback server's).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting: the allocations a request costs are a count, the
/// same under any load, where its time is not (what the regression check bounds).
struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations per call of `f`, over `calls` calls after a warm-up.
async fn allocations_per_call<F, Fut>(calls: u64, mut f: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..20 {
        f().await;
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..calls {
        f().await;
    }
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / calls as f64
}

/// The most heap allocations a plain GET through the broker may cost beyond the same GET
/// with native reqwest, through the buffered client and over `wasi:http` (the
/// regression check, `BENCH_MAX_RATIO` set): 52 and 137 measured (2026-11-29), with a
/// tenth more. A count does not move with the machine's load, so this bound can be
/// tight where a time's cannot: an added copy, buffer or spawn per request shows.
const MAX_EXTRA_ALLOCATIONS: [f64; 2] = [58.0, 150.0];

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

/// The SigV4 headers (`authorization`, `x-amz-date`) for a POST of `body` to `url`
/// for EC2 in us-east-1, as a native client signs: with aws-sigv4, keys in memory.
fn native_sigv4(
    credentials: &aws_credential_types::Credentials,
    url: &str,
    content_type: &str,
    body: &[u8],
) -> http::HeaderMap {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let identity: aws_smithy_runtime_api::client::identity::Identity = credentials.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("ec2")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let request = SignableRequest::new(
        "POST",
        url,
        [("content-type", content_type)].into_iter(),
        SignableBody::Bytes(body),
    )
    .unwrap();
    let (instructions, _) = sign(request, &params).unwrap().into_parts();
    let mut headers = http::HeaderMap::new();
    for header in instructions.headers() {
        headers.insert(
            http::HeaderName::from_bytes(header.0.as_bytes()).unwrap(),
            http::HeaderValue::from_str(header.1).unwrap(),
        );
    }
    headers
}

/// A GET through the broker under a Keystone rule and the same GET with native
/// reqwest and the same token, three times in turn: `None` (the row is skipped) without
/// the Keystone venv.
async fn keystone_get(client: &reqwest::Client) -> Option<(Samples, Samples)> {
    if !keystone_peer::venv().join("bin/gunicorn").exists() {
        println!("Keystone row skipped: no Keystone venv (source scripts/ensure-keystone.sh)");
        return None;
    }
    let cloud = wasm_ccm_tests::keystone::Cloud::start(keystone_peer::Settings::default()).await;
    // A fast endpoint of the catalog (the cloud's own service double validates every
    // token with Keystone, which would be most of what is measured).
    let server = wasm_ccm_tests::RawServer::start(wasm_ccm_tests::RawBehavior::Respond(
        std::sync::Arc::new(|_| (200, "{\"networks\": []}".to_owned())),
    ))
    .await;
    let endpoint = format!("http://{}/network", server.addr);
    cloud
        .keystone
        .register_endpoint("network", "neutron", "public", &endpoint)
        .await;
    let (id, secret) = cloud.application_credential("bench").await;
    let loaded = cloud
        .provider(
            &format!(
                "      applicationCredentialId: {id}\n      applicationCredentialSecretFile: secret\n"
            ),
            &secret,
        )
        .await;
    let (token, _) = cloud
        .keystone
        .login(serde_json::json!({"auth": {"identity": {
            "methods": ["application_credential"],
            "application_credential": {"id": id, "secret": secret}}}}))
        .await
        .unwrap();
    let url = format!("{endpoint}/v2.0/networks");
    let through_broker = || {
        let (provider, url) = (&loaded.provider, &url);
        async move {
            let info = wasm_ccm_tests::keystone::get(provider, url).await.unwrap();
            assert_eq!(info.additional_labels[0].1, "200", "{info:?}");
        }
    };
    let native = || async {
        let response = client
            .get(&url)
            .header("x-auth-token", &token)
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        std::hint::black_box(response.bytes().await.unwrap());
    };
    let (mut wasm, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        wasm.extend(measure(batches(60), 20, through_broker).await.0);
        direct.extend(measure(batches(60), 20, native).await.0);
    }
    assert_eq!(loaded.logins("success"), 1, "one login for every request");
    Some((Samples(wasm), Samples(direct)))
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

    // One plain GET through the full broker vs native reqwest with the same header:
    // through the SDK's default transport (the buffered `wasm-ccm:http/client`) and
    // over `wasi:http/outgoing-handler`'s resources and streams.
    let get_url = format!("{base}/v1/clusters");
    let hostile_v2 = hostile.instances_v2().unwrap();
    let fetch_node = |annotations: &[(&str, &str)]| Node {
        metadata: ObjectMeta {
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .chain([("hostile/action".to_owned(), "fetch".to_owned())])
                .collect(),
            ..node.metadata.clone()
        },
        ..node.clone()
    };
    let buffered_node = fetch_node(&[("hostile/url", &get_url)]);
    let wasi_node = fetch_node(&[
        ("hostile/url", &get_url),
        ("hostile/transport", "wasi-http"),
    ]);
    let fetch = |node: &Node| {
        let hostile_v2 = &hostile_v2;
        let node = node.clone();
        async move {
            let info = hostile_v2.instance_metadata(&node).await.unwrap();
            assert_eq!(info.additional_labels[0].1, "200", "{info:?}");
        }
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
    // The three run in turn, three times, so drift on a noisy machine hits them alike.
    let (mut get_wasm, mut get_wasi, mut get_native) = (Vec::new(), Vec::new(), Vec::new());
    let mut forward = (0.0, 0.0);
    for _ in 0..3 {
        let before = forward_time(&loader.metrics().encode());
        get_wasm.extend(measure(batches(60), 20, || fetch(&buffered_node)).await.0);
        let after = forward_time(&loader.metrics().encode());
        forward = (
            forward.0 + after.0 - before.0,
            forward.1 + after.1 - before.1,
        );
        get_native.extend(measure(batches(60), 20, get_once_native).await.0);
        get_wasi.extend(measure(batches(60), 20, || fetch(&wasi_node)).await.0);
    }
    let (get_wasm, get_wasi, get_native) =
        (Samples(get_wasm), Samples(get_wasi), Samples(get_native));
    let allocations = [
        (
            "plain GET through the broker (buffered client)",
            allocations_per_call(200, || fetch(&buffered_node)).await,
        ),
        (
            "plain GET through the broker (wasi:http)",
            allocations_per_call(200, || fetch(&wasi_node)).await,
        ),
        (
            "the same GET with native reqwest",
            allocations_per_call(200, get_once_native).await,
        ),
    ];
    let forward_mean = forward.0 * 1e6 / forward.1.max(1.0);

    // A SigV4-signed POST through the broker (static keys from files, as deploy/aws
    // mounts them) vs native reqwest signing the same request with aws-sigv4.
    let aws_server = wasm_ccm_tests::RawServer::start(wasm_ccm_tests::RawBehavior::Respond(
        std::sync::Arc::new(|_| (200, "{}".to_owned())),
    ))
    .await;
    let aws_url = format!("http://{}/", aws_server.addr);
    std::fs::write(dir.join("akid"), "AKIDBENCHEXAMPLE").unwrap();
    std::fs::write(dir.join("secret"), "bench/secret/key").unwrap();
    let aws_wasm = dir.join("aws-signed.wasm");
    std::fs::copy(guest("fixture_hostile"), &aws_wasm).unwrap();
    std::fs::write(
        dir.join("aws-signed.yaml"),
        format!(
            "allowedOutboundHosts: ['{origin}']\ncredentials:\n- destination: '{origin}'\n  aws: {{service: ec2, region: us-east-1, accessKeyIdFile: akid, secretAccessKeyFile: secret}}\n",
            origin = aws_url.trim_end_matches('/')
        ),
    )
    .unwrap();
    let signing = loader.load(&aws_wasm, Vec::new()).await.unwrap();
    let signing_v2 = signing.instances_v2().unwrap();
    const FORM: &str =
        "Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-0123456789abcdef0";
    let signed_node = fetch_node(&[
        ("hostile/url", &aws_url),
        ("hostile/method", "POST"),
        ("hostile/form", FORM),
    ]);
    let signed_once_wasm = || {
        let signing_v2 = &signing_v2;
        let node = signed_node.clone();
        async move {
            let info = signing_v2.instance_metadata(&node).await.unwrap();
            assert_eq!(info.additional_labels[0].1, "200", "{info:?}");
        }
    };
    let credentials = aws_credential_types::Credentials::new(
        "AKIDBENCHEXAMPLE",
        "bench/secret/key",
        None,
        None,
        "bench",
    );
    let signed_once_native = || async {
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let headers = native_sigv4(&credentials, &aws_url, content_type, FORM.as_bytes());
        let response = client
            .post(&aws_url)
            .headers(headers)
            .header("content-type", content_type)
            .body(FORM)
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        std::hint::black_box(response.bytes().await.unwrap());
    };
    let (mut signed_wasm, mut signed_native) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        signed_wasm.extend(measure(batches(60), 20, signed_once_wasm).await.0);
        signed_native.extend(measure(batches(60), 20, signed_once_native).await.0);
    }
    let (signed_wasm, signed_native) = (Samples(signed_wasm), Samples(signed_native));

    let keystone = keystone_get(&client).await;

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
    let uri: String = get_url.clone();
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
    let broker = row(
        "plain GET through the full broker (buffered client)",
        &get_wasm,
        &get_native,
    );
    let _ = row(
        "plain GET through the full broker (wasi:http)",
        &get_wasi,
        &get_native,
    );
    let signed = row(
        "SigV4-signed POST through the full broker",
        &signed_wasm,
        &signed_native,
    );
    let keystone_ratio = keystone.as_ref().map(|(wasm, native)| {
        row(
            "Keystone-authenticated GET through the broker",
            wasm,
            native,
        )
    });
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
        "| the rest: the guest building and reading the request, the host call | {:.1} |",
        total - forward_mean - authorize.median()
    );
    println!(
        "| the same GET over wasi:http's resources and streams instead (median) | {:.1} |",
        get_wasi.median()
    );
    println!(
        "\nbroker overhead per request over native reqwest (median difference, µs): \
         buffered {:.1}, wasi:http {:.1}, SigV4-signed {:.1}, Keystone {}",
        get_wasm.median() - get_native.median(),
        get_wasi.median() - get_native.median(),
        signed_wasm.median() - signed_native.median(),
        keystone
            .as_ref()
            .map_or("skipped".to_owned(), |(wasm, native)| format!(
                "{:.1}",
                wasm.median() - native.median()
            ))
    );
    println!("\nheap allocations per request (every thread's, the loopback server's included)");
    println!("| request | allocations |\n| --- | ---: |");
    for (what, count) in &allocations {
        println!("| {what} | {count:.1} |");
    }
    let extra = [
        allocations[0].1 - allocations[2].1,
        allocations[1].1 - allocations[2].1,
    ];
    println!(
        "| the broker's own (buffered GET less native; wasi:http less native) | {:.1}; {:.1} |",
        extra[0], extra[1]
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(max) = std::env::var("BENCH_MAX_RATIO")
        .ok()
        .and_then(|m| m.parse::<f64>().ok())
    {
        for (what, ratio) in [
            ("the cloud seam", seam),
            ("the broker", broker),
            ("the signing broker", signed),
        ]
        .into_iter()
        .chain(keystone_ratio.map(|ratio| ("the Keystone broker", ratio)))
        {
            if ratio > max {
                println!(
                    "REGRESSION: a call through {what} costs {ratio:.2}x native, more than {max}x"
                );
                std::process::exit(1);
            }
        }
        println!("ratios within {max}x native");
        for ((way, extra), most) in ["buffered", "wasi:http"]
            .iter()
            .zip(extra)
            .zip(MAX_EXTRA_ALLOCATIONS)
        {
            if extra > most {
                println!(
                    "REGRESSION: a GET through the broker ({way}) costs {extra:.1} heap \
                     allocations beyond native reqwest's, more than {most}"
                );
                std::process::exit(1);
            }
        }
        println!("the broker's own allocations within {MAX_EXTRA_ALLOCATIONS:?}");
    }
}
