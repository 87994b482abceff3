//! Turning a provider's files into a [`Provider`]: compile (off the async runtime),
//! check the contract, pre-instantiate, create and initialize the first instance.
//! [`ProviderLoader::find`] is start-up's way in, [`ProviderLoader::load_source`] hot
//! swap's; both read the files with [`ProviderSource`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::compile_cache::{CompileCache, sha256_hex};
use super::error::{FindError, LoadError, ProviderError};
use super::pool::{Pool, Prepared};
use super::source::{Fingerprint, ProviderSource};
use super::{Exports, Inner, Provider};
use crate::capabilities::annotations::AnnotationSink;
use crate::capabilities::events::EventSink;
use crate::capabilities::http_egress::{Broker, EgressSettings};
use crate::capabilities::services::ServiceSource;
use crate::capabilities::{Embedder, HostState, Shared};
use crate::contract::{self, Version};
use crate::engine::{EngineError, EngineSettings, WasmEngine};
use crate::metrics::{Metrics, ProviderLabel};
use crate::policy::Policy;

/// Compiles and instantiates providers. One per process: it owns the engine, the
/// linker with the host capabilities, and the pooled HTTP client for egress.
#[derive(Clone)]
pub struct ProviderLoader {
    pub(super) engine: WasmEngine,
    pub(super) linker: Arc<Linker<HostState>>,
    pub(super) broker: Broker,
    pub(super) metrics: Metrics,
    pub(super) cache: Option<CompileCache>,
    pub(super) memory_budget: Option<u64>,
    pub(super) embedder: Embedder,
    /// Pulls the components `NAME.source.yaml` files name.
    pub(super) oci: super::oci::OciFetcher,
    /// `--provider-trusted-keys`: every provider must be signed by one of these.
    pub(super) trusted_keys: Option<Arc<[crate::policy::signing::TrustedKey]>>,
}

