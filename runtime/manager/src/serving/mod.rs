//! The secure port: `/healthz`, `/readyz`, `/livez` and `/metrics` over HTTPS, with
//! Kubernetes delegated authentication and authorization, as upstream's controller
//! managers serve them.
//!
//! - [`options`]: the flags (`--secure-port`, `--tls-cert-file`,
//!   `--authorization-always-allow-paths`, ...); [`inherited`]: a listening socket
//!   handed down (`LISTEN_FDS`) instead of one bound here.
//! - [`tls`]: the serving certificate (files re-read on change, or self-signed) and the
//!   client certificate authorities; [`listener`]: handshakes, connections and request
//!   headers, bounded in time; [`admission`]: each client's share of them.
//! - [`authn`]: who a request comes from (client certificate, `TokenReview`, anonymous).
//! - [`authz`]: whether they may (always-allowed paths, `SubjectAccessReview`).
//! - [`review`]: the reviews both send to the API server, bounded and counted.
//!
//! [`serve`] puts them together in front of a router.

pub mod admission;
pub mod authn;
pub mod authz;
mod filter;
pub mod inherited;
pub mod listener;
pub mod options;
mod reload;
pub mod review;
mod review_cache;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use wasm_ccm_host::metrics::Metrics;

pub use options::ServingArgs;
use review::{CodeLabel, Reviewer};
use tls::{TlsError, TlsState};

/// The ConfigMap the API server publishes its client certificate authority in.
pub const AUTHENTICATION_CONFIGMAP: (&str, &str) =
    ("kube-system", "extension-apiserver-authentication");

/// Why the secure port could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// A flag is invalid or flags do not go together.
    #[error("{0}")]
    Flags(String),
    /// The port cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// `--bind-address:--secure-port`.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The listening socket handed down (`LISTEN_FDS`) is not a usable TCP socket.
    #[error("the listening socket handed down (LISTEN_FDS) cannot be used: {0}")]
    Inherited(#[source] std::io::Error),
    /// The listening socket handed down does not listen where the flags say.
    #[error("{0}")]
    InheritedElsewhere(String),
    /// The certificate, key or client CA is not usable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The client CA ConfigMap could not be read.
    #[error(
        "cannot read ConfigMap kube-system/extension-apiserver-authentication for the client \
         CA: {0}; grant Role extension-apiserver-authentication-reader in kube-system to this \
         controller manager, or start with --authentication-skip-lookup or \
         --authentication-tolerate-lookup-failure"
    )]
    Lookup(#[source] kube::Error),
}

/// Labels of the TLS reload counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `serving-certificate` or `client-ca`.
    pub material: &'static str,
    /// `success` or `error`.
    pub result: &'static str,
}

/// The secure port's metrics.
#[derive(Clone)]
pub struct ServingMetrics {
    /// `apiserver_delegated_authn_request_total{code}` (upstream's name).
    pub authn_requests: Family<CodeLabel, Counter>,
    /// `apiserver_delegated_authz_request_total{code}` (upstream's name).
    pub authz_requests: Family<CodeLabel, Counter>,
    /// `wasm_ccm_secure_port_tls_reloads_total{material,result}`.
    pub reloads: Family<ReloadLabels, Counter>,
    /// `wasm_ccm_secure_port_connections_closed_total{reason}`: connections the port
    /// closed to protect itself.
    pub closed: Family<ReasonLabel, Counter>,
}

/// Labels of the closed-connection counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why: `evicted-connection`, `evicted-pending` (its place given to a newcomer),
    /// `first-byte-timeout`, `handshake-timeout`, `header-timeout` (too slow),
    /// `header-too-large` (answered 431), `idle`.
    pub reason: &'static str,
}

/// Every reason a connection is counted as closed.
pub const CLOSED_REASONS: [&str; 7] = [
    "evicted-connection",
    "evicted-pending",
    "first-byte-timeout",
    "handshake-timeout",
    "header-timeout",
    "header-too-large",
    "idle",
];

impl ServingMetrics {
    /// Registers the families in `metrics`, reload outcomes at 0.
    pub fn register(metrics: &Metrics) -> Self {
        let this = Self {
            authn_requests: Family::default(),
            authz_requests: Family::default(),
            reloads: Family::default(),
            closed: Family::default(),
        };
        metrics.register_upstream(
            "apiserver_delegated_authn_request",
            "TokenReview requests of the secure port's authentication, by HTTP status code",
            this.authn_requests.clone(),
        );
        metrics.register_upstream(
            "apiserver_delegated_authz_request",
            "SubjectAccessReview requests of the secure port's authorization, by HTTP status code",
            this.authz_requests.clone(),
        );
        metrics.register(
            "secure_port_tls_reloads",
            "Changes of the secure port's serving certificate (files) or client CA (file or ConfigMap), by whether they loaded (error: the previous one keeps serving)",
            this.reloads.clone(),
        );
        metrics.register(
            "secure_port_connections_closed",
            "Connections the secure port closed to keep serving every client, by reason (its place given to a newcomer, nothing sent, a handshake, request headers or an idle connection too slow, request headers too large)",
            this.closed.clone(),
        );
        for reason in CLOSED_REASONS {
            let _ = this.closed.get_or_create(&ReasonLabel { reason });
        }
        for material in ["serving-certificate", "client-ca"] {
            for result in ["success", "error"] {
                let _ = this
                    .reloads
                    .get_or_create(&ReloadLabels { material, result });
            }
        }
        this
    }

