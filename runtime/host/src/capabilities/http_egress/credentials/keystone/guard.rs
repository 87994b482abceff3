//! What a guest may not put on a request the host adds a Keystone token to: the
//! headers Keystone's middleware reads as credentials or sets itself, and pecan's
//! method override.

use crate::capabilities::http_egress::Denial;

/// Headers Keystone's middleware (`keystonemiddleware.auth_token`) reads as
/// credentials, or sets for the service behind it once it has validated a token: a
/// guest setting one on a request the host adds a token to is refused (an invalid
/// `X-Service-Token` alone makes the service answer 401).
const CREDENTIAL_HEADERS: [&str; 16] = [
    super::TOKEN_HEADER,
    super::SUBJECT_TOKEN_HEADER,
    "x-service-token",
    "x-storage-token",
    "x-identity-status",
    "x-roles",
    "x-role",
    "x-service-catalog",
    "x-is-admin-project",
    "x-system-scope",
    "openstack-system-scope",
    "x-tenant",
    "x-tenant-id",
    "x-tenant-name",
    "x-user",
    "x-trust-id",
];
/// Prefixes of the identity headers the middleware sets (`X-User-Id`,
/// `X-Project-Domain-Name`, `X-Service-Roles`, ...), refused likewise.
const CREDENTIAL_HEADER_PREFIXES: [&str; 6] = [
    "x-auth-",
    "x-service-",
    "x-identity-",
    "x-user-",
    "x-project-",
    "x-domain-",
];

/// Whether a guest may not set `name` on a request that gets a Keystone token.
pub fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_HEADERS.contains(&name.as_str())
        || CREDENTIAL_HEADER_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// The method override a request to an OpenStack service carries, if any: `_method`
/// (any case) in the query, or in a body the service would read as a form (webob parses
/// a body without content type, a form or multipart for `request.params`, where pecan
/// looks for `_method`).
pub fn method_override(url: &url::Url, headers: &http::HeaderMap, body: &[u8]) -> Option<Denial> {
    let is_override = |(key, _): &(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)| {
        key.eq_ignore_ascii_case("_method")
    };
    if url.query_pairs().any(|pair| is_override(&pair)) {
        return Some(Denial::MethodOverride("a `_method` query parameter".into()));
    }
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match content_type.as_str() {
        "multipart/form-data" => Some(Denial::MethodOverride(
            "a multipart body (read for `_method`)".into(),
        )),
        "" | "application/x-www-form-urlencoded"
            if url::form_urlencoded::parse(body).any(|pair| is_override(&pair)) =>
        {
            Some(Denial::MethodOverride("a `_method` form field".into()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn keystone_credential_headers_are_the_middleware_s() {
        for name in [
            "X-Service-Token",
            "x-auth-token",
            "X-Storage-Token",
            "X-Subject-Token",
            "X-Identity-Status",
            "X-Roles",
            "X-User-Id",
            "X-Project-Domain-Name",
            "X-Service-Roles",
            "OpenStack-System-Scope",
        ] {
            assert!(is_credential_header(name), "{name}");
        }
        for name in [
            "content-type",
            "openstack-api-version",
            "x-openstack-request-id",
        ] {
            assert!(!is_credential_header(name), "{name}");
        }
    }

    #[test]
    fn pecan_s_method_override_is_found_wherever_pecan_reads_it() {
        let form = |ct: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(ct) = ct {
                headers.insert(http::header::CONTENT_TYPE, ct.parse().unwrap());
            }
            headers
        };
        let plain = url("https://octavia.example.com/v2/lbaas/loadbalancers/lb1");
        for query in ["?_method=put", "?_METHOD=post", "?x=1&%5Fmethod=put"] {
            let u = url(&format!("{plain}{query}"));
            assert!(method_override(&u, &form(None), b"").is_some(), "{query}");
        }
        assert!(method_override(&plain, &form(None), b"_method=put").is_some());
        assert!(
            method_override(
                &plain,
                &form(Some("application/x-www-form-urlencoded")),
                b"a=1&_Method=delete"
            )
            .is_some()
        );
        assert!(
            method_override(&plain, &form(Some("multipart/form-data; boundary=b")), b"").is_some()
        );
        // JSON bodies are not forms; an ordinary request passes.
        assert!(
            method_override(
                &plain,
                &form(Some("application/json")),
                br#"{"_method": "put"}"#
            )
            .is_none()
        );
        assert!(method_override(&url(&format!("{plain}?fields=id")), &form(None), b"").is_none());
    }
}
