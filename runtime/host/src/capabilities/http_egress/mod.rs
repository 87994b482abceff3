//! HTTP egress: the broker that is a provider's only way to the network.
//!
//! Guests send over `wasi:http/outgoing-handler` (wasmtime hands every request to
//! [`EgressHooks`]) or, a whole request in one call, over the host's
//! `wasm-ccm:http/client` ([`crate::capabilities::http_client`]); both hand
//! [`Egress::send_buffered`] an [`exchange::GuestRequest`] and get an
//! [`exchange::Buffered`] answer back (the request body and the answer are read
//! whole, the answer up to the policy's size limit). It
//!
//! 1. checks the request under `wasi:http`'s rules for guests, whichever way it came
//!    ([`exchange`]), and parses the destination once ([`destination`]) and checks it: the method (no
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
//! 4. forwards it with the shared pooled `reqwest` client (or the provider's own, when
//!    its policy names a CA bundle),
//! 5. reads the response body up to the policy's size limit and hands it back,
//! 6. counts the request in [`crate::metrics`], inside a `tracing` span that is a
//!    child of the provider call that caused it.
//!
//! Metric labels are bounded: the destination of an allowed request is the allowlist
//! entry it matched, and denied requests are labelled by reason only.
//!
//! Where things are: [`broker`] builds each provider's [`Egress`] (and the clients)
//! and holds the embedder's [`intercept`]or, if any; `egress` holds [`Egress`] and the
//! one path of a request; `rules` the policy in force ([`Grant`]: step 1 and the
//! credential choice; steps 2, 4 and 5 as sent); [`credentials`] what is injected (one
//! [`credentials::CredentialKind`] per kind, a folder per cloud); `forward` the
//! deadline, the bounded response and the error and metric labels; [`Denial`] the
//! reasons a request is refused.

pub mod broker;
mod connect;
pub mod credentials;
mod denial;
pub mod destination;
mod egress;
pub mod exchange;
mod forward;
pub mod intercept;
pub mod rate_limit;
pub mod resolver;
mod rules;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

#[cfg(test)]
use broker::install_crypto_provider;
pub use broker::{Broker, BrokerError};
pub use credentials::{CredentialError, Injection};
pub use denial::Denial;
pub use destination::Destination;
pub use egress::Egress;
use exchange::GuestRequest;
pub use forward::DEADLINE_MARKER;
pub use intercept::EgressInterceptor;
pub use rules::Grant;

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
        let (egress, deadline) = (self.egress.clone(), self.deadline);
        // `host` is wasmtime's, from the URI: not the guest's header.
        let mut guest_headers = request.headers().clone();
        guest_headers.remove(http::header::HOST);
        if let Err(refused) = egress.refuse_early(request.method(), request.uri(), &guest_headers) {
            return Box::new(async move { Err(refused) });
        }
        Box::new(async move {
            let request = GuestRequest::from_wasi(request).await?;
            let answer = egress.send_buffered(request, deadline).await?;
            Ok((
                answer.into_wasi(),
                Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

impl EgressHooks {
    fn new(egress: Arc<Egress>) -> Self {
        Self {
            egress,
            deadline: None,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ProviderLabel;
    use crate::policy::Policy;
    use forward::status_label;
    use http::{HeaderMap, HeaderValue, Method};
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
        let destination = Destination::parse("https://a.example.com/").unwrap();
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
        let destination = Destination::parse(uri)?;
        e.authorize(&method, &destination, &HeaderMap::new())
    }

    /// A `wasi:http` request to a destination the policy refuses is refused (and
    /// counted) before its body is read: a guest that never finishes the body does not
    /// hide the attempt. The destination is on loopback (a port nothing serves), so
    /// even a broker that forwarded it could send nothing off this machine.
    #[tokio::test]
    async fn a_refused_wasi_request_is_refused_before_its_body() {
        use http_body_util::BodyExt;
        let e = egress("allowedOutboundHosts: ['http://127.0.0.1:9']");
        let mut hooks = e.hooks();
        let never = http_body_util::StreamBody::new(futures_util::stream::pending::<
            Result<hyper::body::Frame<bytes::Bytes>, HttpError>,
        >())
        .boxed_unsync();
        let request = http::Request::post("http://127.0.0.2:9/latest/api/token")
            .body(never)
            .unwrap();
        let answer = hooks.send_request(request, None, Box::new(async { Ok(()) }));
        let answer =
            tokio::time::timeout(std::time::Duration::from_secs(10), Box::into_pin(answer))
                .await
                .expect("refused without waiting for the body");
        assert!(matches!(answer, Err(HttpError::HttpRequestDenied)));
        let denied = e
            .metrics
            .egress_denied
            .get_or_create(&crate::metrics::DeniedLabels {
                provider: "test".into(),
                host: String::new(),
                reason: "not_allowed".into(),
            })
            .get();
        assert_eq!(denied, 1);
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
        let destination = Destination::parse("https://ec2.us-east-1.amazonaws.com/").unwrap();
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
        let destination = Destination::parse("https://a.example.com/").unwrap();
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
