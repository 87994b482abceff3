//! How the tools load a provider (`wasm-ccm check --cloud-config`, `call`,
//! `conformance`, the playground's demonstration): through [`ToolLoader`], with the
//! files a policy names confined as the controller manager confines them. A policy
//! ships with a vendor's component, so it must never name a file of the operator's:
//!
//! - with `--credentials-dir DIR`, files are read only inside DIR (directly or through
//!   symlinks), exactly as under the controller manager's `--credentials-dir`. A DIR
//!   holding the component or its policy is refused: it holds the vendor's files, not
//!   only credentials (run from `$HOME`, `--credentials-dir .` would let `vendor.yaml`
//!   name `.kube/config`);
//! - without it, no file at all: the policy's credential rules and TLS files are left
//!   out ([`Policy::without_files`]), so requests go without them, and the tools say
//!   so.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::loader::{Load, ProviderLoader};
use super::{Inspection, LoadError, Provider};
use crate::capabilities::http_egress::{Broker, EgressSettings};
use crate::engine::{EngineError, EngineSettings};
use crate::metrics::Metrics;
use crate::policy::Policy;

/// Why a tool's loader cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The engine could not be created.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// `--credentials-dir` does not exist, cannot be read or is not a directory.
    #[error("--credentials-dir {path}: {source}", path = .path.display())]
    Dir {
        /// The directory given.
        path: PathBuf,
        /// Why it cannot be used.
        #[source]
        source: std::io::Error,
    },
    /// `--credentials-dir` holds the component or its policy.
    #[error(
        "--credentials-dir {dir} holds the provider's {what} {file}: its policy could name any \
         file there; give a directory that holds only the credential files (as the Secret \
         mounted at the controller manager's --credentials-dir)",
        dir = .dir.display(),
        file = .file.display()
    )]
    HoldsProvider {
        /// The directory given.
        dir: PathBuf,
        /// What it holds: `component`, `policy`, ...
        what: &'static str,
        /// That file, as given.
        file: PathBuf,
    },
}

/// Which files a tool lets a provider's policy read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialFiles {
    /// None (no `--credentials-dir`): the policy's credential rules and TLS files are
    /// left out.
    None,
    /// Only those inside this directory (`--credentials-dir`, canonical).
    Inside(PathBuf),
}

impl CredentialFiles {
    /// The confinement `--credentials-dir` (`dir`) asks for: none without it; else
    /// the directory, checked to exist and to hold none of `provider` (what each file
    /// is, and its path: the component, its policy).
    pub fn new(
        dir: Option<&Path>,
        provider: &[(&'static str, &Path)],
    ) -> Result<Self, ConfineError> {
        let Some(dir) = dir else {
            return Ok(Self::None);
        };
        let unusable = |source| ConfineError::Dir {
            path: dir.to_owned(),
            source,
        };
        let canonical = std::fs::canonicalize(dir).map_err(unusable)?;
        if !canonical.is_dir() {
            return Err(unusable(std::io::ErrorKind::NotADirectory.into()));
        }
        for &(what, file) in provider {
            if locations(file).iter().any(|l| l.starts_with(&canonical)) {
                return Err(ConfineError::HoldsProvider {
                    dir: dir.to_owned(),
                    what,
                    file: file.to_owned(),
                });
            }
        }
        Ok(Self::Inside(canonical))
    }

    /// The broker's settings for this confinement. Without a directory the broker is
    /// not confined, and needs not be: [`Self::confine`] leaves it no file to read.
    pub fn egress(&self) -> EgressSettings {
        EgressSettings {
            credentials_dir: match self {
                Self::None => None,
                Self::Inside(dir) => Some(dir.clone()),
            },
            ..EgressSettings::default()
        }
    }

    /// `policy` as loaded under this confinement: whole inside a directory (the broker
    /// reads its files only there); without one, with nothing that reads a file.
    pub fn confine(&self, policy: Policy) -> Policy {
        match self {
            Self::None => policy.without_files(),
            Self::Inside(_) => policy,
        }
    }

    /// What [`Self::confine`] leaves out of `policy`, as `FIELD (FILE)`: nothing inside
    /// a directory; without one, every field naming a file.
    pub fn left_out(&self, policy: &Policy) -> Vec<String> {
        match self {
            Self::None => policy
                .files()
                .into_iter()
                .map(|(field, file)| format!("{field} ({})", file.display()))
                .collect(),
            Self::Inside(_) => Vec::new(),
        }
    }
}

impl fmt::Display for CredentialFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none read (no --credentials-dir)"),
            Self::Inside(dir) => {
                write!(f, "read only inside {} (--credentials-dir)", dir.display())
            }
        }
    }
}

/// Where `file` lies: its directory entry (its directory's canonical path and its
/// name) and, through symlinks, what it is; those that cannot be resolved are left out.
fn locations(file: &Path) -> Vec<PathBuf> {
    let entry = file.file_name().and_then(|name| {
        let parent = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::canonicalize(parent).ok().map(|dir| dir.join(name))
    });
    entry
        .into_iter()
        .chain(std::fs::canonicalize(file).ok())
        .collect()
}

/// The loader of one component for a tool, confined by [`CredentialFiles`]: the
/// component is loaded only through [`Self::load`], and the engine and broker are its
/// own.
pub struct ToolLoader {
    loader: ProviderLoader,
    files: CredentialFiles,
    component: PathBuf,
    policy: Option<PathBuf>,
    /// Whether what the confinement leaves out was said already (once per tool run).
    warned: AtomicBool,
}

