//! `wasm-ccm import-occm-config`: turns the `cloud.conf` of cloud-provider-openstack
//! (occm), which holds the Keystone secret, into what wasm-ccm needs:
//!
//! - `cloud-config/cloud.conf`: the same file without the secret and the identity
//!   settings (the provider reads the rest: `[LoadBalancer]`, `[Networking]`, ...);
//! - `providers/openstack.yaml`: the provider policy, whose `keystone` rule logs in as
//!   occm did (application credential, or user and password with the project);
//! - `credentials/…`: the secret (and the CA bundle and client certificate
//!   the file named), for the `wasm-ccm-credentials` Secret, mounted at
//!   `--credentials-dir` (the policy names the files there);
//! - `cluster-name.yaml`: occm's `--cluster-name` (a flag, not in `cloud.conf`: given
//!   with `--cluster-name`, read from occm's Deployment or DaemonSet with
//!   `--occm-deployment`, else occm's default `kubernetes`, with a note), as
//!   deploy/openstack's patch of the Deployment. It is part of every load balancer's
//!   name (`kube_service_<cluster>_<namespace>_<name>`): the provider refuses by name
//!   the load balancers occm made under another one.
//!
//! [`run`] does it all; the command line (flags, output, exit code) is the controller
//! manager's (`runtime/manager/src/cli/import_occm_config.rs`), which links this crate
//! (native only; the provider shares only `occm-config`'s key table). The pieces:
//! `cloud_conf.rs` ([`convert`]: the provider's `cloud.conf`, the credential rule, the
//! Secret's files), `policy.rs` (the rest of the policy: limits, allowed actions,
//! annotations), `cluster.rs` (the cluster name and `cluster-name.yaml`),
//! [`occm_deployment`] (occm's `--cluster-name` read from its Deployment, DaemonSet,
//! Pod or flags).

#![forbid(unsafe_code)]

mod cloud_conf;
mod cluster;
mod global;
mod login;
pub mod occm_deployment;
mod policy;

use std::path::{Path, PathBuf};

pub use crate::occm_deployment::{Found, OCCM_DEFAULT};
pub use cloud_conf::{Convert, convert, convert_with};
pub use cluster::{cluster_name, default_note, write_cluster_name};
pub use policy::provider_actions;

/// What to import, and where to.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// occm's `cloud.conf`.
    pub cloud_conf: &'a Path,
    /// The directory to write into.
    pub out: &'a Path,
    /// Where the credentials Secret is mounted (the policy names the files there).
    pub credentials_dir: &'a str,
    /// occm's `--cluster-name`, when given.
    pub cluster_name: Option<&'a str>,
    /// occm's Deployment, DaemonSet or Pod (YAML or JSON), or a file of its flags,
    /// where the cluster name is read when not given.
    pub occm_deployment: Option<&'a Path>,
    /// With `use-clouds`: the clouds.yaml occm reads.
    pub clouds_file: Option<&'a Path>,
    /// The token goes only to `https://` catalog endpoints.
    pub https_endpoints_only: bool,
}

/// What [`run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The files written, `cluster-name.yaml` last.
    pub written: Vec<PathBuf>,
    /// The cluster name written, and where it came from.
    pub cluster: Found,
}

/// Reads `options.cloud_conf`, converts it, finds the cluster name and writes the files
/// under `options.out` (nothing is written when any of it fails).
pub fn run(options: &Options<'_>) -> Result<Outcome, ImportError> {
    let text = std::fs::read_to_string(options.cloud_conf).map_err(|source| ImportError::Io {
        path: options.cloud_conf.to_owned(),
        source,
    })?;
    let imported = convert_with(
        &text,
        options.cloud_conf,
        &Convert {
            credentials_dir: options.credentials_dir,
            clouds_file: options.clouds_file,
            https_endpoints_only: options.https_endpoints_only,
        },
    )?;
    let cluster = cluster_name(options.cluster_name, options.occm_deployment)?;
    let mut written = write(&imported, options.out)?;
    written.push(write_cluster_name(&cluster, options.out)?);
    Ok(Outcome { written, cluster })
}

