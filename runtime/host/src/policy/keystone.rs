//! The `keystone` credential kind: OpenStack's Identity service (Keystone v3), logged
//! in to by the host.
//!
//! ```yaml
//! credentials:
//!   - destination: https://keystone.example.com:5000
//!     keystone:
//!       authUrl: https://keystone.example.com:5000/v3
//!       region: RegionOne                  # optional: endpoints of every region
//!       interface: public                  # public (default), internal or admin
//!       services: [compute, network, load-balancer]   # the default
//!       # An application credential (recommended), by ID ...
//!       applicationCredentialId: 21dced0fd20347869b93710d2b98aae0
//!       applicationCredentialSecretFile: application-credential-secret
//!       # ... or by name, with its user (userId, or userName and its domain).
//!   - destination: https://keystone.example.com:5000
//!     keystone:
//!       authUrl: https://keystone.example.com:5000/v3
//!       # Or a password, scoped to a project.
//!       userName: kubernetes-ccm
//!       userDomainName: Default            # or userDomainId
//!       passwordFile: password
//!       projectName: kubernetes            # or projectId
//!       projectDomainName: Default         # or projectDomainId
//!   - destination: https://keystone.example.com:5000
//!     keystone:
//!       authUrl: https://keystone.example.com:5000/v3
//!       # Or a trust (a Magnum cluster's): the trustee's password, scoped to the trust.
//!       userId: 3b5e6a0c1f9d4e0e8f1b2a3c4d5e6f70   # the trustee
//!       passwordFile: trustee-password
//!       trustId: 0c6a3d2f9e8b4c7a8f1e2d3c4b5a6978
//!   - destination: https://keystone.example.com:5000
//!     keystone:
//!       authUrl: https://keystone.example.com:5000/v3
//!       # Or a clouds.yaml kept whole in the Secret: its entry's `auth` (a password,
//!       # an application credential, or either with a trust), read at each login.
//!       cloudsFile: clouds.yaml
//!       cloud: openstack
//! ```
//!
//! The host logs in (`POST <authUrl>/auth/tokens`) with the secret read from its file,
//! keeps the token until shortly before it expires, and adds it as `X-Auth-Token` to
//! requests for the endpoints of the token's service catalog whose type is in
//! `services`, in `region`, on `interface`: those need not be listed in
//! `allowedOutboundHosts`. The provider finds them with `GET <authUrl>/auth/catalog`,
//! which the host answers from the login's catalog; every other request to the
//! identity endpoint (the rule's `destination`, which must match `authUrl`) is
//! refused, and `identity` is never one of `services`: with a token, Keystone creates
//! credentials. Identifiers (IDs and names) are written here; only the secret is a file,
//! or, with `cloudsFile`, a clouds.yaml entry whose `auth_url` must be the rule's `authUrl`
//! (its region and interface are the rule's: they say which endpoints get the token).
//! A plain `http://` catalog endpoint that is not loopback gets the token only with the
//! rule's `allowPlaintext: true`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::allowlist::HostPattern;
use super::{RuleInvalid as Invalid, rule_invalid as invalid};

/// The catalog service types a rule allows by default: what a cloud-controller-manager
/// calls (Nova, Neutron, Octavia).
pub const DEFAULT_SERVICES: [&str; 3] = ["compute", "network", "load-balancer"];

/// The catalog service type never allowed: Keystone hands out credentials.
pub const IDENTITY_SERVICE: &str = "identity";

/// A Keystone v3 login and the catalog endpoints its token is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeystoneCredential {
    /// The identity API's v3 root, e.g. `https://keystone.example.com:5000/v3` (no
    /// trailing slash).
    pub auth_url: url::Url,
    /// How the host logs in.
    pub method: KeystoneMethod,
    /// The region whose endpoints get the token; `None`: every region.
    pub region: Option<String>,
    /// The endpoint interface: `public`, `internal` or `admin`.
    pub interface: String,
    /// The catalog service types whose endpoints get the token.
    pub services: Vec<String>,
    /// Plain `http://` catalog endpoints other than loopback get the token too.
    pub allow_plaintext: bool,
}

