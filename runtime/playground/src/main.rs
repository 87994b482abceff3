//! `wasm-ccm-playground`: everything on one machine with no cluster and no cloud
//! account — the Kubernetes API server double (with a kubeconfig for kubectl), the
//! simulated cloud, the reference provider, seeded nodes and a LoadBalancer Service —
//! and the controller manager running against them, with a readable log of what
//! changes.
//!
//! With `--apiserver real` it runs the real kube-apiserver and etcd instead of the
//! double. This is the only crate that links the API server double and the simulated cloud;
//! the shipped `wasm-ccm` binary does not.

mod aws;
mod cluster;
mod huaweicloud;
mod k3s;
mod kubelets;
mod oci;
mod openstack;
mod playground;
mod seeding;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Run wasm-ccm on this machine with no cluster and no cloud account: the Kubernetes
/// API server double, the simulated cloud and the reference provider (or AWS emulated
/// by moto and the AWS provider, with --cloud aws; or Keystone, the OpenStack double
/// and the OpenStack provider, with --cloud openstack; or the Huawei Cloud double and
/// the Huawei Cloud provider, with --cloud huaweicloud; or Nodes annotated as the K3s
/// agent annotates them and the K3s provider, with --cloud k3s), with seeded nodes and a
/// LoadBalancer Service. Stays up until Ctrl-C or SIGTERM.
#[derive(Parser)]
#[command(name = "wasm-ccm-playground", version, about)]
struct Cli {
    /// Number of nodes (and cloud instances) to seed.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Where to write the kubeconfig for kubectl (printed either way).
    #[arg(long, default_value_os_t = std::env::temp_dir().join("wasm-ccm-playground/kubeconfig"))]
    kubeconfig_out: PathBuf,
    /// Run only the API server double and the simulated cloud, and print the
    /// `wasm-ccm` command to run against them.
    #[arg(long)]
    without_ccm: bool,
    /// The Kubernetes API server: `double` (embedded, starts in milliseconds) or `real`
    /// (kube-apiserver and etcd from target/kube/bin, or $KUBE_APISERVER and $ETCD, as
    /// scripts/ensure-kube-apiserver.sh builds them: RBAC, admission and validation as
    /// a cluster has them; ready in a few seconds).
    #[arg(long, value_enum, default_value_t = seeding::ApiServerKind::Double)]
    apiserver: seeding::ApiServerKind,
    /// Address of the API server (the real one: 127.0.0.1:PORT).
    #[arg(long, default_value = "127.0.0.1:0")]
    api_listen: String,
    /// Address of the simulated cloud.
    #[arg(long, default_value = "127.0.0.1:0")]
    cloud_listen: String,
    /// The cloud: `simcloud` (the simulated cloud and the reference provider), `aws`
    /// (AWS emulated by moto on 127.0.0.1, started from $MOTO_SERVER or
    /// target/tools-venv/bin/moto_server, and the AWS provider), `openstack` (the real
    /// Keystone from $KEYSTONE_VENV or target/tools-venv and the OpenStack API double on
    /// 127.0.0.1, and the OpenStack provider), `huaweicloud` (the Huawei Cloud double on
    /// 127.0.0.1, verifying each request's signature, and the Huawei Cloud provider), `k3s`
    /// (no cloud: Nodes annotated as the K3s agent annotates them, and the K3s provider),
    /// or `none` (any
    /// provider, --provider, reaching its own cloud under --policy with --cloud-config).
    #[arg(long, value_enum, default_value_t = playground::Cloud::Simcloud)]
    cloud: playground::Cloud,
    /// The provider component (default: the cloud's, as built by
    /// scripts/build-guests.sh). With --cloud none, any provider. An
    /// oci://REGISTRY/REPOSITORY@sha256:... reference is pulled and verified (--key),
    /// and installed as NAME.source.yaml, which the controllers pull themselves.
    #[arg(long)]
    provider: Option<PathBuf>,
    /// With an oci:// --provider: a cosign public key its signature must verify with
    /// (repeatable).
    #[arg(long = "key", value_name = "FILE")]
    keys: Vec<PathBuf>,
    /// With an oci:// --provider: the registry's credentials (a Docker config.json).
    #[arg(long)]
    registry_credentials: Option<PathBuf>,
    /// With an oci:// --provider: a CA bundle (PEM) for the registry's certificate.
    #[arg(long)]
    registry_ca: Option<PathBuf>,
    /// The provider's policy (instead of the one generated for the emulated cloud);
    /// relative file paths in it are read relative to it.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The directory the credential files --policy's policy names lie in, as the
    /// controller manager's --credentials-dir (one holding only them: a directory
    /// holding the provider or its policy is refused). Files outside it are refused.
    /// Default: the work directory's credentials/, where the generated policies' are.
    #[arg(long)]
    credentials_dir: Option<PathBuf>,
    /// The provider's cloud config (instead of the one generated for the emulated
    /// cloud); required with --cloud none.
    #[arg(long)]
    cloud_config: Option<PathBuf>,
    /// Directory for the provider directory, credentials and cloud config.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("wasm-ccm-playground"))]
    work_dir: PathBuf,
    /// With the simulated cloud: how long after its instance stops or is deleted a
    /// node's simulated kubelet has stopped long enough for the node to turn NotReady
    /// (Go duration, e.g. 10s; a real cluster's node-monitor-grace-period is 40s).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    node_monitor_grace_period: std::time::Duration,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    wasm_ccm_host::policy::duration::parse_duration(text).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    // TLS on *ring* for every client and server, before any is built.
    wasm_ccm_host::tls::install_crypto_provider();
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(wasm_ccm::colour_logs())
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let options = playground::Options {
        nodes: cli.nodes,
        kubeconfig_out: cli.kubeconfig_out,
        without_ccm: cli.without_ccm,
        apiserver: cli.apiserver,
        api_listen: cli.api_listen,
        cloud_listen: cli.cloud_listen,
        cloud: cli.cloud,
        provider: cli.provider,
        work_dir: cli.work_dir,
        node_monitor_grace_period: cli.node_monitor_grace_period,
        policy: cli.policy,
        credentials_dir: cli.credentials_dir,
        cloud_config: cli.cloud_config,
        provider_keys: cli.keys,
        registry_credentials: cli.registry_credentials,
        registry_ca: cli.registry_ca,
    };
    match runtime.block_on(playground::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", wasm_ccm::error_chain(&err));
            ExitCode::FAILURE
        }
    }
}
