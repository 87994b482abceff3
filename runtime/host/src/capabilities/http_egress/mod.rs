//! HTTP egress: the broker that is a provider's only way to the network.
//!
//! Guests call `wasi:http/outgoing-handler`; wasmtime hands every request to
//! [`EgressHooks::send_request`], which
//! 1. checks the destination against the provider policy's allowlist (deny by default;
//!    link-local / instance-metadata addresses are refused whether given as an IP or
//!    as a name resolving to one, see [`resolver`]),
//! 2. injects the credential configured for the destination; the guest never sees it,
//!    and a request on which the guest set that header itself is refused,
//! 3. waits for the provider's concurrency and rate limits ([`rate_limit`]),
//! 4. buffers the request body and forwards it with the shared pooled `reqwest` client
//!    (or the provider's own, when its policy names a CA bundle),
//! 5. reads the response body up to the policy's size limit and hands it back,
//! 6. counts the request in [`crate::metrics`], inside a `tracing` span that is a
//!    child of the provider call that caused it.
//!
//! Metric labels are bounded: the destination of an allowed request is the allowlist
//! entry it matched, and denied requests are labelled by reason only.

mod credentials;
pub mod rate_limit;
pub mod resolver;

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use tracing::Instrument;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::capabilities::logging::LogLimiter;
use crate::metrics::{DeniedLabels, EgressLabels, HostLabels, ProviderMetrics};
use crate::policy::Policy;
pub use credentials::CredentialError;

/// Largest request body a guest may send.
pub const MAX_REQUEST_BODY_BYTES: usize = 8 << 20;

/// Process-wide egress settings.
#[derive(Debug, Clone, Default)]
pub struct EgressSettings {
    /// Fixed DNS answers (name -> address) checked before the system resolver, for
    /// split-horizon setups and tests. Link-local answers are refused like any other.
    pub dns_overrides: Vec<(String, IpAddr)>,
}

/// Why a request was refused before it left the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// The URI has no host or an unsupported scheme.
    #[error("request URI `{0}` has no usable scheme and host")]
    BadUri(String),
    /// No `allowedOutboundHosts` pattern matches.
    #[error("{scheme}://{host}:{port} is not in the provider's allowedOutboundHosts")]
    NotAllowed {
        /// The request's scheme.
        scheme: String,
        /// The request's host.
        host: String,
        /// The request's port.
        port: u16,
    },
    /// The destination is a link-local / instance metadata address.
    #[error("{0} is a link-local or instance-metadata address, which providers may never reach")]
    LinkLocal(IpAddr),
    /// The destination name resolves only to link-local addresses.
    #[error("{0}")]
    LinkLocalName(String),
    /// The guest set a header that the host injects for this destination.
    #[error(
        "the provider set its own `{0}` header on a destination whose credentials the host injects"
    )]
    GuestCredentialHeader(String),
    /// The credential for this destination could not be read.
    #[error("credential for this destination is unavailable: {0}")]
    Credential(String),
}

impl Denial {
    /// A short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Denial::BadUri(_) => "bad_uri",
            Denial::NotAllowed { .. } => "not_allowed",
            Denial::LinkLocal(_) | Denial::LinkLocalName(_) => "link_local",
            Denial::GuestCredentialHeader(_) => "guest_credential_header",
            Denial::Credential(_) => "credential_unavailable",
        }
    }
}

/// Errors creating a provider's egress.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
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
        })
    }

    /// The egress of one provider under `policy`.
    pub fn egress(
        &self,
        provider: Arc<str>,
        policy: Arc<Policy>,
    ) -> Result<Arc<Egress>, BrokerError> {
        let client = match &policy.tls_ca_bundle {
            None => self.client.clone(),
            Some(path) => dedicated_client(&self.resolver, path)?,
        };
        let limits = &policy.egress_limits;
        Ok(Arc::new(Egress {
            limiter: rate_limit::EgressLimiter::new(
                limits.max_concurrent_requests,
                limits.requests_per_second,
                limits.burst,
            ),
            credentials: credentials::CredentialStore::new(&policy.credentials),
            denial_log: Mutex::new(LogLimiter::default()),
            metrics: self.metrics.clone(),
            provider,
            policy,
            client,
        }))
    }

    /// The shared client (for native comparisons in benchmarks).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

