//! Name resolution for egress that never yields a link-local address.
//!
//! The allowlist is checked against the name a guest asked for; this resolver checks
//! what the name resolves to, at connection time (so a DNS answer cannot be swapped
//! between check and use). Link-local / instance-metadata addresses are dropped; a
//! name that resolves only to such addresses fails with [`LinkLocalOnly`], which the
//! broker reports to the guest as a denied request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::is_link_local;

/// A name resolved only to link-local addresses.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{name} resolves only to link-local addresses ({addrs:?}), which providers may never reach"
)]
pub struct LinkLocalOnly {
    /// The name looked up.
    pub name: String,
    /// The link-local addresses it resolved to.
    pub addrs: Vec<IpAddr>,
}

/// The system resolver (or fixed answers for configured names), minus link-local
/// addresses.
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

    /// Resolves `host`, dropping link-local addresses.
    pub async fn lookup(
        &self,
        host: &str,
    ) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let addrs: Vec<IpAddr> = match self.overrides.get(&host) {
            Some(ips) => ips.clone(),
            None => tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect(),
        };
        let allowed: Vec<IpAddr> = addrs
            .iter()
            .copied()
            .filter(|ip| !is_link_local(*ip))
            .collect();
        if allowed.is_empty() && !addrs.is_empty() {
            return Err(Box::new(LinkLocalOnly { name: host, addrs }));
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
    async fn link_local_answers_are_refused() {
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let r = GuardedResolver::new(&[
            ("metadata.internal".into(), metadata),
            ("mixed.internal".into(), metadata),
            ("mixed.internal".into(), loopback),
        ]);
        let err = r.lookup("Metadata.Internal.").await.unwrap_err();
        assert!(err.downcast_ref::<LinkLocalOnly>().is_some(), "{err}");
        assert_eq!(r.lookup("mixed.internal").await.unwrap(), vec![loopback]);
        assert!(
            r.lookup("localhost")
                .await
                .unwrap()
                .iter()
                .all(|ip| ip.is_loopback())
        );
    }
}
