//! Compiling a component (off the async runtime, through the compile cache), checking it
//! against the contract, and what `wasm-ccm check` learns of it ([`Inspection`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{Component, InstancePre};

use super::error::LoadError;
use super::inspect::{self, Surface, WasmKind};
use super::loader::{ProviderLoader, is_provider_name};
use super::pool;
use super::{Exports, Indices};
use crate::capabilities::{Embedder, HostState, Shared};
use crate::contract::Version;
use crate::metrics::ProviderLabel;
use crate::policy::{InstanceLimits, Policy};

/// What `wasm-ccm check` reports about a component.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The file inspected.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: usize,
    /// What `identity.provider-name` returned.
    pub provider_name: String,
    /// The contract package and version it was checked against.
    pub package: String,
    /// That version.
    pub version: Version,
    /// The optional interfaces it exports.
    pub exports: Exports,
    /// Everything it imports.
    pub imports: Vec<String>,
}

/// A compiled, contract-checked component, ready to instantiate.
pub(super) struct Compiled {
    pub(super) path: PathBuf,
    pub(super) pre: InstancePre<HostState>,
    pub(super) indices: Indices,
    pub(super) version: Version,
    pub(super) exports: Exports,
    pub(super) surface: Surface,
    pub(super) size: usize,
}

impl ProviderLoader {
    /// Checks a component without initializing it: everything `wasm-ccm check` reports.
    pub async fn inspect(&self, path: &Path) -> Result<Inspection, LoadError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read {
                path: path.to_owned(),
                source,
            })?;
        let compiled = self.compile_off_runtime(path, bytes).await?;
        let provider_name = self.verify(&compiled, &InstanceLimits::default()).await?;
        Ok(Inspection {
            path: compiled.path.clone(),
            size: compiled.size,
            provider_name,
            package: compiled.version.to_string(),
            version: compiled.version,
            exports: compiled.exports,
            imports: compiled.surface.imports.clone(),
        })
    }

    /// [`Self::compile`] on the blocking pool, so compilation never stalls the runtime.
    pub(super) async fn compile_off_runtime(
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
        let functions = self.engine.function_cache();
        let compilation = functions.map(|f| f.begin());
        let component = match &self.cache {
            Some(cache) => cache.component(engine, bytes),
            None => Component::new(engine, bytes),
        };
        if let (Some(compilation), Some(functions)) = (compilation, functions) {
            let stats = compilation.end();
            if stats.compiled + stats.reused > 0 {
                tracing::info!(
                    path = %path.display(),
                    reused = stats.reused,
                    compiled = stats.compiled,
                    cache_bytes = functions.size(),
                    "compiled the component's functions (reused: unchanged since a version loaded before)"
                );
            }
        }
        let component = component.map_err(|source| LoadError::Compile {
            path: path.to_owned(),
            source,
        })?;
        let surface = Surface::of(self.engine.engine(), &component);
        let (version, exports) = surface.check_exports(path)?;
        let pre = self.linker.instantiate_pre(&component).map_err(|source| {
            LoadError::UnsupportedImport {
                path: path.to_owned(),
                imports: surface.unsupported_imports(),
                source,
            }
        })?;
        let indices =
            Indices::new(&pre, version, exports).map_err(|m| LoadError::InterfaceMismatch {
                path: path.to_owned(),
                interface: version.interface_name(m.interface),
                source: m.source,
            })?;
        Ok(Compiled {
            path: path.to_owned(),
            pre,
            indices,
            version,
            exports,
            surface,
            size: bytes.len(),
        })
    }

    /// Instantiates once in a throwaway store (no egress, nothing initialized) to
    /// type-check every export and read the provider name.
    pub(super) async fn verify(
        &self,
        compiled: &Compiled,
        limits: &InstanceLimits,
    ) -> Result<String, LoadError> {
        let path = &compiled.path;
        let name = ProviderLabel::new("verify");
        let egress = self
            .broker
            .egress(name.clone(), Arc::new(Policy::default()))
            .map_err(|source| LoadError::Egress {
                path: path.clone(),
                source,
            })?;
        // Nothing plugged in, no cache: only `provider-name` runs.
        let nothing = Policy {
            instance_limits: InstanceLimits {
                cache_bytes: 0,
                ..limits.clone()
            },
            ..Policy::default()
        };
        let shared = Arc::new(Shared::new(
            &Embedder::default(),
            &nothing,
            &name,
            self.metrics.provider(),
        ));
        let mut store = pool::new_store(
            &self.engine,
            &name,
            &egress,
            self.metrics.provider(),
            limits,
            &shared,
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
                interface: compiled.version.interface_name(m.interface),
                source: m.source,
            }
        })?;
        let name =
            tokio::time::timeout(limits.call_timeout, guests.call_provider_name(&mut store)).await;
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
        if !is_provider_name(&name) {
            return Err(LoadError::Instantiate {
                path: path.clone(),
                source: wasmtime::Error::msg(format!(
                    "provider-name returned {:?}; it must be 1 to 63 lowercase letters, digits, \
                     `-` or `.`, starting and ending with a letter or digit",
                    crate::capabilities::logging::sanitize(&name)
                )),
            });
        }
        Ok(name)
    }
}
