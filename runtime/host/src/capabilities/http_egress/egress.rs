//! [`Egress`]: one provider's way out, shared by its instances: the rules in force,
//! the credential sessions, and the one path every guest request takes
//! ([`Egress::send_buffered`]): checked, authorized, limited, credentialed, forwarded,
//! read back and counted.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use http::{HeaderMap, Method};
use tracing::Instrument;
use wasmtime_wasi_http::Error as HttpError;

use super::exchange::{Buffered, GuestRequest};
use super::forward::{Forward, fits, redact_query, status_label};
use super::rules::{Grant, Rules};
use super::{Broker, BrokerError, DEADLINE_MARKER, Denial, Destination, EgressHooks};
use crate::capabilities::logging::LogLimiter;
use crate::metrics::{DeniedLabels, EgressLabels, HostLabels, ProviderLabel, ProviderMetrics};
use crate::policy::{Policy, call_grace};

/// Per-provider egress state shared by all of the provider's instances.
pub struct Egress {
    pub(super) provider: Arc<ProviderLabel>,
    /// What the policy in force says; replaced as a whole when the policy changes.
    pub(super) rules: RwLock<Arc<Rules>>,
    /// The credential kinds' sessions (logins), kept when the policy is replaced.
    pub(super) sessions: super::credentials::Sessions,
    pub(super) broker: Broker,
    pub(super) metrics: Arc<ProviderMetrics>,
    pub(super) denial_log: Mutex<LogLimiter>,
    /// `wasm-ccm/<version> (provider <name>)`, for requests whose provider sets none.
    pub(super) user_agent: http::HeaderValue,
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
        EgressHooks::new(self.clone())
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

    /// Sends one request of the provider through the broker: checked under
    /// `wasi:http`'s rules for guests, authorized, credentialed, limited, forwarded,
    /// read back whole and counted. Both ways out of a guest end here:
    /// `wasi:http/outgoing-handler` ([`EgressHooks`]) and the buffered
    /// `wasm-ccm:http/client` ([`crate::capabilities::http_client`]). A request that
    /// could not finish before `deadline` (the call's) at the policy's
    /// `requestTimeout` is not started: the provider is told so (see
    /// [`DEADLINE_MARKER`]) and can answer `retry-after` in time.
    pub(crate) fn send_buffered(
        self: Arc<Self>,
        request: GuestRequest,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Buffered, HttpError>> + Send + 'static {
        // One request, one set of rules: authorized and forwarded under the same policy.
        let rules = self.rules();
        async move {
            request.check()?;
            let destination = match Destination::parse(&request.url) {
                Ok(destination) => destination,
                Err(denial) => {
                    self.record_denial(&request.method, &request.redacted_url(), &denial);
                    return Err(HttpError::HttpRequestDenied);
                }
            };
            let grant = match rules.authorize(&request.method, &destination, &request.headers) {
                // Not allowed before a kind's first login: what it learns may allow it.
                Err(Denial::NotAllowed { .. }) if rules.awaiting_login() => {
                    rules.log_in().await;
                    rules.authorize(&request.method, &destination, &request.headers)
                }
                granted => granted,
            };
            let grant = match grant {
                Ok(grant) => grant,
                Err(denial) => {
                    self.record_denial(&request.method, &redact_query(&destination.url), &denial);
                    return Err(HttpError::HttpRequestDenied);
                }
            };
            // A child of the provider call span current while the guest runs.
            let span = tracing::debug_span!(
                "egress",
                provider = %self.provider,
                method = %request.method,
                destination = %grant.destination,
            );
            self.forward(rules, request, destination, grant, deadline)
                .instrument(span)
                .await
        }
    }

    /// Refuses, before its body is read, a `wasi:http` request the policy in force
    /// refuses: counted and logged even when the guest never finishes its body. What
    /// this lets through is decided again, whole, by [`Self::send_buffered`] (as is a
    /// request refused only until a credential kind's first login).
    pub(crate) fn refuse_early(
        &self,
        method: &Method,
        uri: &http::Uri,
        headers: &HeaderMap,
    ) -> Result<(), HttpError> {
        let text = uri.to_string();
        let rules = self.rules();
        let destination = match Destination::parse(&text) {
            Ok(destination) => destination,
            Err(denial) => {
                self.record_denial(method, &super::exchange::redact(&text), &denial);
                return Err(HttpError::HttpRequestDenied);
            }
        };
        match rules.authorize(method, &destination, headers) {
            Ok(_) => Ok(()),
            Err(Denial::NotAllowed { .. }) if rules.awaiting_login() => Ok(()),
            Err(denial) => {
                self.record_denial(method, &redact_query(&destination.url), &denial);
                Err(HttpError::HttpRequestDenied)
            }
        }
    }

