//! Shared setup for the integration tests: locating the guest components and the
//! `wasm-ccm` binary, temporary provider directories, and a running simulated cloud
//! with a provider loaded against it.
//!
//! Guests are built once by `scripts/build-guests.sh` (the README's test command runs
//! it first); tests never build them.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// moto, the AWS emulator, as a test peer.
pub mod aws;
pub mod https;
/// A real Keystone with a service double in its catalog.
pub mod keystone;
pub mod kube_apiserver;
pub use moto_peer as moto;
pub mod openstack;
pub mod oracle;
pub mod upstream;

use sim_cloud::SimCloud;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::{CloudError, Provider, ProviderError, ProviderLoader};

/// The bearer token every test cloud requires.
pub const TOKEN: &str = "test-token-7f3a9c";

/// The workspace's `target/` directory.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// A guest component built by `scripts/build-guests.sh`, e.g. `reference_provider`.
///
/// `WASM_CCM_GUESTS_DIR` points the tests at components built another way, e.g.
/// `target/wasm32-wasip1/release` after `cargo component build --release`.
pub fn guest(name: &str) -> PathBuf {
    let dir = std::env::var_os("WASM_CCM_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("wasm32-wasip2/release"));
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the guests first with scripts/build-guests.sh",
        path.display()
    );
    path
}

/// The `wasm-ccm` binary next to the running test (built by `cargo build`).
pub fn wasm_ccm_bin() -> PathBuf {
    built_bin("wasm-ccm")
}

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

/// A workspace binary next to the running test (built by `cargo build`), e.g.
/// `wasm-ccm-playground`.
pub fn built_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // target/debug/deps/<test>-<hash> -> target/debug/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build` before the tests (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "wasm-ccm-test-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A provider directory holding one component and its policy.
pub struct ProviderDir {
    pub dir: TempDir,
    pub wasm: PathBuf,
}

impl ProviderDir {
    /// Copies guest `guest_name` into a fresh directory as `file_stem.wasm`, with
    /// `policy` as `file_stem.yaml` and `token` in a `token` file next to them.
    pub fn new(guest_name: &str, file_stem: &str, policy: &str, token: &str) -> Self {
        let dir = TempDir::new(file_stem);
        let wasm = dir.path().join(format!("{file_stem}.wasm"));
        std::fs::copy(guest(guest_name), &wasm).expect("copy guest");
        std::fs::write(dir.path().join(format!("{file_stem}.yaml")), policy).expect("policy");
        std::fs::write(dir.path().join("token"), token).expect("token");
        Self { dir, wasm }
    }
}

/// The policy that lets a provider reach `cloud` with the token injected.
pub fn policy_for(cloud: &SimCloud) -> String {
    format!(
        "allowedOutboundHosts:\n  - {url}\ncredentials:\n  - destination: {url}\n    bearerTokenFile: token\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n",
        url = cloud.url()
    )
}

/// The reference provider's cloud config for `cloud`.
pub fn cloud_config(cloud: &SimCloud) -> Vec<u8> {
    format!(
        r#"{{"endpoint": "{}", "zone": "zone-home", "region": "region-home"}}"#,
        cloud.url()
    )
    .into_bytes()
}

/// A loader for one test. Each `#[tokio::test]` has its own runtime, and the egress
/// client's connection pool belongs to the runtime it was used on, so tests do not
/// share loaders.
pub fn loader() -> ProviderLoader {
    ProviderLoader::new(&EngineSettings::default()).expect("provider loader")
}

/// A simulated cloud plus the reference provider loaded against it.
pub struct Simulated {
    pub cloud: SimCloud,
    pub provider: Provider,
    pub dir: ProviderDir,
}

impl Simulated {
    pub async fn start() -> Self {
        let cloud = SimCloud::start("127.0.0.1:0", TOKEN)
            .await
            .expect("sim cloud");
        let dir = ProviderDir::new("reference_provider", "simcloud", &policy_for(&cloud), TOKEN);
        let provider = loader()
            .load(&dir.wasm, cloud_config(&cloud))
            .await
            .unwrap_or_else(|e| panic!("loading the reference provider: {e}"));
        Self {
            cloud,
            provider,
            dir,
        }
    }
}

