//! Hot swap through the real `wasm-ccm` binary: kubelet-style ConfigMap updates while
//! the controllers reconcile, refused versions (each with its metric and Event), a
//! removed component, rapid successive updates, cloud config changes, and restarts
//! with a warm compile cache.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event as CoreEvent, Node};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use sim_cloud::model::NewInstance;
use wasm_ccm_host::provider::compile_cache::sha256_hex;
use wasm_ccm_tests::{
    Stack, TempDir, free_port, guest, kubelet_publish, metric, metrics, provider_calls, reconciles,
    wait_until, with_custom_section,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const POD: &str = "wasm-ccm-0";
const NAMESPACE: &str = "kube-system";
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A stack whose providers directory is a kubelet-managed ConfigMap volume.
struct SwapStack {
    stack: Stack,
    reference: Vec<u8>,
    policy: Vec<u8>,
    /// A compile cache of its own: the versions these tests swap in are the same in
    /// every run, and a hit in the tests' shared cache would swap without compiling.
    compile_cache: TempDir,
}

impl SwapStack {
    async fn start() -> Self {
        let stack = Stack::start().await;
        let dir = stack.dir.dir.path();
        let reference = std::fs::read(&stack.dir.wasm).unwrap();
        let policy = std::fs::read(dir.join("simcloud.yaml")).unwrap();
        std::fs::remove_file(&stack.dir.wasm).unwrap();
        std::fs::remove_file(dir.join("simcloud.yaml")).unwrap();
        let this = Self {
            stack,
            reference,
            policy,
            compile_cache: TempDir::new("compile-cache"),
        };
        this.publish(&this.reference);
        this
    }

    fn dir(&self) -> &Path {
        self.stack.dir.dir.path()
    }

    /// A kubelet update of the ConfigMap to `wasm` plus the unchanged policy.
    fn publish(&self, wasm: &[u8]) {
        kubelet_publish(
            self.dir(),
            &[("simcloud.wasm", wasm), ("simcloud.yaml", &self.policy)],
        );
    }

    fn controller_manager(&self, port: u16, extra: &[&str]) -> tokio::process::Child {
        let own_cache = format!(
            "--compile-cache-dir={}",
            self.compile_cache.path().display()
        );
        let mut flags = extra.to_vec();
        if !extra.iter().any(|a| a.starts_with("--compile-cache-dir")) {
            flags.push(&own_cache);
        }
        self.stack
            .controller_manager_command(port, &flags)
            .env("POD_NAME", POD)
            .env("POD_NAMESPACE", NAMESPACE)
            .spawn()
            .expect("start wasm-ccm")
    }

    /// An instance in the cloud and its Node, tainted as kubelet registers it.
    async fn add_node(&self, name: &str) {
        self.stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        Api::<Node>::all(self.stack.client())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }

    async fn initialized(&self, name: &str) -> bool {
        Api::<Node>::all(self.stack.client())
            .get(name)
            .await
            .is_ok_and(|n| {
                !n.spec
                    .and_then(|s| s.taints)
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == UNINITIALIZED)
            })
    }

    /// Events about the controller manager's Pod: (reason, note).
    async fn pod_events(&self) -> Vec<(String, String)> {
        Api::<CoreEvent>::namespaced(self.stack.client(), NAMESPACE)
            .list(&ListParams::default().fields(&format!("involvedObject.name={POD}")))
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The SHA-256 of the version serving, from `wasm_ccm_provider_info`.
fn serving(metrics: &str) -> Option<String> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix("wasm_ccm_provider_info{provider=\"simcloud\",sha256=\"")?;
        let (sha, value) = rest.split_once("\"} ")?;
        (value == "1").then(|| sha.to_owned())
    })
}

fn reloads(metrics: &str, result: &str) -> f64 {
    metric(
        metrics,
        &format!("wasm_ccm_provider_reloads_total{{provider=\"simcloud\",result=\"{result}\"}}"),
    )
}

/// Provider calls that failed in the host (trap, timeout, no instance), not in the cloud.
fn failed_calls(metrics: &str) -> f64 {
    provider_calls(metrics, &["trap", "timeout", "unavailable"])
}

