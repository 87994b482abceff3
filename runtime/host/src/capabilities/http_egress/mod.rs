//! HTTP egress: the broker that is a provider's only way to the network.
//!
//! Guests send over `wasi:http/outgoing-handler` (wasmtime hands every request to
//! [`EgressHooks::send_request`]) or, a whole request in one call, over the host's
//! `wasm-ccm:http/client` ([`crate::capabilities::http_client`]); both end in
//! `Egress::send`, which
//! 1. parses the destination once ([`destination`]) and checks it: the method (no
//!    `TRACE`, no `CONNECT`), the address rules of [`crate::policy::address`] (metadata
//!    and host-local addresses never; loopback only through a pattern naming it), and
//!    the provider policy's allowlist (deny by default). Names are checked again on
//!    what they resolve to ([`resolver`]) and every connection on the address it
//!    reached ([`connect`]), so no spelling, DNS answer or IP literal gets around them;
//! 2. injects the credential configured for the destination; the guest never sees it,
//!    and a request on which the guest set that header itself is refused, as is one
//!    asking the server for another method than the one `allowedActions` checked
//!    ([`credentials::method_override`]),
//! 3. waits for the provider's concurrency and rate limits ([`rate_limit`]),
//! 4. buffers the request body and forwards it with the shared pooled `reqwest` client
//!    (or the provider's own, when its policy names a CA bundle),
//! 5. reads the response body up to the policy's size limit and hands it back,
//! 6. counts the request in [`crate::metrics`], inside a `tracing` span that is a
//!    child of the provider call that caused it.
//!
//! Metric labels are bounded: the destination of an allowed request is the allowlist
//! entry it matched, and denied requests are labelled by reason only.
//!
//! Where things are: [`broker`] builds each provider's [`Egress`] (and the clients)
//! and holds the embedder's [`intercept`]or, if any; `authorize` holds step 1 and the
//! credential choice, [`credentials`] what is injected (one
//! [`credentials::CredentialKind`] per kind, a folder per cloud), `forward` steps 3 to
//! 6, [`Denial`] the reasons a request is refused.

mod authorize;
pub mod broker;
mod connect;
pub mod credentials;
mod denial;
pub mod destination;
mod forward;
pub mod intercept;
pub mod rate_limit;
pub mod resolver;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use http::{HeaderMap, Method};
use tracing::Instrument;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::capabilities::logging::LogLimiter;
use crate::metrics::{ProviderLabel, ProviderMetrics};
use crate::policy::Policy;
pub use authorize::Grant;
use authorize::Rules;
#[cfg(test)]
use broker::install_crypto_provider;
pub use broker::{Broker, BrokerError};
pub use credentials::{CredentialError, Injection};
pub use denial::Denial;
pub use destination::Destination;
pub use forward::DEADLINE_MARKER;
use forward::redact_uri;
pub use intercept::EgressInterceptor;

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

