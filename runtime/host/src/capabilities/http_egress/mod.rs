//! HTTP egress: the broker that is a provider's only way to the network.
//!
//! Guests call `wasi:http/outgoing-handler`; wasmtime hands every request to
//! [`EgressHooks::send_request`], which
//! 1. parses the destination once ([`destination`]) and checks it: the method (no
//!    `TRACE`, no `CONNECT`), the address rules of [`crate::policy::address`] (metadata
//!    and host-local addresses never; loopback only through a pattern naming it), and
//!    the provider policy's allowlist (deny by default). Names are checked again on
//!    what they resolve to ([`resolver`]) and every connection on the address it
//!    reached ([`connect`]), so no spelling, DNS answer or IP literal gets around them;
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

mod connect;
mod credentials;
pub mod destination;
pub mod rate_limit;
pub mod resolver;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method};
use http_body_util::{BodyExt, Full};
use tracing::Instrument;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::capabilities::logging::LogLimiter;
use crate::metrics::{DeniedLabels, EgressLabels, HostLabels, ProviderLabel, ProviderMetrics};
use crate::policy::{Policy, address};
pub use credentials::{AwsError, CredentialError, Injection};
pub use destination::Destination;

/// Largest request body a guest may send.
pub use crate::policy::MAX_REQUEST_BODY_BYTES;

/// Process-wide egress settings.
#[derive(Debug, Clone, Default)]
pub struct EgressSettings {
    /// Fixed DNS answers (name -> address) checked before the system resolver, for
    /// split-horizon setups and tests. Forbidden answers are refused like any other.
    pub dns_overrides: Vec<(String, IpAddr)>,
    /// The directory credential files must lie in (the mounted Secret); `None` leaves
    /// them unconfined (tools and tests). The controller manager always sets it
    /// (`--credentials-dir`).
    pub credentials_dir: Option<PathBuf>,
}