fn client_builder(resolver: &resolver::GuardedResolver) -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
        // A redirect would leave the allowlist's control: the guest sees the 3xx.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .dns_resolver(Arc::new(resolver.clone()))
}

fn dedicated_client(
    resolver: &resolver::GuardedResolver,
    path: &Path,
) -> Result<reqwest::Client, BrokerError> {
    let ca_error = |reason: String| BrokerError::CaBundle {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(ca_error("no PEM certificates found".into()));
    }
    client_builder(resolver)
        .tls_certs_merge(certs)
        .build()
        .map_err(BrokerError::Client)
}

/// reqwest is built without a default TLS crypto provider; install ring once, as kube does.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Per-provider egress state shared by all of the provider's instances.
pub struct Egress {
    provider: Arc<str>,
    policy: Arc<Policy>,
    client: reqwest::Client,
    credentials: credentials::CredentialStore,
    limiter: rate_limit::EgressLimiter,
    metrics: Arc<ProviderMetrics>,
    denial_log: Mutex<LogLimiter>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

/// An allowed request: the matched allowlist entry and the header to inject.
#[derive(Debug, PartialEq, Eq)]
pub struct Grant {
    /// The allowlist pattern that matched (the `host` metric label).
    pub destination: String,
    /// The credential header, if the destination has one.
    pub inject: Option<(HeaderName, HeaderValue)>,
}

impl Egress {
    /// The hooks to install in one store.
    pub fn hooks(self: &Arc<Self>) -> EgressHooks {
        EgressHooks {
            egress: self.clone(),
        }
    }

    /// Checks a request against the policy.
    pub fn authorize(&self, uri: &http::Uri, headers: &HeaderMap) -> Result<Grant, Denial> {
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| Denial::BadUri(uri.to_string()))?;
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Denial::BadUri(uri.to_string()))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(match scheme {
            "https" => 443,
            _ => 80,
        });
        if let Ok(ip) = host.parse::<IpAddr>()
            && is_link_local(ip)
        {
            return Err(Denial::LinkLocal(ip));
        }
        let Some(pattern) = self
            .policy
            .allowed_outbound_hosts
            .iter()
            .find(|p| p.matches(scheme, host, port))
        else {
            return Err(Denial::NotAllowed {
                scheme: scheme.into(),
                host: host.into(),
                port,
            });
        };
        let destination = pattern.to_string();
        let Some(rule) = self
            .policy
            .credentials
            .iter()
            .position(|rule| rule.destination.matches(scheme, host, port))
        else {
            return Ok(Grant {
                destination,
                inject: None,
            });
        };
        let (name, value) = self
            .credentials
            .header(rule)
            .map_err(|e| Denial::Credential(e.to_string()))?;
        if headers.contains_key(&name) {
            return Err(Denial::GuestCredentialHeader(name.to_string()));
        }
        Ok(Grant {
            destination,
            inject: Some((name, value)),
        })
    }

    fn record_denial(&self, method: &Method, uri: &http::Uri, denial: &Denial) {
        self.metrics
            .egress_denied
            .get_or_create(&DeniedLabels {
                provider: self.provider.to_string(),
                host: String::new(),
                reason: denial.reason().into(),
            })
            .inc();
        let (admit, dropped) = self
            .denial_log
            .lock()
            .expect("denial log lock")
            .admit(Instant::now());
        if admit {
            tracing::warn!(
                provider = %self.provider,
                %method,
                uri = %redact_query(uri),
                reason = denial.reason(),
                suppressed = dropped,
                "outbound request denied: {denial}"
            );
        }
    }

    async fn forward(
        self: Arc<Self>,
        request: http::Request<WasiBody>,
        grant: Grant,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let method = request.method().clone();
        let uri = request.uri().clone();
        let _permit = self.limiter.admit().await;
        let started = Instant::now();
        let result = self.send(request, grant.inject).await;
        let status = match &result {
            Ok(response) => response.status().as_str().to_owned(),
            Err(_) => "error".to_owned(),
        };
        let method_label = match method {
            Method::GET
            | Method::PUT
            | Method::POST
            | Method::DELETE
            | Method::PATCH
            | Method::HEAD => method.as_str().to_owned(),
            _ => "OTHER".to_owned(),
        };
        self.metrics
            .egress_requests
            .get_or_create(&EgressLabels {
                provider: self.provider.to_string(),
                host: grant.destination.clone(),
                method: method_label,
                status: status.clone(),
            })
            .inc();
        self.metrics
            .egress_duration
            .get_or_create(&HostLabels {
                provider: self.provider.to_string(),
                host: grant.destination,
            })
            .observe(started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => {
                tracing::debug!(%status, elapsed_us = started.elapsed().as_micros() as u64, "outbound request")
            }
            Err(Forward::Denied(denial)) => self.record_denial(&method, &uri, denial),
            Err(Forward::Failed(error)) => tracing::warn!(
                provider = %self.provider,
                %method,
                uri = %redact_query(&uri),
                error = %error,
                "outbound request failed"
            ),
        }
        result.map_err(|e| match e {
            Forward::Denied(_) => HttpError::HttpRequestDenied,
            Forward::Failed(error) => error,
        })
    }

    async fn send(
        &self,
        request: http::Request<WasiBody>,
        inject: Option<(HeaderName, HeaderValue)>,
    ) -> Result<http::Response<WasiBody>, Forward> {
        let (parts, body) = request.into_parts();
        let body = collect_limited(body, MAX_REQUEST_BODY_BYTES)
            .await
            .map_err(|_| {
                Forward::Failed(HttpError::HttpRequestBodySize(Some(
                    MAX_REQUEST_BODY_BYTES as u64,
                )))
            })?;
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|_| Forward::Failed(HttpError::HttpRequestUriInvalid))?;
        let mut headers = parts.headers;
        headers.remove(http::header::HOST);
        if let Some((name, value)) = inject {
            headers.insert(name, value);
        }
        let limits = &self.policy.egress_limits;
        let response = self
            .client
            .request(parts.method, url)
            .headers(headers)
            .body(body)
            .timeout(limits.request_timeout)
            .send()
            .await
            .map_err(classify)?;
        let status = response.status();
        let mut builder = http::Response::builder().status(status);
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let body = tokio::time::timeout(
            limits.request_timeout,
            read_limited(response, limits.max_response_bytes),
        )
        .await
        .map_err(|_| Forward::Failed(HttpError::ConnectionReadTimeout))??;
        builder
            .body(
                Full::new(body)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .map_err(|e| Forward::Failed(HttpError::InternalError(Some(e.to_string()))))
    }
}

