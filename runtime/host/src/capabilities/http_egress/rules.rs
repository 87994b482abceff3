//! A policy's egress rules: the authorization of one request under the policy in
//! force (the method, the address rules, what a credential kind claims first — a
//! login's catalog —, the allowlist, and the credential the host adds), and the
//! request as sent under them (the credential applied, renewed once on a 401, the
//! answer read within the policy's size limit).

use std::sync::Arc;

use http::{HeaderMap, Method};
use wasmtime_wasi_http::Error as HttpError;

use super::credentials::{self, Injection, Outgoing, Route, check_request};
use super::exchange::{Buffered, GuestRequest};
use super::forward::{Forward, classify, header_section_bytes, read_limited};
use super::{Denial, Destination, rate_limit};
use crate::policy::{Policy, address};

/// A policy's egress: the policy, the client for its TLS settings, its credentials
/// and its limits. A request is authorized and forwarded under one `Rules`.
pub(super) struct Rules {
    pub(super) policy: Arc<Policy>,
    pub(super) client: reqwest::Client,
    pub(super) credentials: credentials::CredentialStore,
    pub(super) limiter: rate_limit::EgressLimiter,
}

/// An allowed request: the matched allowlist entry and the credential to add.
#[derive(Debug, PartialEq, Eq)]
pub struct Grant {
    /// The allowlist pattern that matched (the `host` metric label).
    pub destination: String,
    /// The credential (a header, a signature, a token), if the destination has one.
    pub inject: Option<Injection>,
    /// The index of the credential rule in the policy, whose `allowedActions` the
    /// request is checked against before the credential is added.
    pub rule: Option<usize>,
}

impl Rules {
    pub(super) fn authorize(
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
        if let Some(grant) = self.routed(method, destination, headers)? {
            return Ok(grant);
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
            .enumerate()
            .position(|(i, rule)| {
                self.credentials.kind(i).by_destination()
                    && rule.destination.matches(scheme, host, port)
            })
        else {
            return Ok(Grant {
                destination,
                inject: None,
                rule: None,
            });
        };
        grant(
            destination,
            self.credentials.injection(rule),
            Some(rule),
            headers,
        )
    }

    /// A request a credential kind claims before the allowlist
    /// ([`credentials::CredentialKind::route`]): in rule order, the first kind that
    /// claims it decides; a kind's refusal holds only when no later kind claims it.
    fn routed(
        &self,
        method: &Method,
        destination: &Destination,
        headers: &HeaderMap,
    ) -> Result<Option<Grant>, Denial> {
        let mut refused = None;
        for (index, kind) in self.credentials.kinds() {
            let (label, injection) = match kind.route(method, &destination.url) {
                Route::Pass => continue,
                Route::Refuse { reason, message } => {
                    refused.get_or_insert(Denial::Kind { reason, message });
                    continue;
                }
                Route::Local => (
                    self.policy.credentials[index].destination.to_string(),
                    Injection::Local(kind.clone()),
                ),
                Route::Credential { label } => (label, Injection::Credential(kind.clone())),
            };
            return grant(label, injection, Some(index), headers).map(Some);
        }
        refused.map_or(Ok(None), Err)
    }

    /// Whether a kind does not know yet what it claims (before a first login): a
    /// request refused now may be allowed after [`Self::log_in`].
    pub(super) fn awaiting_login(&self) -> bool {
        self.credentials
            .kinds()
            .any(|(_, kind)| kind.awaits_login())
    }

    /// Logs in for every kind that awaits it (failures are logged and held by the
    /// kind; the request they were for is then refused as not allowed).
    pub(super) async fn log_in(&self) {
        for (_, kind) in self.credentials.kinds() {
            if kind.awaits_login() {
                kind.log_in(&self.client).await;
            }
        }
    }

    /// Sends `request`, authorized for `destination` with `inject` under credential
    /// rule `rule`, and reads the answer whole.
    pub(super) async fn send(
        &self,
        request: GuestRequest,
        destination: &Destination,
        inject: Option<Injection>,
        rule: Option<usize>,
        user_agent: &http::HeaderValue,
    ) -> Result<Buffered, Forward> {
        let GuestRequest {
            method,
            mut headers,
            body,
            ..
        } = request;
        // The cloud's logs say who called, unless the provider says it itself.
        headers
            .entry(http::header::USER_AGENT)
            .or_insert_with(|| user_agent.clone());
        let mut outgoing = Outgoing {
            method,
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
                let mut headers = HeaderMap::new();
                let content_type = http::HeaderValue::try_from(content_type)
                    .map_err(|e| Forward::Failed(HttpError::InternalError(Some(e.to_string()))))?;
                headers.insert(http::header::CONTENT_TYPE, content_type);
                return Ok(Buffered {
                    status: http::StatusCode::OK,
                    headers,
                    body,
                });
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
        let mut headers = std::mem::take(response.headers_mut());
        // The caller bounds the whole request, body included, by `requestTimeout`.
        let body = read_limited(response, limits.max_response_bytes - header_bytes).await?;
        if let Some(kind) = kind.as_ref().filter(|kind| kind.observes(status)) {
            kind.answered(status, &headers, &body);
        }
        // A token in an answer (a login's header) never reaches the guest.
        let hidden: Vec<http::HeaderName> = headers
            .keys()
            .filter(|name| credentials::hides_response_header(name.as_str()))
            .cloned()
            .collect();
        for name in hidden {
            headers.remove(name);
        }
        Ok(Buffered {
            status,
            headers,
            body,
        })
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

/// `injection` for a request to `destination`, unless the guest set a header the host
/// refuses for it ([`Injection::refused_header`]).
fn grant(
    destination: String,
    injection: Injection,
    rule: Option<usize>,
    headers: &HeaderMap,
) -> Result<Grant, Denial> {
    if let Some(refused) = injection.refused_header(headers) {
        return Err(refused);
    }
    Ok(Grant {
        destination,
        inject: Some(injection),
        rule,
    })
}
