//! Who a request comes from, as upstream's delegated authenticator decides: a client
//! certificate signed by the client CA, else a bearer token the API server vouches for
//! (`TokenReview`, answers cached), else the anonymous user.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use sha2::{Digest, Sha256};

use super::review::{CodeLabel, ReviewError, Reviewer};
use super::review_cache::TtlCache;

/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// An authenticated (or anonymous) user, as `SubjectAccessReview` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name (`system:serviceaccount:monitoring:prometheus`).
    pub name: String,
    /// The user's UID, if the authenticator knows one.
    pub uid: String,
    /// The groups, `system:authenticated` included for every authenticated user.
    pub groups: Vec<String>,
    /// Extra attributes the token review returned.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// `system:anonymous` in `system:unauthenticated`: a request with no credentials.
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    /// An authenticated user, `system:authenticated` added to its groups when missing.
    pub fn authenticated(name: String, uid: String, mut groups: Vec<String>) -> Self {
        if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            groups.push(AUTHENTICATED_GROUP.into());
        }
        Self {
            name,
            uid,
            groups,
            extra: BTreeMap::new(),
        }
    }
}

/// Why a request was not authenticated.
#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    /// The API server says the token is not valid.
    #[error("invalid bearer token: {0}")]
    InvalidToken(String),
    /// The `TokenReview` could not be made.
    #[error("TokenReview failed: {0}")]
    Review(#[source] kube::Error),
    /// Too many reviews are in flight.
    #[error("too many reviews in flight")]
    Busy,
}

/// Bearer tokens checked with `TokenReview`, answers kept for the cache TTL (tokens
/// are kept only as their SHA-256).
pub struct TokenAuthenticator {
    reviewer: Reviewer,
    ttl: Duration,
    /// Tokens the API server vouched for, and apart from them the others: a flood of
    /// unknown tokens never pushes out a scraper's.
    valid: TtlCache<[u8; 32], UserInfo>,
    invalid: TtlCache<[u8; 32], String>,
    requests: Family<CodeLabel, Counter>,
}

impl TokenAuthenticator {
    /// Reviews tokens through `reviewer`; `requests` counts reviews by HTTP code.
    pub fn new(reviewer: Reviewer, ttl: Duration, requests: Family<CodeLabel, Counter>) -> Self {
        Self {
            reviewer,
            ttl,
            valid: TtlCache::default(),
            invalid: TtlCache::default(),
            requests,
        }
    }

    /// The user `token`, presented by `client`, belongs to. Answers (valid or not) are
    /// kept for the TTL; failed reviews are not.
    pub async fn authenticate(&self, token: &str, client: IpAddr) -> Result<UserInfo, AuthnError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(user) = self.valid.get(&key) {
            return Ok(user);
        }
        if let Some(error) = self.invalid.get(&key) {
            return Err(AuthnError::InvalidToken(error));
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..Default::default()
        };
        let status = match self.reviewer.create(&review, &self.requests, client).await {
            Ok(answer) => answer.status.unwrap_or_default(),
            Err(ReviewError::Busy) => return Err(AuthnError::Busy),
            Err(ReviewError::Api(err)) => return Err(AuthnError::Review(err)),
        };
        let answer = match (status.authenticated, status.user) {
            (Some(true), Some(user)) if user.username.as_deref().is_some_and(|u| !u.is_empty()) => {
                Ok(UserInfo {
                    extra: user.extra.unwrap_or_default(),
                    ..UserInfo::authenticated(
                        user.username.unwrap_or_default(),
                        user.uid.unwrap_or_default(),
                        user.groups.unwrap_or_default(),
                    )
                })
            }
            _ => Err(status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "not authenticated".into())),
        };
        match &answer {
            Ok(user) => self.valid.insert(key, user.clone(), self.ttl),
            Err(error) => self.invalid.insert(key, error.clone(), self.ttl),
        }
        answer.map_err(AuthnError::InvalidToken)
    }
}

/// The user a verified client certificate names: its Common Name (the last, when the
/// subject has several, as Go's `pkix.Name` reads it), in its Organizations
/// (upstream's `CommonNameUserConversion`). `None` without a Common Name.
pub fn certificate_user(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().last()?.as_str().ok()?.to_owned();
    if name.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(UserInfo::authenticated(name, String::new(), groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_names_its_user_and_groups() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:kube-controller-manager");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:monitoring");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let user = certificate_user(cert.der()).unwrap();
        assert_eq!(user.name, "system:kube-controller-manager");
        assert_eq!(user.groups, ["system:monitoring", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn of_two_common_names_the_last_is_the_user_as_go_reads_it() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:anonymous");
        // rcgen keeps one value per type: a second CN goes in as a raw attribute.
        params.distinguished_name.push(
            rcgen::DnType::CustomDnType(vec![2, 5, 4, 3]),
            "system:kube-controller-manager",
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(cert.der()).unwrap();
        assert_eq!(parsed.subject().iter_common_name().count(), 2, "two CNs");
        assert_eq!(
            certificate_user(cert.der()).unwrap().name,
            "system:kube-controller-manager"
        );
    }

    #[test]
    fn a_certificate_without_common_name_names_nobody() {
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let mut params = params;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(certificate_user(cert.der()), None);
    }
}
