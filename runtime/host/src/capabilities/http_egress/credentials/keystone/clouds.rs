//! A login from an entry of a clouds.yaml file (the format of OpenStack's client
//! config, which occm reads with `use-clouds`), read at each login so a rotated Secret
//! is used at the next one.
//!
//! ```yaml
//! clouds:
//!   openstack:
//!     auth_type: v3applicationcredential   # or password / v3password; inferred when absent
//!     auth:
//!       auth_url: https://keystone.example.com:5000/v3
//!       application_credential_id: 21dced0fd20347869b93710d2b98aae0
//!       application_credential_secret: ...
//! ```
//!
//! Served: a password (`user_id`, or `username` with `user_domain_*`, `domain_*` or
//! `default_domain`; `project_*` or `tenant_*` with their domain likewise, or
//! `trust_id`), and an application credential (by ID, or by name with its user). The
//! entry's `auth_url` must be the rule's `authUrl`: the rule's destination is what the
//! host may send a secret to. Its `region_name`, `interface` and `cacert` are the
//! rule's and the policy's to say, as the endpoints that get the token are.

use std::path::Path;

use serde_json::Value;

use super::request::Login;
use crate::policy::keystone::{Identity, Scope, Within, auth_url};

/// The login and secret the entry `cloud` of `text` (the file `path`) logs in with, or
/// why it cannot be used (naming the file, the entry and the field, never a value).
pub(super) fn login(
    path: &Path,
    text: &str,
    cloud: &str,
    rule_auth_url: &url::Url,
) -> Result<(Login, String), String> {
    let at = |field: &str| format!("{}: clouds.{cloud}.{field}", path.display());
    // Where, not what: the error's text may quote the file, secrets and all.
    let file: Value = serde_saphyr::from_str(text).map_err(|e| match e.location() {
        Some(at) => format!(
            "{} is not YAML (line {}, column {})",
            path.display(),
            at.line(),
            at.column()
        ),
        None => format!("{} is not YAML", path.display()),
    })?;
    let entry = file
        .get("clouds")
        .and_then(|clouds| clouds.get(cloud))
        .ok_or_else(|| format!("{} has no entry `clouds.{cloud}`", path.display()))?;
    let auth = entry
        .get("auth")
        .filter(|a| a.is_object())
        .ok_or_else(|| format!("{} is missing", at("auth")))?;
    let field = |name: &str| text_of(auth.get(name));
    let written = field("auth_url").ok_or_else(|| format!("{} is missing", at("auth.auth_url")))?;
    // The reason is not given: it quotes the URL, which may carry a password.
    let url = auth_url(&written).map_err(|_| {
        format!(
            "{} is not an http(s) URL of the identity API without user info, query or fragment",
            at("auth.auth_url")
        )
    })?;
    if &url != rule_auth_url {
        return Err(format!(
            "{} `{written}` is not the rule's authUrl `{rule_auth_url}`: the host logs in only \
             at the rule's identity endpoint",
            at("auth.auth_url")
        ));
    }
    let auth_type = text_of(entry.get("auth_type"));
    let application_credential = match auth_type.as_deref() {
        None => field("application_credential_secret").is_some(),
        Some("password" | "v3password") => false,
        Some("v3applicationcredential" | "applicationcredential" | "application_credential") => {
            true
        }
        Some(other) => {
            return Err(format!(
                "{} `{other}` is not served: use an application credential \
                 (v3applicationcredential) or a password (password); a token expires and \
                 cannot be renewed by the host",
                at("auth_type")
            ));
        }
    };
    let missing = |name: &str| format!("{} is missing", at(&format!("auth.{name}")));
    // os-client-config's fallbacks: `domain_*`, then `default_domain`.
    let domain = |prefix: &str| -> Option<Within> {
        field(&format!("{prefix}domain_id"))
            .map(Within::DomainId)
            .or_else(|| field(&format!("{prefix}domain_name")).map(Within::DomainName))
            .or_else(|| field("domain_id").map(Within::DomainId))
            .or_else(|| field("domain_name").map(Within::DomainName))
            .or_else(|| field("default_domain").map(Within::DomainId))
    };
    let user = || -> Result<Identity, String> {
        match (field("user_id"), field("username")) {
            (Some(id), _) => Ok(Identity::Id(id)),
            (None, Some(name)) => Ok(Identity::Named {
                name,
                within: Box::new(domain("user_").ok_or_else(|| {
                    format!(
                        "{}: a user name is unique only within a domain: set user_domain_name \
                         or user_domain_id",
                        at("auth.username")
                    )
                })?),
            }),
            (None, None) => Err(missing("user_id (or username)")),
        }
    };
    if application_credential {
        let secret = field("application_credential_secret")
            .ok_or_else(|| missing("application_credential_secret"))?;
        let id = match (
            field("application_credential_id"),
            field("application_credential_name"),
        ) {
            (Some(id), _) => Identity::Id(id),
            (None, Some(name)) => Identity::Named {
                name,
                within: Box::new(Within::User(user()?)),
            },
            (None, None) => return Err(missing("application_credential_id")),
        };
        return Ok((Login::ApplicationCredential(id), secret));
    }
    let password = field("password").ok_or_else(|| missing("password"))?;
    let scope = match field("trust_id") {
        Some(trust) => Scope::Trust(trust),
        None => Scope::Project(
            match (
                field("project_id").or_else(|| field("tenant_id")),
                field("project_name").or_else(|| field("tenant_name")),
            ) {
                (Some(id), _) => Identity::Id(id),
                (None, Some(name)) => Identity::Named {
                    name,
                    within: Box::new(domain("project_").ok_or_else(|| {
                        format!(
                            "{}: a project name is unique only within a domain: set \
                             project_domain_name or project_domain_id",
                            at("auth.project_name")
                        )
                    })?),
                },
                (None, None) => return Err(missing("project_id (or project_name, or trust_id)")),
            },
        ),
    };
    Ok((
        Login::Password {
            user: user()?,
            scope,
        },
        password,
    ))
}

