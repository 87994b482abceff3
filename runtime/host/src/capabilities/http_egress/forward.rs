//! Forwarding an authorized request: limits, credential injection, the upstream
//! call, the bounded response, and the metrics and logs of each request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

use super::authorize::{Grant, Rules};
use super::credentials::{self, Injection, Outgoing, check_request};
use super::{Denial, Destination, Egress, MAX_REQUEST_BODY_BYTES, connect, resolver};
use crate::metrics::{DeniedLabels, EgressLabels, HostLabels};
use crate::policy::call_grace;

/// How the message of a request not started for the call's deadline begins (an
/// `internal-error` to the guest): the guest SDK reads it as "answer `retry-after`
/// now", not as a failure of the cloud.
pub const DEADLINE_MARKER: &str = "call deadline:";

impl Egress {
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

    pub(super) async fn forward(
        self: Arc<Self>,
        rules: Arc<Rules>,
        request: http::Request<WasiBody>,
        destination: Destination,
        grant: Grant,
        deadline: Option<Instant>,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let method = request.method().clone();
        let _permit = rules.limiter.admit().await;
        let started = Instant::now();
        let timeout = rules.policy.egress_limits.request_timeout;
        let result = match self.broker.intercept(&method, &destination.url) {
            Some(answer) => intercepted(answer),
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
            Ok(response) => status_label(response.status()),
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

impl Rules {
    async fn send(
        &self,
        request: http::Request<WasiBody>,
        destination: &Destination,
        inject: Option<Injection>,
        rule: Option<usize>,
        user_agent: &http::HeaderValue,
    ) -> Result<http::Response<WasiBody>, Forward> {
        let (parts, body) = request.into_parts();
        let body = collect_limited(body, MAX_REQUEST_BODY_BYTES)
            .await
            .map_err(|_| {
                Forward::Failed(HttpError::HttpRequestBodySize(Some(
                    MAX_REQUEST_BODY_BYTES as u64,
                )))
            })?;
        let mut headers = parts.headers;
        headers.remove(http::header::HOST);
        // The cloud's logs say who called, unless the provider says it itself.
        headers
            .entry(http::header::USER_AGENT)
            .or_insert_with(|| user_agent.clone());
        let mut outgoing = Outgoing {
            method: parts.method,
            url: destination.url.clone(),
            headers,
            body,
        };
        let kind = match inject {
            None => None,
            Some(Injection::Credential(kind)) => Some(kind),
            Some(Injection::Local(kind)) => {
                let (content_type, body) = kind
                    .local_answer(&self.client)
                    .await
                    .map_err(|reason| Forward::Denied(Denial::Credential(reason)))?;
                return local_response(http::StatusCode::OK, content_type, body);
            }
        };
        // Kept for a second try only when the credential may need replacing.
        let mut retry = None;
        if let Some(kind) = kind.clone() {
            let actions = rule
                .and_then(|i| self.policy.credentials.get(i))
                .and_then(|r| r.allowed_actions.as_ref());
            check_request(&*kind, actions, &outgoing).map_err(Forward::Denied)?;
            let applied = kind
                .apply(&mut outgoing, &self.client)
                .await
                .map_err(|reason| Forward::Denied(Denial::Credential(reason)))?;
            if kind.renews() {
                retry = Some((kind, applied, outgoing.clone()));
            }
        }
        let mut response = self.request(outgoing).await?;
        if response.status() == http::StatusCode::UNAUTHORIZED
            && let Some((kind, applied, request)) = retry
            && let Some(again) = kind.renew(applied, request, &self.client).await
        {
            response = self.request(again).await?;
        }
        let limits = &self.policy.egress_limits;
        let status = response.status();
        // Headers count against `maxResponseBytes` like the body: the guest holds both.
        let header_bytes = header_section_bytes(response.headers());
        if header_bytes > limits.max_response_bytes {
            return Err(Forward::Failed(HttpError::HttpResponseHeaderSectionSize(
                Some(u32::try_from(header_bytes).unwrap_or(u32::MAX)),
            )));
        }
        let mut builder = http::Response::builder().status(status);
        for (name, value) in response.headers() {
            // A token in an answer (a login's header) never reaches the guest.
            if !credentials::hides_response_header(name.as_str()) {
                builder = builder.header(name, value);
            }
        }
        // The caller bounds the whole request, body included, by `requestTimeout`.
        let observer = kind.as_ref().filter(|kind| kind.observes(status));
        let answer_headers = observer.map(|_| response.headers().clone());
        let body = read_limited(response, limits.max_response_bytes - header_bytes).await?;
        if let (Some(kind), Some(headers)) = (observer, &answer_headers) {
            kind.answered(status, headers, &body);
        }
        builder
            .body(
                Full::new(body)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .map_err(|e| Forward::Failed(HttpError::InternalError(Some(e.to_string()))))
    }

    /// One upstream request, up to its response's headers.
    async fn request(&self, request: Outgoing) -> Result<reqwest::Response, Forward> {
        self.client
            .request(request.method, request.url)
            .headers(request.headers)
            .body(request.body)
            .send()
            .await
            .map_err(classify)
    }
}

/// An interceptor's answer, as the provider gets it.
fn intercepted(answer: http::Response<Bytes>) -> Result<http::Response<WasiBody>, Forward> {
    Ok(answer.map(|body| {
        Full::new(body)
            .map_err(|never| match never {})
            .boxed_unsync()
    }))
}

/// An answer the host gives itself, without a request.
fn local_response(
    status: http::StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Result<http::Response<WasiBody>, Forward> {
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(
            Full::new(body)
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .map_err(|e| Forward::Failed(HttpError::InternalError(Some(e.to_string()))))
}

/// Whether a request may start at `now`: only while its whole `timeout` and the
/// call's `grace` after it are left before `deadline` (none: outside a call), so no
/// request outlives the call that sent it. The error says what was left.
fn fits(
    deadline: Option<Instant>,
    timeout: Duration,
    grace: Duration,
    now: Instant,
) -> Result<(), String> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(now);
    if left >= timeout + grace {
        return Ok(());
    }
    Err(format!(
        "{:.1}s left in the call, and a request may take the policy's \
         requestTimeout ({timeout:?}) plus {grace:?} for the provider to answer",
        left.as_secs_f64()
    ))
}

/// How forwarding failed.
enum Forward {
    /// Refused at connection time (a name resolving to a link-local address).
    Denied(Denial),
    /// Not started: it could outlive the call's deadline (the message says by what).
    NotStarted(String),
    /// A transport failure reported to the guest as this error code.
    Failed(HttpError),
}

/// The `status` label: the codes clouds use for their API contract, else the class,
/// so a server cannot create series at will.
pub(super) fn status_label(status: http::StatusCode) -> &'static str {
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
pub(super) fn redact_uri(uri: &http::Uri) -> String {
    format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or(""),
        uri.authority().map(|a| a.as_str()).unwrap_or(""),
        uri.path()
    )
}

/// The size of a header section as sent: `name: value\r\n` per field.
fn header_section_bytes(headers: &http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
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

    #[test]
    fn a_request_starts_only_while_its_timeout_and_the_grace_fit() {
        let now = Instant::now();
        let (timeout, grace) = (Duration::from_secs(20), Duration::from_secs(1));
        assert!(fits(None, timeout, grace, now).is_ok(), "outside a call");
        let deadline = |left_ms| Some(now + Duration::from_millis(left_ms));
        assert!(fits(deadline(21_000), timeout, grace, now).is_ok());
        let short = fits(deadline(20_999), timeout, grace, now).unwrap_err();
        assert!(
            short.contains("21.0s left") && short.contains("requestTimeout (20s)"),
            "{short}"
        );
        assert!(fits(Some(now), timeout, grace, now + Duration::from_secs(1)).is_err());
    }
}