/// The `hostile` fixture loaded by `loader` under `policy`.
pub async fn hostile(loader: &ProviderLoader, policy: &str) -> (ProviderDir, Provider) {
    let dir = ProviderDir::new("fixture_hostile", "hostile", policy, TOKEN);
    let provider = loader
        .load(&dir.wasm, Vec::new())
        .await
        .expect("load hostile");
    (dir, provider)
}

/// Calls `instance-metadata` on the hostile provider with these annotations (its
/// `hostile/action` and arguments).
pub async fn act(
    provider: &Provider,
    annotations: &[(&str, &str)],
) -> Result<types::InstanceInfo, ProviderError> {
    provider
        .instances_v2()
        .expect("the hostile fixture exports instances-v2")
        .instance_metadata(&node("victim", None, annotations))
        .await
}

/// The message of a `cloud-error.other`; panics on anything else.
pub fn other_message(err: &ProviderError) -> &str {
    match err.cloud() {
        Some(CloudError::Other(m)) => m,
        _ => panic!("expected cloud-error.other, got {err:?}"),
    }
}

/// Polls `condition` until it holds or `timeout` passes.
pub async fn eventually(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub use wasm_ccm_host::contract::types;

/// A Node view with a name, optional provider ID, and annotations.
pub fn node(name: &str, provider_id: Option<&str>, annotations: &[(&str, &str)]) -> types::Node {
    let mut node = types::Node::named(name);
    node.metadata.uid = format!("uid-{name}");
    node.metadata.annotations = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    node.provider_id = provider_id.map(str::to_owned);
    node
}

/// A LoadBalancer Service view with one TCP port 80 -> node port 30080.
pub fn lb_service(namespace: &str, name: &str, uid: &str) -> types::Service {
    types::Service {
        metadata: types::ObjectMeta {
            name: name.into(),
            namespace: namespace.into(),
            uid: uid.into(),
            labels: Vec::new(),
            annotations: Vec::new(),
            deletion_timestamp: None,
        },
        service_type: types::ServiceType::LoadBalancer,
        ports: vec![types::ServicePort {
            name: "http".into(),
            protocol: types::Protocol::Tcp,
            port: 80,
            target_port: "8080".into(),
            node_port: 30080,
            app_protocol: None,
        }],
        session_affinity: types::SessionAffinity::None,
        load_balancer_source_ranges: Vec::new(),
        external_traffic_policy: types::TrafficPolicy::Cluster,
        health_check_node_port: 0,
        ip_families: vec![types::IpFamily::Ipv4],
        load_balancer_class: None,
        load_balancer_ip: None,
        status: types::LoadBalancerStatus {
            ingress: Vec::new(),
        },
        external_ips: Vec::new(),
        cluster_ips: vec!["10.96.0.10".into()],
        ip_family_policy: Some(types::IpFamilyPolicy::SingleStack),
        session_affinity_timeout_seconds: None,
        allocate_load_balancer_node_ports: Some(true),
    }
}

/// Answers a whole request (head and body, as text) with a status and a body.
pub type Responder = std::sync::Arc<dyn Fn(&str) -> (u16, String) + Send + Sync>;

/// How a [`RawServer`] answers every connection.
#[derive(Clone)]
pub enum RawBehavior {
    /// Reads each request with its body and answers what the function says, keeping
    /// the connection open for the next request.
    Respond(Responder),
    /// Accepts and reads, never answers.
    Silent,
    /// Answers 200 with this body (e.g. garbage instead of JSON).
    Fixed(&'static str),
    /// Announces a 1 GiB body with Content-Length and streams zeros.
    HugeWithLength,
    /// Streams an endless chunked body.
    EndlessChunked,
    /// Answers 200 with this many 128-byte header fields and a 2-byte body.
    ManyHeaders(usize),
}

impl std::fmt::Debug for RawBehavior {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RawBehavior::Respond(_) => "Respond",
            RawBehavior::Silent => "Silent",
            RawBehavior::Fixed(_) => "Fixed",
            RawBehavior::HugeWithLength => "HugeWithLength",
            RawBehavior::EndlessChunked => "EndlessChunked",
            RawBehavior::ManyHeaders(_) => "ManyHeaders",
        })
    }
}

