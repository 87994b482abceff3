//! Turning a `.wasm` file into a [`Provider`]: compile (off the async runtime),
//! check the contract, pre-instantiate, create and initialize the first instance.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{Component, HasSelf, InstancePre, Linker};

use super::cache::{CompileCache, sha256_hex};
use super::error::{LoadError, ProviderError};
use super::inspect::{self, Exports, Surface, WasmKind};
use super::pool::{self, Indices, Pool, Prepared};
use super::{Backend, Inner, Provider};
use crate::bindings::{
    self, clusters, identity, instances, instances_v2, load_balancer, routes, zones,
};
use crate::capabilities::HostState;
use crate::capabilities::http_egress::{Broker, EgressSettings};
use crate::engine::{EngineError, EngineSettings, WasmEngine};
use crate::metrics::Metrics;
use crate::policy::{Limits, Policy};

/// Compiles and instantiates providers. One per process: it owns the engine, the
/// linker with the host capabilities, and the pooled HTTP client for egress.
#[derive(Clone)]
pub struct ProviderLoader {
    engine: WasmEngine,
    linker: Arc<Linker<HostState>>,
    broker: Broker,
    metrics: Metrics,
    cache: Option<CompileCache>,
}

/// What `wasm-ccm check` reports about a component.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub path: PathBuf,
    pub size: usize,
    pub provider_name: String,
    pub package: String,
    pub exports: Exports,
    pub imports: Vec<String>,
}

/// A compiled, contract-checked component, ready to instantiate.
struct Compiled {
    path: PathBuf,
    pre: InstancePre<HostState>,
    indices: Indices,
    exports: Exports,
    surface: Surface,
    size: usize,
}

impl ProviderLoader {
    /// Builds the engine, the linker and the egress broker with default egress
    /// settings and a fresh metrics registry.
    pub fn new(settings: &EngineSettings) -> Result<Self, EngineError> {
        Self::with_options(settings, &EgressSettings::default(), Metrics::new())
    }

