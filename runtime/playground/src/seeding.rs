//! What every cloud's seeding shares: the playground's options and errors, the
//! seeded cloud's description, the kubelet's Node, the starting Service, file writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use wasm_ccm::controllers::TAINT_UNINITIALIZED;

/// Playground options (the CLI flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Nodes (and cloud instances) to seed.
    pub nodes: usize,
    /// Where the kubeconfig for kubectl is written.
    pub kubeconfig_out: PathBuf,
    /// Start only the API server double and the cloud.
    pub without_ccm: bool,
    /// Which API server: the double or the real one.
    pub apiserver: ApiServerKind,
    /// Address of the API server.
    pub api_listen: String,
    /// Address of the simulated cloud.
    pub cloud_listen: String,
    /// Which cloud: the simulated one, or AWS emulated by moto.
    pub cloud: Cloud,
    /// The provider component to load and demonstrate (the cloud's default if `None`).
    pub provider: Option<PathBuf>,
    /// Where the provider directory (component, policy, token, cloud config) is written.
    pub work_dir: PathBuf,
    /// How long after its instance stops a simulated kubelet's Node turns NotReady.
    pub node_monitor_grace_period: Duration,
    /// The provider's policy, instead of the one generated for the emulated cloud.
    pub policy: Option<PathBuf>,
    /// The directory the credential files of `policy` lie in (`--credentials-dir`);
    /// the work directory's `credentials/` without it.
    pub credentials_dir: Option<PathBuf>,
    /// The provider's cloud config, instead of the one generated for the emulated cloud.
    pub cloud_config: Option<PathBuf>,
    /// With an `oci://` provider: the cosign public keys its signature may be made with.
    pub provider_keys: Vec<PathBuf>,
    /// With an `oci://` provider: the registry's credentials (a Docker config.json).
    pub registry_credentials: Option<PathBuf>,
    /// With an `oci://` provider: a CA bundle for the registry's certificate.
    pub registry_ca: Option<PathBuf>,
}

/// Which Kubernetes API server the playground runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiServerKind {
    /// The embedded API server double (tests/kube-double).
    Double,
    /// The real kube-apiserver with etcd, from target/kube/bin (or `$KUBE_APISERVER`
    /// and `$ETCD`): RBAC, admission and validation as a cluster has them.
    Real,
}

/// The cloud the playground runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cloud {
    /// The simulated cloud, with the reference provider (`simcloud`).
    Simcloud,
    /// AWS emulated by moto on 127.0.0.1, with the AWS provider (`aws`).
    Aws,
    /// OpenStack: the real Keystone and the OpenStack API double on 127.0.0.1, with the
    /// OpenStack provider (`openstack`).
    Openstack,
    /// K3s: no cloud but the cluster, Nodes annotated as the K3s agent annotates them,
    /// with the K3s provider (`k3s`).
    K3s,
    /// Huawei Cloud: the Huawei Cloud double on 127.0.0.1 (ECS, shared ELB, VPC and
    /// EIPs, every request's signature verified), with the Huawei Cloud provider
    /// (`huaweicloud`).
    Huaweicloud,
    /// No emulated cloud: the provider given by `--provider` reaches its own cloud (or
    /// its author's emulator) under `--policy`, configured by `--cloud-config`.
    None,
}

impl Cloud {
    /// The provider name (`--cloud-provider`) of the emulated cloud's provider.
    pub(crate) fn provider_name(self) -> Option<&'static str> {
        match self {
            Cloud::Simcloud => Some("simcloud"),
            Cloud::Aws => Some("aws"),
            Cloud::Openstack => Some("openstack"),
            Cloud::Huaweicloud => Some("huaweicloud"),
            Cloud::K3s => Some("k3s"),
            Cloud::None => None,
        }
    }

    /// Where `scripts/build-guests.sh` puts the cloud's provider.
    pub(crate) fn default_provider(self) -> Option<PathBuf> {
        match self {
            Cloud::Simcloud => Some("target/wasm32-wasip2/release/reference_provider.wasm"),
            Cloud::Aws => Some("target/wasm32-wasip2/release/aws_provider.wasm"),
            Cloud::Openstack => Some("target/wasm32-wasip2/release/openstack_provider.wasm"),
            Cloud::Huaweicloud => Some("target/wasm32-wasip2/release/huaweicloud_provider.wasm"),
            Cloud::K3s => Some("target/wasm32-wasip2/release/k3s_provider.wasm"),
            Cloud::None => None,
        }
        .map(PathBuf::from)
    }
}

/// A seeded cloud: what the controllers need to reach it, and what to tell the user.
pub(crate) struct Seeded {
    /// The cloud config file.
    pub(crate) cloud_config: PathBuf,
    /// A node to demonstrate `instance-metadata` on.
    pub(crate) demo_node: String,
    /// Its annotations, as the provider sees them (the K3s agent's addresses).
    pub(crate) demo_annotations: Vec<(String, String)>,
    /// Flags the controller manager runs with for this cloud (beyond the playground's).
    pub(crate) flags: Vec<String>,
    /// Lines describing the cloud.
    pub(crate) about: Vec<String>,
    /// Commands to try.
    pub(crate) try_lines: Vec<String>,
    /// The running cloud, kept until the playground stops.
    pub(crate) _cloud: Box<dyn std::any::Any + Send>,
}

/// Errors starting the playground.
#[derive(Debug, thiserror::Error)]
pub enum PlaygroundError {
    /// A server could not bind its address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Seeding the API server failed.
    #[error("seeding the cluster: {0}")]
    Seed(String),
    /// The real API server could not be started or reached.
    #[error("the real API server: {0}")]
    RealApiServer(#[source] kube_apiserver_peer::Error),
    /// The AWS emulator could not be started.
    #[error("starting the AWS emulator (moto): {0}")]
    Emulator(String),
    /// The flags do not make a playground.
    #[error("{0}")]
    Usage(String),
    /// The provider component could not be read as a provider.
    #[error("{path}: {message}", path = .path.display())]
    Provider {
        /// The component.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The policy given with --policy is invalid.
    #[error("{0}")]
    Policy(String),
    /// The credentials directory cannot be used (missing, or holding the provider).
    #[error(transparent)]
    Credentials(#[from] wasm_ccm_host::provider::ConfineError),
    /// The SIGTERM handler could not be installed.
    #[error("cannot handle SIGTERM: {source}")]
    Signal {
        #[source]
        source: std::io::Error,
    },
}

/// A Node as kubelet registers it with `--cloud-provider=external`, with the pod CIDR
/// the node IPAM controller would assign.
pub fn kubelet_node(name: &str, pod_cidr: &str) -> Value {
    let now = kube_double::time::now_rfc3339();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {
            "taints": [{"key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
        },
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": "v1.31.0", "kubeProxyVersion": "v1.31.0",
                "osImage": "Debian GNU/Linux 12 (bookworm)", "kernelVersion": "6.1.0",
                "containerRuntimeVersion": "containerd://1.7.24", "operatingSystem": "linux",
                "architecture": "amd64", "machineID": "", "systemUUID": "", "bootID": "",
            },
        },
    })
}

pub(crate) fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), PlaygroundError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| PlaygroundError::Write {
            path: dir.to_owned(),
            source,
        })?;
    }
    std::fs::write(path, contents).map_err(|source| PlaygroundError::Write {
        path: path.to_owned(),
        source,
    })
}

/// The Service every playground starts with.
pub(crate) fn web_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    })
}