async fn wait_serving(port: u16, sha256: &str) {
    wait_until(TIMEOUT, &format!("version {sha256} serving"), || async {
        serving(&metrics(port).await).as_deref() == Some(sha256)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_update_under_load_swaps_with_no_failed_calls() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    for i in 0..10 {
        swap.add_node(&format!("before-{i}")).await;
    }
    let port = free_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &v1).await;

    // Nodes keep arriving while the new version is published.
    let v2_bytes = with_custom_section(&swap.reference, "v2");
    let v2 = sha256_hex(&v2_bytes);
    let mut added = Vec::new();
    let mut published: Option<Instant> = None;
    let mut swapped_after = None;
    for i in 0..40 {
        let name = format!("during-{i}");
        swap.add_node(&name).await;
        added.push(name);
        if i == 10 {
            swap.publish(&v2_bytes);
            published = Some(Instant::now());
        }
        if let Some(at) = published
            && swapped_after.is_none()
            && serving(&metrics(port).await).as_deref() == Some(v2.as_str())
        {
            swapped_after = Some(at.elapsed());
        }
    }
    wait_serving(port, &v2).await;
    eprintln!(
        "published -> serving: {:?} (observed while creating nodes)",
        swapped_after.unwrap_or_else(|| published.unwrap().elapsed())
    );
    for name in (0..10).map(|i| format!("before-{i}")).chain(added) {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            swap.initialized(&name)
        })
        .await;
    }
    let m = metrics(port).await;
    assert_eq!(failed_calls(&m), 0.0, "{m}");
    assert_eq!(reconciles(&m, "cloud-node", "error"), 0.0, "{m}");
    assert_eq!(reloads(&m, "success"), 1.0, "{m}");
    wait_until(TIMEOUT, "a ProviderReloaded event on the Pod", || async {
        swap.pod_events()
            .await
            .iter()
            .any(|(reason, note)| reason == "ProviderReloaded" && note.contains(&v2[..12]))
    })
    .await;
}