/// Whether a version is loaded to serve, or as a hot-swap candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Load {
    Serving,
    Candidate,
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
        if let Some(functions) = engine.function_cache() {
            functions.register(&metrics);
        }
        let mut linker = Linker::new(engine.engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(EngineError::Create)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(EngineError::Create)?;
        // Every contract version's imports: 0.1 components link against 0.1's.
        contract::logging::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .and_then(|()| {
                contract::types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            })
            .and_then(|()| {
                contract::cache::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            })
            .and_then(|()| {
                contract::events::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            })
            .and_then(|()| {
                contract::deadline::add_to_linker::<HostState, HasSelf<HostState>>(
                    &mut linker,
                    |s| s,
                )
            })
            .and_then(|()| {
                contract::annotations::add_to_linker::<HostState, HasSelf<HostState>>(
                    &mut linker,
                    |s| s,
                )
            })
            .and_then(|()| {
                contract::services::add_to_linker::<HostState, HasSelf<HostState>>(
                    &mut linker,
                    |s| s,
                )
            })
            .and_then(|()| {
                crate::capabilities::http_client::client::add_to_linker::<
                    HostState,
                    HasSelf<HostState>,
                >(&mut linker, |s| s)
            })
            .and_then(|()| crate::capabilities::compat::add_to_linker(&mut linker))
            .map_err(EngineError::Create)?;
        let broker = Broker::new(egress, metrics.provider().clone())
            .map_err(|e| EngineError::Create(wasmtime::Error::msg(e.to_string())))?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            broker,
            metrics,
            cache: None,
            memory_budget: None,
            embedder: Embedder::default(),
            // Registry credentials are confined as the policy's credential files are.
            oci: super::oci::OciFetcher::new(egress.credentials_dir.clone()),
            trusted_keys: None,
        })
    }

    /// Sends the events providers record (the `events` import) to `sink`; without one
    /// they are only logged.
    pub fn with_event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.embedder.events = Some(sink);
        self
    }

    /// Sends the Service annotations providers set (the `annotations` import) to
    /// `sink`; without one they are only logged.
    pub fn with_annotation_sink(mut self, sink: Arc<dyn AnnotationSink>) -> Self {
        self.embedder.annotations = Some(sink);
        self
    }

    /// Answers the `services` import from `source`; without one it answers `not-ready`
    /// (nothing can be said of which addresses are taken).
    pub fn with_service_source(mut self, source: Arc<dyn ServiceSource>) -> Self {
        self.embedder.services = Some(source);
        self
    }

    /// Refuses policies whose worst-case memory ([`Policy::worst_case_bytes`]) is over
    /// `bytes` (the controller manager's `--provider-memory-budget`).
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = Some(bytes);
        self
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

    /// Pulls components named by `NAME.source.yaml` with `fetcher` (its cache, deadline
    /// and signature requirement) instead of the default: no cache, credentials only
    /// inside the egress settings' credentials directory.
    pub fn with_oci_fetcher(mut self, fetcher: super::oci::OciFetcher) -> Self {
        self.oci = fetcher;
        self
    }

    /// Requires every provider to carry a cosign signature by one of `keys` (the
    /// operator's `--provider-trusted-keys`): keys a policy or source lists are
    /// narrowed to these ([`super::signature`]).
    pub fn with_trusted_keys(mut self, keys: Vec<crate::policy::signing::TrustedKey>) -> Self {
        self.trusted_keys = Some(keys.into());
        self
    }

    /// The engine providers run on.
    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    /// Loads `path` with the policy next to it and `cloud_config` for `initialize`.
    pub async fn load(&self, path: &Path, cloud_config: Vec<u8>) -> Result<Provider, LoadError> {
        self.load_with_policy(path, None, cloud_config).await
    }

    /// [`Self::load`] with the policy at `policy` when given, else the one next to the
    /// component. Its files are read as this loader's broker allows: the tools load
    /// through [`super::ToolLoader`], which confines them.
    pub async fn load_with_policy(
        &self,
        path: &Path,
        policy: Option<&Path>,
        cloud_config: Vec<u8>,
    ) -> Result<Provider, LoadError> {
        let source = Self::read_source(path, policy).await?;
        self.load_source(path, source.with_cloud_config(cloud_config))
            .await
    }

    /// Reads the component at `path` with the policy at `policy` when given, else the
    /// one next to it (no cloud config), on the blocking pool.
    pub(super) async fn read_source(
        path: &Path,
        policy: Option<&Path>,
    ) -> Result<ProviderSource, LoadError> {
        let owned = path.to_owned();
        let policy_file = policy.map(Path::to_owned);
        let source = tokio::task::spawn_blocking(move || {
            let source = ProviderSource::read(&owned, None)?;
            match policy_file {
                Some(policy) => source.with_policy_file(&policy),
                None => Ok(source),
            }
        })
        .await
        .expect("reading provider files panicked")?;
        Ok(source)
    }

    /// Finds the provider named `name` in `dir` and loads it: `NAME.wasm` (or the
    /// component `NAME.source.yaml` names) first, then
    /// any other component declaring that name. Each candidate is read once, with the
    /// policy next to it and the cloud config at `cloud_config`; what was read is what
    /// loads, and its [`Fingerprint`] is returned so hot swap can compare later reads.
    pub async fn find(
        &self,
        dir: &Path,
        name: &str,
        cloud_config: Option<&Path>,
    ) -> Result<(Provider, Fingerprint), FindError> {
        let mut candidates: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| FindError::Dir {
                path: dir.to_owned(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                if p.extension().is_some_and(|x| x == "wasm") {
                    return Some(p);
                }
                // `NAME.source.yaml` stands for `NAME.wasm`, which its source names.
                let file = p.file_name()?.to_str()?;
                let name = file.strip_suffix(".source.yaml")?;
                (!name.is_empty()).then(|| p.with_file_name(format!("{name}.wasm")))
            })
            .collect();
        candidates.sort();
        candidates.dedup();
        candidates.sort_by_key(|p| p.file_stem().is_none_or(|s| s != name));
        let mut found = Vec::new();
        for path in candidates {
            // The file named after the provider must load: its error is the answer.
            let named = path.file_stem().is_some_and(|s| s == name);
            let loaded = match ProviderSource::read(&path, cloud_config) {
                Ok(source) => {
                    let fingerprint = source.fingerprint.clone();
                    self.load_named(&path, source, name)
                        .await
                        .map(|provider| (provider, fingerprint))
                }
                Err(err) => Err(err.into()),
            };
            match loaded {
                Ok(found) => return Ok(found),
                Err(LoadError::WrongName { found: other, .. }) if !named => {
                    found.push(format!("{other} ({})", path.display()))
                }
                Err(err) if named => return Err(err.into()),
                Err(err) => {
                    tracing::warn!(file = %path.display(), error = %err, "skipping invalid provider component");
                    found.push(format!("invalid: {}", path.display()));
                }
            }
        }
        Err(FindError::NotFound {
            name: name.into(),
            dir: dir.to_owned(),
            found: if found.is_empty() {
                "nothing".into()
            } else {
                found.join(", ")
            },
        })
    }

    /// Loads one version read by [`ProviderSource::read`] as the component at `path`
    /// (which names it in errors and logs).
    pub async fn load_source(
        &self,
        path: &Path,
        source: ProviderSource,
    ) -> Result<Provider, LoadError> {
        self.load_source_as(path, source, None, Load::Serving).await
    }

    /// [`Self::load_source`] for a component that must declare `name`: one declaring
    /// another is refused before any instance of it runs (so it cannot put a name of
    /// its choosing on metrics and logs).
    pub async fn load_named(
        &self,
        path: &Path,
        source: ProviderSource,
        name: &str,
    ) -> Result<Provider, LoadError> {
        self.load_source_as(path, source, Some(name), Load::Serving)
            .await
    }

    /// [`Self::load_named`] for a hot-swap candidate: its metrics and logs say
    /// `provider="candidate"` until [`Provider::accept`] puts its name on them, so a
    /// version that is refused never mixes into the serving version's series.
    pub async fn load_candidate(
        &self,
        path: &Path,
        source: ProviderSource,
        name: &str,
    ) -> Result<Provider, LoadError> {
        self.load_source_as(path, source, Some(name), Load::Candidate)
            .await
    }

    async fn load_source_as(
        &self,
        path: &Path,
        source: ProviderSource,
        expected: Option<&str>,
        load: Load,
    ) -> Result<Provider, LoadError> {
        let policy = source.policy(path)?;
        self.load_source_under(path, source, policy, expected, load)
            .await
    }

    /// Loads `source` under `policy` (its own policy, or what the tools' confinement
    /// makes of it: [`super::ToolLoader`]).
    pub(super) async fn load_source_under(
        &self,
        path: &Path,
        source: ProviderSource,
        policy: Policy,
        expected: Option<&str>,
        load: Load,
    ) -> Result<Provider, LoadError> {
        self.check_policy(path, &policy)?;
        let source =
            super::oci::resolve(&self.oci, self.trusted_keys.as_deref(), source, &policy).await?;
        super::signature::check_source(path, &source, &policy, self.trusted_keys.as_deref())?;
        self.load_bytes(path, source, policy, expected, load).await
    }

    /// Checks `policy` (of the component at `path`) against this host: its worst-case
    /// memory against the budget, its instance memory against the engine's maximum.
    pub fn check_policy(&self, path: &Path, policy: &Policy) -> Result<(), LoadError> {
        if let Some(budget) = self.memory_budget
            && policy.worst_case_bytes() > budget
        {
            return Err(LoadError::Policy(crate::policy::PolicyError::Invalid {
                path: Policy::path_for(path),
                field: "limits".into(),
                reason: format!(
                    "its worst case, {} MiB (poolSize x memoryMiB + cacheKiB + maxConcurrentRequests x \
                     (maxResponseBytes + {} MiB of request body)), is over this host's provider \
                     memory budget of {} MiB (--provider-memory-budget)",
                    policy.worst_case_bytes() >> 20,
                    crate::policy::MAX_REQUEST_BODY_BYTES >> 20,
                    budget >> 20
                ),
            }));
        }
        let most = self.engine.max_memory_bytes();
        if policy.instance_limits.memory_bytes > most {
            return Err(LoadError::Policy(crate::policy::PolicyError::Invalid {
                path: Policy::path_for(path),
                field: "limits.memoryMiB".into(),
                reason: format!(
                    "{} MiB is over this host's per-instance maximum of {} MiB",
                    policy.instance_limits.memory_bytes >> 20,
                    most >> 20
                ),
            }));
        }
        Ok(())
    }

    /// Loads a component from memory; `path` names it in errors.
    async fn load_bytes(
        &self,
        path: &Path,
        source: ProviderSource,
        policy: Policy,
        expected: Option<&str>,
        load: Load,
    ) -> Result<Provider, LoadError> {
        let ProviderSource {
            component: bytes,
            cloud_config,
            ..
        } = source;
        let sha256 = sha256_hex(&bytes);
        let compiled = self.compile_off_runtime(path, bytes).await?;
        let limits = policy.instance_limits.clone();
        let name = self.verify(&compiled, &limits).await?;
        if let Some(expected) = expected
            && name != expected
        {
            return Err(LoadError::WrongName {
                path: path.to_owned(),
                found: name,
                expected: expected.to_owned(),
            });
        }
        let label = ProviderLabel::new(match load {
            Load::Candidate => ProviderLabel::CANDIDATE,
            Load::Serving => &name,
        });
        let shared = Arc::new(Shared::new(
            &self.embedder,
            &policy,
            &label,
            self.metrics.provider(),
        ));
        let egress = self
            .broker
            .egress(label.clone(), Arc::new(policy))
            .map_err(|source| LoadError::Egress {
                path: path.to_owned(),
                source,
            })?;
        let pool = Arc::new(Pool::new(
            label,
            Prepared {
                engine: self.engine.clone(),
                pre: compiled.pre,
                indices: compiled.indices,
            },
            egress,
            self.metrics.provider().clone(),
            limits,
            cloud_config.into(),
            shared,
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
                serial: super::next_serial(),
                name,
                path: path.to_owned(),
                sha256,
                version: compiled.version,
                exports: compiled.exports,
                declined: Exports::NONE,
                has_cluster_id: false,
                pool,
            }),
        };
        let has_cluster_id = provider.call_has_cluster_id().await.map_err(init_error)?;
        let declined_names = provider
            .call_declined_interfaces()
            .await
            .map_err(init_error)?;
        let declined = declined_exports(path, provider.exports(), &declined_names)?;
        let inner =
            Arc::get_mut(&mut provider.inner).expect("the provider has not been shared yet");
        inner.has_cluster_id = has_cluster_id;
        inner.declined = declined;
        inner.exports = declined.iter().fold(inner.exports, Exports::without);
        if declined != Exports::NONE {
            tracing::info!(
                provider = provider.name(),
                declined = ?declined.names(),
                "the provider's configuration declines these interfaces; their controllers do not run"
            );
        }
        if compiled.version.is_deprecated() {
            tracing::warn!(
                provider = provider.name(),
                path = %path.display(),
                contract = %compiled.version,
                current = %Version::CURRENT,
                "provider built against an older contract version; the host adapts it, \
                 rebuild it against the current one for batched calls, the cache and events"
            );
        }
        tracing::info!(
            provider = provider.name(),
            path = %path.display(),
            sha256 = provider.sha256(),
            contract = %compiled.version,
            exports = ?provider.exports().names(),
            size = compiled.size,
            "provider loaded"
        );
        Ok(provider)
    }
}