impl ToolLoader {
    /// The loader of the component at `component`, under the policy at `policy` (else
    /// the one next to the component), with credential files confined to
    /// `credentials_dir` (`--credentials-dir`; none read without it). Its providers'
    /// `services` import lists no Service: a tool runs outside any cluster.
    pub fn new(
        engine: &EngineSettings,
        component: &Path,
        policy: Option<&Path>,
        credentials_dir: Option<&Path>,
    ) -> Result<Self, ConfineError> {
        let policy_path = policy
            .map(Path::to_owned)
            .unwrap_or_else(|| Policy::path_for(component));
        let files = CredentialFiles::new(
            credentials_dir,
            &[("component", component), ("policy", policy_path.as_path())],
        )?;
        // Outside a cluster no Service holds anything (the `services` import).
        let loader = ProviderLoader::with_options(engine, &files.egress(), Metrics::new())?
            .with_service_source(std::sync::Arc::new(
                crate::capabilities::services::NoServices,
            ));
        Ok(Self {
            loader,
            files,
            component: component.to_owned(),
            policy: policy.map(Path::to_owned),
            warned: AtomicBool::new(false),
        })
    }

    /// Which files the policy may have read.
    pub fn credential_files(&self) -> &CredentialFiles {
        &self.files
    }

    /// What inspecting the component finds ([`ProviderLoader::inspect`]: no policy,
    /// no egress).
    pub async fn inspect(&self) -> Result<Inspection, LoadError> {
        self.loader.inspect(&self.component).await
    }

    /// The egress broker of the providers loaded here (where `conformance` registers
    /// its throttle).
    pub fn broker(&self) -> &Broker {
        self.loader.broker()
    }

    /// The component loaded under its policy as confined here, `initialize`d with
    /// `cloud_config`. The files are read once: what is confined is what loads.
    pub async fn load(&self, cloud_config: Vec<u8>) -> Result<Provider, LoadError> {
        let source = ProviderLoader::read_source(&self.component, self.policy.as_deref()).await?;
        let policy = source.policy(&self.component)?;
        let left_out = self.files.left_out(&policy);
        if !left_out.is_empty() && !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                left_out = %left_out.join(", "),
                "no --credentials-dir: no credential file is read; requests go without the \
                 policy's credentials and TLS files"
            );
        }
        self.loader
            .load_source_under(
                &self.component,
                source.with_cloud_config(cloud_config),
                self.files.confine(policy),
                None,
                Load::Serving,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn temp(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("wasm-ccm-confined-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("credentials")).unwrap();
        std::fs::write(dir.join("p.wasm"), b"").unwrap();
        std::fs::write(dir.join("p.yaml"), b"").unwrap();
        Dir(dir)
    }

    #[test]
    fn a_directory_holding_only_credentials_is_used() {
        let dir = temp("only");
        let (credentials, wasm, policy) = (
            dir.0.join("credentials"),
            dir.0.join("p.wasm"),
            dir.0.join("p.yaml"),
        );
        let files = CredentialFiles::new(
            Some(credentials.as_path()),
            &[("component", wasm.as_path()), ("policy", policy.as_path())],
        )
        .unwrap();
        let canonical = std::fs::canonicalize(&credentials).unwrap();
        assert_eq!(files, CredentialFiles::Inside(canonical.clone()));
        assert_eq!(files.egress().credentials_dir, Some(canonical));
        assert_eq!(
            CredentialFiles::new(None, &[])
                .unwrap()
                .egress()
                .credentials_dir,
            None
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_holding_the_component_or_its_policy_is_refused() {
        let dir = temp("holds");
        let wasm = dir.0.join("p.wasm");
        // The policy seen through a symlink into the directory is held all the same.
        let link = dir.0.join("credentials/link.yaml");
        std::os::unix::fs::symlink(dir.0.join("p.yaml"), &link).unwrap();
        for (given, what, file) in [
            (dir.0.clone(), "component", wasm.clone()),
            (dir.0.join("."), "component", wasm.clone()),
            (dir.0.join("credentials"), "policy", link.clone()),
        ] {
            let err = CredentialFiles::new(
                Some(given.as_path()),
                &[("component", wasm.as_path()), ("policy", link.as_path())],
            )
            .unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, ConfineError::HoldsProvider { what: w, .. } if w == what),
                "{text}"
            );
            assert!(
                text.contains("--credentials-dir") && text.contains(&file.display().to_string()),
                "{text}"
            );
        }
    }

    #[test]
    fn a_missing_directory_names_the_flag() {
        let dir = temp("missing");
        for given in [dir.0.join("absent"), dir.0.join("p.wasm")] {
            let err = CredentialFiles::new(Some(given.as_path()), &[]).unwrap_err();
            assert!(matches!(err, ConfineError::Dir { .. }), "{err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("--credentials-dir {}: ", given.display())),
                "{err}"
            );
        }
    }

    #[test]
    fn without_a_directory_the_policy_reads_no_file() {
        let policy = Policy::parse(
            "allowedOutboundHosts: ['http://127.0.0.1:9']\n\
             credentials: [{destination: 'http://127.0.0.1:9', bearerTokenFile: /root/.kube/config}]\n",
            Path::new("/vendor/vendor.yaml"),
        )
        .unwrap();
        let none = CredentialFiles::None;
        assert_eq!(
            none.left_out(&policy),
            ["credentials[0] (/root/.kube/config)"]
        );
        let confined = none.confine(policy.clone());
        assert!(confined.files().is_empty());
        assert_eq!(confined.allowed_outbound_hosts.len(), 1);
        let inside = CredentialFiles::Inside(PathBuf::from("/secrets"));
        assert!(inside.left_out(&policy).is_empty());
        assert_eq!(inside.confine(policy).credentials.len(), 1);
        assert_eq!(none.to_string(), "none read (no --credentials-dir)");
        assert_eq!(
            inside.to_string(),
            "read only inside /secrets (--credentials-dir)"
        );
    }
}
