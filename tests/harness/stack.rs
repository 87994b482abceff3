//! The controller manager under test: a [`Stack`] (API server double, simulated cloud,
//! provider directory) and the `wasm-ccm` commands the tests run against it.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sim_cloud::SimCloud;

use crate::{
    ProviderDir, TOKEN, http_get, kubelet_node, listening_port, policy_for, set_ready, taint_keys,
    wait_until, wasm_ccm_bin,
};

/// Runs `wasm-ccm conformance <wasm> <args…>`, prints its table (for
/// `cargo test -- --nocapture`), checks it succeeded (its stderr in the failure) and
/// returns the table.
pub async fn conformance<I, S>(wasm: &Path, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = tokio::process::Command::new(wasm_ccm_bin())
        .arg("conformance")
        .arg(wasm)
        .args(args)
        .output()
        .await
        .expect("run wasm-ccm conformance");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A cluster (API server double), a simulated cloud, the reference provider's
/// directory, and `wasm-ccm` processes running against them.
pub struct Stack {
    /// The provider name `--cloud-provider` selects.
    pub provider: String,
    pub api: kube_double::ApiServer,
    pub cloud: SimCloud,
    pub dir: ProviderDir,
    pub kubeconfig: PathBuf,
    pub cloud_config: PathBuf,
}

impl Stack {
    /// The stack with the reference provider.
    pub async fn start() -> Self {
        Self::with_provider("reference_provider", "simcloud").await
    }

    /// The stack with guest `guest_name` installed as `provider.wasm`; `provider` is
    /// also the name the component declares.
    pub async fn with_provider(guest_name: &str, provider: &str) -> Self {
        let api = kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("API server double");
        let cloud = SimCloud::start("127.0.0.1:0", TOKEN)
            .await
            .expect("sim cloud");
        let dir = ProviderDir::new(guest_name, provider, &policy_for(&cloud), TOKEN);
        let kubeconfig = dir.dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let cloud_config = dir.dir.path().join("cloud-config.json");
        std::fs::write(&cloud_config, cloud_config_bytes(&cloud)).expect("cloud config");
        Self {
            provider: provider.into(),
            api,
            cloud,
            dir,
            kubeconfig,
            cloud_config,
        }
    }

    /// Starts `wasm-ccm` with fast periods, serving health on `port`, plus `extra` flags.
    pub fn controller_manager(&self, port: u16, extra: &[&str]) -> tokio::process::Child {
        self.controller_manager_command(port, extra)
            .spawn()
            .expect("start wasm-ccm")
    }

    /// The command [`Self::controller_manager`] runs, to add environment variables.
    pub fn controller_manager_command(&self, port: u16, extra: &[&str]) -> tokio::process::Command {
        controller_manager_command(
            &self.provider,
            self.dir.dir.path(),
            &self.cloud_config,
            &self.kubeconfig,
            port,
            extra,
        )
    }

    /// [`Self::controller_manager_command`] serving health as deployed (HTTPS,
    /// delegated authentication and authorization).
    pub fn secure_controller_manager_command(
        &self,
        port: u16,
        extra: &[&str],
    ) -> tokio::process::Command {
        secure_controller_manager_command(
            &self.provider,
            self.dir.dir.path(),
            &self.cloud_config,
            &self.kubeconfig,
            port,
            extra,
        )
    }

    /// Two replicas with leader election and `flags`: the first leading (its
    /// controllers running), then the second on standby. Each with its health port.
    pub async fn two_replicas(
        &self,
        flags: &[&str],
    ) -> ((tokio::process::Child, u16), (tokio::process::Child, u16)) {
        let timeout = Duration::from_secs(60);
        let (p1, p2) = (listening_port(), listening_port());
        let first = self.controller_manager(p1, flags);
        wait_until(timeout, "first replica leads", || async {
            http_get(p1, "/readyz")
                .await
                .is_ok_and(|(_, b)| b.contains("controllers running"))
        })
        .await;
        let second = self.controller_manager(p2, flags);
        wait_until(timeout, "second replica on standby", || async {
            http_get(p2, "/readyz")
                .await
                .is_ok_and(|(s, b)| s == 200 && b.contains("standby"))
        })
        .await;
        ((first, p1), (second, p2))
    }

    /// The lifecycle controller's two steps for Node `name`, whose instance is in the
    /// simulated cloud: the instance stops and the Node is not Ready, so it is tainted
    /// as shut down; then the instance is gone, so the Node is deleted.
    pub async fn shut_down_then_gone(
        &self,
        nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
        name: &str,
        timeout: Duration,
    ) {
        let id = self
            .cloud
            .with_state(|s| s.list_instances(Some(name))[0].id.clone());
        self.cloud.with_state(|s| {
            s.patch_instance(
                &id,
                sim_cloud::model::InstancePatch {
                    state: Some(sim_cloud::model::InstanceState::Stopped),
                    ..Default::default()
                },
            )
        });
        set_ready(nodes, name, "False").await;
        wait_until(timeout, &format!("{name} tainted as shut down"), || async {
            nodes.get(name).await.is_ok_and(|n| {
                taint_keys(&n).contains(&"node.cloudprovider.kubernetes.io/shutdown".to_string())
            })
        })
        .await;
        self.cloud.with_state(|s| s.delete_instance(&id));
        wait_until(timeout, &format!("{name} deleted"), || async {
            nodes.get_opt(name).await.is_ok_and(|n| n.is_none())
        })
        .await;
    }

    /// A kube client for the double.
    pub fn client(&self) -> kube::Client {
        {
            wasm_ccm_host::tls::install_crypto_provider();
            kube::Client::try_from(kube::Config::new(self.api.url().parse().unwrap())).unwrap()
        }
    }

    /// An instance named `name` in the simulated cloud and its Node joining (Ready,
    /// tainted uninitialized, as kubelet registers it); the Nodes API.
    pub async fn joining_node(&self, name: &str) -> kube::Api<k8s_openapi::api::core::v1::Node> {
        self.cloud
            .with_state(|s| s.create_instance(sim_cloud::model::NewInstance::named(name)));
        let nodes = kube::Api::all(self.client());
        nodes
            .create(
                &kube::api::PostParams::default(),
                &kubelet_node(name, "True"),
            )
            .await
            .unwrap();
        nodes
    }
}

/// `wasm-ccm` for provider `provider` in `providers_dir` (also the credentials
/// directory), with fast periods, serving health on `port` over plain HTTP
/// (`--serve-plain-http`), plus `extra` flags.
pub fn controller_manager_command(
    provider: &str,
    providers_dir: &Path,
    cloud_config: &Path,
    kubeconfig: &Path,
    port: u16,
    extra: &[&str],
) -> tokio::process::Command {
    let mut command = secure_controller_manager_command(
        provider,
        providers_dir,
        cloud_config,
        kubeconfig,
        port,
        extra,
    );
    // Its start-up warning is for operators, not for every test's output.
    command
        .arg("--serve-plain-http=true")
        .env("RUST_LOG", "warn,wasm_ccm::serving=error");
    command
}

/// [`controller_manager_command`] serving health on `port` as deployed: HTTPS with
/// delegated authentication and authorization.
pub fn secure_controller_manager_command(
    provider: &str,
    providers_dir: &Path,
    cloud_config: &Path,
    kubeconfig: &Path,
    port: u16,
    extra: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(wasm_ccm_bin());
    command
        .args([
            "--cloud-provider",
            provider,
            "--node-monitor-period",
            "500ms",
            "--cluster-cidr",
            "10.244.0.0/16",
            "--route-reconciliation-period",
            "500ms",
        ])
        .arg("--providers-dir")
        .arg(providers_dir)
        .arg("--credentials-dir")
        .arg(providers_dir)
        .arg("--cloud-config")
        .arg(cloud_config)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(extra);
    crate::serve_on(&mut command, port);
    if !extra.iter().any(|a| a.starts_with("--compile-cache-dir")) {
        command
            .arg("--compile-cache-dir")
            .arg(shared_compile_cache());
    }
    command.env("RUST_LOG", "warn").kill_on_drop(true);
    die_with_parent(&mut command);
    command
}

/// The compile cache every controller manager the tests start shares (unless a test
/// passes its own `--compile-cache-dir`), so a component is compiled once per run
/// instead of once per process: `target/<profile>/test-compile-cache`. Entries are
/// keyed on the component's SHA-256 and the engine, and written under a name of the
/// writing process before being renamed into place, so processes sharing it are safe.
/// A test that counts compiled functions or cache misses passes a directory of its own.
pub fn shared_compile_cache() -> PathBuf {
    let dir = crate::fixtures::built_bin("wasm-ccm")
        .parent()
        .expect("target profile dir")
        .join("test-compile-cache");
    // Private to this user, as the controller manager wants it (it would narrow it).
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    assert!(
        dir.is_dir(),
        "the shared compile cache {} cannot be made",
        dir.display()
    );
    dir
}

/// Makes the child get SIGKILL when the thread that started it ends (the test's
/// runtime), so a test killed on a timeout leaves no process behind (drop does not run
/// then).
pub fn die_with_parent(command: &mut tokio::process::Command) {
    // SAFETY: prctl(2) only, between fork and exec: async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

fn cloud_config_bytes(cloud: &SimCloud) -> Vec<u8> {
    format!(r#"{{"endpoint": "{}"}}"#, cloud.url()).into_bytes()
}

/// Spawns `command` with its stderr collected line by line into the returned text.
pub fn spawn_logged(
    mut command: tokio::process::Command,
) -> (
    tokio::process::Child,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("piped stderr");
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = log.clone();
    tokio::spawn(async move {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    (child, log)
}