/// The function cache: a new version with the same code (new bytes) takes its
/// functions from the serving version's compilation instead of compiling them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_reuses_the_functions_it_shares_with_the_serving_one() {
    let swap = SwapStack::start().await;
    let port = free_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &sha256_hex(&swap.reference)).await;
    let functions = |m: &str| {
        let count = |result: &str| {
            metric(
                m,
                &format!("wasm_ccm_compiled_functions_total{{result=\"{result}\"}}"),
            )
        };
        (count("compiled"), count("reused"))
    };
    let m = metrics(port).await;
    let (compiled, reused) = functions(&m);
    // A component has identical functions (adapters, generic code): the first
    // compilation reuses those already.
    assert!(compiled > 100.0 && compiled > reused, "{m}");
    assert!(metric(&m, "wasm_ccm_function_cache_bytes") > 0.0, "{m}");

    let v2 = with_custom_section(&swap.reference, "v2");
    swap.publish(&v2);
    wait_serving(port, &sha256_hex(&v2)).await;
    let m = metrics(port).await;
    let (compiled_v2, reused_v2) = functions(&m);
    let total = compiled + reused;
    assert_eq!(compiled_v2 + reused_v2 - total, total, "{m}");
    // Not all: cranelift-codegen 0.135's `DataFlowGraph::clear` keeps a reused
    // compiler context's exception tables, which enter the next function's cache key,
    // so which functions miss depends on which thread compiled what (10 to 30% of them
    // on 2 busy cores).
    assert!(
        compiled_v2 - compiled < total / 2.0,
        "most functions reused: {m}"
    );
    assert_eq!(failed_calls(&m), 0.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_versions_leave_the_previous_one_serving() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    let port = free_port();
    let _ccm = swap.controller_manager(
        port,
        &["--leader-elect=false", "--provider-rescan-period=300ms"],
    );
    wait_serving(port, &v1).await;

    let truncated = swap.reference[..swap.reference.len() / 2].to_vec();
    let other_world = std::fs::read(guest("fixture-other-world")).unwrap();
    let stub = std::fs::read(guest("fixture_simcloud_stub")).unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("truncated component", &truncated, "compile"),
        (
            "not WebAssembly",
            b"#!/bin/sh\necho not a provider\n",
            "not_wasm",
        ),
        ("a component of another world", &other_world, "other_world"),
        (
            "a version without load-balancer",
            &stub,
            "interface_dropped",
        ),
    ];
    for (i, (what, bytes, reason)) in cases.iter().enumerate() {
        swap.publish(bytes);
        wait_until(TIMEOUT, &format!("{what} refused as {reason}"), || async {
            reloads(&metrics(port).await, reason) == 1.0
        })
        .await;
        assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));
        // The previous version still initializes Nodes.
        let node = format!("after-refusal-{i}");
        swap.add_node(&node).await;
        wait_until(TIMEOUT, &format!("{node} initialized"), || {
            swap.initialized(&node)
        })
        .await;
    }

    // A cloud config change re-initializes: with the stub still published, its
    // `initialize` now fails.
    let config = std::fs::read_to_string(&swap.stack.cloud_config).unwrap();
    let failing = config.replace('}', r#", "zone": "fail-initialize"}"#);
    std::fs::write(&swap.stack.cloud_config, &failing).unwrap();
    // `initialize` may fail on a passing condition: the version is retried every
    // rescan, and the unchanged failure is not published again.
    wait_until(
        TIMEOUT,
        "initialize failure refused, then retried",
        || async { reloads(&metrics(port).await, "initialize") >= 3.0 },
    )
    .await;
    let m = metrics(port).await;
    assert_eq!(serving(&m).as_deref(), Some(v1.as_str()));
    assert_eq!(reloads(&m, "success"), 0.0, "{m}");
    assert_eq!(failed_calls(&m), 0.0, "{m}");

    wait_until(
        TIMEOUT,
        "a ProviderReloadFailed event per refusal",
        || async {
            let events = swap.pod_events().await;
            let failed: Vec<_> = events
                .iter()
                .filter(|(reason, _)| reason == "ProviderReloadFailed")
                .collect();
            let initialize = failed
                .iter()
                .filter(|(_, note)| note.contains("initialize failed"))
                .count();
            failed.len() >= 5
                && initialize == 1
                && failed.iter().any(|(_, note)| {
                    note.contains("simcloud.wasm")
                        && note.contains("does not export instances-v2 or instances")
                })
        },
    )
    .await;

    // Removed from the ConfigMap: the loaded version keeps serving.
    kubelet_publish(swap.dir(), &[("simcloud.yaml", &swap.policy)]);
    wait_until(TIMEOUT, "a ProviderFileMissing event", || async {
        swap.pod_events()
            .await
            .iter()
            .any(|(reason, _)| reason == "ProviderFileMissing")
    })
    .await;
    swap.add_node("after-removal").await;
    wait_until(TIMEOUT, "after-removal initialized", || {
        swap.initialized("after-removal")
    })
    .await;

    // The reference provider back, with the changed cloud config: a new version.
    swap.publish(&swap.reference);
    wait_until(TIMEOUT, "the reference provider reloaded", || async {
        reloads(&metrics(port).await, "success") == 1.0
    })
    .await;
    assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_updates_end_on_the_newest_good_version() {
    let swap = SwapStack::start().await;
    let port = free_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &sha256_hex(&swap.reference)).await;

    let versions: Vec<Vec<u8>> = ["v2", "v3", "v4"]
        .iter()
        .map(|tag| with_custom_section(&swap.reference, tag))
        .collect();
    // Faster than a compile: no waiting between updates, a broken one in between.
    swap.publish(&versions[0]);
    swap.publish(b"garbage");
    swap.publish(&versions[1]);
    swap.publish(&versions[2]);
    let newest = sha256_hex(&versions[2]);
    wait_serving(port, &newest).await;
    swap.add_node("after-rapid").await;
    wait_until(TIMEOUT, "after-rapid initialized", || {
        swap.initialized("after-rapid")
    })
    .await;
    let m = metrics(port).await;
    assert_eq!(serving(&m), Some(newest), "{m}");
    assert_eq!(failed_calls(&m), 0.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_warm_compile_cache_skips_compiling() {
    let swap = SwapStack::start().await;
    let cache = TempDir::new("compile-cache");
    let cache_flag = format!("--compile-cache-dir={}", cache.path().display());
    let args = ["--leader-elect=false", cache_flag.as_str()];
    let cache_result = |m: &str, result: &str| {
        metric(
            m,
            &format!("wasm_ccm_compile_cache_total{{result=\"{result}\"}}"),
        )
    };

    let port = free_port();
    let mut first = swap.controller_manager(port, &args);
    wait_serving(port, &sha256_hex(&swap.reference)).await;
    let m = metrics(port).await;
    assert_eq!(cache_result(&m, "miss"), 1.0, "{m}");
    first.kill().await.unwrap();
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        entries.len() == 1 && entries[0].ends_with(".cwasm"),
        "{entries:?}"
    );

    let port = free_port();
    let _second = swap.controller_manager(port, &args);
    wait_serving(port, &sha256_hex(&swap.reference)).await;
    let m = metrics(port).await;
    assert_eq!(cache_result(&m, "hit"), 1.0, "{m}");
    assert_eq!(cache_result(&m, "miss"), 0.0, "{m}");
    // Nothing is ever written into the providers directory (a ConfigMap).
    assert!(
        std::fs::read_dir(swap.dir())
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().ends_with(".cwasm"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_changes_reload_and_invalid_policies_are_refused() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    let port = free_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &v1).await;

    // An invalid policy: refused, naming the file and the field.
    let policy = String::from_utf8(swap.policy.clone()).unwrap();
    let invalid = policy.replace("callTimeout: 10s", "callTimeout: soon");
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", &swap.reference),
            ("simcloud.yaml", invalid.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the invalid policy refused", || async {
        reloads(&metrics(port).await, "policy") == 1.0
    })
    .await;
    wait_until(TIMEOUT, "an event naming the field", || async {
        swap.pod_events().await.iter().any(|(reason, note)| {
            reason == "ProviderReloadFailed"
                && note.contains("simcloud.yaml")
                && note.contains("callTimeout")
        })
    })
    .await;

    // A valid change (a shorter call timeout): the same component, re-initialized.
    let shorter = policy.replace("callTimeout: 10s", "callTimeout: 5s");
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", &swap.reference),
            ("simcloud.yaml", shorter.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the policy change reloaded", || async {
        reloads(&metrics(port).await, "success") == 1.0
    })
    .await;
    assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));
    // While it was checked, the candidate's own calls were labelled as a candidate;
    // the serving series counts only the version loaded at start-up.
    let text = metrics(port).await;
    let identity_calls = |provider: &str| {
        metric(
            &text,
            &format!(
                r#"wasm_ccm_provider_calls_total{{provider="{provider}",interface="identity",function="has-cluster-id",result="ok"}}"#
            ),
        )
    };
    assert_eq!(identity_calls("candidate"), 1.0, "{text}");
    assert_eq!(identity_calls("simcloud"), 1.0, "{text}");
    swap.add_node("after-policy").await;
    wait_until(TIMEOUT, "after-policy initialized", || {
        swap.initialized("after-policy")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tightened_policy_applies_even_when_its_component_is_refused() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    let port = free_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &v1).await;
    swap.add_node("before").await;
    wait_until(TIMEOUT, "before initialized", || swap.initialized("before")).await;

    // The operator narrows the allowlist (the cloud is no longer allowed) in the same
    // update as a component that is refused: the narrower policy must still apply.
    let narrowed = "allowedOutboundHosts:\n  - https://api.example.com\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n";
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", b"not a component"),
            ("simcloud.yaml", narrowed.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the component refused", || async {
        reloads(&metrics(port).await, "not_wasm") == 1.0
    })
    .await;
    wait_until(
        TIMEOUT,
        "the policy applied to the serving version",
        || async { reloads(&metrics(port).await, "policy_applied") == 1.0 },
    )
    .await;
    assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));

    // The serving version is now held to it: the cloud is out of reach.
    swap.add_node("after").await;
    wait_until(TIMEOUT, "the old egress denied", || async {
        metric(
            &metrics(port).await,
            r#"wasm_ccm_egress_denied_total{provider="simcloud",host="",reason="not_allowed"}"#,
        ) >= 1.0
    })
    .await;
    assert!(
        !swap.initialized("after").await,
        "no cloud call may succeed"
    );
    wait_until(TIMEOUT, "an event saying the policy applies", || async {
        swap.pod_events().await.iter().any(|(reason, note)| {
            reason == "ProviderPolicyApplied" && note.contains("the changed policy now applies")
        })
    })
    .await;
}

