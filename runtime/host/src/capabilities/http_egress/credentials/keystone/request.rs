//! Keystone's wire format: the login request's body, the token answer, its errors.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::policy::keystone::{Identity, Scope, Within};

#[derive(Deserialize)]
pub(super) struct TokenBody {
    pub(super) token: TokenFields,
}

#[derive(Deserialize)]
pub(super) struct TokenFields {
    pub(super) expires_at: String,
    pub(super) catalog: Option<Vec<Value>>,
}

/// Keystone's `{"error": {"message": ...}}`, or the start of the body.
pub(super) fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    message.chars().filter(|c| !c.is_control()).collect()
}

/// `{"id": ...}` or `{"name": ..., "domain"|"user": ...}`.
fn reference(identity: &Identity) -> Value {
    match identity {
        Identity::Id(id) => json!({ "id": id }),
        Identity::Named { name, within } => match within.as_ref() {
            Within::DomainId(id) => json!({ "name": name, "domain": { "id": id } }),
            Within::DomainName(domain) => json!({ "name": name, "domain": { "name": domain } }),
            Within::User(user) => json!({ "name": name, "user": reference(user) }),
        },
    }
}

/// Who logs in: a rule's method with its secret file read (or a clouds.yaml entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Login {
    /// An application credential.
    ApplicationCredential(Identity),
    /// A user's password, and the token's scope.
    Password {
        /// The user.
        user: Identity,
        /// A project or a trust.
        scope: Scope,
    },
}

/// The `POST /v3/auth/tokens` body.
pub(super) fn login_body(login: &Login, secret: &str) -> Value {
    match login {
        Login::ApplicationCredential(id) => {
            let mut credential = reference(id);
            credential["secret"] = json!(secret);
            json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": credential,
            }}})
        }
        Login::Password { user, scope } => {
            let mut user = reference(user);
            user["password"] = json!(secret);
            let scope = match scope {
                Scope::Project(project) => json!({"project": reference(project)}),
                Scope::Trust(id) => json!({"OS-TRUST:trust": {"id": id}}),
            };
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": user}},
                "scope": scope,
            }})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_bodies_name_the_credential_as_keystone_expects() {
        let app = Login::ApplicationCredential(Identity::Named {
            name: "ccm".into(),
            within: Box::new(Within::User(Identity::Named {
                name: "k8s".into(),
                within: Box::new(Within::DomainName("Default".into())),
            })),
        });
        assert_eq!(
            login_body(&app, "shh"),
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"name": "ccm", "secret": "shh",
                    "user": {"name": "k8s", "domain": {"name": "Default"}}}}}})
        );
        let password = Login::Password {
            user: Identity::Id("u1".into()),
            scope: Scope::Project(Identity::Named {
                name: "k8s".into(),
                within: Box::new(Within::DomainId("default".into())),
            }),
        };
        assert_eq!(
            login_body(&password, "pw"),
            json!({"auth": {"identity": {"methods": ["password"],
                "password": {"user": {"id": "u1", "password": "pw"}}},
                "scope": {"project": {"name": "k8s", "domain": {"id": "default"}}}}})
        );
    }

    #[test]
    fn error_messages_come_from_keystone_s_error_body() {
        let body = br#"{"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}"#;
        assert_eq!(
            error_message(body),
            "The request you have made requires authentication."
        );
        assert_eq!(error_message(b"<html>\nbad gateway"), "<html>bad gateway");
    }
}