/// Why a request was refused before it left the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// The URI has no host, an unsupported scheme, or user info.
    #[error("request URI `{0}` has no usable scheme and host (or carries user info)")]
    BadUri(String),
    /// `TRACE` or `CONNECT`.
    #[error("method {0} is not allowed")]
    Method(String),
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
    /// The destination is an address no provider may reach.
    #[error("{ip} is {}, which providers may never reach", .never.what)]
    Never {
        /// The address (normalized).
        ip: IpAddr,
        /// What it is.
        never: address::Never,
    },
    /// The destination name resolves, or a connection went, only to such addresses.
    #[error("{message}")]
    NeverByName {
        /// The metric label of the first refused address.
        label: &'static str,
        /// What was refused, for the log.
        message: String,
    },
    /// Loopback, through a pattern that does not name it.
    #[error(
        "{0} is this host's loopback; a provider reaches it only through an allowedOutboundHosts \
         entry naming a loopback address or localhost"
    )]
    Loopback(String),
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
            Denial::Method(_) => "method",
            Denial::NotAllowed { .. } => "not_allowed",
            Denial::Never { never, .. } => never.label,
            Denial::NeverByName { label, .. } => label,
            Denial::Loopback(_) => "loopback",
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
    /// A credential file of the policy is unusable (outside the credentials directory).
    #[error(transparent)]
    Credential(#[from] CredentialError),
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
    /// Throttling answered by the broker itself: (requests left, `Retry-After`).
    throttle: Arc<Mutex<Option<(u32, Duration)>>>,
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
            throttle: Arc::new(Mutex::new(None)),
        })
    }

    /// Answers the next `requests` requests the policy allows with `429 Too Many
    /// Requests` and `Retry-After: <retry_after in seconds>` itself, without forwarding
    /// them: `wasm-ccm conformance` checks that a provider turns a cloud's throttling
    /// into `retry-after`. Requests the policy denies are denied as always.
    pub fn throttle_next(&self, requests: u32, retry_after: Duration) {
        *self.throttle.lock().expect("throttle lock") =
            (requests > 0).then_some((requests, retry_after));
    }

    /// One request's share of [`Self::throttle_next`]: the `Retry-After` to answer.
    fn take_throttle(&self) -> Option<Duration> {
        let mut throttle = self.throttle.lock().expect("throttle lock");
        let (left, retry_after) = (*throttle)?;
        *throttle = (left > 1).then_some((left - 1, retry_after));
        Some(retry_after)
    }

    /// The egress of one provider under `policy`.
    pub fn egress(
        &self,
        provider: Arc<ProviderLabel>,
        policy: Arc<Policy>,
    ) -> Result<Arc<Egress>, BrokerError> {
        Ok(Arc::new(Egress {
            rules: RwLock::new(Arc::new(self.rules(policy)?)),
            broker: self.clone(),
            denial_log: Mutex::new(LogLimiter::default()),
            metrics: self.metrics.clone(),
            provider,
        }))
    }

    /// What a policy makes of a provider's egress.
    fn rules(&self, policy: Arc<Policy>) -> Result<Rules, BrokerError> {
        let client = match &policy.tls_ca_bundle {
            None => self.client.clone(),
            Some(path) => dedicated_client(&self.resolver, path)?,
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
            )?,
            policy,
            client,
        })
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
        // Never a proxy from the environment (HTTP(S)_PROXY, ALL_PROXY): credentials
        // and requests go only where the policy says.
        .no_proxy()
        .connector_layer(connect::PeerGuardLayer)
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
    let pem = read_ca_bundle(path).map_err(|e| ca_error(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(ca_error("no PEM certificates found".into()));
    }
    client_builder(resolver)
        .tls_certs_merge(certs)
        .build()
        .map_err(BrokerError::Client)
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

/// reqwest is built without a default TLS crypto provider; install ring once, as kube does.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Per-provider egress state shared by all of the provider's instances.
pub struct Egress {
    provider: Arc<ProviderLabel>,
    /// What the policy in force says; replaced as a whole when the policy changes.
    rules: RwLock<Arc<Rules>>,
    broker: Broker,
    metrics: Arc<ProviderMetrics>,
    denial_log: Mutex<LogLimiter>,
}

/// A policy's egress: the policy, the client for its TLS settings, its credentials
/// and its limits. A request is authorized and forwarded under one `Rules`.
struct Rules {
    policy: Arc<Policy>,
    client: reqwest::Client,
    credentials: credentials::CredentialStore,
    limiter: rate_limit::EgressLimiter,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

/// An allowed request: the matched allowlist entry and the credential to add.
#[derive(Debug, PartialEq, Eq)]
pub struct Grant {
    /// The allowlist pattern that matched (the `host` metric label).
    pub destination: String,
    /// The credential (a header, or an AWS signature), if the destination has one.
    pub inject: Option<Injection>,
}

impl Egress {
    /// The hooks to install in one store.
    pub fn hooks(self: &Arc<Self>) -> EgressHooks {
        EgressHooks {
            egress: self.clone(),
        }
    }

    /// The rules in force.
    fn rules(&self) -> Arc<Rules> {
        self.rules
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Puts `policy`'s egress rules in force for every instance of the provider, from
    /// the next request on. If they cannot be built (an unreadable CA bundle, a
    /// credential file outside the credentials directory), nothing is allowed any
    /// more (fail closed) and the error says why.
    pub fn replace_policy(&self, policy: Arc<Policy>) -> Result<(), BrokerError> {
        let (rules, result) = match self.broker.rules(policy) {
            Ok(rules) => (rules, Ok(())),
            Err(err) => (
                self.broker
                    .rules(Arc::new(Policy::default()))
                    .expect("the deny-all policy always builds"),
                Err(err),
            ),
        };
        *self
            .rules
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(rules);
        result
    }

    /// Checks a request to `destination` against the address rules and the policy.
    pub fn authorize(
        &self,
        method: &Method,
        destination: &Destination,
        headers: &HeaderMap,
    ) -> Result<Grant, Denial> {
        self.rules().authorize(method, destination, headers)
    }
}

impl Rules {
    fn authorize(
        &self,
        method: &Method,
        destination: &Destination,
        headers: &HeaderMap,
    ) -> Result<Grant, Denial> {
        if *method == Method::TRACE || *method == Method::CONNECT {
            return Err(Denial::Method(method.to_string()));
        }
        if let Some(ip) = destination.ip
            && let Some(never) = address::never_reachable(ip)
        {
            return Err(Denial::Never { ip, never });
        }
        let (scheme, host, port) = (destination.scheme(), &destination.host, destination.port);
        let Some(pattern) = self
            .policy
            .allowed_outbound_hosts
            .iter()
            .find(|p| p.matches(scheme, host, port))
        else {
            return Err(Denial::NotAllowed {
                scheme: scheme.into(),
                host: host.clone(),
                port,
            });
        };
        if destination.is_loopback() && !pattern.names_loopback() {
            return Err(Denial::Loopback(host.clone()));
        }
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
        let injection = self
            .credentials
            .injection(rule)
            .map_err(|e| Denial::Credential(e.to_string()))?;
        if let Some(own) = injection
            .owned_headers()
            .into_iter()
            .find(|name| headers.contains_key(*name))
        {
            return Err(Denial::GuestCredentialHeader(own.to_owned()));
        }
        Ok(Grant {
            destination,
            inject: Some(injection),
        })
    }
}

impl Egress {
    fn record_denial(&self, method: &Method, uri: &str, denial: &Denial) {
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
                uri = %uri,
                reason = denial.reason(),
                suppressed = dropped,
                "outbound request denied: {denial}"
            );
        }
    }

    async fn forward(
        self: Arc<Self>,
        rules: Arc<Rules>,
        request: http::Request<WasiBody>,
        destination: Destination,
        grant: Grant,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let method = request.method().clone();
        let uri = redact_query(&destination.url);
        let _permit = rules.limiter.admit().await;
        let started = Instant::now();
        let result = match self.broker.take_throttle() {
            Some(retry_after) => throttled(retry_after),
            None => rules.send(request, destination, grant.inject).await,
        };
        let status = match &result {
            Ok(response) => status_label(response.status()),
            Err(_) => "error",
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
                status: status.to_owned(),
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
                uri = %uri,
                error = %error,
                "outbound request failed"
            ),
        }
        result.map_err(|e| match e {
            Forward::Denied(_) => HttpError::HttpRequestDenied,
            Forward::Failed(error) => error,
        })
    }
}

