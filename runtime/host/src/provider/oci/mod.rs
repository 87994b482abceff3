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

    /// Fetches the component `spec` pins: from the cache when it holds it (checked as
    /// a pull is, and signed by a key `spec` lists now), else from the registry, then
    /// into the cache.
    pub async fn fetch(&self, spec: &SourceSpec) -> Result<Fetched, OciError> {
        // The files it names are checked (and read) even when the cache holds the
        // component: a source naming a file outside the credentials directory is
        // refused whether or not the registry is reached.
        let access = {
            let (spec, files) = (spec.clone(), self.files.clone());
            blocking(move || registry_auth::Access::for_spec(&spec, &files)).await?
        };
        if let Some(hit) = self.cached(spec).await {
            return Ok(hit);
        }
        let name = spec.display_reference();
        let (artifact, verified) =
            tokio::time::timeout(self.timeout, self.pull_and_verify(spec, access))
                .await
                .map_err(|_| OciError::Timeout {
                    reference: name.clone(),
                    after: self.timeout,
                })??;
        let cache = self.cache.clone();
        let owned = spec.clone();
        blocking(move || {
            if let Some(cache) = &cache
                && let Err(err) = cache.put(&owned.digest, &artifact, &verified.signatures)
            {
                tracing::warn!(cache = %cache.dir().display(), reference = %owned.display_reference(), error = %err,
                    "cannot cache the pulled provider; a restart will pull it again");
            }
            let opened = pull::open(artifact, &owned)?;
            Ok(Fetched {
                component: opened.component,
                layer_digest: opened.layer_digest,
                signers: verified.signers,
                from_cache: false,
            })
        })
        .await
    }

    /// The cached artifact for `spec`, when it passes a pull's checks and one of its
    /// signatures verifies with a key `spec` lists now.
    async fn cached(&self, spec: &SourceSpec) -> Option<Fetched> {
        let cache = self.cache.clone()?;
        let spec = spec.clone();
        blocking(move || {
            let Some((artifact, signatures)) = cache.get(&spec.digest) else {
                return Ok(None);
            };
            let signers = verify::check_stored(&signatures, &spec.digest, &spec.keys);
            if !spec.keys.is_empty() && signers.is_empty() {
                // Signed by keys no longer listed: ask the registry again.
                return Ok(None);
            }
            match pull::open(artifact, &spec) {
                Ok(opened) => Ok(Some(Fetched {
                    component: opened.component,
                    layer_digest: opened.layer_digest,
                    signers,
                    from_cache: true,
                })),
                Err(err) => {
                    tracing::warn!(cache = %cache.dir().display(), reference = %spec.display_reference(), error = %err,
                        "cached provider failed its checks; pulling it again");
                    cache.remove(&spec.digest);
                    Ok(None)
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    async fn pull_and_verify(
        &self,
        spec: &SourceSpec,
        access: registry_auth::Access,
    ) -> Result<(pull::Artifact, verify::Verified), OciError> {
        let client = access.client(spec)?;
        let artifact = pull::pull(&client, &access.auth, spec).await?;
        let verified = if spec.keys.is_empty() {
            verify::Verified {
                signers: Vec::new(),
                signatures: Vec::new(),
            }
        } else {
            verify::signers(access.sigstore_config(), &access.sigstore_auth(), spec).await?
        };
        Ok((artifact, verified))
    }
}

/// Runs `work` (file I/O, hashing, unpacking) on the blocking pool; a panic in it is
/// an error, not a crashed reload.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, OciError> + Send + 'static,
) -> Result<T, OciError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| {
            Err(OciError::Pull {
                reference: String::new(),
                detail: format!("checking the artifact failed: {err}"),
            })
        })
}

/// The component of a `source` read from `NAME.source.yaml`, pulled and verified with
/// the keys its source lists, narrowed to the policy's `requireSignature.keys` and to
/// the operator's `trusted` ones ([`crate::provider::signature`]); a source naming no
/// registry is returned as is.
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
    let mut spec = spec.clone();
    // The policy's keys narrow the source's (or stand for them when it lists none),
    // then the operator's narrow both.
    if let Some(required) = &policy.require_signature {
        spec.keys = if spec.keys.is_empty() {
            required.clone()
        } else {
            effective_keys(
                &spec.path,
                "verify.keys",
                &spec.keys,
                Some(required.as_slice()),
            )?
        };
    }
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