/// Per-provider egress state shared by all of the provider's instances.
pub struct Egress {
    provider: Arc<ProviderLabel>,
    /// What the policy in force says; replaced as a whole when the policy changes.
    rules: RwLock<Arc<Rules>>,
    /// The credential kinds' sessions (logins), kept when the policy is replaced.
    sessions: credentials::Sessions,
    broker: Broker,
    metrics: Arc<ProviderMetrics>,
    denial_log: Mutex<LogLimiter>,
    /// `wasm-ccm/<version> (provider <name>)`, for requests whose provider sets none.
    user_agent: http::HeaderValue,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// The hooks to install in one store.
    pub fn hooks(self: &Arc<Self>) -> EgressHooks {
        EgressHooks {
            egress: self.clone(),
            deadline: None,
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
        let (rules, result) = match self.broker.rules(policy, &self.sessions) {
            Ok(rules) => (rules, Ok(())),
            Err(err) => (
                self.broker
                    .rules(Arc::new(Policy::default()), &self.sessions)
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

/// The [`WasiHttpHooks`] installed in each provider store.
pub struct EgressHooks {
    egress: Arc<Egress>,
    /// When the host ends the call the instance is running (none between calls).
    deadline: Option<Instant>,
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
        let response = self.egress.clone().send(request, self.deadline);
        Box::new(async move {
            Ok((
                response.await?,
                Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

impl EgressHooks {
    /// The provider's egress.
    pub(crate) fn egress(&self) -> &Arc<Egress> {
        &self.egress
    }

    /// When the host ends the call the instance is running: no request starts that
    /// could outlive it.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Sets (or, between calls, clears) the call's deadline.
    pub(crate) fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }
}

impl Egress {
    /// Sends one request of the provider through the broker: authorized, credentialed,
    /// limited, forwarded and counted. Both ways out of a guest end here:
    /// `wasi:http/outgoing-handler` ([`EgressHooks`]) and the buffered
    /// `wasm-ccm:http/client` ([`crate::capabilities::http_client`]). A request that
    /// could not finish before `deadline` (the call's) at the policy's
    /// `requestTimeout` is not started: the provider is told so (see
    /// [`DEADLINE_MARKER`]) and can answer `retry-after` in time.
    pub(crate) fn send(
        self: Arc<Self>,
        request: http::Request<WasiBody>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<http::Response<WasiBody>, HttpError>> + Send + 'static {
        // One request, one set of rules: authorized and forwarded under the same policy.
        let rules = self.rules();
        let checked = check(&rules, &request);
        async move {
            let checked = match checked {
                // Not allowed before a kind's first login: what it learns may allow it.
                Err(Denial::NotAllowed { .. }) if rules.awaiting_login() => {
                    rules.log_in().await;
                    check(&rules, &request)
                }
                checked => checked,
            };
            let (destination, grant) = match checked {
                Ok(allowed) => allowed,
                Err(denial) => {
                    self.record_denial(request.method(), &redact_uri(request.uri()), &denial);
                    return Err(HttpError::HttpRequestDenied);
                }
            };
            // A child of the provider call span current while the guest runs.
            let span = tracing::debug_span!(
                "egress",
                provider = %self.provider,
                method = %request.method(),
                destination = %grant.destination,
            );
            self.forward(rules, request, destination, grant, deadline)
                .instrument(span)
                .await
        }
    }
}

/// Authorizes `request` under `rules`.
fn check(rules: &Rules, request: &http::Request<WasiBody>) -> Result<(Destination, Grant), Denial> {
    let destination = Destination::parse(request.uri())?;
    let grant = rules.authorize(request.method(), &destination, request.headers())?;
    Ok((destination, grant))
}

#[cfg(test)]
mod tests {
    use super::*;
    use forward::status_label;
    use http::HeaderValue;
    use std::path::Path;

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

    #[test]
    fn a_ca_bundle_outside_the_credentials_directory_is_refused() {
        let root = std::env::temp_dir().join(format!("wasm-ccm-ca-dir-{}", std::process::id()));
        let secrets = root.join("credentials");
        std::fs::create_dir_all(&secrets).unwrap();
        // Not a certificate: inside the directory it is read (and refused for what it
        // holds), outside it is never read.
        let pem = "no certificates here\n";
        std::fs::write(root.join("attacker-ca.pem"), pem).unwrap();
        std::fs::write(secrets.join("ca.pem"), pem).unwrap();
        let broker = Broker::new(
            &EgressSettings {
                credentials_dir: Some(secrets.clone()),
                ..EgressSettings::default()
            },
            crate::metrics::Metrics::new().provider().clone(),
        )
        .unwrap();
        let load = |file: &str| {
            let policy = Policy::parse(
                &format!("tls: {{caBundleFile: {file}}}"),
                &root.join("p.yaml"),
            )
            .unwrap();
            broker.egress(ProviderLabel::new("p"), Arc::new(policy))
        };
        let inside = load("credentials/ca.pem").unwrap_err().to_string();
        assert!(inside.contains("no PEM certificates"), "{inside}");
        let err = load("attacker-ca.pem").unwrap_err().to_string();
        assert!(
            err.contains("attacker-ca.pem") && err.contains("outside the credentials directory"),
            "{err}"
        );
        std::fs::remove_dir_all(root).ok();
    }

    #[test]
    fn method_override_headers_and_keystone_s_credential_headers_are_refused() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-override-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "s3cret").unwrap();
        let e = egress(&format!(
            "allowedOutboundHosts: ['https://a.example.com']\ncredentials: [{{destination: 'https://a.example.com', bearerTokenFile: '{}/token'}}]",
            dir.display()
        ));
        let destination = Destination::parse(&"https://a.example.com/".parse().unwrap()).unwrap();
        // Refused on every credentialed request, even without allowedActions; `_` is
        // read as `-` by servers that map headers to CGI variables.
        for header in [
            "x-http-method-override",
            "x-http-method",
            "x-method-override",
            "x_http_method_override",
        ] {
            let mut own = HeaderMap::new();
            own.insert(
                http::HeaderName::from_static(header),
                HeaderValue::from_static("DELETE"),
            );
            let denial = e.authorize(&Method::POST, &destination, &own).unwrap_err();
            assert_eq!(denial.reason(), "method_override", "{header}: {denial}");
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
                inject: None,
                rule: None,
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
        assert!(matches!(grant.inject, Some(Injection::Credential(_))));
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

    /// Runs a future that never waits (a header credential's `apply`) to its end.
    fn futures_lite_block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
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
        let Some(Injection::Credential(kind)) = grant.inject else {
            panic!("a header credential")
        };
        let mut request = credentials::Outgoing {
            method: Method::GET,
            url: destination.url.clone(),
            headers: HeaderMap::new(),
            body: bytes::Bytes::new(),
        };
        futures_lite_block_on(kind.apply(&mut request, &reqwest::Client::new())).unwrap();
        let value = &request.headers[http::header::AUTHORIZATION];
        assert_eq!(value, "Bearer s3cret");
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
