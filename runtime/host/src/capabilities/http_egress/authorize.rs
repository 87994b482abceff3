//! Authorization of one request under the policy in force: the method, the address
//! rules, Keystone's catalog, the allowlist, and the credential the host adds.

use std::sync::Arc;

use http::{HeaderMap, Method};

use super::credentials::{self, CatalogMatch, Injection};
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
    /// The credential (a header, an AWS signature, a Keystone token), if the
    /// destination has one.
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
        if let Some(grant) = self.keystone(method, destination, headers)? {
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
                !self.credentials.is_keystone(i) && rule.destination.matches(scheme, host, port)
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

    /// A request Keystone rules decide: the catalog (answered by the host), the
    /// identity API (refused), an endpoint of the last login's catalog (the token).
    fn keystone(
        &self,
        method: &Method,
        destination: &Destination,
        headers: &HeaderMap,
    ) -> Result<Option<Grant>, Denial> {
        for (index, session) in self.credentials.keystone() {
            let (index, rule) = (Some(*index), session.credential());
            match session.classify(&destination.url) {
                CatalogMatch::None => continue,
                CatalogMatch::Identity => {
                    let catalog = rule.catalog_url();
                    let url = &destination.url;
                    let is_catalog = url.query().is_none()
                        && format!("{}{}", url.origin().ascii_serialization(), url.path())
                            == catalog;
                    if !is_catalog || *method != Method::GET {
                        return Err(Denial::KeystoneIdentity(catalog));
                    }
                    let label = index.map_or_else(
                        || rule.auth_url.to_string(),
                        |i| self.policy.credentials[i].destination.to_string(),
                    );
                    let catalog = Injection::KeystoneCatalog(session.clone());
                    return grant(label, catalog, index, headers).map(Some);
                }
                CatalogMatch::Plaintext(endpoint) => {
                    return Err(Denial::KeystonePlaintext(endpoint));
                }
                CatalogMatch::Endpoint(label) => {
                    let token = Injection::Credential(session.clone());
                    return grant(label, token, index, headers).map(Some);
                }
            }
        }
        Ok(None)
    }

    /// Whether a Keystone rule has not logged in yet, so its catalog's endpoints are
    /// not known: a request denied now may be allowed after [`Self::log_in`].
    pub(super) fn keystone_pending(&self) -> bool {
        self.credentials.keystone().any(|(_, s)| !s.has_catalog())
    }

    /// Logs in for every Keystone rule that has not yet (failures are logged and held
    /// by the session; the request they were for is then refused as not allowed).
    pub(super) async fn log_in(&self) {
        for (_, session) in self.credentials.keystone() {
            if !session.has_catalog() {
                let _ = session.token(&self.client).await;
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
