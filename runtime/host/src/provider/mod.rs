//! Providers: reading a version's files, loading the component, its pool of
//! instances, and the typed handles to call it.
//!
//! Start with [`ProviderLoader::load`], which turns a `.wasm` file (plus the policy
//! next to it) into a [`Provider`]; start-up ([`ProviderLoader::find`]) and hot swap
//! ([`ProviderLoader::load_source`]) read the files with the same
//! [`ProviderSource`]; the tools (`check`, `call`, `conformance`, the playground) load
//! through [`ToolLoader`], which confines the files a policy names as the controller
//! manager's `--credentials-dir` does. A `Provider` mirrors upstream's
//! `cloudprovider.Interface`: each optional interface is an `Option`, present when the
//! component exports it, like upstream's `LoadBalancer() (LoadBalancer, bool)`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use wasm_ccm_host::engine::EngineSettings;
//! use wasm_ccm_host::provider::ProviderLoader;
//!
//! let loader = ProviderLoader::new(&EngineSettings::default())?;
//! let provider = loader
//!     .load("/etc/wasm-ccm/providers/simcloud.wasm".as_ref(), b"{}".to_vec())
//!     .await?;
//! if let Some(lb) = provider.load_balancer() {
//!     // lb.ensure_load_balancer("kubernetes", &service, &nodes).await?
//! #   let _ = lb;
//! }
//! # Ok(()) }
//! ```

pub(crate) mod call;
#[macro_use]
mod interface_table;
mod compile;
pub mod compile_cache;
mod confined;
mod error;
mod inspect;
pub mod interfaces;
mod loader;
pub mod oci;
mod pool;
mod shared;
pub mod signature;
mod source;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use compile::Inspection;
pub use confined::{ConfineError, CredentialFiles, ToolLoader};
pub use error::{CloudError, FindError, LoadError, ProviderError, TrapKind};
pub(crate) use interface_table::ContractMismatch;
pub use interface_table::Exports;
pub use interfaces::{
    Clusters, Instances, InstancesBatch, InstancesV2, Interface, LoadBalancer, LoadBalancerName,
    Routes, Zones,
};
pub(crate) use interfaces::{Guests, Indices};
pub use loader::ProviderLoader;
pub use shared::SharedProvider;
pub use source::{Fingerprint, ProviderSource, SourceError};

/// Creates `provider`'s counters of rare events at 0 with every label value they can
/// take: traps by [`TrapKind`], refused requests by
/// [`Denial`](crate::capabilities::http_egress::Denial) reason, the shared cache.
pub fn initialize_metrics(metrics: &crate::metrics::ProviderMetrics, provider: &str) {
    let kinds = TrapKind::ALL.map(TrapKind::as_str);
    metrics.initialize(
        provider,
        &kinds,
        &crate::capabilities::http_egress::Denial::reasons().collect::<Vec<_>>(),
    );
}

use crate::policy::InstanceLimits;

/// A loaded, initialized provider. Cheap to clone; clones share the instance pool.
#[derive(Clone)]
pub struct Provider {
    inner: Arc<Inner>,
}

struct Inner {
    serial: u64,
    name: String,
    path: PathBuf,
    sha256: String,
    version: crate::contract::Version,
    exports: Exports,
    declined: Exports,
    has_cluster_id: bool,
    pool: Arc<pool::Pool>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.inner.name)
            .field("path", &self.inner.path)
            .field("sha256", &self.inner.sha256)
            .field("contract", &self.inner.version)
            .field("exports", &self.inner.exports)
            .finish_non_exhaustive()
    }
}

/// Serials of loaded versions: one per load, never reused in a process.
fn next_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Provider {
    /// This loaded version's serial, unique in the process: two loads of the same
    /// files (or of the same component with another policy or cloud config) differ.
    pub fn serial(&self) -> u64 {
        self.inner.serial
    }

    /// `identity.provider-name`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The file the provider was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The hex SHA-256 of the component's bytes.
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// The contract version the component was built against.
    pub fn contract_version(&self) -> crate::contract::Version {
        self.inner.version
    }

    /// The bytes held now in the version's shared cache (the `cache` import).
    pub fn cache_bytes(&self) -> usize {
        self.inner.pool.shared().cache.bytes()
    }

    /// `identity.has-cluster-id`, read after `initialize`.
    pub fn has_cluster_id(&self) -> bool {
        self.inner.has_cluster_id
    }

    /// The optional interfaces the component exports and serves: those its
    /// configuration declines (`identity.declined-interfaces`) are not among them.
    pub fn exports(&self) -> Exports {
        self.inner.exports
    }

    /// The exported interfaces its configuration declines (contract 0.3's
    /// `identity.declined-interfaces`, read after `initialize`).
    pub fn declined(&self) -> Exports {
        self.inner.declined
    }

    /// The instance limits from the provider's policy.
    pub fn limits(&self) -> &InstanceLimits {
        &self.inner.pool.limits
    }

    /// Idle initialized instances in the pool.
    pub fn idle_instances(&self) -> usize {
        self.inner.pool.idle()
    }

    /// Puts the egress part of `policy` (allowlist, credentials, request limits, TLS)
    /// in force for this running version, from its next request on. Hot swap uses it
    /// so a tightened or removed policy applies even when the component it came with is
    /// refused. If the rules cannot be built, all egress is denied (fail closed) and
    /// the error says why. Instance limits (pool size, memory, call timeout) keep the
    /// values the version was loaded with.
    pub fn apply_egress_policy(
        &self,
        policy: crate::policy::Policy,
    ) -> Result<(), crate::capabilities::http_egress::BrokerError> {
        self.inner.pool.egress().replace_policy(Arc::new(policy))
    }

    /// Puts the provider's name on the metrics and logs of a version loaded with
    /// [`ProviderLoader::load_candidate`] (labelled `candidate` until now).
    pub fn accept(&self) {
        self.inner.pool.label.set(&self.inner.name);
    }

    /// The instance pool.
    pub(crate) fn pool(&self) -> &Arc<pool::Pool> {
        &self.inner.pool
    }
}
