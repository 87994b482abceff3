//! Fidelity of the Kubernetes API server double, driven by real clients: the
//! `kubectl` binary and kube-rs (Api, watcher, reflector).

mod delegated_auth;
mod events;
mod kube_rs;
mod kubectl;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Service};
use k8s_openapi::api::events::v1::Event as EventsV1;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config};
use kube_double::{ApiServer, Settings};
use serde_json::{Value, json};
use wasm_ccm_tests::TempDir;

struct Cluster {
    api: ApiServer,
    dir: TempDir,
}

impl Cluster {
    async fn start() -> Self {
        Self::with(Settings::default()).await
    }

    async fn with(settings: Settings) -> Self {
        let api = ApiServer::start(settings).await.unwrap();
        let dir = TempDir::new("api-double");
        api.write_kubeconfig(&dir.path().join("kubeconfig"))
            .unwrap();
        Self { api, dir }
    }

    fn kubeconfig(&self) -> std::path::PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Runs kubectl; returns stdout, panicking with stderr on failure.
    async fn kubectl(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl_result(args).await;
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }

    async fn kubectl_result(&self, args: &[&str]) -> (bool, String, String) {
        let kubeconfig = self.kubeconfig();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let out = Command::new(kubectl())
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(&args)
                .output()
                .expect("run kubectl");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .await
        .unwrap()
    }

    async fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all).await).unwrap()
    }

    fn client(&self) -> Client {
        let config = Config::new(self.api.url().parse().unwrap());
        {
            wasm_ccm_host::tls::install_crypto_provider();
            Client::try_from(config).unwrap()
        }
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }
}

/// The real kubectl: `$KUBECTL` (scripts/test.sh installs one when none is on PATH),
/// else `kubectl` on PATH.
fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}