/// A provider built against contract 0.1 (the `fixture_legacy` build of the simcloud
/// provider) replaces a 0.2 one and is replaced back while Nodes keep arriving: both
/// directions swap with no failed call, and every Node is initialized by one version
/// or the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_between_contract_versions_both_ways_under_load() {
    let swap = SwapStack::start().await;
    let v02 = sha256_hex(&swap.reference);
    let old = std::fs::read(guest("fixture_legacy")).unwrap();
    let v01 = sha256_hex(&old);
    let port = free_port();
    // The 0.1 build exports instances and zones only: the node controllers run.
    let _ccm = swap.controller_manager(
        port,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
        ],
    );
    wait_serving(port, &v02).await;
    let mut names = Vec::new();
    for (i, (publish, hash)) in [(&old, &v01), (&swap.reference, &v02)].iter().enumerate() {
        for j in 0..8 {
            let name = format!("round-{i}-{j}");
            swap.add_node(&name).await;
            names.push(name);
            if j == 3 {
                swap.publish(publish);
            }
        }
        wait_serving(port, hash).await;
    }
    for name in &names {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            swap.initialized(name)
        })
        .await;
    }
    let m = metrics(port).await;
    assert_eq!(failed_calls(&m), 0.0, "{m}");
    assert_eq!(reconciles(&m, "cloud-node", "error"), 0.0, "{m}");
    assert_eq!(reloads(&m, "success"), 2.0, "{m}");
    // Both versions answered calls: the 0.1 build through legacy `instances`.
    assert!(m.contains("function=\"instance-id\""), "{m}");
}