/// A raw TCP HTTP server on 127.0.0.1 for misbehaving-cloud scenarios. It counts
/// connections and stops when dropped.
pub struct RawServer {
    pub addr: std::net::SocketAddr,
    pub connections: std::sync::Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    pub async fn start(behavior: RawBehavior) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        let connections = std::sync::Arc::new(AtomicU64::new(0));
        let counter = connections.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let behavior = behavior.clone();
                tokio::spawn(async move {
                    // Read the request head.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    match behavior {
                        RawBehavior::Respond(respond) => loop {
                            let text = String::from_utf8_lossy(&head).to_string();
                            let split = text.find("\r\n\r\n").map_or(text.len(), |i| i + 4);
                            let length: usize = text[..split]
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .and_then(|v| v.trim().parse().ok())
                                })
                                .unwrap_or(0);
                            while head.len() < split + length {
                                match socket.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => head.extend_from_slice(&buf[..n]),
                                }
                            }
                            let request =
                                String::from_utf8_lossy(&head[..split + length]).to_string();
                            head.drain(..split + length);
                            let (status, body) = respond(&request);
                            let response = format!(
                                "HTTP/1.1 {status} X\r\ncontent-type: text/xml\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if socket.write_all(response.as_bytes()).await.is_err() {
                                return;
                            }
                            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                                match socket.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => head.extend_from_slice(&buf[..n]),
                                }
                            }
                        },
                        RawBehavior::Silent => {
                            let _ = socket.read(&mut buf).await;
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        RawBehavior::Fixed(body) => {
                            let response = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = socket.write_all(response.as_bytes()).await;
                            let _ = socket.read(&mut buf).await;
                        }
                        RawBehavior::HugeWithLength => {
                            let _ = socket
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n")
                                .await;
                            let zeros = vec![0u8; 64 * 1024];
                            while socket.write_all(&zeros).await.is_ok() {}
                        }
                        RawBehavior::EndlessChunked => {
                            let _ = socket
                                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                                .await;
                            let mut chunk = b"10000\r\n".to_vec();
                            chunk.extend(std::iter::repeat_n(b'x', 0x10000));
                            chunk.extend_from_slice(b"\r\n");
                            while socket.write_all(&chunk).await.is_ok() {}
                        }
                        RawBehavior::ManyHeaders(count) => {
                            let mut response = String::from("HTTP/1.1 200 OK\r\n");
                            for i in 0..count {
                                response
                                    .push_str(&format!("x-field-{i:05}: {}\r\n", "v".repeat(110)));
                            }
                            response.push_str("connection: close\r\ncontent-length: 2\r\n\r\nok");
                            let _ = socket.write_all(response.as_bytes()).await;
                            let _ = socket.read(&mut buf).await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            connections,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A plain HTTP/1.1 GET on 127.0.0.1: (status, body).
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    Ok(parse_response(&raw))
}

/// The status and body of a whole HTTP/1.1 response (status 0 when there is none).
pub fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
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
        let (p1, p2) = (free_port(), free_port());
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
        kube::Client::try_from(kube::Config::new(self.api.url().parse().unwrap())).unwrap()
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
            "--secure-port",
        ])
        .arg(port.to_string())
        .args(["--bind-address", "127.0.0.1", "--providers-dir"])
        .arg(providers_dir)
        .arg("--credentials-dir")
        .arg(providers_dir)
        .arg("--cloud-config")
        .arg(cloud_config)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(extra)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    die_with_parent(&mut command);
    command
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

/// A Node as kubelet registers it with `--cloud-provider=external`: tainted
/// uninitialized, its Ready condition `ready`, its hostname as only address.
pub fn kubelet_node(name: &str, ready: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "addresses": [{"type": "Hostname", "address": name}]
        }
    }))
    .expect("a Node")
}