/// How forwarding failed.
enum Forward {
    /// Refused at connection time (a name resolving to a link-local address).
    Denied(Denial),
    /// A transport failure reported to the guest as this error code.
    Failed(HttpError),
}

/// The [`WasiHttpHooks`] installed in each provider store.
pub struct EgressHooks {
    egress: Arc<Egress>,
}

type ResponseFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> ResponseFuture {
        let egress = self.egress.clone();
        match egress.authorize(request.uri(), request.headers()) {
            Err(denial) => {
                egress.record_denial(request.method(), request.uri(), &denial);
                Box::new(async move { Err(HttpError::HttpRequestDenied) })
            }
            Ok(grant) => {
                // A child of the provider call span current while the guest runs.
                let span = tracing::debug_span!(
                    "egress",
                    provider = %egress.provider,
                    method = %request.method(),
                    destination = %grant.destination,
                );
                Box::new(
                    async move {
                        let response = egress.forward(request, grant).await?;
                        Ok((
                            response,
                            Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
                        ))
                    }
                    .instrument(span),
                )
            }
        }
    }
}

/// 169.254.0.0/16, fe80::/10 and the AWS IPv6 metadata address fd00:ec2::254.
pub fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4.is_link_local();
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.segments() == [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254]
        }
    }
}

fn redact_query(uri: &http::Uri) -> String {
    format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or(""),
        uri.authority().map(|a| a.as_str()).unwrap_or(""),
        uri.path()
    )
}

async fn collect_limited(body: WasiBody, limit: usize) -> Result<Bytes, ()> {
    http_body_util::Limited::new(body, limit)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|_| ())
}

