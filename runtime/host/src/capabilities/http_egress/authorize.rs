//! Authorization of one request under the policy in force: the method, the address
//! rules, what a credential kind claims first (a login's catalog), the allowlist, and
//! the credential the host adds.

use std::sync::Arc;

use http::{HeaderMap, Method};

use super::credentials::{self, Injection, Route};
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