/// A Service of type LoadBalancer in `default` (port 80 → 8080), of `class` if any.
pub fn load_balancer_service(
    name: &str,
    class: Option<&str>,
) -> k8s_openapi::api::core::v1::Service {
    let mut spec = serde_json::json!({"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]});
    if let Some(class) = class {
        spec["loadBalancerClass"] = serde_json::json!(class);
    }
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .expect("a Service")
}

/// The date and commit of a run, for tables meant to be compared (`2026-11-25,
/// commit 1a2b3c4`).
pub fn bench_stamp() -> String {
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".into())
    };
    format!(
        "{}, commit {}",
        run("date", &["-u", "+%F %H:%M UTC"]),
        run("git", &["rev-parse", "--short", "HEAD"])
    )
}

/// Prints a bench's first line: its name, the core count, the date and the commit.
pub fn print_bench_heading(bench: &str) {
    println!(
        "{bench}: {} cores, {}\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        bench_stamp()
    );
}

/// The keys of a Node's taints.
pub fn taint_keys(node: &k8s_openapi::api::core::v1::Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

/// Sets a Node's Ready condition to `status`, as its kubelet would.
pub async fn set_ready(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
    status: &str,
) {
    nodes
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(serde_json::json!(
                {"status": {"conditions": [{"type": "Ready", "status": status}]}}
            )),
        )
        .await
        .unwrap();
}

/// Whether the route controller marked the Node routed (`NetworkUnavailable` False).
pub async fn network_available(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
) -> bool {
    nodes.get(name).await.is_ok_and(|n| {
        n.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
    })
}

/// [`kubelet_node`], Ready, with the pod CIDR `pod_cidr` (as kube-controller-manager's
/// node IPAM allocates it).
pub fn kubelet_node_with_pod_cidr(name: &str, pod_cidr: &str) -> k8s_openapi::api::core::v1::Node {
    let mut node = kubelet_node(name, "True");
    let spec = node.spec.get_or_insert_default();
    spec.pod_cidr = Some(pod_cidr.into());
    spec.pod_cidrs = Some(vec![pod_cidr.into()]);
    node
}

/// A Node as kubelet registers it with `--cloud-provider=external --node-ip=<ip>`
/// (1.29+): the uninitialized taint, a pod CIDR if given, the `provided-node-ip` annotation, and
/// that address as its InternalIP (with its Hostname) until the cloud-node controller
/// writes the cloud's.
pub fn kubelet_node_with_node_ip(
    name: &str,
    pod_cidr: Option<&str>,
    ip: &str,
) -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::NodeAddress;
    let mut node = match pod_cidr {
        Some(cidr) => kubelet_node_with_pod_cidr(name, cidr),
        None => kubelet_node(name, "True"),
    };
    node.metadata.annotations = Some(
        [(
            "alpha.kubernetes.io/provided-node-ip".to_owned(),
            ip.to_owned(),
        )]
        .into(),
    );
    node.status.get_or_insert_default().addresses = Some(vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: ip.into(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: name.into(),
        },
    ]);
    node
}

