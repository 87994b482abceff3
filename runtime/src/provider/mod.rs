//! Providers: loading a component, its pool of instances, and the typed API the
//! controllers call.
//!
//! Start with [`ProviderLoader::load`], which turns a `.wasm` file (plus the policy
//! next to it) into a [`Provider`]. A `Provider` mirrors upstream's
//! `cloudprovider.Interface`: each optional interface is an `Option`, present when the
//! component exports it, like upstream's `LoadBalancer() (LoadBalancer, bool)`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use wasm_ccm::engine::EngineSettings;
//! use wasm_ccm::provider::ProviderLoader;
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

mod api;
pub mod cache;
pub mod error;
pub mod inspect;
mod loader;
pub mod native;
mod pool;
mod shared;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use api::{Clusters, Instances, InstancesV2, LoadBalancer, Routes, Zones};
pub use error::{CloudError, LoadError, ProviderError, TrapKind};
pub use inspect::Exports;
pub use loader::{Inspection, ProviderLoader};
pub use shared::SharedProvider;

use crate::policy::Limits;

/// A loaded, initialized provider. Cheap to clone; clones share the instance pool.
#[derive(Clone)]
pub struct Provider {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    path: PathBuf,
    sha256: String,
    exports: Exports,
    has_cluster_id: bool,
    backend: Backend,
}

/// What runs the provider's code.
enum Backend {
    /// A component: a pool of sandboxed instances.
    Component(Arc<pool::Pool>),
    /// Rust in-process ([`native`]).
    Native(Arc<dyn native::NativeInstancesV2>),
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.inner.name)
            .field("path", &self.inner.path)
            .field("sha256", &self.inner.sha256)
            .field("exports", &self.inner.exports)
            .finish_non_exhaustive()
    }
}

impl Provider {
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

    /// `identity.has-cluster-id`, read after `initialize`.
    pub fn has_cluster_id(&self) -> bool {
        self.inner.has_cluster_id
    }

    /// The optional interfaces the component exports.
    pub fn exports(&self) -> Exports {
        self.inner.exports
    }

    /// The limits from the provider's policy.
    pub fn limits(&self) -> &Limits {
        static NATIVE: std::sync::OnceLock<Limits> = std::sync::OnceLock::new();
        match &self.inner.backend {
            Backend::Component(pool) => &pool.limits,
            Backend::Native(_) => NATIVE.get_or_init(Limits::default),
        }
    }

    /// Idle initialized instances in the pool.
    pub fn idle_instances(&self) -> usize {
        match &self.inner.backend {
            Backend::Component(pool) => pool.idle(),
            Backend::Native(_) => 0,
        }
    }

    /// `InstancesV2`, if exported.
    pub fn instances_v2(&self) -> Option<InstancesV2<'_>> {
        self.inner.exports.instances_v2.then_some(InstancesV2(self))
    }

    /// Legacy `Instances`, if exported.
    pub fn instances(&self) -> Option<Instances<'_>> {
        self.inner.exports.instances.then_some(Instances(self))
    }

    /// `Zones`, if exported.
    pub fn zones(&self) -> Option<Zones<'_>> {
        self.inner.exports.zones.then_some(Zones(self))
    }

    /// `LoadBalancer`, if exported.
    pub fn load_balancer(&self) -> Option<LoadBalancer<'_>> {
        self.inner
            .exports
            .load_balancer
            .then_some(LoadBalancer(self))
    }

    /// `Routes`, if exported.
    pub fn routes(&self) -> Option<Routes<'_>> {
        self.inner.exports.routes.then_some(Routes(self))
    }

    /// `Clusters`, if exported.
    pub fn clusters(&self) -> Option<Clusters<'_>> {
        self.inner.exports.clusters.then_some(Clusters(self))
    }

    /// The instance pool; `Err` for a native provider, which has none.
    pub(crate) fn pool(&self, function: &'static str) -> Result<&Arc<pool::Pool>, ProviderError> {
        match &self.inner.backend {
            Backend::Component(pool) => Ok(pool),
            Backend::Native(_) => Err(ProviderError::Cloud {
                provider: self.inner.name.clone(),
                function,
                error: CloudError::NotImplemented,
            }),
        }
    }
}