/// How the host logs in to Keystone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeystoneMethod {
    /// An application credential (already scoped to its project).
    ApplicationCredential {
        /// Its ID, or its name and user.
        id: Identity,
        /// The file holding its secret.
        secret_file: PathBuf,
    },
    /// A user's password, scoped to a project or a trust.
    Password {
        /// The user (with a trust, the trustee).
        user: Identity,
        /// The file holding the password.
        password_file: PathBuf,
        /// What the token is scoped to.
        scope: Scope,
    },
    /// The `auth` of an entry of a clouds.yaml file (a Secret), read at each login.
    CloudsYaml {
        /// The clouds.yaml file.
        file: PathBuf,
        /// The entry under `clouds:`.
        cloud: String,
    },
}

/// What a password login's token is scoped to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// A project.
    Project(Identity),
    /// A trust, by ID: the trustor's project and roles (`OS-TRUST:trust`).
    Trust(String),
}

/// An object Keystone names by ID, or by name within a domain (or, for an
/// application credential's name, with its user).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// `{"id": ...}`.
    Id(String),
    /// `{"name": ..., "domain": {"id"|"name": ...}}`.
    Named {
        /// The name.
        name: String,
        /// Its domain (or, for an application credential, its user).
        within: Box<Within>,
    },
}

/// What a name is unique within.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Within {
    /// A domain, by ID.
    DomainId(String),
    /// A domain, by name.
    DomainName(String),
    /// A user (an application credential's name is unique per user).
    User(Identity),
}

impl KeystoneCredential {
    /// The Secret file the host reads.
    pub fn files(&self) -> Vec<&Path> {
        match &self.method {
            KeystoneMethod::ApplicationCredential { secret_file, .. } => vec![secret_file],
            KeystoneMethod::Password { password_file, .. } => vec![password_file],
            KeystoneMethod::CloudsYaml { file, .. } => vec![file],
        }
    }

    /// The catalog's URL as the provider asks for it: `<authUrl>/auth/catalog`.
    pub fn catalog_url(&self) -> String {
        format!("{}/auth/catalog", self.auth_url)
    }
}

/// The `keystone` fields of a credential rule, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawKeystone {
    auth_url: String,
    region: Option<String>,
    interface: Option<String>,
    services: Option<Vec<String>>,
    application_credential_id: Option<String>,
    application_credential_name: Option<String>,
    application_credential_secret_file: Option<PathBuf>,
    user_id: Option<String>,
    user_name: Option<String>,
    user_domain_id: Option<String>,
    user_domain_name: Option<String>,
    password_file: Option<PathBuf>,
    project_id: Option<String>,
    project_name: Option<String>,
    project_domain_id: Option<String>,
    project_domain_name: Option<String>,
    trust_id: Option<String>,
    clouds_file: Option<PathBuf>,
    cloud: Option<String>,
}

/// `id`, or `name` within the domain `domain_id` or `domain_name`.
fn identity(
    what: &'static str,
    id: Option<String>,
    name: Option<String>,
    domain_id: Option<String>,
    domain_name: Option<String>,
) -> Result<Identity, Invalid> {
    let (id_field, name_field, domain_fields) = match what {
        "user" => ("userId", "userName", "userDomainId or userDomainName"),
        _ => (
            "projectId",
            "projectName",
            "projectDomainId or projectDomainName",
        ),
    };
    match (id, name, domain_id, domain_name) {
        (Some(id), None, None, None) => Ok(Identity::Id(id)),
        (Some(_), _, _, _) => Err(invalid(
            if what == "user" {
                "userId"
            } else {
                "projectId"
            },
            format!("with `{id_field}`, leave out `{name_field}` and its domain"),
        )),
        (None, Some(name), Some(domain), None) => Ok(Identity::Named {
            name,
            within: Box::new(Within::DomainId(domain)),
        }),
        (None, Some(name), None, Some(domain)) => Ok(Identity::Named {
            name,
            within: Box::new(Within::DomainName(domain)),
        }),
        (None, Some(_), None, None) => Err(invalid(
            if what == "user" {
                "userName"
            } else {
                "projectName"
            },
            format!("a {what} name is unique only within a domain: set {domain_fields}"),
        )),
        (None, Some(_), Some(_), Some(_)) => Err(invalid(
            if what == "user" {
                "userDomainId"
            } else {
                "projectDomainId"
            },
            format!("set one of {domain_fields}"),
        )),
        (None, None, _, _) => Err(invalid(
            if what == "user" {
                "userId"
            } else {
                "projectId"
            },
            format!("name the {what}: `{id_field}`, or `{name_field}` and {domain_fields}"),
        )),
    }
}

