//! HTTP egress: the only way a provider reaches the network.
//!
//! Guests call `wasi:http/outgoing-handler`; wasmtime hands every request to
//! [`EgressHooks::send_request`], which
//! 1. checks the destination against the provider policy's allowlist (deny by default,
//!    link-local metadata addresses never allowed),
//! 2. injects the credential configured for the destination (the guest never sees it,
//!    and a guest-set header of the same name is refused),
//! 3. buffers the request body and forwards it with one pooled `reqwest` client,
//! 4. buffers the response body up to the policy's size limit and hands it back.

pub mod allowlist;
mod credentials;

use std::net::IpAddr;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::policy::Policy;
pub use credentials::CredentialError;

/// Largest request body a guest may send.
pub const MAX_REQUEST_BODY_BYTES: usize = 8 << 20;

/// Why a request was refused before it left the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// The URI has no host or an unsupported scheme.
    #[error("request URI `{0}` has no usable scheme and host")]
    BadUri(String),
    /// No `allowedOutboundHosts` pattern matches.
    #[error("{scheme}://{host}:{port} is not in the provider's allowedOutboundHosts")]
    NotAllowed {
        scheme: String,
        host: String,
        port: u16,
    },
    /// The destination is a link-local / instance metadata address.
    #[error("{0} is a link-local or instance-metadata address, which providers may never reach")]
    LinkLocal(IpAddr),
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
            Denial::LinkLocal(_) => "link_local",
            Denial::GuestCredentialHeader(_) => "guest_credential_header",
            Denial::Credential(_) => "credential_unavailable",
        }
    }
}

/// The pooled HTTP client all providers' requests go through. Redirects are not
/// followed (a redirect would leave the allowlist's control; the guest sees the 3xx).
pub fn client() -> reqwest::Result<reqwest::Client> {
    install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .build()
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
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// Creates the egress for a provider with its policy, sharing `client`'s
    /// connection pool.
    pub fn new(provider: Arc<str>, policy: Arc<Policy>, client: reqwest::Client) -> Self {
        Self {
            provider,
            credentials: credentials::CredentialStore::new(&policy.credentials),
            policy,
            client,
        }
    }

    /// The hooks to install in one store.
    pub fn hooks(self: &Arc<Self>) -> EgressHooks {
        EgressHooks {
            egress: self.clone(),
        }
    }

    /// Checks a request against the policy and returns the header to inject, if any.
    pub fn authorize(
        &self,
        uri: &http::Uri,
        headers: &HeaderMap,
    ) -> Result<Option<(HeaderName, HeaderValue)>, Denial> {
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
        if !self
            .policy
            .allowed_outbound_hosts
            .iter()
            .any(|p| p.matches(scheme, host, port))
        {
            return Err(Denial::NotAllowed {
                scheme: scheme.into(),
                host: host.into(),
                port,
            });
        }
        let Some(rule) = self
            .policy
            .credentials
            .iter()
            .position(|rule| rule.destination.matches(scheme, host, port))
        else {
            return Ok(None);
        };
        let (name, value) = self
            .credentials
            .header(rule)
            .map_err(|e| Denial::Credential(e.to_string()))?;
        if headers.contains_key(&name) {
            return Err(Denial::GuestCredentialHeader(name.to_string()));
        }
        Ok(Some((name, value)))
    }

    async fn forward(
        self: Arc<Self>,
        request: http::Request<WasiBody>,
        inject: Option<(HeaderName, HeaderValue)>,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let body = collect_limited(body, MAX_REQUEST_BODY_BYTES)
            .await
            .map_err(|_| HttpError::HttpRequestBodySize(Some(MAX_REQUEST_BODY_BYTES as u64)))?;
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        let mut headers = parts.headers;
        headers.remove(http::header::HOST);
        if let Some((name, value)) = inject {
            headers.insert(name, value);
        }
        let limits = &self.policy.limits;
        let response = self
            .client
            .request(parts.method.clone(), url)
            .headers(headers)
            .body(body)
            .timeout(limits.request_timeout)
            .send()
            .await
            .map_err(|err| {
                tracing::warn!(provider = %self.provider, method = %parts.method, host = ?parts.uri.host(), error = %err, "outbound request failed");
                map_reqwest_error(&err)
            })?;
        let status = response.status();
        let mut builder = http::Response::builder().status(status);
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let body = read_limited(response, limits.max_response_bytes).await?;
        tracing::debug!(
            provider = %self.provider,
            method = %parts.method,
            host = ?parts.uri.host(),
            status = status.as_u16(),
            bytes = body.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "outbound request"
        );
        builder
            .body(
                Full::new(body)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .map_err(|e| HttpError::InternalError(Some(e.to_string())))
    }
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
                tracing::warn!(
                    provider = %egress.provider,
                    method = %request.method(),
                    uri = %redact_query(request.uri()),
                    reason = denial.reason(),
                    "outbound request denied: {denial}"
                );
                Box::new(async move { Err(HttpError::HttpRequestDenied) })
            }
            Ok(inject) => Box::new(async move {
                let response = egress.forward(request, inject).await?;
                Ok((
                    response,
                    Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
                ))
            }),
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
                || v6 == "fd00:ec2::254".parse::<std::net::Ipv6Addr>().unwrap()
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
    let limited = http_body_util::Limited::new(body, limit);
    limited
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|_| ())
}

async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Bytes, HttpError> {
    if let Some(len) = response.content_length()
        && len > limit as u64
    {
        return Err(HttpError::HttpResponseBodySize(Some(len)));
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| map_reqwest_error(&e))? {
        if buf.len() + chunk.len() > limit {
            return Err(HttpError::HttpResponseBodySize(Some(
                (buf.len() + chunk.len()) as u64,
            )));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn map_reqwest_error(err: &reqwest::Error) -> HttpError {
    if err.is_timeout() {
        HttpError::ConnectionReadTimeout
    } else if err.is_connect() {
        HttpError::ConnectionRefused
    } else if err.is_body() || err.is_decode() {
        HttpError::HttpResponseIncomplete
    } else {
        HttpError::InternalError(Some(err.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn egress(policy: &str) -> Egress {
        let policy = Policy::parse(policy, Path::new("/p/test.yaml")).unwrap();
        Egress::new("test".into(), Arc::new(policy), client().unwrap())
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
    fn link_local_is_never_allowed() {
        let e = egress("allowedOutboundHosts: ['http://*:*']");
        for uri in [
            "http://169.254.169.254/latest/meta-data",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]:80/",
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
        let ok: http::Uri = "http://127.0.0.1/".parse().unwrap();
        assert_eq!(e.authorize(&ok, &HeaderMap::new()), Ok(None));
    }
}
