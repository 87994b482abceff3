//! The destination of an outbound request, parsed once.
//!
//! The guest's request URI is parsed with the URL standard's parser — the one reqwest
//! connects with — and nothing else ever parses it again: the allowlist, the address
//! rules and the forwarded request all see the same host. An IPv4 address written in
//! any form a URL parser accepts (decimal `2852039166`, hexadecimal `0xA9FEA9FE`,
//! octal `0251.0376.0251.0376`, shortened `169.254.43518`, a trailing dot) is read
//! as the address it is, `169.254.169.254`, before any rule is applied.

use std::net::IpAddr;

use reqwest::Url;

use super::Denial;
use crate::policy::address;

/// Where a request goes.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The URL forwarded, exactly as parsed.
    pub url: Url,
    /// The host in canonical form: a lowercase name without a trailing dot, or an IP
    /// address (IPv6 without brackets).
    pub host: String,
    /// The host's address when it is an IP address.
    pub ip: Option<IpAddr>,
    /// The port, the scheme's default when the URL has none.
    pub port: u16,
}

impl Destination {
    /// Parses the URL of a guest's request.
    pub fn parse(text: &str) -> Result<Self, Denial> {
        // Errors (and so logs) name the URL without its user information and query,
        // which may carry tokens.
        let bad = || Denial::BadUri(super::exchange::redact(text));
        let url = Url::parse(text).map_err(|_| bad())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad());
        }
        // Credentials in a URL would bypass the host's credential rules.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad());
        }
        let (host, ip) = match url.host().ok_or_else(bad)? {
            url::Host::Domain(name) => (name.trim_end_matches('.').to_ascii_lowercase(), None),
            url::Host::Ipv4(v4) => (v4.to_string(), Some(IpAddr::V4(v4))),
            url::Host::Ipv6(v6) => (v6.to_string(), Some(IpAddr::V6(v6))),
        };
        if host.is_empty() {
            return Err(bad());
        }
        let port = url.port_or_known_default().ok_or_else(bad)?;
        Ok(Self {
            url,
            host,
            ip,
            port,
        })
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &str {
        self.url.scheme()
    }

    /// Whether the destination is this host's loopback: a loopback address in any
    /// spelling, or the name `localhost`.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.ip.is_some_and(address::is_loopback)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(uri: &str) -> Result<Destination, Denial> {
        Destination::parse(uri)
    }

    #[test]
    fn every_ipv4_spelling_is_the_address_it_reaches() {
        for uri in [
            "http://169.254.169.254/latest",
            "http://2852039166/latest",
            "http://0xA9FEA9FE/latest",
            "http://0xa9.0xfe.0xa9.0xfe/latest",
            "http://0251.0376.0251.0376/latest",
            "http://169.254.43518/latest",
            "http://169.16689662/latest",
            "http://169.254.169.254./latest",
        ] {
            let d = parse(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
            assert_eq!(d.host, "169.254.169.254", "{uri}");
            assert_eq!(d.ip, Some("169.254.169.254".parse().unwrap()), "{uri}");
            // What is forwarded is what was checked.
            assert_eq!(d.url.host_str(), Some("169.254.169.254"), "{uri}");
        }
    }

    #[test]
    fn names_ports_and_loopback() {
        let d = parse("https://API.Example.com./v1").unwrap();
        assert_eq!(
            (d.host.as_str(), d.port, d.ip),
            ("api.example.com", 443, None)
        );
        assert!(!d.is_loopback());
        assert!(parse("http://localhost:8080/").unwrap().is_loopback());
        assert!(parse("http://2130706433:8080/").unwrap().is_loopback());
        assert!(parse("http://[::ffff:127.0.0.1]/").unwrap().is_loopback());
        let v6 = parse("http://[fd00:ec2:0::254]:81/").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("fd00:ec2::254", 81));
    }

    #[test]
    fn unusable_uris_are_refused() {
        for uri in [
            "ftp://example.com/",
            "http://user:pw@example.com/",
            "not a url",
            "/relative",
        ] {
            assert!(matches!(parse(uri), Err(Denial::BadUri(_))), "{uri}");
        }
        // The query (a token, maybe) stays out of the error.
        let Err(Denial::BadUri(named)) = parse("ftp://example.com/x?token=s3cret") else {
            panic!("refused")
        };
        assert_eq!(named, "ftp://example.com/x");
        let Err(Denial::BadUri(named)) = parse("http://user:s3cret@example.com/x") else {
            panic!("refused")
        };
        assert_eq!(named, "http://example.com/x");
    }
}
