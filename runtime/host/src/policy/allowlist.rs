//! The allowlist grammar: outbound host patterns `scheme://host[:port]`, used by the
//! policy's `allowedOutboundHosts` and `credentials[].destination`.
//!
//! - scheme: `http`, `https` or `*`;
//! - host: an exact name or IP (`[::1]` for IPv6), or `*.example.com` for any
//!   subdomain of `example.com` (not `example.com` itself). A bare `*` and a wildcard
//!   over a single label (`*.com`) are refused: a policy names the cloud it talks to.
//!   IP addresses are read as URLs read them (`0x7f.1` is `127.0.0.1`), and an address
//!   that is never reachable ([`super::address`]) is refused;
//! - port: a number, a range `8000-9000`, or `*`; when absent, the scheme's default
//!   port (80 for http, 443 for https, either for `*`).

use std::fmt;
use std::net::IpAddr;

use super::address;

/// Why a host pattern cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// No `://` separator.
    #[error("`{0}` is not of the form scheme://host[:port]")]
    Shape(String),
    /// A scheme other than http, https or `*`.
    #[error("`{0}`: scheme must be http, https or *")]
    Scheme(String),
    /// An empty or malformed host.
    #[error("`{0}`: invalid host")]
    Host(String),
    /// A bare `*` host or a wildcard over a single label such as `*.com`.
    #[error(
        "`{0}`: too wide; name the cloud's hosts (`api.example.com`) or a wildcard under \
         a domain of at least two labels (`*.example.com`)"
    )]
    TooWide(String),
    /// A host that no provider may ever reach.
    #[error("`{0}`: {1} is never reachable from a provider")]
    NeverReachable(String, &'static str),
    /// A port that is not a number, a range `a-b` with a <= b, or `*`.
    #[error("`{0}`: invalid port")]
    Port(String),
    /// A path, query or user info after the host.
    #[error("`{0}`: only scheme://host[:port] is allowed, without a path")]
    Path(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SchemePattern {
    Any,
    Http,
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Exact(String),
    /// `*.suffix`: stored as `.suffix`.
    Subdomain(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortMatch {
    Any,
    Default,
    Range(u16, u16),
}

/// A parsed `scheme://host[:port]` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    text: String,
    scheme: SchemePattern,
    host: HostMatch,
    port: PortMatch,
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl HostPattern {
    /// Parses a pattern.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| PatternError::Shape(text.into()))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "*" => SchemePattern::Any,
            "http" => SchemePattern::Http,
            "https" => SchemePattern::Https,
            _ => return Err(PatternError::Scheme(text.into())),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(PatternError::Path(text.into()));
        }
        let (host, port) = split_host_port(rest).ok_or_else(|| PatternError::Host(text.into()))?;
        let host = host.to_ascii_lowercase();
        let host = if host == "*" {
            return Err(PatternError::TooWide(text.into()));
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let suffix = suffix.trim_end_matches('.');
            if suffix.is_empty() || suffix.contains('*') {
                return Err(PatternError::Host(text.into()));
            }
            let numeric = suffix
                .rsplit('.')
                .next()
                .is_some_and(|label| label.chars().all(|c| c.is_ascii_digit()));
            if !suffix.contains('.') || numeric {
                return Err(PatternError::TooWide(text.into()));
            }
            HostMatch::Subdomain(format!(".{suffix}"))
        } else if host.is_empty() || host.contains('*') {
            return Err(PatternError::Host(text.into()));
        } else {
            let host = normalize_host(&host).ok_or_else(|| PatternError::Host(text.into()))?;
            if let Ok(ip) = host.parse::<IpAddr>()
                && let Some(never) = address::never_reachable(ip)
            {
                return Err(PatternError::NeverReachable(text.into(), never.what));
            }
            HostMatch::Exact(host)
        };
        let port = match port {
            None => PortMatch::Default,
            Some("*") => PortMatch::Any,
            Some(p) => {
                let bad = || PatternError::Port(text.into());
                let (lo, hi) = match p.split_once('-') {
                    Some((lo, hi)) => (lo, hi),
                    None => (p, p),
                };
                let lo: u16 = lo.parse().map_err(|_| bad())?;
                let hi: u16 = hi.parse().map_err(|_| bad())?;
                if lo > hi {
                    return Err(bad());
                }
                PortMatch::Range(lo, hi)
            }
        };
        Ok(Self {
            text: text.into(),
            scheme,
            host,
            port,
        })
    }

    /// Whether the pattern names a loopback host itself (`127.0.0.1`, `[::1]`,
    /// `localhost`): the only way a provider reaches loopback.
    pub fn names_loopback(&self) -> bool {
        match &self.host {
            HostMatch::Exact(host) => {
                host == "localhost" || host.parse::<IpAddr>().is_ok_and(address::is_loopback)
            }
            _ => false,
        }
    }

    /// The one host the pattern names, if it is not a wildcard.
    pub fn exact_host(&self) -> Option<&str> {
        match &self.host {
            HostMatch::Exact(host) => Some(host),
            _ => None,
        }
    }

    /// The suffix a wildcard pattern matches (`.example.com` for `*.example.com`).
    pub fn wildcard_suffix(&self) -> Option<&str> {
        match &self.host {
            HostMatch::Subdomain(suffix) => Some(suffix),
            _ => None,
        }
    }

    /// Whether the pattern can match a plain `http://` request.
    pub fn allows_http(&self) -> bool {
        matches!(self.scheme, SchemePattern::Any | SchemePattern::Http)
    }

    /// True if a request to `scheme://host:port` matches. `host` is compared
    /// case-insensitively; IPv6 hosts are given without brackets, IP addresses in
    /// their canonical form (as [`url::Host`] writes them).
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        let scheme = scheme.to_ascii_lowercase();
        let scheme_ok = match self.scheme {
            SchemePattern::Any => scheme == "http" || scheme == "https",
            SchemePattern::Http => scheme == "http",
            SchemePattern::Https => scheme == "https",
        };
        if !scheme_ok {
            return false;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let host_ok = match &self.host {
            HostMatch::Exact(h) => *h == host,
            // A wildcard is over names: never over IP addresses (`*.0.1`).
            HostMatch::Subdomain(suffix) => {
                host.len() > suffix.len()
                    && host.ends_with(suffix)
                    && host.parse::<IpAddr>().is_err()
            }
        };
        if !host_ok {
            return false;
        }
        match self.port {
            PortMatch::Any => true,
            PortMatch::Range(lo, hi) => (lo..=hi).contains(&port),
            PortMatch::Default => match self.scheme {
                SchemePattern::Http => port == 80,
                SchemePattern::Https => port == 443,
                SchemePattern::Any => {
                    (scheme == "http" && port == 80) || (scheme == "https" && port == 443)
                }
            },
        }
    }
}

/// The canonical form of an exact host: an IP address as URLs read it, a name in
/// lowercase without a trailing dot.
fn normalize_host(host: &str) -> Option<String> {
    if let Ok(v6) = host.parse::<std::net::Ipv6Addr>() {
        return Some(v6.to_string());
    }
    match url::Host::parse(host).ok()? {
        url::Host::Domain(name) => Some(name.trim_end_matches('.').to_owned()),
        url::Host::Ipv4(v4) => Some(v4.to_string()),
        url::Host::Ipv6(v6) => Some(v6.to_string()),
    }
}

/// Splits `host[:port]` / `[v6][:port]`; the host of an IPv6 literal loses its brackets.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port))),
        Some(_) => None,
        None => Some((s, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
    }

    #[test]
    fn exact_host_with_default_ports() {
        let https = p("https://api.example.com");
        assert!(https.matches("https", "API.example.com", 443));
        assert!(!https.matches("https", "api.example.com", 8443));
        assert!(!https.matches("http", "api.example.com", 80));
        assert!(!https.matches("https", "evil.com", 443));
        assert!(p("*://a.b").matches("http", "a.b", 80));
        assert!(!p("*://a.b").matches("http", "a.b", 443));
    }

    #[test]
    fn wildcards_and_ranges() {
        assert!(p("http://127.0.0.1:*").matches("http", "127.0.0.1", 31337));
        let range = p("http://localhost:8000-8010");
        assert!(range.matches("http", "localhost", 8005));
        assert!(!range.matches("http", "localhost", 8011));
        let sub = p("https://*.example.com");
        assert!(sub.matches("https", "ec2.eu.example.com", 443));
        assert!(!sub.matches("https", "example.com", 443));
        assert!(!sub.matches("https", "badexample.com", 443));
        assert!(p("*://*.example.com:*").matches("https", "a.example.com", 1));
    }

    #[test]
    fn ipv6_literals() {
        let v6 = p("http://[::1]:8080");
        assert!(v6.matches("http", "::1", 8080));
        assert!(!v6.matches("http", "::2", 8080));
    }

    #[test]
    fn malformed_patterns_are_rejected() {
        assert!(matches!(
            HostPattern::parse("example.com"),
            Err(PatternError::Shape(_))
        ));
        assert!(matches!(
            HostPattern::parse("ftp://x"),
            Err(PatternError::Scheme(_))
        ));
        assert!(matches!(
            HostPattern::parse("http://"),
            Err(PatternError::Host(_))
        ));
        assert!(matches!(
            HostPattern::parse("http://a*b"),
            Err(PatternError::Host(_))
        ));
        assert!(matches!(
            HostPattern::parse("http://a:99999"),
            Err(PatternError::Port(_))
        ));
        assert!(matches!(
            HostPattern::parse("http://a:9-1"),
            Err(PatternError::Port(_))
        ));
        assert!(matches!(
            HostPattern::parse("http://a/path"),
            Err(PatternError::Path(_))
        ));
        assert!(matches!(
            HostPattern::parse("http://u@a"),
            Err(PatternError::Path(_))
        ));
    }

    #[test]
    fn wide_and_never_reachable_patterns_are_refused() {
        for wide in [
            "http://*",
            "*://*:*",
            "https://*.com",
            "https://*.com.",
            "http://*:443",
            "http://*.0.1:*",
        ] {
            let err = HostPattern::parse(wide).unwrap_err();
            assert!(matches!(err, PatternError::TooWide(_)), "{wide}: {err}");
            assert!(err.to_string().contains("too wide"), "{err}");
        }
        for never in [
            "http://169.254.169.254",
            "http://[fd00:ec2::254]",
            "http://0xA9FEA9FE",
            "http://169.254.43518",
            "http://[::ffff:169.254.169.254]:80",
            "http://168.63.129.16",
            "http://100.100.100.200",
            "http://0.0.0.0:8080",
        ] {
            let err = HostPattern::parse(never).unwrap_err();
            assert!(
                matches!(err, PatternError::NeverReachable(..)),
                "{never}: {err}"
            );
        }
    }

    #[test]
    fn hosts_are_read_as_urls_read_them() {
        let pattern = p("http://0x7f.1:8080");
        assert!(pattern.matches("http", "127.0.0.1", 8080));
        assert!(pattern.names_loopback());
        assert!(p("http://[0:0::1]:1").matches("http", "::1", 1));
        assert!(p("http://LOCALHOST.:1").names_loopback());
        assert!(!p("http://*.example.com").names_loopback());
        assert!(p("http://API.Example.com.").matches("http", "api.example.com", 80));
        assert!(p("*://a.example.com").allows_http());
        assert!(!p("https://a.example.com").allows_http());
    }
}
