//! Authorization of one request under the policy in force: the method, the address
//! rules, the allowlist, and the credential the host adds.

use std::sync::Arc;

use http::{HeaderMap, Method};

use super::credentials::{self, Injection};
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
    /// The credential (a header, or an AWS signature), if the destination has one.
    pub inject: Option<Injection>,
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
