//! The controller manager: load the provider, serve health and metrics, take the
//! leader lease, run the enabled controllers.

pub mod health;
pub mod leader;
pub mod options;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::controllers::{self, Context};
use crate::engine::EngineSettings;
use crate::hot_swap::{self, ReloadReporter, Reloader, Requirement, Snapshot, report};
use crate::metrics::Metrics;
use crate::provider::cache::CompileCache;
use crate::provider::{LoadError, Provider, ProviderLoader, SharedProvider};
pub use options::DaemonArgs;

/// Why the controller manager stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A flag is missing or invalid.
    #[error("{0}")]
    Flags(String),
    /// No usable Kubernetes client configuration.
    #[error("kubernetes client configuration: {0}")]
    KubeConfig(String),
    /// The provider directory cannot be read.
    #[error("cannot read providers directory {path}: {source}")]
    ProvidersDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No component in the directory has the requested provider name.
    #[error("no provider named {name:?} in {dir} (found: {found})")]
    ProviderNotFound {
        name: String,
        dir: PathBuf,
        found: String,
    },
    /// The provider failed to load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The engine could not be created.
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    /// The cloud config file cannot be read.
    #[error("cannot read --cloud-config {path}: {source}")]
    CloudConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The compile cache directory cannot be created.
    #[error("--compile-cache-dir {path}: {source}")]
    CacheDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The health server cannot listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// This replica lost the leader lease.
    #[error("leader election lost")]
    LeaderLost,
}

/// Finds and loads the provider named `name` from `dir`: `NAME.wasm` first, then any
/// other component declaring that name. Each candidate is compiled once.
async fn load_provider(
    loader: &ProviderLoader,
    dir: &Path,
    name: &str,
    cloud_config: Vec<u8>,
) -> Result<Provider, DaemonError> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| DaemonError::ProvidersDir {
            path: dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    candidates.sort();
    candidates.sort_by_key(|p| p.file_stem().is_none_or(|s| s != name));
    let mut found = Vec::new();
    for path in candidates {
        match loader.load(&path, cloud_config.clone()).await {
            Ok(provider) if provider.name() == name => return Ok(provider),
            Ok(provider) => found.push(format!("{} ({})", provider.name(), path.display())),
            // The file named after the provider must load: its error is the answer.
            Err(err) if path.file_stem().is_some_and(|s| s == name) => return Err(err.into()),
            Err(err) => {
                tracing::warn!(file = %path.display(), error = %err, "skipping invalid provider component");
                found.push(format!("invalid: {}", path.display()));
            }
        }
    }
    Err(DaemonError::ProviderNotFound {
        name: name.into(),
        dir: dir.to_owned(),
        found: if found.is_empty() {
            "nothing".into()
        } else {
            found.join(", ")
        },
    })
}

/// The enabled controllers that can run with `provider`: one whose interface the
/// provider does not export is skipped with a warning, as upstream does.
fn plan(
    enabled: &[&'static str],
    provider: &Provider,
    configure_cloud_routes: bool,
) -> Vec<&'static str> {
    let mut planned = Vec::new();
    for &controller in enabled {
        if controller == "route" && !configure_cloud_routes {
            tracing::info!(
                controller,
                "--configure-cloud-routes is false; controller not started"
            );
            continue;
        }
        if let Some(requirement) = Requirement::of_controller(controller)
            && !requirement.met_by(&provider.exports())
        {
            tracing::warn!(
                controller,
                provider = provider.name(),
                "the provider exports no {}; controller not started",
                requirement.interface()
            );
            continue;
        }
        planned.push(controller);
    }
    planned
}

/// The `User-Agent` of the controller manager's requests to the API server.
pub const USER_AGENT: &str = concat!("wasm-ccm/", env!("CARGO_PKG_VERSION"));

/// The `--cloud-config` bytes (empty without the flag).
fn read_cloud_config(args: &DaemonArgs) -> Result<Vec<u8>, DaemonError> {
    match &args.cloud_config {
        Some(path) => std::fs::read(path).map_err(|source| DaemonError::CloudConfig {
            path: path.clone(),
            source,
        }),
        None => Ok(Vec::new()),
    }
}

async fn kube_client(args: &DaemonArgs) -> Result<kube::Client, DaemonError> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| DaemonError::KubeConfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| DaemonError::KubeConfig(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::incluster()
            .map_err(|e| DaemonError::KubeConfig(format!("in-cluster: {e}")))?,
    };
    let mut config = config;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    kube::Client::try_from(config).map_err(|e| DaemonError::KubeConfig(e.to_string()))
}

fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "wasm-ccm".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{:08x}", nanos ^ std::process::id())
}

