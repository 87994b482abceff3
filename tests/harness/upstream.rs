//! The clouds' own controller managers, as `scripts/ensure-upstream-ccm.sh` builds them
//! from their Go modules (none of their code is in this repository), and the command
//! line the tests run them with: the four controllers of a cloud controller manager,
//! no leader election, no serving port, and the periods wasm-ccm gets beside them.

use std::path::{Path, PathBuf};

/// The flags both sides of a comparison get, as far as both have them.
pub const SHARED_FLAGS: [&str; 7] = [
    "--leader-elect=false",
    "--controllers=cloud-node,cloud-node-lifecycle,service,route",
    "--configure-cloud-routes=true",
    "--cluster-cidr=10.244.0.0/16",
    "--node-monitor-period=1s",
    "--route-reconciliation-period=2s",
    "--concurrent-service-syncs=5",
];

/// An upstream binary: `$variable`, else target/kube/bin/`name`; panics naming the
/// command that builds it when it is missing.
fn binary(variable: &str, name: &str, script_argument: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/kube/bin")
                .join(name)
        });
    assert!(
        path.is_file(),
        "{} is missing: run `scripts/ensure-upstream-ccm.sh {script_argument}` (scripts/test.sh \
         does), which builds it from its Go module",
        path.display()
    );
    path
}

/// occm (`$OCCM`).
pub fn occm() -> PathBuf {
    binary("OCCM", "openstack-cloud-controller-manager", "occm")
}

/// cloud-provider-aws (`$AWS_CCM`).
pub fn aws_ccm() -> PathBuf {
    binary("AWS_CCM", "aws-cloud-controller-manager", "aws-ccm")
}

/// cloud-provider-aws's environment against moto: the SDK's default chain with `keys`,
/// no profile, no metadata service, and every service (any without an override in the
/// cloud config too) at `moto_url`.
pub fn aws_ccm_environment<'a>(
    command: &'a mut tokio::process::Command,
    moto_url: &str,
    keys: &crate::moto::Keys,
) -> &'a mut tokio::process::Command {
    command
        .env("AWS_ACCESS_KEY_ID", &keys.id)
        .env("AWS_SECRET_ACCESS_KEY", &keys.secret)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ENDPOINT_URL", moto_url)
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ROLE_ARN")
        .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("HTTPS_PROXY")
        .env_remove("HTTP_PROXY")
}

/// `program` for `--cloud-provider=provider` with [`SHARED_FLAGS`], the cloud config
/// and the kubeconfig; killed when dropped or when the test's thread ends.
pub fn command(
    program: &Path,
    provider: &str,
    cloud_config: &Path,
    kubeconfig: &Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .arg(format!("--cloud-provider={provider}"))
        .args(SHARED_FLAGS)
        .args([
            "--use-service-account-credentials=false",
            "--allocate-node-cidrs=true",
            "--secure-port=0",
        ])
        .arg(format!("--cloud-config={}", cloud_config.display()))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    crate::die_with_parent(&mut command);
    command
}

/// wasm-ccm with [`SHARED_FLAGS`], the cloud config, the kubeconfig and a providers
/// directory (also its credentials directory), serving no health port.
pub fn wasm_ccm_command(
    provider: &str,
    providers: &Path,
    cloud_config: &Path,
    kubeconfig: &Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(crate::wasm_ccm_bin());
    command
        .arg(format!("--cloud-provider={provider}"))
        .args(SHARED_FLAGS)
        .args(["--serve-plain-http=true", "--bind-address=127.0.0.1"])
        // Nothing reads its health or metrics: upstream's 0, no port.
        .arg("--secure-port=0")
        .arg(format!("--cloud-config={}", cloud_config.display()))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--providers-dir={}", providers.display()))
        .arg(format!("--credentials-dir={}", providers.display()))
        .env("RUST_LOG", "warn,wasm_ccm::serving=error")
        .kill_on_drop(true);
    crate::die_with_parent(&mut command);
    command
}