/// Whether the cloud-node controller has initialized the Node (its
/// `node.cloudprovider.kubernetes.io/uninitialized` taint is gone).
pub async fn initialized(nodes: &kube::Api<k8s_openapi::api::core::v1::Node>, name: &str) -> bool {
    nodes.get(name).await.is_ok_and(|n| {
        !taint_keys(&n).contains(&"node.cloudprovider.kubernetes.io/uninitialized".to_string())
    })
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

/// Polls an async condition until it holds or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Prometheus exposition served on `port`'s `/metrics` (empty while unreachable).
pub async fn metrics(port: u16) -> String {
    http_get(port, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// `wasm_ccm_controller_reconciles_total` of `controller` with `result` (`success` or
/// `error`).
pub fn reconciles(text: &str, controller: &str, result: &str) -> f64 {
    metric(
        text,
        &format!(
            "wasm_ccm_controller_reconciles_total{{controller=\"{controller}\",result=\"{result}\"}}"
        ),
    )
}

/// Provider calls, over every interface and function, that ended with one of `results`
/// (`ok`, `cloud_error`, `trap`, `timeout`, `unavailable`).
pub fn provider_calls(text: &str, results: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("wasm_ccm_provider_calls_total{"))
        .filter(|l| {
            results
                .iter()
                .any(|r| l.contains(&format!("result=\"{r}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A metric's value from a Prometheus exposition (the first line starting with
/// `series`), or 0.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Publishes `files` into `dir` the way kubelet updates a ConfigMap volume: a new
/// timestamped directory, a `..data_tmp` symlink renamed over `..data`, a symlink per
/// file (`NAME -> ..data/NAME`; links of files no longer present are removed), and
/// the previous timestamped directory removed.
#[cfg(unix)]
pub fn kubelet_publish(dir: &Path, files: &[(&str, &[u8])]) {
    use std::os::unix::fs::symlink;
    static VERSION: AtomicU64 = AtomicU64::new(0);
    let version = format!(
        "..2026_11_22_{:06}.{}",
        VERSION.fetch_add(1, Ordering::SeqCst),
        std::process::id()
    );
    std::fs::create_dir(dir.join(&version)).expect("version dir");
    for (name, bytes) in files {
        std::fs::write(dir.join(&version).join(name), bytes).expect("write file");
    }
    let previous = std::fs::read_link(dir.join("..data")).ok();
    let _ = std::fs::remove_file(dir.join("..data_tmp"));
    symlink(&version, dir.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("rename ..data");
    for (name, _) in files {
        let link = dir.join(name);
        if link.symlink_metadata().is_err() {
            symlink(Path::new("..data").join(name), link).expect("file symlink");
        }
    }
    if let Some(previous) = &previous {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let name = entry.file_name();
            let target = std::fs::read_link(entry.path()).ok();
            let points_into_data = target.is_some_and(|t| t.starts_with("..data"));
            let still_published = files.iter().any(|(f, _)| std::ffi::OsStr::new(f) == name);
            if points_into_data && !still_published {
                std::fs::remove_file(entry.path()).expect("remove stale link");
            }
        }
        std::fs::remove_dir_all(dir.join(previous)).expect("remove previous version");
    }
}

/// A copy of a component that differs only by a custom section: a new version with
/// the same behaviour (a different SHA-256).
pub fn with_custom_section(component: &[u8], tag: &str) -> Vec<u8> {
    fn leb128(mut value: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"wasm-ccm-test-version";
    let mut payload = Vec::new();
    leb128(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = component.to_vec();
    out.push(0);
    leb128(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

/// Upstream's default load balancer name of a Service (`cloudprovider.DefaultLoadBalancerName`):
/// `a` + its UID without dashes, 32 characters at most.
pub fn default_load_balancer_name(svc: &k8s_openapi::api::core::v1::Service) -> String {
    let uid = svc
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .replace('-', "");
    format!("a{uid}").chars().take(32).collect()
}

/// A `tracing` writer collecting output in memory.
#[derive(Clone, Default)]
pub struct CapturedLogs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Captures this thread's `tracing` output at INFO and above until the guard drops.
    pub fn install() -> (Self, tracing::subscriber::DefaultGuard) {
        Self::install_at(tracing::Level::INFO)
    }

    /// Captures this thread's `tracing` output at `level` and above until the guard
    /// drops.
    pub fn install_at(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let guard = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(logs.clone())
                .with_ansi(false)
                .with_max_level(level)
                .finish(),
        );
        (logs, guard)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// `kubectl kustomize DIR` (`$KUBECTL`, else `kubectl`), parsed document by document.
pub fn kustomize(dir: &Path) -> Vec<serde_json::Value> {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {kubectl} kustomize: {e} (set KUBECTL)"));
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("rendered YAML"))
        .collect()
}

/// The ConfigMap `name` among rendered `docs`.
pub fn config_map(docs: &[serde_json::Value], name: &str) -> serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("ConfigMap {name}"))
        .clone()
}

/// The value of an additional label of an instance's metadata (the hostile fixture
/// reports what it saw there); panics when it has none.
pub fn label<'a>(info: &'a types::InstanceInfo, key: &str) -> &'a str {
    info.additional_labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {key} in {:?}", info.additional_labels))
}