/// Runs the controller manager until SIGINT/SIGTERM or the loss of the leader lease.
pub async fn run(args: DaemonArgs) -> Result<(), DaemonError> {
    let name = args.cloud_provider.clone().ok_or_else(|| {
        DaemonError::Flags("--cloud-provider is required (the provider name, e.g. simcloud)".into())
    })?;
    let enabled = options::enabled_controllers(&args.controllers).map_err(DaemonError::Flags)?;
    let cluster_cidrs = args
        .cluster_cidr
        .iter()
        .map(|c| controllers::route::Cidr::parse(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| DaemonError::Flags(format!("--cluster-cidr: {e}")))?;
    if cluster_cidrs.len() > 2 {
        return Err(DaemonError::Flags(
            "--cluster-cidr: at most two CIDRs (dual stack)".into(),
        ));
    }
    if enabled.contains(&"route") && args.configure_cloud_routes && cluster_cidrs.is_empty() {
        return Err(DaemonError::Flags(
            "the route controller needs --cluster-cidr (or --configure-cloud-routes=false, or --controllers=*,-route)".into(),
        ));
    }
    let metrics = Metrics::new();
    let health = Arc::new(health::Health::default());
    health.leader_ok.store(true, Ordering::Relaxed);
    let addr = format!("{}:{}", args.bind_address, args.secure_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| DaemonError::Listen {
            addr: addr.clone(),
            source,
        })?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    tokio::spawn(health::serve(listener, health.clone(), metrics.clone()));

    let mut loader = ProviderLoader::with_options(
        &EngineSettings::default(),
        &crate::capabilities::http_egress::EgressSettings::default(),
        metrics.clone(),
    )?;
    if let Some(dir) = &args.compile_cache_dir {
        let cache = CompileCache::open(dir, &metrics).map_err(|source| DaemonError::CacheDir {
            path: dir.clone(),
            source,
        })?;
        loader = loader.with_compile_cache(cache);
    }
    // `NAME.wasm` is read once, and what was read is what loads: the hot swap then
    // compares later reads with exactly this version.
    let named = args.providers_dir.join(format!("{name}.wasm"));
    let from_named = match Snapshot::read(&named, args.cloud_config.as_deref()) {
        Ok(snapshot) => {
            let fingerprint = snapshot.fingerprint.clone();
            // The file named after the provider must load: its error is the answer.
            let provider = snapshot.load(&loader, &named).await?;
            (provider.name() == name).then_some((provider, Some(fingerprint)))
        }
        Err(_) => None,
    };
    let (provider, serving) = match from_named {
        Some(found) => found,
        // Another file of the directory declaring the name.
        None => {
            let config = read_cloud_config(&args)?;
            let provider = load_provider(&loader, &args.providers_dir, &name, config).await?;
            let serving = Snapshot::read(provider.path(), args.cloud_config.as_deref())
                .ok()
                .map(|s| s.fingerprint);
            (provider, serving)
        }
    };
    health.provider_ready.store(true, Ordering::Relaxed);
    let client = kube_client(&args).await?;
    let identity = identity();
    let reporter = Arc::new(ReloadReporter::new(
        &metrics,
        report::own_pod().map(|pod| (client.clone(), pod)),
    ));
    reporter.serving(provider.name(), provider.sha256(), None);
    let planned = plan(&enabled, &provider, args.configure_cloud_routes);
    let shared = SharedProvider::from(provider.clone());

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    match serving {
        Some(serving) if args.provider_hot_swap => {
            let reloader = Reloader::new(
                hot_swap::Settings {
                    component: provider.path().to_owned(),
                    cloud_config: args.cloud_config.clone(),
                    provider_name: name.clone(),
                    controllers: planned.clone(),
                    rescan_period: args.provider_rescan_period,
                    debounce: hot_swap::DEBOUNCE,
                },
                loader.clone(),
                shared.clone(),
                serving,
                reporter,
            );
            tasks.spawn(reloader.run(stop_rx.clone()));
        }
        Some(_) => tracing::info!("--provider-hot-swap=false: provider changes need a restart"),
        None => {
            tracing::warn!(file = %provider.path().display(), "cannot re-read the provider's files; hot swap disabled")
        }
    }

    let elector = args.leader_elect.then(|| {
        leader::Elector::new(
            client.clone(),
            leader::Settings {
                lease_duration: args.leader_elect_lease_duration,
                renew_deadline: args.leader_elect_renew_deadline,
                retry_period: args.leader_elect_retry_period,
                name: args.leader_elect_resource_name.clone(),
                namespace: args.leader_elect_resource_namespace.clone(),
                identity: identity.clone(),
            },
        )
    });
    if let Some(elector) = &elector {
        tokio::select! {
            _ = elector.acquire() => {}
            _ = shutdown_signal() => return Ok(()),
        }
    }
    let ctx = Context {
        client,
        provider: shared,
        metrics,
        instance: identity,
    };
    for &controller in &planned {
        let run: futures_util::future::BoxFuture<'static, ()> = match controller {
            "cloud-node" => Box::pin(controllers::node::run(
                ctx.clone(),
                controllers::node::Options {
                    status_update_frequency: args.node_status_update_frequency,
                    workers: args.concurrent_node_syncs,
                },
                stop_rx.clone(),
            )),
            "service" => Box::pin(controllers::service::run(
                ctx.clone(),
                controllers::service::Options {
                    cluster_name: args.cluster_name.clone(),
                    workers: args.concurrent_service_syncs,
                },
                stop_rx.clone(),
            )),
            "route" => Box::pin(controllers::route::run(
                ctx.clone(),
                controllers::route::Options {
                    cluster_name: args.cluster_name.clone(),
                    cluster_cidrs: cluster_cidrs.clone(),
                    period: args.route_reconciliation_period,
                },
                stop_rx.clone(),
            )),
            "cloud-node-lifecycle" => Box::pin(controllers::node_lifecycle::run(
                ctx.clone(),
                controllers::node_lifecycle::Options {
                    monitor_period: args.node_monitor_period,
                },
                stop_rx.clone(),
            )),
            _ => continue,
        };
        health.controller_started(controller);
        let (health, stop) = (health.clone(), stop_rx.clone());
        tasks.spawn(async move {
            run.await;
            if !*stop.borrow() {
                tracing::error!(controller, "controller stopped unexpectedly");
                health.controller_failed(controller);
            }
        });
        tracing::info!(controller, "started controller");
    }
    health.controllers_running.store(true, Ordering::Relaxed);
    let result = match &elector {
        Some(elector) => tokio::select! {
            _ = elector.hold() => {
                health.leader_ok.store(false, Ordering::Relaxed);
                Err(DaemonError::LeaderLost)
            }
            _ = shutdown_signal() => Ok(()),
        },
        None => {
            shutdown_signal().await;
            Ok(())
        }
    };
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), drain).await;
    result
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
