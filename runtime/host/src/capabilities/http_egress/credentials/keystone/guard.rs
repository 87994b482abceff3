//! What a guest may not put on a request the host adds a Keystone token to: the
//! headers Keystone's middleware reads as credentials or sets itself. Pecan's `_method`
//! is a method override, refused with the others in one place for every kind
//! ([`super::super::method_override`]); for a Keystone token even without
//! `allowedActions`.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
