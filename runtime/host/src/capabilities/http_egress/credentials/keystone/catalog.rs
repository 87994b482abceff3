//! Where a request falls in a login's service catalog: the endpoints the rule gives
//! the token to, and the identity API it never goes to, paths compared as servers
//! read them.

use serde_json::Value;

use crate::metrics::ProviderLabel;
use crate::policy::keystone::{IDENTITY_SERVICE, KeystoneCredential};

/// An endpoint of the catalog the token goes to.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    /// The service type, e.g. `compute`.
    pub(super) service: String,
    pub(super) url: url::Url,
}

/// What a login's catalog holds for a rule.
#[derive(Debug, Default)]
pub(super) struct Allowed {
    /// The endpoints that get the token.
    pub(super) endpoints: Vec<Endpoint>,
    /// Every identity endpoint.
    pub(super) identity: Vec<url::Url>,
    /// Plain `http://` endpoints (not loopback) the rule would allow but for its
    /// `allowPlaintext`: refused by name.
    pub(super) plaintext: Vec<url::Url>,
}

/// The catalog's endpoints `rule` allows, and every identity endpoint (plain
/// `http://` endpoints that are not loopback are left out, and logged for `provider`,
/// unless the rule allows plaintext).
pub(super) fn allowed(
    rule: &KeystoneCredential,
    catalog: &[Value],
    provider: &ProviderLabel,
) -> Allowed {
    let mut endpoints = Vec::new();
    let mut identity = Vec::new();
    let mut plaintext = Vec::new();
    for service in catalog {
        let kind = service["type"].as_str().unwrap_or_default();
        for endpoint in service["endpoints"].as_array().into_iter().flatten() {
            let Some(url) = endpoint["url"]
                .as_str()
                .and_then(|u| url::Url::parse(u).ok())
            else {
                continue;
            };
            if kind == IDENTITY_SERVICE {
                identity.push(url);
                continue;
            }
            let region = endpoint["region_id"]
                .as_str()
                .or_else(|| endpoint["region"].as_str());
            let wanted = rule.services.iter().any(|s| s == kind)
                && endpoint["interface"].as_str() == Some(rule.interface.as_str())
                && rule.region.as_deref().is_none_or(|r| region == Some(r));
            if !wanted || !matches!(url.scheme(), "http" | "https") {
                continue;
            }
            // A name beginning `127.` is a name, not this host's loopback.
            let loopback = match url.host() {
                Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            };
            if url.scheme() == "http" && !loopback && !rule.allow_plaintext {
                tracing::warn!(
                    provider = %provider,
                    endpoint = %url,
                    service = kind,
                    "a plain http:// catalog endpoint does not get the Keystone token without the rule's allowPlaintext: true"
                );
                plaintext.push(url);
                continue;
            }
            endpoints.push(Endpoint {
                service: kind.to_owned(),
                url,
            });
        }
    }
    Allowed {
        endpoints,
        identity,
        plaintext,
    }
}

/// Whether `url` lies under `base`: same origin, and `base`'s path is a prefix of its
/// path at a segment boundary, both paths read as a server reads them
/// ([`normalized_path`]: `//identity/v3` and `/%69dentity/v3` are under `/identity`).
pub(super) fn under(base: &url::Url, url: &url::Url) -> bool {
    if base.scheme() != url.scheme()
        || base.host_str().map(str::to_ascii_lowercase)
            != url.host_str().map(str::to_ascii_lowercase)
        || base.port_or_known_default() != url.port_or_known_default()
    {
        return false;
    }
    let prefix = normalized_path(base.path());
    let path = normalized_path(url.path());
    prefix == "/"
        || path == prefix
        || path
            .strip_prefix(&prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A URL path as a web server routes it: percent-decoded, empty and `.` segments
/// dropped, `..` segments resolved; always starting with `/`, never ending with one
/// (but `/` itself).
fn normalized_path(path: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split(['/', '\\']) {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    format!("/{}", segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn under_is_same_origin_and_a_path_prefix_at_a_segment() {
        let base = url("https://nova.example.com:8774/v2.1");
        assert!(under(&base, &url("https://nova.example.com:8774/v2.1")));
        assert!(under(
            &base,
            &url("https://NOVA.example.com:8774/v2.1/servers?x=1")
        ));
        assert!(!under(
            &base,
            &url("https://nova.example.com:8774/v2.10/servers")
        ));
        assert!(!under(&base, &url("https://nova.example.com:8774/")));
        assert!(!under(&base, &url("http://nova.example.com:8774/v2.1")));
        assert!(!under(&base, &url("https://nova.example.com:8775/v2.1")));
        let root = url("https://neutron.example.com:9696/");
        assert!(under(
            &root,
            &url("https://neutron.example.com:9696/v2.0/ports")
        ));
        assert!(under(&url("https://h"), &url("https://h:443/x")));
        // Paths as the server reads them: doubled slashes, encodings, dot segments.
        let identity = url("https://cloud.example.com/identity/v3");
        for path in [
            "//identity/v3/users",
            "/%69dentity/v3/users",
            "/compute/../identity/v3/credentials",
            "/identity//v3/users",
            "/identity%2Fv3/users",
            "/./identity/v3",
        ] {
            let request = url(&format!("https://cloud.example.com{path}"));
            assert!(under(&identity, &request), "{path}");
        }
        assert!(!under(
            &identity,
            &url("https://cloud.example.com/identityx/v3")
        ));
    }

    /// A catalog host whose name begins `127.` is a name like any other: its plain
    /// `http://` endpoint gets no token without `allowPlaintext`; real loopback does.
    #[test]
    fn only_real_loopback_endpoints_get_the_token_over_plain_http() {
        let rule = KeystoneCredential {
            auth_url: url("https://keystone.example.com/v3"),
            method: crate::policy::keystone::KeystoneMethod::ApplicationCredential {
                id: crate::policy::keystone::Identity::Id("a".into()),
                secret_file: "s".into(),
            },
            region: None,
            interface: "public".into(),
            services: vec!["load-balancer".into()],
            allow_plaintext: false,
        };
        let endpoint = |u: &str| {
            serde_json::json!({"type": "load-balancer", "endpoints": [
                {"url": u, "interface": "public", "region_id": "RegionOne"}]})
        };
        let catalog = [
            endpoint("http://127.attacker.example:9876/"),
            endpoint("http://127.0.0.1:9876/"),
            endpoint("http://[::1]:9876/"),
            endpoint("http://localhost:9876/"),
        ];
        let found = allowed(&rule, &catalog, &ProviderLabel::new("test"));
        let hosts: Vec<_> = found
            .endpoints
            .iter()
            .map(|e| e.url.host_str().unwrap())
            .collect();
        assert_eq!(hosts, ["127.0.0.1", "[::1]", "localhost"]);
        // Kept apart, to be refused by name.
        assert_eq!(found.plaintext, [url("http://127.attacker.example:9876/")]);
        // With the rule's word, every one gets it, as occm sends it.
        let rule = KeystoneCredential {
            allow_plaintext: true,
            ..rule
        };
        let found = allowed(&rule, &catalog, &ProviderLabel::new("test"));
        assert_eq!(found.endpoints.len(), 4);
        assert!(found.plaintext.is_empty());
    }
}