/// A scalar as text (YAML may read an ID of digits as a number); empty is absent.
fn text_of(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::http_egress::credentials::keystone::request::login_body;
    use serde_json::json;

    fn rule() -> url::Url {
        url::Url::parse("https://keystone.example.com:5000/v3").unwrap()
    }

    fn body(text: &str) -> Result<Value, String> {
        login(Path::new("/creds/clouds.yaml"), text, "openstack", &rule())
            .map(|(login, secret)| login_body(&login, &secret))
    }

    #[test]
    fn an_application_credential_entry_logs_in_as_its_credential() {
        let text = "clouds:\n  openstack:\n    auth_type: v3applicationcredential\n    \
                    region_name: RegionOne\n    auth:\n      \
                    auth_url: https://keystone.example.com:5000\n      \
                    application_credential_id: 12345\n      \
                    application_credential_secret: shh\n";
        assert_eq!(
            body(text).unwrap(),
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"id": "12345", "secret": "shh"}}}})
        );
    }

    #[test]
    fn a_password_entry_takes_os_client_config_s_domain_fallbacks_and_trusts() {
        let text = "clouds:\n  openstack:\n    auth:\n      \
                    auth_url: https://keystone.example.com:5000/v3/\n      \
                    username: ccm\n      password: pw\n      project_name: k8s\n      \
                    domain_name: Default\n";
        assert_eq!(
            body(text).unwrap(),
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user":
                    {"name": "ccm", "domain": {"name": "Default"}, "password": "pw"}}},
                "scope": {"project": {"name": "k8s", "domain": {"name": "Default"}}}}})
        );
        let trust = "clouds:\n  openstack:\n    auth:\n      \
                     auth_url: https://keystone.example.com:5000/v3\n      \
                     user_id: trustee\n      password: pw\n      trust_id: t1\n";
        assert_eq!(
            body(trust).unwrap()["auth"]["scope"],
            json!({"OS-TRUST:trust": {"id": "t1"}})
        );
    }

    #[test]
    fn an_entry_that_cannot_be_used_is_named_with_its_field_and_never_its_secret() {
        for (text, wanted) in [
            ("clouds: {}\n", "has no entry `clouds.openstack`"),
            (
                "clouds:\n  openstack: {}\n",
                "clouds.openstack.auth is missing",
            ),
            (
                "clouds:\n  openstack:\n    auth:\n      auth_url: https://evil.example.com/v3\n      \
                 user_id: u\n      password: hunter2\n      project_id: p\n",
                "clouds.openstack.auth.auth_url `https://evil.example.com/v3` is not the rule's",
            ),
            (
                "clouds:\n  openstack:\n    auth_type: token\n    auth:\n      \
                 auth_url: https://keystone.example.com:5000/v3\n      token: hunter2\n",
                "clouds.openstack.auth_type `token` is not served",
            ),
            (
                "clouds:\n  openstack:\n    auth:\n      \
                 auth_url: https://keystone.example.com:5000/v3\n      username: u\n      \
                 password: hunter2\n      project_id: p\n",
                "clouds.openstack.auth.username: a user name is unique only within a domain",
            ),
            (
                "clouds:\n  openstack:\n    auth:\n      \
                 auth_url: https://keystone.example.com:5000/v3\n      user_id: u\n      \
                 password: hunter2\n",
                "clouds.openstack.auth.project_id (or project_name, or trust_id) is missing",
            ),
            ("clouds: [", "/creds/clouds.yaml is not YAML"),
            (
                "clouds:\n  openstack:\n    auth:\n      \
                 auth_url: https://ccm:hunter2@keystone.example.com:5000/v3\n",
                "clouds.openstack.auth.auth_url is not an http(s) URL",
            ),
            (
                "clouds:\n  openstack:\n    auth: {password: hunter2\n",
                "/creds/clouds.yaml is not YAML",
            ),
        ] {
            let err = body(text).unwrap_err();
            assert!(err.contains(wanted), "{text}: {err}");
            assert!(err.starts_with("/creds/clouds.yaml"), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}