impl Rules {
    async fn send(
        &self,
        request: http::Request<WasiBody>,
        destination: Destination,
        inject: Option<Injection>,
    ) -> Result<http::Response<WasiBody>, Forward> {
        let (parts, body) = request.into_parts();
        let body = collect_limited(body, MAX_REQUEST_BODY_BYTES)
            .await
            .map_err(|_| {
                Forward::Failed(HttpError::HttpRequestBodySize(Some(
                    MAX_REQUEST_BODY_BYTES as u64,
                )))
            })?;
        let url = destination.url;
        let mut headers = parts.headers;
        headers.remove(http::header::HOST);
        match inject {
            None => {}
            Some(Injection::Header(name, value)) => {
                headers.insert(name, value);
            }
            Some(Injection::Aws(signer)) => signer
                .sign(&parts.method, &url, &mut headers, &body, &self.client)
                .await
                .map_err(|e| Forward::Denied(Denial::Credential(e.to_string())))?,
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

/// The answer of [`Broker::throttle_next`].
fn throttled(retry_after: Duration) -> Result<http::Response<WasiBody>, Forward> {
    http::Response::builder()
        .status(http::StatusCode::TOO_MANY_REQUESTS)
        .header(http::header::RETRY_AFTER, retry_after.as_secs().to_string())
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(
            Full::new(Bytes::from_static(
                b"throttled by the host (wasm-ccm conformance)",
            ))
            .map_err(|never| match never {})
            .boxed_unsync(),
        )
        .map_err(|e| Forward::Failed(HttpError::InternalError(Some(e.to_string()))))
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
        // One request, one set of rules: authorized and forwarded under the same policy.
        let rules = egress.rules();
        let checked = Destination::parse(request.uri()).and_then(|destination| {
            rules
                .authorize(request.method(), &destination, request.headers())
                .map(|grant| (destination, grant))
        });
        match checked {
            Err(denial) => {
                egress.record_denial(request.method(), &redact_uri(request.uri()), &denial);
                Box::new(async move { Err(HttpError::HttpRequestDenied) })
            }
            Ok((destination, grant)) => {
                // A child of the provider call span current while the guest runs.
                let span = tracing::debug_span!(
                    "egress",
                    provider = %egress.provider,
                    method = %request.method(),
                    destination = %grant.destination,
                );
                Box::new(
                    async move {
                        let response = egress.forward(rules, request, destination, grant).await?;
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

/// The `status` label: the codes clouds use for their API contract, else the class,
/// so a server cannot create series at will.
fn status_label(status: http::StatusCode) -> &'static str {
    const KNOWN: [&str; 17] = [
        "200", "201", "202", "204", "304", "400", "401", "403", "404", "409", "412", "422", "429",
        "500", "502", "503", "504",
    ];
    if let Some(known) = KNOWN.iter().find(|k| **k == status.as_str()) {
        return known;
    }
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// The URL without its query (which may carry tokens), for logs.
fn redact_query(url: &reqwest::Url) -> String {
    let mut redacted = url.clone();
    redacted.set_query(None);
    redacted.set_fragment(None);
    redacted.to_string()
}

/// The guest's URI without its query, for logs of requests refused before parsing.
fn redact_uri(uri: &http::Uri) -> String {
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
    // The operating system's error behind `err`, if one is (the first in the chain).
    let mut io_kind = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<resolver::Unreachable>() {
            return Forward::Denied(Denial::NeverByName {
                label: refused.label,
                message: refused.to_string(),
            });
        }
        if let Some(refused) = e.downcast_ref::<connect::RefusedPeer>() {
            return Forward::Denied(Denial::NeverByName {
                label: refused.label,
                message: refused.to_string(),
            });
        }
        if let Some(failed) = e.downcast_ref::<resolver::LookupFailed>() {
            return Forward::Failed(HttpError::DnsError {
                rcode: Some(failed.source.to_string()),
                info_code: None,
            });
        }
        io_kind = io_kind.or_else(|| e.downcast_ref::<std::io::Error>().map(|io| io.kind()));
        source = e.source();
    }
    Forward::Failed(if err.is_timeout() && err.is_connect() {
        HttpError::ConnectionTimeout
    } else if err.is_timeout() {
        HttpError::ConnectionReadTimeout
    } else if err.is_connect() {
        // The guest tells a refused connection (nothing listens) from a destination it
        // could not reach at all (no route, reset while connecting).
        match io_kind {
            Some(std::io::ErrorKind::ConnectionRefused) => HttpError::ConnectionRefused,
            Some(std::io::ErrorKind::TimedOut) => HttpError::ConnectionTimeout,
            _ => HttpError::DestinationUnavailable,
        }
    } else if err.is_body() || err.is_decode() {
        HttpError::HttpResponseIncomplete
    } else {
        HttpError::InternalError(Some(err.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn egress(policy: &str) -> Arc<Egress> {
        let policy = Policy::parse(policy, Path::new("/p/test.yaml")).unwrap();
        let metrics = crate::metrics::Metrics::new();
        Broker::new(&EgressSettings::default(), metrics.provider().clone())
            .unwrap()
            .egress(ProviderLabel::new("test"), Arc::new(policy))
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
            ("/dev/zero", "not a regular file"),
        ] {
            let policy = Policy::parse(
                &format!("tls: {{caBundleFile: {file}}}"),
                &dir.join("p.yaml"),
            )
            .unwrap();
            let err = broker
                .egress(ProviderLabel::new("p"), Arc::new(policy))
                .unwrap_err()
                .to_string();
            assert!(err.contains(file) && err.contains(reason), "{err}");
        }
        std::fs::remove_dir_all(dir).ok();
    }

    fn authorize(e: &Egress, method: Method, uri: &str) -> Result<Grant, Denial> {
        let destination = Destination::parse(&uri.parse().unwrap())?;
        e.authorize(&method, &destination, &HeaderMap::new())
    }

    #[test]
    fn deny_by_default() {
        let e = egress("");
        assert!(matches!(
            authorize(&e, Method::GET, "http://127.0.0.1:8080/v1"),
            Err(Denial::NotAllowed { port: 8080, .. })
        ));
    }

    #[test]
    fn allowed_requests_are_labelled_by_the_matching_entry() {
        let e = egress("allowedOutboundHosts: ['http://127.0.0.1:*']");
        assert_eq!(
            authorize(&e, Method::GET, "http://127.0.0.1:8080/v1"),
            Ok(Grant {
                destination: "http://127.0.0.1:*".into(),
                inject: None
            })
        );
        // The same address in another spelling is the same destination.
        assert!(authorize(&e, Method::GET, "http://2130706433:8080/v1").is_ok());
    }

    #[test]
    fn metadata_and_host_local_addresses_are_never_allowed_in_any_spelling() {
        let e = egress("allowedOutboundHosts: ['http://*.example.com:*', 'http://127.0.0.1:*']");
        for (uri, reason) in [
            ("http://169.254.169.254/latest/meta-data", "link_local"),
            ("http://2852039166/latest/meta-data", "link_local"),
            ("http://0xA9FEA9FE/", "link_local"),
            ("http://0251.0376.0251.0376/", "link_local"),
            ("http://169.254.43518/", "link_local"),
            ("http://169.254.169.254./", "link_local"),
            ("http://[fe80::1]:80/", "link_local"),
            ("http://[::ffff:169.254.169.254]/", "link_local"),
            ("http://[64:ff9b::a9fe:a9fe]/", "link_local"),
            ("http://[fd00:ec2::254]/", "metadata"),
            ("http://168.63.129.16/", "metadata"),
            ("http://100.100.100.200/", "metadata"),
            ("http://0.0.0.0:8080/", "unspecified"),
            ("http://[::]:8080/", "unspecified"),
        ] {
            let denial = authorize(&e, Method::GET, uri).unwrap_err();
            assert_eq!(denial.reason(), reason, "{uri}: {denial}");
        }
    }

    #[test]
    fn loopback_only_through_a_pattern_naming_it() {
        let e = egress(
            "allowedOutboundHosts: ['http://*.example.com:*', 'http://127.0.0.1:8080', 'http://localhost:9090']",
        );
        assert!(authorize(&e, Method::GET, "http://127.0.0.1:8080/").is_ok());
        assert!(authorize(&e, Method::GET, "http://localhost:9090/").is_ok());
        // Not named: the address does not match, and no wildcard reaches loopback.
        assert!(matches!(
            authorize(&e, Method::GET, "http://127.0.0.2:8080/"),
            Err(Denial::NotAllowed { .. })
        ));
        // Nor does a wildcard over it: `*.localhost` is refused as too wide.
        assert!(
            Policy::parse(
                "allowedOutboundHosts: ['http://*.localhost:*']",
                Path::new("/p")
            )
            .is_err()
        );
    }

    #[test]
    fn status_labels_are_bounded() {
        let label = |code: u16| status_label(http::StatusCode::from_u16(code).unwrap());
        assert_eq!(label(200), "200");
        assert_eq!(label(429), "429");
        assert_eq!(label(418), "4xx");
        assert_eq!(label(299), "2xx");
        assert_eq!(label(599), "5xx");
        assert_eq!(label(999), "other");
        let distinct: std::collections::BTreeSet<&str> = (100..1000).map(label).collect();
        assert!(distinct.len() <= 23, "{distinct:?}");
    }

    #[test]
    fn trace_and_connect_are_refused() {
        let e = egress("allowedOutboundHosts: ['https://api.example.com']");
        for method in [Method::TRACE, Method::CONNECT] {
            assert_eq!(
                authorize(&e, method.clone(), "https://api.example.com/").unwrap_err(),
                Denial::Method(method.to_string())
            );
        }
        assert!(authorize(&e, Method::PATCH, "https://api.example.com/").is_ok());
    }

    #[test]
    fn guest_signing_headers_on_an_aws_destination_are_refused() {
        let e = egress(
            "allowedOutboundHosts: ['https://ec2.us-east-1.amazonaws.com']\n\
             credentials: [{destination: 'https://ec2.us-east-1.amazonaws.com', aws: {services: [ec2], accessKeyIdFile: /nonexistent/id, secretAccessKeyFile: /nonexistent/key}}]",
        );
        let destination =
            Destination::parse(&"https://ec2.us-east-1.amazonaws.com/".parse().unwrap()).unwrap();
        let grant = e
            .authorize(&Method::POST, &destination, &HeaderMap::new())
            .unwrap();
        assert!(matches!(grant.inject, Some(Injection::Aws(_))));
        for header in [
            "authorization",
            "x-amz-date",
            "x-amz-security-token",
            "x-amz-content-sha256",
        ] {
            let mut own = HeaderMap::new();
            own.insert(
                http::HeaderName::from_static(header),
                HeaderValue::from_static("x"),
            );
            assert_eq!(
                e.authorize(&Method::POST, &destination, &own),
                Err(Denial::GuestCredentialHeader(header.into()))
            );
        }
    }

    #[test]
    fn guest_authorization_on_a_credentialed_destination_is_refused() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-egress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "s3cret").unwrap();
        let policy = format!(
            "allowedOutboundHosts: ['https://a.example.com']\ncredentials: [{{destination: 'https://a.example.com', bearerTokenFile: '{}/token'}}]",
            dir.display()
        );
        let e = egress(&policy);
        let destination = Destination::parse(&"https://a.example.com/".parse().unwrap()).unwrap();
        let grant = e
            .authorize(&Method::GET, &destination, &HeaderMap::new())
            .unwrap();
        let Some(Injection::Header(name, value)) = grant.inject else {
            panic!("a header credential")
        };
        assert_eq!(name, http::header::AUTHORIZATION);
        assert!(value.is_sensitive());
        let mut own = HeaderMap::new();
        own.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer mine"),
        );
        assert_eq!(
            e.authorize(&Method::GET, &destination, &own),
            Err(Denial::GuestCredentialHeader("authorization".into()))
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
