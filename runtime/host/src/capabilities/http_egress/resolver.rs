//! Name resolution for egress that never yields an address a provider may not reach.
//!
//! The allowlist is checked against the name a guest asked for; this resolver checks
//! what the name resolves to, at connection time (so a DNS answer cannot be swapped
//! between check and use). Addresses that are never reachable
//! ([`crate::policy::address`]) are dropped, and so is loopback for every name but
//! `localhost` (whose pattern must name it); `localhost` keeps only loopback answers.
//! A name left with no address fails with [`Unreachable`], which the broker reports
//! to the guest as a denied request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::policy::address;

/// A name that resolved only to addresses a provider may not reach.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{name} resolves only to addresses providers may not reach ({addrs:?}: {what})")]
pub struct Unreachable {
    /// The name looked up.
    pub name: String,
    /// The addresses it resolved to.
    pub addrs: Vec<IpAddr>,
    /// The metric label of the first refused address.
    pub label: &'static str,
    /// What the first refused address is.
    pub what: &'static str,
}

/// A name the system resolver could not resolve (no such name, no DNS server).
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {name}: {source}")]
pub struct LookupFailed {
    /// The name looked up.
    pub name: String,
    /// The resolver's error.
    #[source]
    pub source: std::io::Error,
}

/// Whether a DNS answer for `name` may be connected to; the refusal otherwise.
fn refusal(name: &str, ip: IpAddr) -> Option<(&'static str, &'static str)> {
    if let Some(never) = address::never_reachable(ip) {
        return Some((never.label, never.what));
    }
    match (name == "localhost", address::is_loopback(ip)) {
        (true, false) => Some(("loopback", "not loopback, for the name localhost")),
        (false, true) => Some((
            "loopback",
            "this host's loopback, for a name other than localhost",
        )),
        _ => None,
    }
}

/// The system resolver (or fixed answers for configured names), minus the addresses
/// providers may not reach.
#[derive(Debug, Clone, Default)]
pub struct GuardedResolver {
    overrides: HashMap<String, Vec<IpAddr>>,
}

impl GuardedResolver {
    /// A resolver answering `overrides` from the map and everything else from the
    /// system resolver.
    pub fn new(overrides: &[(String, IpAddr)]) -> Self {
        let mut map: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (name, ip) in overrides {
            map.entry(name.to_ascii_lowercase()).or_default().push(*ip);
        }
        Self { overrides: map }
    }

    /// Resolves `host`, dropping the addresses providers may not reach.
    pub async fn lookup(
        &self,
        host: &str,
    ) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let addrs: Vec<IpAddr> = match self.overrides.get(&host) {
            Some(ips) => ips.clone(),
            None => tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|source| LookupFailed {
                    name: host.clone(),
                    source,
                })?
                .map(|a| a.ip())
                .collect(),
        };
        let allowed: Vec<IpAddr> = addrs
            .iter()
            .copied()
            .filter(|ip| refusal(&host, *ip).is_none())
            .collect();
        if allowed.is_empty()
            && let Some((label, what)) = addrs.first().and_then(|ip| refusal(&host, *ip))
        {
            return Err(Box::new(Unreachable {
                name: host,
                addrs,
                label,
                what,
            }));
        }
        Ok(allowed)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let ips = this.lookup(&host).await?;
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn forbidden_answers_are_refused() {
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let wireserver: IpAddr = "168.63.129.16".parse().unwrap();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let private: IpAddr = "10.1.2.3".parse().unwrap();
        let r = GuardedResolver::new(&[
            ("metadata.internal".into(), metadata),
            ("wire.internal".into(), wireserver),
            ("rebind.example.com".into(), loopback),
            ("mixed.internal".into(), metadata),
            ("mixed.internal".into(), private),
        ]);
        for (name, label) in [
            ("Metadata.Internal.", "link_local"),
            ("wire.internal", "metadata"),
            ("rebind.example.com", "loopback"),
        ] {
            let err = r.lookup(name).await.unwrap_err();
            let refused = err.downcast_ref::<Unreachable>().expect("an Unreachable");
            assert_eq!(refused.label, label, "{name}: {err}");
        }
        assert_eq!(r.lookup("mixed.internal").await.unwrap(), vec![private]);
        assert!(
            r.lookup("localhost")
                .await
                .unwrap()
                .iter()
                .all(|ip| ip.is_loopback())
        );
    }
}
