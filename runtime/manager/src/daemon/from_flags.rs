//! The pieces [`super::run`] puts together, each built from the flags.

use crate::cloud::provider_annotations::ProviderAnnotations;
use crate::cloud::provider_events::ProviderEvents;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use wasm_ccm_host::capabilities::http_egress::EgressSettings;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::compile_cache::CompileCache;
use wasm_ccm_host::provider::oci::OciFetcher;
use wasm_ccm_host::provider::{Fingerprint, Provider, ProviderLoader, SharedProvider};

use super::{DaemonArgs, DaemonError, USER_AGENT, client_limits, health, leader};
use crate::controllers::{self, Context, Controller, Settings};
use crate::hot_swap::{self, ReloadReporter, Reloader};

/// `--cluster-cidr` is read when the route controller will run: enabled,
/// `--configure-cloud-routes`, and a provider exporting `routes` (upstream
/// `startRouteController` checks in that order, and ignores the flag otherwise).
/// Called with the planned controllers; fills `settings.cluster_cidrs`.
pub(super) fn route_flags(
    args: &DaemonArgs,
    planned: &[&'static Controller],
    settings: &mut Settings,
) -> Result<(), DaemonError> {
    if !planned.iter().any(|c| c.name == controllers::route::NAME) {
        if !args.cluster_cidr.is_empty() {
            tracing::info!("the route controller does not run; --cluster-cidr is not used");
        }
        return Ok(());
    }
    settings.cluster_cidrs = args.cluster_cidrs().map_err(DaemonError::Flags)?;
    Ok(())
}

/// Serves `/healthz`, `/livez`, `/readyz` and `/metrics` on the secure port.
pub(super) async fn serve_health(
    args: &DaemonArgs,
    config: kube::Config,
    metrics: &Metrics,
) -> Result<Arc<health::Health>, DaemonError> {
    let health = Arc::new(health::Health::default());
    health.leader_ok.store(true, Ordering::Relaxed);
    let app = health::router(health.clone(), metrics.clone());
    // The secure port's reviews go through a client of their own (its own rate limit).
    let reviews = kube_client(args, config)?;
    crate::serving::serve(&args.serving, &reviews, metrics, app).await?;
    Ok(health)
}

/// The provider loader, with the compile cache when `--compile-cache-dir` is set and
/// the providers' events published through `client`.
pub(super) fn loader(
    args: &DaemonArgs,
    metrics: &Metrics,
    client: &kube::Client,
    identity: &str,
) -> Result<ProviderLoader, DaemonError> {
    let egress = EgressSettings {
        credentials_dir: Some(args.credentials_dir.clone()),
        ..EgressSettings::default()
    };
    // With hot swap, a new version recompiles only the functions that changed.
    let engine = EngineSettings {
        function_cache: args.provider_hot_swap,
        ..EngineSettings::default()
    };
    let loader = ProviderLoader::with_options(&engine, &egress, metrics.clone())?
        .with_memory_budget(args.provider_memory_budget)
        .with_event_sink(Arc::new(ProviderEvents::new(client.clone(), identity)))
        .with_annotation_sink(Arc::new(ProviderAnnotations::new(client.clone())))
        .with_oci_fetcher(oci_fetcher(args));
    let loader = match &args.provider_trusted_keys {
        Some(dir) => {
            let keys = wasm_ccm_host::policy::signing::read_trusted_keys(dir)
                .map_err(|err| DaemonError::Flags(err.to_string()))?;
            tracing::info!(dir = %dir.display(), keys = %wasm_ccm_host::policy::signing::key_ids(&keys),
                "providers must be signed by one of these keys");
            loader.with_trusted_keys(keys)
        }
        None => loader,
    };
    let Some(dir) = &args.compile_cache_dir else {
        return Ok(loader);
    };
    let cache = CompileCache::open(dir, metrics).map_err(|source| DaemonError::CacheDir {
        path: dir.clone(),
        source,
    })?;
    Ok(loader.with_compile_cache(cache))
}

/// How components named by `NAME.source.yaml` are pulled: registry files confined to
/// `--credentials-dir`, cached in `--provider-cache-dir`, within
/// `--provider-pull-timeout`.
pub(super) fn oci_fetcher(args: &DaemonArgs) -> OciFetcher {
    let fetcher = OciFetcher::new(Some(args.credentials_dir.clone()))
        .with_timeout(args.provider_pull_timeout);
    match &args.provider_cache_dir {
        Some(dir) => fetcher.with_cache(dir.clone()),
        None => fetcher,
    }
}

/// The Kubernetes client configuration from `--kubeconfig`, or the in-cluster one,
/// with wasm-ccm's `User-Agent`.
pub(super) async fn kube_config(args: &DaemonArgs) -> Result<kube::Config, DaemonError> {
    let mut config = match &args.kubeconfig {
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
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(config)
}

/// A Kubernetes client of `config` with its own `--kube-api-qps` / `--kube-api-burst`
/// token bucket.
pub(super) fn kube_client(
    args: &DaemonArgs,
    config: kube::Config,
) -> Result<kube::Client, DaemonError> {
    client_limits::content_type(&args.kube_api_content_type).map_err(DaemonError::Flags)?;
    let bucket = client_limits::bucket(args.kube_api_qps, args.kube_api_burst)
        .map_err(DaemonError::Flags)?;
    // TLS on ring (kube's rustls config takes the process default).
    wasm_ccm_host::tls::install_crypto_provider();
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| DaemonError::KubeConfig(e.to_string()))?;
    Ok(match bucket {
        Some(bucket) => builder
            .with_layer(&client_limits::QpsLayer::new(bucket))
            .build(),
        None => builder.build(),
    })
}

/// This replica's identity: the lease holder and events' reporting instance.
pub(super) fn identity() -> String {
    let host = crate::hostname().unwrap_or_else(|| "wasm-ccm".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{:08x}", nanos ^ std::process::id())
}

/// The enabled controllers that can run with `provider`: one whose interface the
/// provider does not export is skipped with a warning, as upstream does.
pub(super) fn plan(
    enabled: &[&'static Controller],
    provider: &Provider,
    configure_cloud_routes: bool,
) -> Vec<&'static Controller> {
    let mut planned = Vec::new();
    for &controller in enabled {
        if controller.name == controllers::route::NAME && !configure_cloud_routes {
            tracing::info!(
                controller = controller.name,
                "--configure-cloud-routes is false; controller not started"
            );
            continue;
        }
        if !controller.needs.met_by(provider.exports()) {
            tracing::warn!(
                controller = controller.name,
                provider = provider.name(),
                "the provider exports no {}; controller not started",
                controller.needs.interface()
            );
            continue;
        }
        planned.push(controller);
    }
    planned
}

/// The hot swap of the provider serving as `serving`.
#[allow(clippy::too_many_arguments)]
pub(super) fn reloader(
    args: &DaemonArgs,
    name: &str,
    planned: &[&'static Controller],
    provider: &Provider,
    loader: ProviderLoader,
    shared: &SharedProvider,
    serving: Fingerprint,
    reporter: Arc<ReloadReporter>,
    canary: Option<hot_swap::canary::Canary>,
) -> Reloader {
    Reloader::new(
        hot_swap::Settings {
            component: provider.path().to_owned(),
            cloud_config: args.cloud_config.clone(),
            provider_name: name.to_owned(),
            controllers: planned.to_vec(),
            rescan_period: args.provider_rescan_period,
            debounce: hot_swap::DEBOUNCE,
            allow_untagged_cloud: args.allow_untagged_cloud,
            canary,
        },
        loader,
        shared.clone(),
        serving,
        reporter,
    )
}

/// The hot swap canary, with a `--provider-canary-period` above zero.
pub(super) fn canary(
    args: &DaemonArgs,
    slot: &crate::cloud::shadow::CanarySlot,
    metrics: &Metrics,
) -> Option<hot_swap::canary::Canary> {
    (!args.provider_canary_period.is_zero()).then(|| {
        hot_swap::canary::Canary::new(
            hot_swap::canary::CanaryOptions {
                period: args.provider_canary_period,
                max_error_percent: args.provider_canary_max_error_percent,
                max_difference_percent: args.provider_canary_max_difference_percent,
            },
            slot.clone(),
            metrics,
        )
    })
}

/// The leader elector, with `--leader-elect`.
pub(super) fn elector(
    args: &DaemonArgs,
    client: &kube::Client,
    identity: &str,
) -> Option<leader::Elector> {
    args.leader_elect.then(|| {
        leader::Elector::new(
            client.clone(),
            leader::Settings {
                lease_duration: args.leader_elect_lease_duration,
                renew_deadline: args.leader_elect_renew_deadline,
                retry_period: args.leader_elect_retry_period,
                name: args.leader_elect_resource_name.clone(),
                namespace: args.leader_elect_resource_namespace.clone(),
                identity: identity.to_owned(),
            },
        )
    })
}

/// Starts each planned controller; one that ends on its own fails its health check.
pub(super) fn start_controllers(
    planned: &[&'static Controller],
    ctx: &Context,
    settings: &Settings,
    health: &Arc<health::Health>,
    stop: &tokio::sync::watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    for &controller in planned {
        let run = (controller.run)(ctx.clone(), settings, stop.clone());
        let name = controller.name;
        health.controller_started(name);
        let (health, stop) = (health.clone(), stop.clone());
        tasks.spawn(async move {
            run.await;
            if !*stop.borrow() {
                tracing::error!(controller = name, "controller stopped unexpectedly");
                health.controller_failed(name);
            }
        });
        tracing::info!(controller = name, "started controller");
    }
}
