//! Providers loaded in process (no controller manager): the reference provider against
//! the simulated cloud, the hostile fixture, the contract's views of Nodes and
//! Services, and captured `tracing` output.

use sim_cloud::SimCloud;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::{CloudError, Provider, ProviderError, ProviderLoader};

use crate::{ProviderDir, TOKEN};

/// The policy that lets a provider reach `cloud` with the token injected (read from
/// `token` next to the policy).
pub fn policy_for(cloud: &SimCloud) -> String {
    policy_reading(cloud, "token")
}

/// [`policy_for`] with the token read from `token_file`.
pub fn policy_reading(cloud: &SimCloud, token_file: &str) -> String {
    format!(
        "allowedOutboundHosts:\n  - {url}\ncredentials:\n  - destination: {url}\n    bearerTokenFile: {token_file}\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n",
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

/// Loads the hostile fixture with `policy` as its `hostile.yaml` and answers the error;
/// fails the test when it loads.
pub async fn refused_policy(loader: &ProviderLoader, policy: &str) -> String {
    let dir = ProviderDir::new("fixture_hostile", "hostile", policy, TOKEN);
    match loader.load(&dir.wasm, Vec::new()).await {
        Ok(_) => panic!("hostile.yaml was accepted:\n{policy}"),
        Err(e) => e.to_string(),
    }
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

/// The value of an additional label of an instance's metadata (the hostile fixture
/// reports what it saw there); panics when it has none.
pub fn label<'a>(info: &'a types::InstanceInfo, key: &str) -> &'a str {
    info.additional_labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {key} in {:?}", info.additional_labels))
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
