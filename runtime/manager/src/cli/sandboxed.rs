//! What `call` and `conformance` share: a provider component with its policy and the
//! directory its credential files must lie in, loaded as the controller manager loads
//! it (the same sandbox, the same confinement of credential files).

use std::path::{Path, PathBuf};

use wasm_ccm_host::capabilities::http_egress::EgressSettings;
use wasm_ccm_host::engine::{EngineError, EngineSettings};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::policy::Policy;
use wasm_ccm_host::provider::{LoadError, Provider, ProviderLoader};

/// The component and where its policy and credentials are.
#[derive(Debug, Clone, clap::Args)]
pub struct Sandboxed {
    /// The provider component (`.wasm`); its policy is FILE.yaml next to it unless
    /// --policy names another.
    pub file: PathBuf,
    /// The provider policy, instead of FILE.yaml next to the component.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// The directory credential files must lie in, as the controller manager's
    /// --credentials-dir (default: the policy's directory).
    #[arg(long)]
    pub credentials_dir: Option<PathBuf>,
}

impl Sandboxed {
    /// A loader reading credential files only inside `--credentials-dir`, else the
    /// policy's directory: the confinement the daemon applies with
    /// `--credentials-dir`, so a policy that works here works there.
    pub fn loader(&self) -> Result<ProviderLoader, EngineError> {
        let policy = self
            .policy
            .clone()
            .unwrap_or_else(|| Policy::path_for(&self.file));
        let dir = self.credentials_dir.clone().unwrap_or_else(|| {
            policy
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_owned()
        });
        ProviderLoader::with_options(
            &EngineSettings {
                max_instances: 2,
                ..EngineSettings::default()
            },
            &EgressSettings {
                credentials_dir: Some(dir),
                ..EgressSettings::default()
            },
            Metrics::new(),
        )
    }

    /// The component loaded by `loader` under its policy, `initialize`d with `config`.
    pub async fn load(
        &self,
        loader: &ProviderLoader,
        config: Vec<u8>,
    ) -> Result<Provider, LoadError> {
        loader
            .load_with_policy(&self.file, self.policy.as_deref(), config)
            .await
    }
}