impl RawKeystone {
    /// Checks the rule and resolves its file with `resolve`.
    pub(super) fn validate(
        self,
        destination: &HostPattern,
        allow_plaintext: bool,
        resolve: impl Fn(PathBuf) -> PathBuf,
    ) -> Result<KeystoneCredential, Invalid> {
        let auth_url = auth_url(&self.auth_url)?;
        let port = auth_url.port_or_known_default().unwrap_or(0);
        if !destination.matches(
            auth_url.scheme(),
            auth_url.host_str().unwrap_or_default(),
            port,
        ) {
            return Err(invalid(
                "authUrl",
                format!(
                    "`{}` is not under the rule's destination `{destination}`: the destination \
                     is the identity endpoint",
                    self.auth_url
                ),
            ));
        }
        let interface = self.interface.clone().unwrap_or_else(|| "public".into());
        if !["public", "internal", "admin"].contains(&interface.as_str()) {
            return Err(invalid(
                "interface",
                format!("`{interface}` is not one of public, internal, admin"),
            ));
        }
        let services = self
            .services
            .clone()
            .unwrap_or_else(|| DEFAULT_SERVICES.map(String::from).to_vec());
        if services.is_empty() {
            return Err(invalid(
                "services",
                "name at least one catalog service type",
            ));
        }
        if services.iter().any(|s| s == IDENTITY_SERVICE) {
            return Err(invalid(
                "services",
                "the host never sends the token to the identity service: with it, Keystone \
                 creates credentials (the provider reads the catalog at <authUrl>/auth/catalog)",
            ));
        }
        if let Some(region) = &self.region
            && region.trim().is_empty()
        {
            return Err(invalid("region", "is empty: leave it out for every region"));
        }
        let user = |this: &Self| {
            identity(
                "user",
                this.user_id.clone(),
                this.user_name.clone(),
                this.user_domain_id.clone(),
                this.user_domain_name.clone(),
            )
        };
        let has_project = self.project_id.is_some()
            || self.project_name.is_some()
            || self.project_domain_id.is_some()
            || self.project_domain_name.is_some();
        if let Some(file) = self.clouds_file.clone() {
            return Ok(KeystoneCredential {
                method: self.clouds_yaml(resolve(file))?,
                auth_url,
                region: self.region.clone(),
                interface,
                services,
                allow_plaintext,
            });
        }
        if self.cloud.is_some() {
            return Err(invalid(
                "cloud",
                "names an entry of cloudsFile: set cloudsFile too",
            ));
        }
        let method = match (
            self.application_credential_secret_file.clone(),
            self.password_file.clone(),
        ) {
            (Some(_), None) if self.trust_id.is_some() => {
                return Err(invalid(
                    "trustId",
                    "a trust logs in with its trustee's password (userId and passwordFile), \
                     not an application credential",
                ));
            }
            (Some(secret_file), None) => {
                if has_project {
                    return Err(invalid(
                        "projectName",
                        "an application credential is scoped to its project already: leave out \
                         the project fields",
                    ));
                }
                let id = match (
                    self.application_credential_id.clone(),
                    self.application_credential_name.clone(),
                ) {
                    (Some(id), None) => {
                        if self.user_id.is_some() || self.user_name.is_some() {
                            return Err(invalid(
                                "applicationCredentialId",
                                "with the credential's ID, leave out the user fields",
                            ));
                        }
                        Identity::Id(id)
                    }
                    (None, Some(name)) => Identity::Named {
                        name,
                        within: Box::new(Within::User(user(&self)?)),
                    },
                    _ => {
                        return Err(invalid(
                            "applicationCredentialId",
                            "set one of applicationCredentialId or applicationCredentialName",
                        ));
                    }
                };
                KeystoneMethod::ApplicationCredential {
                    id,
                    secret_file: resolve(secret_file),
                }
            }
            (None, Some(password_file)) => {
                if self.application_credential_id.is_some()
                    || self.application_credential_name.is_some()
                {
                    return Err(invalid(
                        "passwordFile",
                        "an application credential logs in with applicationCredentialSecretFile, \
                         not passwordFile",
                    ));
                }
                let scope = match self.trust_id.clone() {
                    Some(_) if has_project => {
                        return Err(invalid(
                            "trustId",
                            "a trust is scoped to its trustor's project already: leave out the \
                             project fields",
                        ));
                    }
                    Some(trust) if trust.trim().is_empty() => {
                        return Err(invalid("trustId", "is empty"));
                    }
                    Some(trust) => Scope::Trust(trust.trim().to_owned()),
                    None => Scope::Project(identity(
                        "project",
                        self.project_id.clone(),
                        self.project_name.clone(),
                        self.project_domain_id.clone(),
                        self.project_domain_name.clone(),
                    )?),
                };
                KeystoneMethod::Password {
                    user: user(&self)?,
                    password_file: resolve(password_file),
                    scope,
                }
            }
            _ => {
                return Err(invalid(
                    "applicationCredentialSecretFile",
                    "set exactly one of applicationCredentialSecretFile (an application \
                     credential) or passwordFile (a user's password)",
                ));
            }
        };
        Ok(KeystoneCredential {
            auth_url,
            method,
            region: self.region.clone(),
            interface,
            services,
            allow_plaintext,
        })
    }
}