/// The exports `names` (a provider's `identity.declined-interfaces`) decline: each
/// must be an optional interface the component exports, so a typo cannot silently
/// leave an interface on.
fn declined_exports(path: &Path, exports: Exports, names: &[String]) -> Result<Exports, LoadError> {
    let mut declined = Exports::NONE;
    for name in names {
        let interface = super::Interface::from_wit_name(name)
            .filter(|i| exports.contains(*i))
            .ok_or_else(|| LoadError::Declined {
                path: path.to_owned(),
                name: crate::capabilities::logging::sanitize(name),
                exports: exports.names().join(", "),
            })?;
        declined = declined.with(interface);
    }
    Ok(declined)
}

/// A provider name: what `--cloud-provider` names, the scheme of provider IDs, a label
/// of every metric. 1 to 63 of `[a-z0-9.-]`, starting and ending alphanumeric.
pub(super) fn is_provider_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&name.len())
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

#[cfg(test)]
mod tests {
    use super::is_provider_name;

    #[test]
    fn only_exported_interfaces_can_be_declined() {
        use super::super::{Exports, Interface};
        let path = std::path::Path::new("p.wasm");
        let exports: Exports = [Interface::InstancesV2, Interface::LoadBalancer]
            .into_iter()
            .collect();
        let declined = super::declined_exports(path, exports, &["load-balancer".into()]).unwrap();
        assert!(declined.contains(Interface::LoadBalancer));
        assert!(!declined.contains(Interface::InstancesV2));
        for bad in ["routes", "identity", "load_balancer", ""] {
            let err = super::declined_exports(path, exports, &[bad.into()]).unwrap_err();
            assert!(
                err.to_string().contains("instances-v2, load-balancer"),
                "{err}"
            );
        }
    }

    #[test]
    fn provider_names_are_dns_like() {
        for ok in ["aws", "simcloud", "open-stack", "a", "cloud.v2"] {
            assert!(is_provider_name(ok), "{ok}");
        }
        for bad in [
            "",
            "AWS",
            "a b",
            "a/b",
            "-a",
            "a-",
            "x\u{1b}[2J",
            "a\nb",
            &"a".repeat(64),
        ] {
            assert!(!is_provider_name(bad), "{bad:?}");
        }
    }
}