async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Bytes, Forward> {
    if let Some(len) = response.content_length()
        && len > limit as u64
    {
        return Err(Forward::Failed(HttpError::HttpResponseBodySize(Some(len))));
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(classify)? {
        if buf.len() + chunk.len() > limit {
            return Err(Forward::Failed(HttpError::HttpResponseBodySize(Some(
                (buf.len() + chunk.len()) as u64,
            ))));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn classify(err: reqwest::Error) -> Forward {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(link_local) = e.downcast_ref::<resolver::LinkLocalOnly>() {
            return Forward::Denied(Denial::LinkLocalName(link_local.to_string()));
        }
        source = e.source();
    }
    Forward::Failed(if err.is_timeout() {
        HttpError::ConnectionReadTimeout
    } else if err.is_connect() {
        HttpError::ConnectionRefused
    } else if err.is_body() || err.is_decode() {
        HttpError::HttpResponseIncomplete
    } else {
        HttpError::InternalError(Some(err.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(policy: &str) -> Arc<Egress> {
        let policy = Policy::parse(policy, Path::new("/p/test.yaml")).unwrap();
        let metrics = crate::metrics::Metrics::new();
        Broker::new(&EgressSettings::default(), metrics.provider().clone())
            .unwrap()
            .egress("test".into(), Arc::new(policy))
            .unwrap()
    }

    #[test]
    fn unusable_ca_bundles_are_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("empty.pem"), "no certificates here\n").unwrap();
        let broker = Broker::new(
            &EgressSettings::default(),
            crate::metrics::Metrics::new().provider().clone(),
        )
        .unwrap();
        for (file, reason) in [
            ("missing.pem", "No such file"),
            ("empty.pem", "no PEM certificates"),
        ] {
            let policy = Policy::parse(
                &format!("tls: {{caBundleFile: {file}}}"),
                &dir.join("p.yaml"),
            )
            .unwrap();
            let err = broker
                .egress("p".into(), Arc::new(policy))
                .unwrap_err()
                .to_string();
            assert!(err.contains(file) && err.contains(reason), "{err}");
        }
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn deny_by_default() {
        let e = egress("");
        let uri: http::Uri = "http://127.0.0.1:8080/v1".parse().unwrap();
        assert!(matches!(
            e.authorize(&uri, &HeaderMap::new()),
            Err(Denial::NotAllowed { port: 8080, .. })
        ));
    }

    #[test]
    fn allowed_requests_are_labelled_by_the_matching_entry() {
        let e = egress("allowedOutboundHosts: ['http://127.0.0.1:*']");
        let uri: http::Uri = "http://127.0.0.1:8080/v1".parse().unwrap();
        assert_eq!(
            e.authorize(&uri, &HeaderMap::new()),
            Ok(Grant {
                destination: "http://127.0.0.1:*".into(),
                inject: None
            })
        );
    }

    #[test]
    fn link_local_is_never_allowed() {
        let e = egress("allowedOutboundHosts: ['http://*:*']");
        for uri in [
            "http://169.254.169.254/latest/meta-data",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]:80/",
            "http://[::ffff:169.254.169.254]/",
        ] {
            let uri: http::Uri = uri.parse().unwrap();
            assert!(
                matches!(
                    e.authorize(&uri, &HeaderMap::new()),
                    Err(Denial::LinkLocal(_))
                ),
                "{uri}"
            );
        }
    }

    #[test]
    fn guest_authorization_on_a_credentialed_destination_is_refused() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-egress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "s3cret").unwrap();
        let policy = format!(
            "allowedOutboundHosts: ['http://a']\ncredentials: [{{destination: 'http://a', bearerTokenFile: '{}/token'}}]",
            dir.display()
        );
        let e = egress(&policy);
        let uri: http::Uri = "http://a/".parse().unwrap();
        let grant = e.authorize(&uri, &HeaderMap::new()).unwrap();
        let (name, value) = grant.inject.unwrap();
        assert_eq!(name, http::header::AUTHORIZATION);
        assert!(value.is_sensitive());
        let mut own = HeaderMap::new();
        own.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer mine"),
        );
        assert_eq!(
            e.authorize(&uri, &own),
            Err(Denial::GuestCredentialHeader("authorization".into()))
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
