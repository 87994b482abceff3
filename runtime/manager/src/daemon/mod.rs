//! The controller manager process. [`run`] is the start-up sequence, read top to
//! bottom; [`from_flags`] builds each piece it puts together (health server, provider
//! loader, Kubernetes client, hot swap, leader election, the controllers of the
//! table in [`crate::controllers::ALL`]).

pub mod client_limits;
pub mod feature_gates;
mod from_flags;
pub mod health;
pub mod leader;
pub mod options;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{FindError, SharedProvider};

use crate::cloud::SharedCloud;
use crate::controllers::Context;
use crate::controllers::node_informer::NodeInformer;
use crate::hot_swap::ReloadReporter;
use crate::metrics::ControllerMetrics;
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
    /// The provider could not be found in the providers directory or failed to load.
    #[error(transparent)]
    Provider(#[from] FindError),
    /// The engine could not be created.
    #[error(transparent)]
    Engine(#[from] wasm_ccm_host::engine::EngineError),
    /// The compile cache directory cannot be created.
    #[error("--compile-cache-dir {path}: {source}")]
    CacheDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The secure port (health and metrics) could not start.
    #[error("secure port: {0}")]
    Serving(#[from] crate::serving::ServingError),
    /// The provider answers `has-cluster-id` false and `--allow-untagged-cloud` is off.
    #[error(
        "no ClusterID found: provider {provider} does not tag its resources with a cluster \
         ID, which is required for the cloud provider to function properly; this check can \
         be bypassed with --allow-untagged-cloud"
    )]
    UntaggedCloud {
        /// The provider's name.
        provider: String,
    },
    /// This replica lost the leader lease.
    #[error("leader election lost")]
    LeaderLost,
}

/// The `User-Agent` of the controller manager's requests to the API server.
pub const USER_AGENT: &str = concat!("wasm-ccm/", env!("CARGO_PKG_VERSION"));

/// Runs the controller manager until SIGINT/SIGTERM or the loss of the leader lease.
pub async fn run(args: DaemonArgs) -> Result<(), DaemonError> {
    // Flags first: nothing starts with a bad command line.
    let name = args.cloud_provider.clone().ok_or_else(|| {
        DaemonError::Flags("--cloud-provider is required (the provider name, e.g. simcloud)".into())
    })?;
    let enabled = options::enabled_controllers(&args.controllers).map_err(DaemonError::Flags)?;
    let mut settings = args.controller_settings().map_err(DaemonError::Flags)?;

    // Health and metrics, then the provider: `/readyz` says when it is loaded.
    let metrics = Metrics::new();
    let controller_metrics = Arc::new(ControllerMetrics::register(
        &metrics,
        &crate::controllers::node_lifecycle::guard::Answer::LABELS,
    ));
    let config = from_flags::kube_config(&args).await?;
    let client = from_flags::kube_client(&args, config.clone())?;
    let health = from_flags::serve_health(&args, config, &metrics).await?;
    let identity = from_flags::identity();
    let services = crate::controllers::service::ServiceView::default();
    let loader = from_flags::loader(&args, &metrics, &client, &identity)?
        .with_service_source(Arc::new(services.clone()));
    let (provider, serving) = loader
        .find(&args.providers_dir, &name, args.cloud_config.as_deref())
        .await?;
    crate::allocator::release_free_memory();
    // Upstream: a provider without a cluster ID cannot tell its resources from
    // another cluster's; it runs only when the operator says so.
    if !provider.has_cluster_id() && !args.allow_untagged_cloud {
        return Err(DaemonError::UntaggedCloud {
            provider: provider.name().to_owned(),
        });
    }
    health.provider_ready.store(true, Ordering::Relaxed);
    wasm_ccm_host::provider::initialize_metrics(metrics.provider(), provider.name());

    let reporter = Arc::new(ReloadReporter::new(
        &metrics,
        crate::hot_swap::report::own_pod().map(|pod| (client.clone(), pod)),
    ));
    reporter.serving(provider.name(), provider.sha256(), None);
    let planned = from_flags::plan(&enabled, &provider, args.configure_cloud_routes);
    from_flags::route_flags(&args, &planned, &mut settings)?;
    let shared = SharedProvider::from(provider.clone());
    let canary_slot = crate::cloud::shadow::CanarySlot::default();

    // Every replica hot-swaps (a standby must be ready to lead); only the leader runs
    // the controllers.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    if args.provider_hot_swap {
        let canary = from_flags::canary(&args, &canary_slot, &metrics);
        let reloader = from_flags::reloader(
            &args, &name, &planned, &provider, loader, &shared, serving, reporter, canary,
        );
        tasks.spawn(reloader.run(stop_rx.clone()));
    } else {
        tracing::info!("--provider-hot-swap=false: provider changes need a restart");
    }
    let elector = from_flags::elector(&args, &client, &identity);
    let leading = crate::metrics::leader_status(&metrics, &args.leader_elect_resource_name);
    if let Some(elector) = &elector {
        tokio::select! {
            _ = elector.acquire() => {}
            _ = shutdown_signal() => return Ok(()),
        }
    }
    let (nodes, informer) = NodeInformer::new(client.clone(), stop_rx.clone());
    tasks.spawn(informer);
    let ctx = Context {
        nodes,
        client,
        cloud: SharedCloud::provider_with_canary(shared, canary_slot),
        metrics: controller_metrics,
        instance: identity,
        services,
    };
    from_flags::start_controllers(&planned, &ctx, &settings, &health, &stop_rx, &mut tasks);
    health.controllers_running.store(true, Ordering::Relaxed);
    leading.set(1);

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
    leading.set(0);
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), drain).await;
    // Stopped on a signal with the controllers drained: hand the Lease over now.
    if let (Ok(()), Some(elector)) = (&result, &elector) {
        match elector.release().await {
            Ok(true) => tracing::info!("released the leader lease"),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "cannot release the leader lease; the standby takes over when it expires")
            }
        }
    }
    result
}

/// SIGINT or SIGTERM.
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
