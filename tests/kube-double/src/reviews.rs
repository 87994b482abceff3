//! Delegated authentication and authorization, as the API server answers them:
//! `TokenReview` (who a bearer token belongs to) and `SubjectAccessReview` (may this
//! user use this verb on this non-resource path), for servers that authorize their own
//! endpoints through the API server, as a controller manager's `/metrics`. The test
//! sets the users and grants ([`crate::ApiServer::add_user`],
//! [`crate::ApiServer::allow_non_resource`]).

use serde_json::{Value, json};

/// A user a bearer token authenticates as.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub token: String,
    pub name: String,
    pub groups: Vec<String>,
}

/// An RBAC-like grant on non-resource URLs: `subject` (a user or a group) may use
/// `verb` (or `*`) on `path` (exact, or a prefix ending in `*`, as RBAC's
/// `nonResourceURLs`).
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub subject: String,
    pub verb: String,
    pub path: String,
}

/// The users and grants the double knows.
#[derive(Debug, Default)]
pub(crate) struct Reviews {
    pub users: Vec<User>,
    pub grants: Vec<Grant>,
}

impl Reviews {
    /// The answer to a `TokenReview` create: the review with its status.
    pub fn token_review(&self, review: &Value) -> Value {
        let token = review
            .pointer("/spec/token")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let status = match self
            .users
            .iter()
            .find(|u| !token.is_empty() && u.token == token)
        {
            Some(user) => json!({
                "authenticated": true,
                "user": {
                    "username": user.name,
                    "uid": format!("uid-{}", user.name),
                    "groups": user.groups,
                },
            }),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {},
            "spec": review.get("spec").cloned().unwrap_or(json!({})),
            "status": status,
        })
    }

    /// The answer to a `SubjectAccessReview` create: allowed when a grant names the
    /// user or one of its groups, the verb and the path. Resource attributes are never
    /// allowed (the double authorizes non-resource URLs only).
    pub fn subject_access_review(&self, review: &Value) -> Value {
        let spec = review.get("spec").cloned().unwrap_or(json!({}));
        let user = spec["user"].as_str().unwrap_or_default();
        let groups: Vec<&str> = spec["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let (allowed, reason) = match spec.get("nonResourceAttributes") {
            Some(attributes) => {
                let path = attributes["path"].as_str().unwrap_or_default();
                let verb = attributes["verb"].as_str().unwrap_or_default();
                let grant = self.grants.iter().find(|g| {
                    (g.subject == user || groups.contains(&g.subject.as_str()))
                        && (g.verb == "*" || g.verb == verb)
                        && path_matches(&g.path, path)
                });
                match grant {
                    Some(g) => (
                        true,
                        format!("granted {} on {} to {}", g.verb, g.path, g.subject),
                    ),
                    None => (false, String::new()),
                }
            }
            None => (false, "the double authorizes non-resource URLs only".into()),
        };
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {},
            "spec": spec,
            "status": {"allowed": allowed, "reason": reason},
        })
    }
}

/// RBAC's `nonResourceURLs` match: the path itself, or a prefix ending in `*`.
fn path_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reviews() -> Reviews {
        Reviews {
            users: vec![User {
                token: "t-scraper".into(),
                name: "system:serviceaccount:monitoring:prometheus".into(),
                groups: vec![
                    "system:serviceaccounts".into(),
                    "system:authenticated".into(),
                ],
            }],
            grants: vec![Grant {
                subject: "system:serviceaccount:monitoring:prometheus".into(),
                verb: "get".into(),
                path: "/metrics".into(),
            }],
        }
    }

    #[test]
    fn tokens_authenticate_as_their_user_only() {
        let r = reviews();
        let known = r.token_review(&json!({"spec": {"token": "t-scraper"}}));
        assert_eq!(known["status"]["authenticated"], true);
        assert_eq!(
            known["status"]["user"]["username"],
            "system:serviceaccount:monitoring:prometheus"
        );
        for token in ["other", ""] {
            let unknown = r.token_review(&json!({"spec": {"token": token}}));
            assert_eq!(unknown["status"]["authenticated"], false, "{token}");
        }
    }

    #[test]
    fn grants_allow_their_verb_and_path_only() {
        let r = reviews();
        let review = |user: &str, verb: &str, path: &str| {
            r.subject_access_review(&json!({"spec": {
                "user": user, "groups": ["system:authenticated"],
                "nonResourceAttributes": {"verb": verb, "path": path}}}))["status"]["allowed"]
                == true
        };
        let sa = "system:serviceaccount:monitoring:prometheus";
        assert!(review(sa, "get", "/metrics"));
        assert!(!review(sa, "post", "/metrics"));
        assert!(!review(sa, "get", "/metrics/extra"));
        assert!(!review("someone", "get", "/metrics"));
        assert!(path_matches("/healthz/*", "/healthz/ping"));
        assert!(!path_matches("/healthz/*", "/metrics"));
    }
}