    /// Counts a connection closed for `reason` (one of [`CLOSED_REASONS`]).
    pub fn closed(&self, reason: &'static str) {
        self.closed.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Counts a reload of `material`.
    pub fn reloaded(&self, material: &'static str, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.reloads
            .get_or_create(&ReloadLabels { material, result })
            .inc();
    }
}

/// Serves `app` on `--bind-address:--secure-port` (or the socket handed down there,
/// [`inherited`]) until the process ends: HTTPS behind
/// delegated authentication and authorization through `client` (its own, so reviews
/// never wait on the controllers' rate limit nor they on reviews), or plain HTTP with
/// `--serve-plain-http`. The bound address, or `None` with `--secure-port=0`.
pub async fn serve(
    args: &ServingArgs,
    client: &kube::Client,
    metrics: &Metrics,
    app: Router,
) -> Result<Option<SocketAddr>, ServingError> {
    args.validate().map_err(ServingError::Flags)?;
    let flags = SocketAddr::new(args.bind_address, args.secure_port);
    let Some((tcp, addr)) = inherited::listener(flags, &args.inherited).await? else {
        tracing::info!("--secure-port=0: health and metrics are not served");
        return Ok(None);
    };
    if args.serve_plain_http {
        tracing::warn!(
            %addr,
            "--serve-plain-http: serving /healthz, /readyz, /livez and /metrics over plain HTTP \
             with no authentication or authorization"
        );
        tokio::spawn(async move { axum::serve(tcp, app).await });
        return Ok(Some(addr));
    }

    let certificate = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(cert), Some(key)) => {
            let files = [cert.clone(), key.clone()];
            let contents = reload::read_all(&files)?;
            let certificate = tls::certificate_from_pem((cert, &contents[0]), (key, &contents[1]))?;
            Some((files, contents, certificate))
        }
        _ => None,
    };
    let state = Arc::new(match &certificate {
        Some((_, _, certificate)) => TlsState::new(certificate.clone())?,
        None => {
            tracing::info!(
                "no --tls-cert-file: serving a self-signed certificate generated in memory"
            );
            TlsState::new(tls::self_signed(args.bind_address)?)?
        }
    });
    let metrics = ServingMetrics::register(metrics);
    if let Some((files, contents, _)) = certificate {
        reload::serving_certificate(files, contents, state.clone(), metrics.clone());
    }
    client_ca(args, client, &state, &metrics).await?;

    let reviewer = Reviewer::new(client.clone());
    let delegated = Arc::new(filter::Delegated {
        tokens: authn::TokenAuthenticator::new(
            reviewer.clone(),
            args.authentication_token_webhook_cache_ttl,
            metrics.authn_requests.clone(),
        ),
        authorizer: authz::Authorizer::new(
            reviewer,
            args.always_allow_paths().map(str::to_owned).collect(),
            (
                args.authorization_webhook_cache_authorized_ttl,
                args.authorization_webhook_cache_unauthorized_ttl,
            ),
            metrics.authz_requests.clone(),
        ),
        tls: state.clone(),
    });
    let app = app.layer(axum::middleware::from_fn_with_state(
        delegated,
        filter::guard,
    ));
    tracing::info!(%addr, "serving securely (HTTPS, delegated authentication and authorization)");
    listener::serve(tcp, state, app, metrics);
    Ok(Some(addr))
}

/// Client certificates: verified against `--client-ca-file` (re-read on change), or
/// the API server's published client CA (re-read every minute), or not accepted.
async fn client_ca(
    args: &ServingArgs,
    client: &kube::Client,
    state: &Arc<TlsState>,
    metrics: &ServingMetrics,
) -> Result<(), ServingError> {
    if let Some(path) = &args.client_ca_file {
        let files = [path.clone()];
        let contents = reload::read_all(&files)?;
        let origin = format!("--client-ca-file {}", path.display());
        let roots = tls::client_ca_from_pem(&origin, &contents[0])?;
        state.set_client_ca(Some((origin, roots)))?;
        reload::client_ca_file(files, contents, state.clone(), metrics.clone());
        return Ok(());
    }
    if args.authentication_skip_lookup {
        tracing::info!("--authentication-skip-lookup: client certificates are not accepted");
        return Ok(());
    }
    let found = match reload::lookup_client_ca(client).await {
        Ok(found) => found,
        Err(err) if args.authentication_tolerate_lookup_failure => {
            tracing::warn!(error = %err, "cannot read the client CA ConfigMap; client certificates are not accepted");
            None
        }
        Err(err) => return Err(ServingError::Lookup(err)),
    };
    if let Some(pem) = &found {
        let origin = reload::configmap_origin();
        let roots = tls::client_ca_from_pem(&origin, pem)?;
        state.set_client_ca(Some((origin, roots)))?;
    } else {
        tracing::info!(
            "no client-ca-file in ConfigMap kube-system/extension-apiserver-authentication: client certificates are not accepted"
        );
    }
    reload::client_ca_configmap(client.clone(), found, state.clone(), metrics.clone());
    Ok(())
}
