//! What `check`, `call` and `conformance` share: a provider component with its policy
//! and the directory its credential files must lie in, loaded through the host's
//! [`ToolLoader`]: the controller manager's sandbox, with credential files confined as
//! its `--credentials-dir` confines them (and none read without the flag).

use std::path::PathBuf;

use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::{ConfineError, ToolLoader};

/// The component and where its policy and credentials are.
#[derive(Debug, Clone, clap::Args)]
pub struct Sandboxed {
    /// The provider component (`.wasm`); its policy is FILE.yaml next to it unless
    /// --policy names another.
    pub file: PathBuf,
    /// The provider policy, instead of FILE.yaml next to the component.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// The directory the policy's credential files must lie in, as the controller
    /// manager's --credentials-dir: one holding only credentials (a directory holding
    /// the component or the policy is refused). Without it no credential file is read:
    /// the policy's credential rules and TLS files are left out.
    #[arg(long)]
    pub credentials_dir: Option<PathBuf>,
}

impl Sandboxed {
    /// Whether the policy allows no host and names no credential, so the provider can
    /// send nothing (false when the policy cannot be read: the checks then run).
    pub fn reaches_nothing(&self) -> bool {
        let path = self
            .policy
            .clone()
            .unwrap_or_else(|| wasm_ccm_host::policy::Policy::path_for(&self.file));
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| wasm_ccm_host::policy::Policy::parse(&text, &path).ok())
            .is_some_and(|p| p.allowed_outbound_hosts.is_empty() && p.credentials.is_empty())
    }

    /// The loader of this component (at most `max_instances` instances), its policy's
    /// files confined to `--credentials-dir`.
    pub fn loader(&self, max_instances: u32) -> Result<ToolLoader, ConfineError> {
        ToolLoader::new(
            &EngineSettings {
                max_instances,
                ..EngineSettings::default()
            },
            &self.file,
            self.policy.as_deref(),
            self.credentials_dir.as_deref(),
        )
    }
}