    /// Builds the loader recording into `metrics`.
    pub fn with_options(
        settings: &EngineSettings,
        egress: &EgressSettings,
        metrics: Metrics,
    ) -> Result<Self, EngineError> {
        let engine = WasmEngine::new(settings)?;
        let mut linker = Linker::new(engine.engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(EngineError::Create)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(EngineError::Create)?;
        bindings::logging::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(EngineError::Create)?;
        bindings::types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(EngineError::Create)?;
        let broker = Broker::new(egress, metrics.provider().clone())
            .map_err(|e| EngineError::Create(wasmtime::Error::msg(e.to_string())))?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            broker,
            metrics,
            cache: None,
        })
    }

    /// Keeps compiled components in `cache`, so loading known content skips compiling.
    pub fn with_compile_cache(mut self, cache: CompileCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The metrics the loader's providers record into.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The egress broker.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// The engine providers run on.
    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    /// Loads `path` with the policy next to it and `cloud_config` for `initialize`.
    pub async fn load(&self, path: &Path, cloud_config: Vec<u8>) -> Result<Provider, LoadError> {
        let policy = Policy::load_for(path)?;
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read {
                path: path.to_owned(),
                source,
            })?;
        self.load_bytes(path, bytes, policy, cloud_config).await
    }

    /// Loads a component from memory; `path` names it in errors.
    pub async fn load_bytes(
        &self,
        path: &Path,
        bytes: Vec<u8>,
        policy: Policy,
        cloud_config: Vec<u8>,
    ) -> Result<Provider, LoadError> {
        let sha256 = sha256_hex(&bytes);
        let compiled = self.compile_off_runtime(path, bytes).await?;
        let limits = policy.limits.clone();
        let name = self.verify(&compiled, &limits).await?;
        let provider_name: Arc<str> = name.clone().into();
        let egress = self
            .broker
            .egress(provider_name.clone(), Arc::new(policy))
            .map_err(|source| LoadError::Egress {
                path: path.to_owned(),
                source,
            })?;
        let pool = Arc::new(Pool::new(
            provider_name,
            Prepared {
                engine: self.engine.clone(),
                pre: compiled.pre,
                indices: compiled.indices,
            },
            egress,
            self.metrics.provider().clone(),
            limits,
            cloud_config.into(),
        ));
        let init_error = |source: ProviderError| LoadError::Initialize {
            path: path.to_owned(),
            source,
        };
        // The first instance proves `initialize` succeeds and warms the pool.
        let lease = pool.acquire().await.map_err(init_error)?;
        drop(lease);
        let mut provider = Provider {
            inner: Arc::new(Inner {
                name,
                path: path.to_owned(),
                sha256,
                exports: compiled.exports,
                has_cluster_id: false,
                backend: Backend::Component(pool),
            }),
        };
        let has_cluster_id = provider.call_has_cluster_id().await.map_err(init_error)?;
        Arc::get_mut(&mut provider.inner)
            .expect("the provider has not been shared yet")
            .has_cluster_id = has_cluster_id;
        tracing::info!(
            provider = provider.name(),
            path = %path.display(),
            sha256 = provider.sha256(),
            exports = ?provider.exports().names(),
            size = compiled.size,
            "provider loaded"
        );
        Ok(provider)
    }

    /// Checks a component without initializing it: everything `wasm-ccm check` reports.
    pub async fn inspect(&self, path: &Path) -> Result<Inspection, LoadError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read {
                path: path.to_owned(),
                source,
            })?;
        let compiled = self.compile_off_runtime(path, bytes).await?;
        let provider_name = self.verify(&compiled, &Limits::default()).await?;
        Ok(Inspection {
            path: compiled.path.clone(),
            size: compiled.size,
            provider_name,
            package: format!("{}@{}", bindings::PACKAGE, bindings::PACKAGE_VERSION),
            exports: compiled.exports,
            imports: compiled.surface.imports.clone(),
        })
    }

    /// [`Self::compile`] on the blocking pool, so compilation never stalls the runtime.
    async fn compile_off_runtime(
        &self,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<Compiled, LoadError> {
        let this = self.clone();
        let owned_path = path.to_owned();
        tokio::task::spawn_blocking(move || this.compile(&owned_path, &bytes))
            .await
            .expect("compile task panicked")
    }

    /// Compiles and checks the contract statically. CPU-bound: call off the runtime.
    fn compile(&self, path: &Path, bytes: &[u8]) -> Result<Compiled, LoadError> {
        if inspect::sniff(path, bytes)? == WasmKind::CoreModule {
            return Err(LoadError::CoreModule {
                path: path.to_owned(),
            });
        }
        let engine = self.engine.engine();
        let component = match &self.cache {
            Some(cache) => cache.component(engine, bytes),
            None => Component::new(engine, bytes),
        }
        .map_err(|source| LoadError::Compile {
            path: path.to_owned(),
            source,
        })?;
        let surface = Surface::of(self.engine.engine(), &component);
        let exports = surface.check_exports(path)?;
        let pre = self.linker.instantiate_pre(&component).map_err(|source| {
            LoadError::UnsupportedImport {
                path: path.to_owned(),
                imports: surface.unsupported_imports(),
                source,
            }
        })?;
        let mismatch = |interface: &str| {
            let path = path.to_owned();
            let interface = inspect::interface_name(interface);
            move |source| LoadError::InterfaceMismatch {
                path,
                interface,
                source,
            }
        };
        // The export lookups of each optional interface the component exports.
        macro_rules! optional {
            ($flag:ident, $module:ident, $name:literal) => {
                exports
                    .$flag
                    .then(|| $module::GuestIndices::new(&pre))
                    .transpose()
                    .map_err(mismatch($name))?
            };
        }
        let indices = Indices {
            identity: identity::GuestIndices::new(&pre).map_err(mismatch("identity"))?,
            instances_v2: optional!(instances_v2, instances_v2, "instances-v2"),
            instances: optional!(instances, instances, "instances"),
            zones: optional!(zones, zones, "zones"),
            load_balancer: optional!(load_balancer, load_balancer, "load-balancer"),
            routes: optional!(routes, routes, "routes"),
            clusters: optional!(clusters, clusters, "clusters"),
        };
        Ok(Compiled {
            path: path.to_owned(),
            pre,
            indices,
            exports,
            surface,
            size: bytes.len(),
        })
    }

    /// Instantiates once in a throwaway store (no egress, nothing initialized) to
    /// type-check every export and read the provider name.
    async fn verify(&self, compiled: &Compiled, limits: &Limits) -> Result<String, LoadError> {
        let path = &compiled.path;
        let name: Arc<str> = "verify".into();
        let egress = self
            .broker
            .egress(name.clone(), Arc::new(Policy::default()))
            .map_err(|source| LoadError::Egress {
                path: path.clone(),
                source,
            })?;
        let mut store = pool::new_store(
            &self.engine,
            &name,
            &egress,
            self.metrics.provider(),
            limits,
        );
        let instance = tokio::time::timeout(
            limits.call_timeout,
            compiled.pre.instantiate_async(&mut store),
        )
        .await
        .map_err(|_| LoadError::Instantiate {
            path: path.clone(),
            source: wasmtime::Error::msg(format!(
                "instantiation did not finish within {:?}",
                limits.call_timeout
            )),
        })?
        .map_err(|source| LoadError::Instantiate {
            path: path.clone(),
            source,
        })?;
        let guests = compiled.indices.load(&mut store, &instance).map_err(|m| {
            LoadError::InterfaceMismatch {
                path: path.clone(),
                interface: inspect::interface_name(m.interface),
                source: m.source,
            }
        })?;
        let name = tokio::time::timeout(
            limits.call_timeout,
            guests.identity.call_provider_name(&mut store),
        )
        .await;
        let name = match name {
            Ok(Ok(name)) => name,
            Ok(Err(trap)) => {
                return Err(LoadError::Instantiate {
                    path: path.clone(),
                    source: trap,
                });
            }
            Err(_) => {
                return Err(LoadError::Instantiate {
                    path: path.clone(),
                    source: wasmtime::Error::msg("provider-name did not return in time"),
                });
            }
        };
        if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '/') {
            return Err(LoadError::Instantiate {
                path: path.clone(),
                source: wasmtime::Error::msg(format!(
                    "provider-name returned {name:?}; it must be non-empty without spaces or `/`"
                )),
            });
        }
        Ok(name)
    }
}