/// The canary (`--provider-canary-period`): a version that says every instance is gone
/// (its cloud config points at an empty cloud) shadows the serving version, answers
/// differently on the calls compared, and is refused with an event and
/// `reloads{result="canary"}`; no Node is deleted meanwhile and the serving version
/// keeps serving. A good version serves once its period passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_keeps_a_version_that_says_everything_is_gone_from_serving() {
    let swap = SwapStack::start().await;
    let empty = sim_cloud::SimCloud::start("127.0.0.1:0", wasm_ccm_tests::TOKEN)
        .await
        .unwrap();
    swap.add_node("ready").await;
    swap.add_node("partitioned").await;
    let port = free_port();
    let _ccm = swap.controller_manager(
        port,
        &["--leader-elect=false", "--provider-canary-period=2s"],
    );
    let v1 = sha256_hex(&swap.reference);
    wait_serving(port, &v1).await;
    for name in ["ready", "partitioned"] {
        wait_until(TIMEOUT, "initialized", || swap.initialized(name)).await;
    }
    let nodes: Api<Node> = Api::all(swap.stack.client());
    wasm_ccm_tests::set_ready(&nodes, "partitioned", "Unknown").await;

    // The faulty version: the same component, a policy reaching both clouds, a cloud
    // config naming the empty one.
    let policy = format!(
        "allowedOutboundHosts: ['{a}', '{b}']\ncredentials:\n  - destination: '{a}'\n    bearerTokenFile: token\n  - destination: '{b}'\n    bearerTokenFile: token\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n",
        a = swap.stack.cloud.url(),
        b = empty.url()
    );
    let config = |url: &str| format!(r#"{{"endpoint": "{url}"}}"#);
    let write_config = |text: String| {
        let tmp = swap.stack.cloud_config.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &swap.stack.cloud_config).unwrap();
    };
    write_config(config(&empty.url()));
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", &swap.reference),
            ("simcloud.yaml", policy.as_bytes()),
        ],
    );
    wait_until(
        TIMEOUT,
        "the faulty version refused by its canary",
        || async { reloads(&metrics(port).await, "canary") >= 1.0 },
    )
    .await;
    let m = metrics(port).await;
    assert_eq!(reloads(&m, "success"), 0.0, "{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("wasm_ccm_provider_canary_calls_total")
                && (l.contains("result=\"differ\"") || l.contains("result=\"candidate_error\""))),
        "{m}"
    );
    let events = swap.pod_events().await;
    assert!(
        events.iter().any(|(r, _)| r == "ProviderCanaryStarted"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "ProviderReloadFailed" && n.contains("failed its canary")),
        "{events:?}"
    );
    assert!(nodes.get("partitioned").await.is_ok(), "nothing deleted");

    // A good version serves after its period.
    write_config(config(&swap.stack.cloud.url()));
    let v2 = with_custom_section(&swap.reference, "v2");
    kubelet_publish(
        swap.dir(),
        &[("simcloud.wasm", &v2), ("simcloud.yaml", policy.as_bytes())],
    );
    wait_serving(port, &sha256_hex(&v2)).await;
    let m = metrics(port).await;
    assert_eq!(reloads(&m, "success"), 1.0, "{m}");
    assert_eq!(failed_calls(&m), 0.0, "{m}");
    assert!(nodes.get("partitioned").await.is_ok(), "nothing deleted");
}