    pub(super) fn record_denial(&self, method: &Method, uri: &str, denial: &Denial) {
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

    /// Steps 3 to 6 of an authorized request: limits, the upstream call (or the
    /// embedder's interceptor), metrics and logs.
    async fn forward(
        self: Arc<Self>,
        rules: Arc<Rules>,
        request: GuestRequest,
        destination: Destination,
        grant: Grant,
        deadline: Option<Instant>,
    ) -> Result<Buffered, HttpError> {
        let method = request.method.clone();
        let _permit = rules.limiter.admit().await;
        let started = Instant::now();
        let timeout = rules.policy.egress_limits.request_timeout;
        let result = match self.broker.intercept(&method, &destination.url) {
            Some(answer) => Ok(Buffered::from(answer)),
            None => match fits(
                deadline,
                timeout,
                call_grace(rules.policy.instance_limits.call_timeout),
                started,
            ) {
                Err(short) => Err(Forward::NotStarted(short)),
                // One bound for all of it: a login, the request, a renewed credential's
                // second try and the body.
                Ok(()) => tokio::time::timeout(
                    timeout,
                    rules.send(
                        request,
                        &destination,
                        grant.inject,
                        grant.rule,
                        &self.user_agent,
                    ),
                )
                .await
                .unwrap_or(Err(Forward::Failed(HttpError::HttpResponseTimeout))),
            },
        };
        let status = match &result {
            Ok(answer) => status_label(answer.status),
            Err(Forward::NotStarted(_)) => "not_started",
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
        let elapsed = started.elapsed();
        let provider = self.provider.get().to_string();
        self.metrics
            .egress_duration
            .get_or_create(&HostLabels {
                provider: provider.clone(),
                host: grant.destination.clone(),
            })
            .observe(elapsed.as_secs_f64());
        self.metrics
            .egress_requests
            .get_or_create(&EgressLabels {
                provider,
                host: grant.destination,
                method: method_label,
                status: status.to_owned(),
            })
            .inc();
        match &result {
            Ok(_) => {
                tracing::debug!(%status, elapsed_us = elapsed.as_micros() as u64, "outbound request")
            }
            Err(Forward::Denied(denial)) => {
                self.record_denial(&method, &redact_query(&destination.url), denial)
            }
            Err(Forward::NotStarted(short)) => tracing::info!(
                provider = %self.provider,
                %method,
                uri = %redact_query(&destination.url),
                "outbound request not started: {short}"
            ),
            Err(Forward::Failed(error)) => tracing::warn!(
                provider = %self.provider,
                %method,
                uri = %redact_query(&destination.url),
                error = %error,
                "outbound request failed"
            ),
        }
        result.map_err(|e| match e {
            Forward::Denied(_) => HttpError::HttpRequestDenied,
            Forward::NotStarted(short) => {
                HttpError::InternalError(Some(format!("{DEADLINE_MARKER} {short}")))
            }
            Forward::Failed(error) => error,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use http::{HeaderName, HeaderValue};

    use super::*;
    use crate::capabilities::http_egress::EgressSettings;

    fn egress() -> Arc<Egress> {
        let policy = Policy::parse(
            "allowedOutboundHosts: ['http://127.0.0.1:9']",
            Path::new("/p/test.yaml"),
        )
        .unwrap();
        Broker::new(
            &EgressSettings::default(),
            crate::metrics::Metrics::new().provider().clone(),
        )
        .unwrap()
        .egress(ProviderLabel::new("test"), Arc::new(policy))
        .unwrap()
    }

    async fn send(url: &str, header: Option<(&str, &str)>) -> Result<Buffered, HttpError> {
        let mut headers = HeaderMap::new();
        if let Some((name, value)) = header {
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let request = GuestRequest {
            method: Method::GET,
            url: url.into(),
            headers,
            body: bytes::Bytes::new(),
        };
        egress().send_buffered(request, None).await
    }

    /// Whichever way a request came, it is checked under `wasi:http`'s rules before
    /// the policy is asked. Every destination is on loopback (a port nothing serves),
    /// so even a broker that forwarded them could send nothing off this machine.
    #[tokio::test]
    async fn every_request_is_checked_then_authorized() {
        let forbidden = send("http://127.0.0.1:9/", Some(("connection", "close"))).await;
        assert!(
            matches!(&forbidden, Err(HttpError::InternalError(Some(m))) if m.contains("forbidden")),
            "{forbidden:?}"
        );
        for url in ["http://127.0.0.1:9/x\r\nforged: line", "/relative"] {
            let refused = send(url, None).await;
            assert!(
                matches!(refused, Err(HttpError::HttpRequestUriInvalid)),
                "{url}: {refused:?}"
            );
        }
        let denied = send("http://127.0.0.2:9/?token=x", None).await;
        assert!(
            matches!(denied, Err(HttpError::HttpRequestDenied)),
            "{denied:?}"
        );
    }
}
