//! The grammar of `serviceAnnotations`: the annotation key prefixes a provider may
//! write on the Service of a load-balancer call (the `annotations` import).
//!
//! ```yaml
//! serviceAnnotations:
//!   - loadbalancer.openstack.org/
//! ```
//!
//! A prefix is a DNS subdomain followed by `/`. Kubernetes' own prefixes
//! (`kubernetes.io/`, `k8s.io/` and their subdomains) are refused: what other
//! controllers and kubectl read there is not a provider's to write. Nothing is allowed
//! without the field.

/// The longest annotation value a provider may set, in bytes.
pub const MAX_VALUE_BYTES: usize = 4096;
/// The most annotations one call may set.
pub const MAX_PER_CALL: usize = 16;

/// Checks one prefix of `serviceAnnotations` (a reason when it is not one).
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    let Some(domain) = prefix.strip_suffix('/') else {
        return Err(format!(
            "`{prefix}` must end with `/` (a domain such as loadbalancer.example.org/)"
        ));
    };
    if !is_dns_subdomain(domain) {
        return Err(format!("`{domain}` is not a DNS subdomain"));
    }
    if is_kubernetes_domain(domain) {
        return Err(format!(
            "`{prefix}` is Kubernetes' own prefix: a provider writes only under its own domain"
        ));
    }
    Ok(())
}

/// Whether `key` is a valid annotation key under one of `prefixes`.
pub fn key_allowed(prefixes: &[String], key: &str) -> bool {
    prefixes.iter().any(|prefix| {
        key.strip_prefix(prefix.as_str())
            .is_some_and(is_qualified_name_part)
    })
}

fn is_kubernetes_domain(domain: &str) -> bool {
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|own| domain == *own || domain.ends_with(&format!(".{own}")))
}

/// A DNS-1123 subdomain: lowercase labels of `[a-z0-9-]`, alphanumeric at both ends,
/// at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The name part of a qualified name: 1 to 63 characters of `[A-Za-z0-9._-]`,
/// alphanumeric at both ends.
fn is_qualified_name_part(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert!(check_prefix("loadbalancer.openstack.org/").is_ok());
        assert!(check_prefix("example.com/").is_ok());
        for bad in [
            "loadbalancer.openstack.org",
            "/",
            "Example.com/",
            "kubernetes.io/",
            "service.beta.kubernetes.io/",
            "k8s.io/",
            "x.k8s.io/",
            "a..b/",
            "-a.com/",
            "a.com/b/",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys() {
        let prefixes = vec!["loadbalancer.openstack.org/".to_owned()];
        assert!(key_allowed(
            &prefixes,
            "loadbalancer.openstack.org/load-balancer-id"
        ));
        for bad in [
            "loadbalancer.openstack.org/",
            "loadbalancer.openstack.org/-x",
            "loadbalancer.openstack.org/a/b",
            "loadbalancer.openstack.org/a b",
            "evil.loadbalancer.openstack.org/x",
            "service.beta.kubernetes.io/x",
            "x",
        ] {
            assert!(!key_allowed(&prefixes, bad), "{bad}");
        }
        assert!(!key_allowed(&[], "loadbalancer.openstack.org/x"));
    }
}