/// Why a `cloud.conf` cannot be converted.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The `cloud.conf` is not valid gcfg, or lacks or misuses a setting; or occm's
    /// Deployment (`--occm-deployment`) gives no cluster name.
    #[error("{path}: {reason}")]
    Invalid {
        /// The `cloud.conf`, or occm's Deployment.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The cluster name cannot be used.
    #[error("{0}")]
    ClusterName(String),
}

/// The converted files, as text (see [`write`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The provider's `cloud.conf`.
    pub cloud_conf: String,
    /// The provider policy.
    pub policy: String,
    /// Files for the credentials Secret: (name under `openstack/`, content).
    pub secrets: Vec<(String, Vec<u8>)>,
}

/// YAML for a scalar (quoted: IDs may look like numbers).
fn quoted(value: &str) -> String {
    serde_json::Value::String(value.to_owned()).to_string()
}

/// Writes `imported` under `out`: `cloud-config/cloud.conf`, `providers/openstack.yaml`
/// and `credentials/*` (owner-only: each file a key of the credentials Secret, made with
/// `kubectl create secret generic wasm-ccm-credentials --from-file=DIR/credentials/`).
/// The paths written.
pub fn write(imported: &Imported, out: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ImportError::Io { path, source }
    };
    let mut written = Vec::new();
    let mut put = |relative: &str, content: &[u8], secret: bool| -> Result<(), ImportError> {
        let path = out.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, content).map_err(io(&path))?;
        if secret {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(io(&path))?;
        }
        written.push(path);
        Ok(())
    };
    put(
        "cloud-config/cloud.conf",
        imported.cloud_conf.as_bytes(),
        false,
    )?;
    put(
        "providers/openstack.yaml",
        imported.policy.as_bytes(),
        false,
    )?;
    for (name, content) in &imported.secrets {
        put(&format!("credentials/{name}"), content, true)?;
    }
    Ok(written)
}

/// occm's `cloud.conf` with a password login, for the tests.
#[cfg(test)]
const TEST_CLOUD_CONF: &str = "[Global]\nauth-url = https://keystone.example.com:5000/v3\n\
    region = RegionOne\nusername = ccm\npassword = \"hunter2\"\n\
    tenant-name = k8s\ndomain-name = Default\n\
    [LoadBalancer]\nsubnet-id = s1\nfloating-network-id = f1\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// The four files, the secret owner-only, `cluster-name.yaml` last; nothing written
    /// when the cluster name is refused.
    #[test]
    fn run_writes_the_files_and_the_cluster_name() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("occm-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("cloud.conf");
        std::fs::write(&conf, TEST_CLOUD_CONF).unwrap();
        let out = dir.join("out");
        let options = Options {
            cloud_conf: &conf,
            out: &out,
            credentials_dir: "/etc/wasm-ccm/credentials",
            cluster_name: Some("prod"),
            occm_deployment: None,
            clouds_file: None,
            https_endpoints_only: false,
        };
        let outcome = run(&options).unwrap();
        assert_eq!(
            outcome.written,
            [
                out.join("cloud-config/cloud.conf"),
                out.join("providers/openstack.yaml"),
                out.join("credentials/password"),
                out.join("cluster-name.yaml"),
            ]
        );
        assert_eq!(outcome.cluster.name, "prod");
        let secret = out.join("credentials/password");
        assert_eq!(std::fs::read(&secret).unwrap(), b"hunter2");
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let refused = dir.join("refused");
        let err = run(&Options {
            out: &refused,
            cluster_name: Some(""),
            ..options
        })
        .unwrap_err();
        assert!(matches!(err, ImportError::ClusterName(_)), "{err}");
        assert!(!refused.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