impl RawKeystone {
    /// `cloudsFile` (resolved to `file`) and `cloud`: the login's identity is the
    /// entry's, so no identity field may be written beside them.
    fn clouds_yaml(&self, file: PathBuf) -> Result<KeystoneMethod, Invalid> {
        let written = [
            (
                "applicationCredentialId",
                self.application_credential_id.is_some(),
            ),
            (
                "applicationCredentialName",
                self.application_credential_name.is_some(),
            ),
            (
                "applicationCredentialSecretFile",
                self.application_credential_secret_file.is_some(),
            ),
            ("userId", self.user_id.is_some()),
            ("userName", self.user_name.is_some()),
            ("userDomainId", self.user_domain_id.is_some()),
            ("userDomainName", self.user_domain_name.is_some()),
            ("passwordFile", self.password_file.is_some()),
            ("projectId", self.project_id.is_some()),
            ("projectName", self.project_name.is_some()),
            ("projectDomainId", self.project_domain_id.is_some()),
            ("projectDomainName", self.project_domain_name.is_some()),
            ("trustId", self.trust_id.is_some()),
        ];
        if let Some(&(field, _)) = written.iter().find(|(_, set)| *set) {
            return Err(invalid(
                field,
                "with cloudsFile, the clouds.yaml entry's `auth` says who logs in: leave this out",
            ));
        }
        let cloud = self
            .cloud
            .clone()
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| {
                invalid(
                    "cloud",
                    "name the clouds.yaml entry to log in with (occm's `cloud`)",
                )
            })?;
        Ok(KeystoneMethod::CloudsYaml { file, cloud })
    }
}

impl super::CredentialSpec for KeystoneCredential {
    type Raw = RawKeystone;

    fn validate(raw: RawKeystone, rule: &super::RuleContext<'_>) -> Result<Self, Invalid> {
        raw.validate(rule.destination, rule.allow_plaintext, rule.resolve)
    }

    fn files(&self) -> Vec<&Path> {
        KeystoneCredential::files(self)
    }

    /// One login, one rule.
    fn duplicate(&self, earlier: &Self, first: usize) -> Option<String> {
        (self == earlier).then(|| {
            format!(
                "the same Keystone login as credentials[{first}]: one login gets one rule (and \
                 one allowedActions); merge them"
            )
        })
    }
}

