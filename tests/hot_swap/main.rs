//! Hot swap through the real `wasm-ccm` binary: kubelet-style ConfigMap updates while
//! the controllers reconcile, refused versions (each with its metric and Event), a
//! removed component, rapid successive updates, cloud config changes, and restarts
//! with a warm compile cache.

mod canary;
mod compile_reuse;
mod policy;
mod refusals;
mod swaps;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event as CoreEvent, Node};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use sim_cloud::model::NewInstance;
use wasm_ccm_host::provider::compile_cache::sha256_hex;
use wasm_ccm_tests::{
    Stack, TempDir, guest, kubelet_publish, listening_port, metric, metrics, provider_calls,
    reconciles, wait_until, with_custom_section,
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
    wasm_ccm_tests::serving_sha256(metrics, "simcloud")
}

fn reloads(metrics: &str, result: &str) -> f64 {
    wasm_ccm_tests::provider_reloads(metrics, "simcloud", result)
}

/// Provider calls that failed in the host (trap, timeout, no instance), not in the cloud.
fn failed_calls(metrics: &str) -> f64 {
    provider_calls(metrics, &["trap", "timeout", "unavailable"])
}

async fn wait_serving(port: u16, sha256: &str) {
    wasm_ccm_tests::wait_serving_sha256(port, "simcloud", sha256, TIMEOUT).await;
}
