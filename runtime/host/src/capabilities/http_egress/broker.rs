//! The broker: one pooled HTTP client for every provider (or a provider's own, when
//! its policy names a CA bundle), and each provider's [`Egress`] built from its policy.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::credentials::{self, CredentialError};
use super::rules::Rules;
use super::{Egress, EgressInterceptor, EgressSettings, connect, rate_limit, resolver};
use crate::capabilities::logging::LogLimiter;
use crate::metrics::{ProviderLabel, ProviderMetrics};
use crate::policy::Policy;

/// Errors creating a provider's egress.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// A credential file of the policy is unusable (outside the credentials directory).
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// The policy's client certificate or key cannot be used.
    #[error("TLS client certificate {path}: {reason}")]
    ClientCertificate {
        /// The certificate file.
        path: String,
        /// What is wrong with it (or its key).
        reason: String,
    },
    /// The policy's CA bundle cannot be read or parsed.
    #[error("CA bundle {path}: {reason}")]
    CaBundle {
        /// The bundle file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Creates each provider's [`Egress`], sharing one pooled client and the metrics.
#[derive(Clone)]
pub struct Broker {
    client: reqwest::Client,
    resolver: resolver::GuardedResolver,
    metrics: Arc<ProviderMetrics>,
    credentials_dir: Option<PathBuf>,
    /// The embedder's interceptor, if it registered one.
    interceptor: Arc<RwLock<Option<Arc<dyn EgressInterceptor>>>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Broker")
    }
}

impl Broker {
    /// The broker with its shared client.
    pub fn new(
        settings: &EgressSettings,
        metrics: Arc<ProviderMetrics>,
    ) -> Result<Self, BrokerError> {
        let resolver = resolver::GuardedResolver::new(&settings.dns_overrides);
        Ok(Self {
            client: client_builder(&resolver)
                .build()
                .map_err(BrokerError::Client)?,
            resolver,
            metrics,
            credentials_dir: settings.credentials_dir.clone(),
            interceptor: Arc::default(),
        })
    }

    /// Registers `interceptor` for every provider's requests from now on (`None`
    /// removes it).
    pub fn set_interceptor(&self, interceptor: Option<Arc<dyn EgressInterceptor>>) {
        *self
            .interceptor
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = interceptor;
    }

    /// The interceptor's answer to an allowed request, if one is registered and answers.
    pub(super) fn intercept(
        &self,
        method: &http::Method,
        url: &url::Url,
    ) -> Option<http::Response<bytes::Bytes>> {
        let interceptor = self
            .interceptor
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()?;
        interceptor.intercept(method, url)
    }

    /// The egress of one provider under `policy`.
    pub fn egress(
        &self,
        provider: Arc<ProviderLabel>,
        policy: Arc<Policy>,
    ) -> Result<Arc<Egress>, BrokerError> {
        let sessions = credentials::Sessions::new(provider.clone(), self.metrics.clone());
        let user_agent = http::HeaderValue::try_from(format!("{USER_AGENT} (provider {provider})"))
            .unwrap_or_else(|_| http::HeaderValue::from_static(USER_AGENT));
        Ok(Arc::new(Egress {
            user_agent,
            rules: RwLock::new(Arc::new(self.rules(policy, &sessions)?)),
            sessions,
            broker: self.clone(),
            denial_log: Mutex::new(LogLimiter::default()),
            metrics: self.metrics.clone(),
            provider,
        }))
    }

    /// What a policy makes of a provider's egress (kinds that log in take their
    /// sessions from `sessions`).
    pub(super) fn rules(
        &self,
        policy: Arc<Policy>,
        sessions: &credentials::Sessions,
    ) -> Result<Rules, BrokerError> {
        let client = if policy.tls_ca_bundle.is_none() && policy.tls_client_certificate.is_none() {
            self.client.clone()
        } else {
            self.dedicated_client(&policy)?
        };
        let limits = &policy.egress_limits;
        Ok(Rules {
            limiter: rate_limit::EgressLimiter::new(
                limits.max_concurrent_requests,
                limits.requests_per_second,
                limits.burst,
            ),
            credentials: credentials::CredentialStore::new(
                &policy.credentials,
                self.credentials_dir.as_deref(),
                sessions,
            )?,
            policy,
            client,
        })
    }

    /// A provider's own client: the shared client's settings, plus the policy's CA
    /// bundle and client certificate.
    fn dedicated_client(&self, policy: &Policy) -> Result<reqwest::Client, BrokerError> {
        let mut builder = client_builder(&self.resolver);
        if let Some(path) = &policy.tls_ca_bundle {
            // A trust anchor decides where credentials may go (a kind's login
            // included): it comes from the mounted Secret like they do.
            let path = credentials::confined_path(self.credentials_dir.as_deref(), path)?;
            builder = builder.tls_certs_merge(ca_certificates(&path)?);
        }
        if let Some(client) = &policy.tls_client_certificate {
            let error = |reason: String| BrokerError::ClientCertificate {
                path: client.certificate_file.display().to_string(),
                reason,
            };
            let dir = self.credentials_dir.as_deref();
            let certificate = credentials::read_secret_file(dir, &client.certificate_file)?;
            let key = credentials::read_secret_file(dir, &client.key_file)?;
            let identity =
                reqwest::Identity::from_pem(format!("{certificate}\n{key}\n").as_bytes())
                    .map_err(|e| error(format!("with key {}: {e}", client.key_file.display())))?;
            builder = builder.identity(identity);
        }
        builder.build().map_err(BrokerError::Client)
    }

    /// The shared client (for native comparisons in benchmarks).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

/// The `User-Agent` of the host's own requests (logins, STS); a provider's requests
/// add the provider's name.
pub const USER_AGENT: &str = concat!("wasm-ccm/", env!("CARGO_PKG_VERSION"));

fn client_builder(resolver: &resolver::GuardedResolver) -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        // A redirect would leave the allowlist's control: the guest sees the 3xx.
        .redirect(reqwest::redirect::Policy::none())
        // Never a proxy from the environment (HTTP(S)_PROXY, ALL_PROXY): credentials
        // and requests go only where the policy says.
        .no_proxy()
        .connector_layer(connect::PeerGuardLayer)
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .dns_resolver(Arc::new(resolver.clone()))
}

/// The certificates of a CA bundle.
fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, BrokerError> {
    let ca_error = |reason: String| BrokerError::CaBundle {
        path: path.display().to_string(),
        reason,
    };
    let pem = read_ca_bundle(path).map_err(|e| ca_error(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(ca_error("no PEM certificates found".into()));
    }
    Ok(certs)
}

/// The largest CA bundle read.
const MAX_CA_BUNDLE_BYTES: u64 = 1 << 20;

/// Reads a CA bundle: a regular file (not a device or a FIFO), at most 1 MiB.
fn read_ca_bundle(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > MAX_CA_BUNDLE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_CA_BUNDLE_BYTES} bytes"
        )));
    }
    let mut pem = Vec::new();
    file.take(MAX_CA_BUNDLE_BYTES + 1).read_to_end(&mut pem)?;
    Ok(pem)
}

/// reqwest is built without a default TLS crypto provider: *ring*, as kube's.
pub(super) fn install_crypto_provider() {
    crate::tls::install_crypto_provider();
}