/// `authUrl` as the v3 root: `http(s)://host[:port][/path]/v3`, `/v3` added when absent.
pub(crate) fn auth_url(text: &str) -> Result<url::Url, Invalid> {
    let bad = |reason: &str| invalid("authUrl", format!("`{text}` {reason}"));
    let mut url = url::Url::parse(text).map_err(|e| bad(&format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("is not an http(s) URL with a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("carries user info: secrets go in files"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("has a query or fragment"));
    }
    let path = url.path().trim_end_matches('/').to_owned();
    let path = if path.ends_with("/v3") {
        path
    } else if path.ends_with("/v2.0") {
        return Err(bad("is Keystone v2.0, which is gone: use the v3 URL"));
    } else {
        format!("{path}/v3")
    };
    url.set_path(&path);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(yaml: &str) -> RawKeystone {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn check(yaml: &str) -> Result<KeystoneCredential, String> {
        raw(yaml)
            .validate(
                &HostPattern::parse("https://keystone.example.com:5000").unwrap(),
                false,
                |p| Path::new("/creds").join(p),
            )
            .map_err(|e| format!("{}: {}", e.field, e.reason))
    }

    #[test]
    fn application_credential_by_id_with_defaults() {
        let k = check(
            "authUrl: https://keystone.example.com:5000\n\
             applicationCredentialId: abc\n\
             applicationCredentialSecretFile: os/secret\n",
        )
        .unwrap();
        assert_eq!(k.auth_url.as_str(), "https://keystone.example.com:5000/v3");
        assert_eq!(
            k.catalog_url(),
            "https://keystone.example.com:5000/v3/auth/catalog"
        );
        assert_eq!(k.interface, "public");
        assert_eq!(k.services, DEFAULT_SERVICES.map(String::from).to_vec());
        assert_eq!(k.files(), vec![Path::new("/creds/os/secret")]);
    }

    #[test]
    fn password_needs_a_scoped_project_and_named_users_their_domain() {
        let k = check(
            "authUrl: https://keystone.example.com:5000/v3/\n\
             userName: ccm\nuserDomainName: Default\npasswordFile: pw\n\
             projectName: k8s\nprojectDomainId: default\n",
        )
        .unwrap();
        assert_eq!(k.auth_url.path(), "/v3");
        assert!(matches!(k.method, KeystoneMethod::Password { .. }));
        for (yaml, field) in [
            (
                "userName: ccm\npasswordFile: pw\nprojectId: p\n",
                "userName",
            ),
            ("userId: u\npasswordFile: pw\n", "projectId"),
            (
                "userId: u\npasswordFile: pw\nprojectName: p\n",
                "projectName",
            ),
            (
                "applicationCredentialId: a\napplicationCredentialSecretFile: s\nprojectId: p\n",
                "projectName",
            ),
            (
                "applicationCredentialName: a\napplicationCredentialSecretFile: s\n",
                "userId",
            ),
            (
                "applicationCredentialId: a\napplicationCredentialSecretFile: s\npasswordFile: p\n",
                "applicationCredentialSecretFile",
            ),
            ("userId: u\n", "applicationCredentialSecretFile"),
        ] {
            let text = format!("authUrl: https://keystone.example.com:5000/v3\n{yaml}");
            let err = check(&text).unwrap_err();
            assert!(err.starts_with(&format!("{field}:")), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_trust_is_a_trustee_s_password_and_a_clouds_yaml_entry_stands_alone() {
        let k = check(
            "authUrl: https://keystone.example.com:5000/v3\n\
             userId: trustee\npasswordFile: pw\ntrustId: t1\n",
        )
        .unwrap();
        assert!(matches!(
            &k.method,
            KeystoneMethod::Password { scope: Scope::Trust(t), .. } if t == "t1"
        ));
        let clouds = check(
            "authUrl: https://keystone.example.com:5000/v3\n\
             cloudsFile: clouds.yaml\ncloud: openstack\n",
        )
        .unwrap();
        assert_eq!(clouds.files(), vec![Path::new("/creds/clouds.yaml")]);
        for (yaml, field) in [
            (
                "userId: u\npasswordFile: pw\ntrustId: t\nprojectId: p\n",
                "trustId",
            ),
            (
                "applicationCredentialId: a\napplicationCredentialSecretFile: s\ntrustId: t\n",
                "trustId",
            ),
            ("userId: u\npasswordFile: pw\ntrustId: ' '\n", "trustId"),
            ("cloudsFile: c\n", "cloud"),
            ("cloudsFile: c\ncloud: openstack\nuserId: u\n", "userId"),
            ("cloudsFile: c\ncloud: o\npasswordFile: p\n", "passwordFile"),
            (
                "cloud: openstack\nuserId: u\npasswordFile: pw\nprojectId: p\n",
                "cloud",
            ),
        ] {
            let text = format!("authUrl: https://keystone.example.com:5000/v3\n{yaml}");
            let err = check(&text).unwrap_err();
            assert!(err.starts_with(&format!("{field}:")), "{yaml}: {err}");
        }
    }

    #[test]
    fn identity_is_never_a_service_and_the_auth_url_is_the_destination() {
        let base = "applicationCredentialId: a\napplicationCredentialSecretFile: s\n";
        for (extra, field) in [
            (
                "authUrl: https://keystone.example.com:5000\nservices: [compute, identity]\n",
                "services:",
            ),
            ("authUrl: https://other.example.com:5000\n", "authUrl:"),
            (
                "authUrl: https://keystone.example.com:5000/v2.0\n",
                "authUrl:",
            ),
            (
                "authUrl: https://u:p@keystone.example.com:5000/v3\n",
                "authUrl:",
            ),
            (
                "authUrl: https://keystone.example.com:5000\ninterface: private\n",
                "interface:",
            ),
        ] {
            let err = check(&format!("{extra}{base}")).unwrap_err();
            assert!(err.starts_with(field), "{extra}: {err}");
        }
    }
}
