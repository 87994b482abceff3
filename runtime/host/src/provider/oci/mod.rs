//! Providers from an OCI registry: `NAME.source.yaml` in the providers directory names
//! a component by digest, and [`OciFetcher::fetch`] pulls it, checks the digests,
//! verifies its cosign signature and keeps it in a disk cache.
//!
//! The order is fixed: the manifest must hash to the pinned digest, its one layer
//! (media type `application/wasm`) must fit `maxSizeMiB` and hash to the manifest's
//! layer digest, and with `verify.keys` a signature of the digest must verify with one
//! of them. Only then do the loader's usual checks (contract, policy, canary) run.
//! Every step runs under one deadline ([`OciFetcher::with_timeout`]): a registry that
//! hangs is an error, never a stuck reload.
//!
//! ```
//! # async fn demo(dir: &std::path::Path) -> Result<(), wasm_ccm_host::provider::oci::OciError> {
//! use wasm_ccm_host::provider::oci::{OciFetcher, SourceSpec};
//! let spec = SourceSpec::parse(
//!     "reference: oci://registry.example.com/p/aws@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
//!     std::path::Path::new("/etc/wasm-ccm/providers/aws.source.yaml"),
//! )?;
//! let fetcher = OciFetcher::new(Some(dir.join("credentials"))).with_cache(dir.join("cache"));
//! let fetched = fetcher.fetch(&spec).await?;
//! println!("{} bytes, signed by {:?}", fetched.component.len(), fetched.signers);
//! # Ok(()) }
//! ```

mod cache;
mod error;
mod pull;
mod push;
mod registry_auth;
mod spec;
mod verify;

use std::path::PathBuf;
use std::time::Duration;

pub use error::OciError;
pub use pull::{WASM_CONFIG_MEDIA_TYPE, WASM_MEDIA_TYPE};
pub use push::push;
pub use registry_auth::FileAccess;
pub use spec::{DEFAULT_MAX_SIZE_MIB, SourceSpec, TrustedKey, source_path};

/// How long a whole fetch (manifest, layer, signatures) may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A fetched component.
#[derive(Debug)]
pub struct Fetched {
    /// The component's bytes.
    pub component: Vec<u8>,
    /// The layer's digest.
    pub layer_digest: String,
    /// The ids of the trusted keys whose signatures verified (empty without
    /// `verify.keys`).
    pub signers: Vec<String>,
    /// Whether it came from the disk cache.
    pub from_cache: bool,
}

/// Pulls and verifies the components `NAME.source.yaml` files name.
#[derive(Debug, Clone)]
pub struct OciFetcher {
    files: FileAccess,
    cache: Option<cache::Cache>,
    timeout: Duration,
}

impl OciFetcher {
    /// A fetcher reading registry credentials and CA bundles only inside
    /// `credentials_dir` (none at all without one), with no disk cache.
    pub fn new(credentials_dir: Option<PathBuf>) -> Self {
        Self::reading(match credentials_dir {
            Some(dir) => FileAccess::Inside(dir),
            None => FileAccess::Nothing,
        })
    }

    /// A fetcher reading the files a source names as `files` allows.
    pub fn reading(files: FileAccess) -> Self {
        Self {
            files,
            cache: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Keeps pulled components in `dir` (private to this process, e.g. an `emptyDir`).
    pub fn with_cache(mut self, dir: PathBuf) -> Self {
        self.cache = Some(cache::Cache::new(dir));
        self
    }

    /// Bounds a whole fetch.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Fetches the component `spec` pins: from the cache when it holds it (signed by a
    /// key `spec` still trusts), else from the registry, then into the cache.
    pub async fn fetch(&self, spec: &SourceSpec) -> Result<Fetched, OciError> {
        // The files it names are checked (and read) even when the cache holds the
        // component: a source naming a file outside the credentials directory is
        // refused whether or not the registry is reached.
        let access = registry_auth::Access::for_spec(spec, &self.files)?;
        if let Some(hit) = self.cached(spec) {
            return Ok(hit);
        }
        let name = spec.display_reference();
        let fetched = tokio::time::timeout(self.timeout, self.pull_and_verify(spec, access))
            .await
            .map_err(|_| OciError::Timeout {
                reference: name.clone(),
                after: self.timeout,
            })??;
        if let Some(cache) = &self.cache {
            let entry = cache::Entry {
                component: fetched.component,
                layer_digest: fetched.layer_digest,
                signers: fetched.signers,
            };
            if let Err(err) = cache.put(&spec.digest, &name, &entry) {
                tracing::warn!(cache = %cache.dir().display(), reference = %name, error = %err,
                    "cannot cache the pulled provider; a restart will pull it again");
            }
            return Ok(Fetched {
                component: entry.component,
                layer_digest: entry.layer_digest,
                signers: entry.signers,
                from_cache: false,
            });
        }
        Ok(fetched)
    }

    /// The cached entry for `spec`, when one of its signers is still trusted.
    fn cached(&self, spec: &SourceSpec) -> Option<Fetched> {
        let entry = self.cache.as_ref()?.get(&spec.digest)?;
        let signers: Vec<String> = entry
            .signers
            .iter()
            .filter(|id| spec.keys.iter().any(|key| &key.id == *id))
            .cloned()
            .collect();
        if !spec.keys.is_empty() && signers.is_empty() {
            // Verified with keys no longer trusted: check the registry again.
            return None;
        }
        Some(Fetched {
            component: entry.component,
            layer_digest: entry.layer_digest,
            signers,
            from_cache: true,
        })
    }

    async fn pull_and_verify(
        &self,
        spec: &SourceSpec,
        access: registry_auth::Access,
    ) -> Result<Fetched, OciError> {
        let client = access.client(spec)?;
        let pulled = pull::pull(&client, &access.auth, spec).await?;
        let signers = if spec.keys.is_empty() {
            Vec::new()
        } else {
            verify::signers(access.sigstore_config(), &access.sigstore_auth(), spec).await?
        };
        Ok(Fetched {
            component: pulled.component,
            layer_digest: pulled.layer_digest,
            signers,
            from_cache: false,
        })
    }
}

/// The component of a `source` read from `NAME.source.yaml`, pulled and verified with
/// the keys its source lists narrowed to the operator's `trusted` ones (and required
/// when `policy` asks for a signature: [`crate::provider::signature`]); a source
/// holding its component is returned as is.
pub(crate) async fn resolve(
    fetcher: &OciFetcher,
    trusted: Option<&[TrustedKey]>,
    mut source: super::ProviderSource,
    policy: &crate::policy::Policy,
) -> Result<super::ProviderSource, super::LoadError> {
    use super::signature::{SignatureError, effective_keys};
    let Some(spec) = &source.remote else {
        return Ok(source);
    };
    if !source.component.is_empty() {
        return Ok(source);
    }
    let mut spec = spec.clone();
    spec.keys = effective_keys(&spec.path, "verify.keys", &spec.keys, trusted)?;
    if spec.keys.is_empty() && policy.require_signature.is_some() {
        return Err(SignatureError::Unverified { path: spec.path }.into());
    }
    let fetched = fetcher.fetch(&spec).await?;
    tracing::info!(
        reference = %format!("oci://{}", spec.display_reference()),
        layer = %fetched.layer_digest,
        signed_by = %if fetched.signers.is_empty() { "-".to_owned() } else { fetched.signers.join(",") },
        from_cache = fetched.from_cache,
        "provider component pulled and verified"
    );
    source.component = fetched.component;
    Ok(source)
}