/// A version on canary whose files change back to the serving version (an operator
/// rolling back) ends its trial without a verdict: it never serves, the slot the
/// controllers read is empty again, and a later new version gets its own trial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_during_the_canary_ends_the_trial() {
    use std::sync::Arc;
    use wasm_ccm::hot_swap::canary::{Canary, CanaryOptions, CanarySlot};
    use wasm_ccm::hot_swap::{self, Outcome, ReloadReporter, Reloader};
    use wasm_ccm_host::metrics::Metrics;
    use wasm_ccm_host::provider::{ProviderSource, SharedProvider};

    let swap = SwapStack::start().await;
    let metrics = Metrics::new();
    let loader = wasm_ccm_tests::loader();
    let component = swap.dir().join("simcloud.wasm");
    let config = std::fs::read(&swap.stack.cloud_config).unwrap();
    let shared = SharedProvider::from(loader.load(&component, config).await.unwrap());
    let serving = ProviderSource::read(&component, Some(&swap.stack.cloud_config))
        .unwrap()
        .fingerprint;
    let slot = CanarySlot::default();
    let canary = Canary::new(
        CanaryOptions {
            period: Duration::from_secs(3600),
            max_error_percent: 5.0,
            max_difference_percent: 5.0,
        },
        slot.clone(),
        &metrics,
    );
    let mut reloader = Reloader::new(
        hot_swap::Settings {
            component: component.clone(),
            cloud_config: Some(swap.stack.cloud_config.clone()),
            provider_name: "simcloud".into(),
            controllers: wasm_ccm::controllers::ALL.iter().collect(),
            rescan_period: Duration::from_secs(30),
            debounce: hot_swap::DEBOUNCE,
            allow_untagged_cloud: false,
            canary: Some(canary),
        },
        loader,
        shared.clone(),
        serving,
        Arc::new(ReloadReporter::new(&metrics, None)),
    );
    let v1 = sha256_hex(&swap.reference);
    let v2 = with_custom_section(&swap.reference, "v2");
    swap.publish(&v2);
    assert!(matches!(reloader.check().await, Outcome::OnTrial { .. }));
    assert!(
        slot.get().is_some(),
        "the controllers shadow the version on trial"
    );
    assert!(matches!(reloader.check().await, Outcome::Unchanged));
    // Rolled back: the trial ends, v1 keeps serving.
    swap.publish(&swap.reference);
    assert!(matches!(reloader.check().await, Outcome::Unchanged));
    assert!(slot.get().is_none(), "no trial any more");
    assert_eq!(shared.current().sha256(), v1);
    // v2 again: a new trial.
    swap.publish(&v2);
    assert!(matches!(reloader.check().await, Outcome::OnTrial { .. }));
    assert_eq!(shared.current().sha256(), v1);
}
