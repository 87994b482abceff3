//! What a user may do on the secure port, as upstream's delegated authorizer decides:
//! paths of `--authorization-always-allow-paths` and the `system:masters` group are
//! allowed, anything else is a `SubjectAccessReview` on the non-resource path with
//! the request's lower-case method as verb (`get` on `/metrics`), answers cached.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::authn::UserInfo;
use sha2::{Digest, Sha256};

use super::review::{CodeLabel, ReviewError, Reviewer};
use super::review_cache::TtlCache;

/// The group upstream's delegated authorizer allows without asking (the API server
/// itself allows it everything).
pub const ALWAYS_ALLOW_GROUP: &str = "system:masters";

/// The authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied, with the reviewer's reason (possibly empty).
    Deny(String),
}

/// Why no decision was made.
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// The `SubjectAccessReview` could not be made.
    #[error("SubjectAccessReview failed: {0}")]
    Review(#[source] kube::Error),
    /// Too many reviews are in flight.
    #[error("too many reviews in flight")]
    Busy,
}

/// Who and what a cached answer is for: the SHA-256 of the user (name, UID, groups,
/// extra), the verb and the path, each length-prefixed — a key of bounded size whatever
/// the request carries, built without copying it.
fn key(user: &UserInfo, verb: &str, path: &str) -> [u8; 32] {
    let mut sha = Sha256::new();
    let mut field = |bytes: &[u8]| {
        sha.update((bytes.len() as u64).to_le_bytes());
        sha.update(bytes);
    };
    field(user.name.as_bytes());
    field(user.uid.as_bytes());
    field(&(user.groups.len() as u64).to_le_bytes());
    for group in &user.groups {
        field(group.as_bytes());
    }
    field(&(user.extra.len() as u64).to_le_bytes());
    for (name, values) in &user.extra {
        field(name.as_bytes());
        field(&(values.len() as u64).to_le_bytes());
        for value in values {
            field(value.as_bytes());
        }
    }
    field(verb.as_bytes());
    field(path.as_bytes());
    sha.finalize().into()
}

/// Always-allowed paths and groups, then `SubjectAccessReview`.
pub struct Authorizer {
    reviewer: Reviewer,
    always_allow_paths: Vec<String>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    /// Allowed answers, and apart from them denied ones: a flood of paths nobody may
    /// use never pushes out a scraper's answer.
    allowed: TtlCache<[u8; 32], ()>,
    denied: TtlCache<[u8; 32], String>,
    requests: Family<CodeLabel, Counter>,
}

impl Authorizer {
    /// Reviews through `reviewer`; `requests` counts reviews by HTTP code.
    pub fn new(
        reviewer: Reviewer,
        always_allow_paths: Vec<String>,
        (allowed_ttl, denied_ttl): (Duration, Duration),
        requests: Family<CodeLabel, Counter>,
    ) -> Self {
        Self {
            reviewer,
            always_allow_paths,
            allowed_ttl,
            denied_ttl,
            allowed: TtlCache::default(),
            denied: TtlCache::default(),
            requests,
        }
    }

    /// Whether `user`, connected from `client`, may use `verb` on `path`.
    pub async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
        client: IpAddr,
    ) -> Result<Decision, AuthzError> {
        if self
            .always_allow_paths
            .iter()
            .any(|pattern| path_matches(pattern, path))
            || user.groups.iter().any(|g| g == ALWAYS_ALLOW_GROUP)
        {
            return Ok(Decision::Allow);
        }
        let key = key(user, verb, path);
        if self.allowed.get(&key).is_some() {
            return Ok(Decision::Allow);
        }
        if let Some(reason) = self.denied.get(&key) {
            return Ok(Decision::Deny(reason));
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
                resource_attributes: None,
            },
            ..Default::default()
        };
        let status = match self.reviewer.create(&review, &self.requests, client).await {
            Ok(answer) => answer.status.unwrap_or_default(),
            Err(ReviewError::Busy) => return Err(AuthzError::Busy),
            Err(ReviewError::Api(err)) => return Err(AuthzError::Review(err)),
        };
        let decision = if status.allowed && !status.denied.unwrap_or(false) {
            Decision::Allow
        } else {
            Decision::Deny(status.reason.unwrap_or_default())
        };
        match &decision {
            Decision::Allow => self.allowed.insert(key, (), self.allowed_ttl),
            Decision::Deny(reason) => self.denied.insert(key, reason.clone(), self.denied_ttl),
        }
        Ok(decision)
    }
}

/// `--authorization-always-allow-paths` matching: the path itself, or a prefix
/// ending in `*`.
pub fn path_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

#[cfg(test)]
mod tests {
    use super::path_matches;

    #[test]
    fn always_allowed_paths_are_exact_or_a_trailing_star_prefix() {
        assert!(path_matches("/healthz", "/healthz"));
        assert!(!path_matches("/healthz", "/healthz/leaderElection"));
        assert!(path_matches("/healthz/*", "/healthz/leaderElection"));
        assert!(path_matches("/healthz*", "/healthz"));
        assert!(!path_matches("/healthz", "/metrics"));
        assert!(path_matches("/*", "/metrics"));
    }
}
