//! The credential kinds a rule may name, by their key in the policy. Besides the
//! built-in headers (`bearerTokenFile`, `basic`, `header`), each kind is a type that
//! implements [`CredentialSpec`] (its fields, how they are checked, its files and its
//! `allowedActions` grammar) and the broker's
//! [`BuildKind`](crate::capabilities::http_egress::credentials::BuildKind) (what it adds
//! to requests). The registry is the [`credential_kinds!`] invocation at the bottom of
//! this file: adding a kind is one line there, its policy module next to this one and
//! its broker module under `capabilities/http_egress/credentials/`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::RuleInvalid;
use super::actions::AllowedActions;
use super::allowlist::HostPattern;
use crate::capabilities::http_egress::CredentialError;
use crate::capabilities::http_egress::credentials::{BuildContext, BuildKind, CredentialKind};

/// What a kind's fields are checked with.
pub struct RuleContext<'a> {
    /// The rule's destination.
    pub destination: &'a HostPattern,
    /// The rule's `allowPlaintext`.
    pub allow_plaintext: bool,
    /// A file as the policy names it, resolved against the policy's directory.
    pub resolve: &'a dyn Fn(PathBuf) -> PathBuf,
}

/// A credential kind of the policy: its fields as written (`Raw`), and what the
/// policy checks of a rule of it.
pub trait CredentialSpec: Sized + Clone + std::fmt::Debug + PartialEq + Eq {
    /// The kind's fields as written (`deny_unknown_fields`, camelCase).
    type Raw: DeserializeOwned;

    /// Checks the fields; an error names the field (under the kind's key).
    fn validate(raw: Self::Raw, rule: &RuleContext<'_>) -> Result<Self, RuleInvalid>;

    /// The Secret files the credential is read from.
    fn files(&self) -> Vec<&Path>;

    /// Reads the rule's `allowedActions`: `METHOD /path` patterns, unless the kind
    /// names its actions another way. An error gives the entry's index.
    fn parse_actions(&self, entries: &[String]) -> Result<AllowedActions, (usize, String)> {
        AllowedActions::parse_requests(entries)
    }

    /// Checks the rule's actions as a whole (those the kind cannot guard).
    fn check_actions(&self, _actions: &AllowedActions) -> Result<(), String> {
        Ok(())
    }

    /// Why this rule may not follow `earlier` (rule number `first`), if it may not.
    fn duplicate(&self, _earlier: &Self, _first: usize) -> Option<String> {
        None
    }
}

/// `basic:`'s fields as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawBasic {
    username_file: PathBuf,
    password_file: PathBuf,
}

/// `header:`'s fields as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawHeader {
    name: String,
    value_file: PathBuf,
}

/// Declares the kinds: `key => Variant(Type),` each. Generates [`Credential`], the
/// rule as written (`RawCredential`) and the dispatch from a rule to its kind.
macro_rules! credential_kinds {
    ($($(#[doc = $doc:expr])* $key:ident => $variant:ident($ty:ty),)*) => {
        /// A credential read by the host from mounted files; the guest never sees it.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Credential {
            /// `Authorization: Bearer <file contents>`.
            Bearer {
                /// The file holding the token.
                token_file: PathBuf,
            },
            /// `Authorization: Basic base64(user:password)`.
            Basic {
                /// The file holding the user name.
                username_file: PathBuf,
                /// The file holding the password.
                password_file: PathBuf,
            },
            /// `<name>: <file contents>`.
            Header {
                /// The header name, lowercase.
                name: String,
                /// The file holding its value.
                value_file: PathBuf,
            },
            $($(#[doc = $doc])* $variant($ty),)*
        }

        /// A credential rule as written.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        pub(super) struct RawCredential {
            pub(super) destination: String,
            #[serde(default)]
            pub(super) allow_plaintext: bool,
            bearer_token_file: Option<PathBuf>,
            basic: Option<RawBasic>,
            header: Option<RawHeader>,
            $($key: Option<<$ty as CredentialSpec>::Raw>,)*
            pub(super) allowed_actions: Option<Vec<String>>,
        }

        /// Every kind's key, as a rule names it.
        pub const KEYS: &[&str] = &["bearerTokenFile", "basic", "header", $(stringify!($key)),*];

        impl RawCredential {
            /// The kinds the rule sets (one, for a valid rule), checked; an error names
            /// the field under the rule.
            pub(super) fn kinds(
                &mut self,
                rule: &RuleContext<'_>,
            ) -> Result<Vec<Credential>, RuleInvalidAt> {
                let mut kinds = Vec::new();
                if let Some(file) = self.bearer_token_file.take() {
                    kinds.push(Credential::Bearer {
                        token_file: (rule.resolve)(file),
                    });
                }
                if let Some(basic) = self.basic.take() {
                    kinds.push(Credential::Basic {
                        username_file: (rule.resolve)(basic.username_file),
                        password_file: (rule.resolve)(basic.password_file),
                    });
                }
                if let Some(header) = self.header.take() {
                    if http::HeaderName::from_bytes(header.name.as_bytes()).is_err() {
                        return Err(RuleInvalidAt {
                            field: "header.name".into(),
                            reason: format!("`{}` is not a valid HTTP header name", header.name),
                        });
                    }
                    kinds.push(Credential::Header {
                        name: header.name.to_ascii_lowercase(),
                        value_file: (rule.resolve)(header.value_file),
                    });
                }
                $(if let Some(raw) = self.$key.take() {
                    let credential = <$ty as CredentialSpec>::validate(raw, rule).map_err(|e| {
                        RuleInvalidAt {
                            field: format!("{}.{}", stringify!($key), e.field),
                            reason: e.reason,
                        }
                    })?;
                    kinds.push(Credential::$variant(credential));
                })*
                Ok(kinds)
            }
        }

        impl Credential {
            /// The kind's key, as a rule names it (the `kind` metric label).
            pub fn key(&self) -> &'static str {
                match self {
                    Credential::Bearer { .. } => "bearerTokenFile",
                    Credential::Basic { .. } => "basic",
                    Credential::Header { .. } => "header",
                    $(Credential::$variant(_) => stringify!($key),)*
                }
            }

            /// The Secret files this credential is read from.
            pub fn files(&self) -> Vec<&Path> {
                match self {
                    Credential::Bearer { token_file } => vec![token_file],
                    Credential::Basic {
                        username_file,
                        password_file,
                    } => vec![username_file, password_file],
                    Credential::Header { value_file, .. } => vec![value_file],
                    $(Credential::$variant(credential) => credential.files(),)*
                }
            }

            /// Reads the rule's `allowedActions` in the kind's grammar.
            pub(super) fn parse_actions(
                &self,
                entries: &[String],
            ) -> Result<AllowedActions, (usize, String)> {
                match self {
                    $(Credential::$variant(credential) => credential.parse_actions(entries),)*
                    _ => AllowedActions::parse_requests(entries),
                }
            }

            /// Checks the rule's actions as a whole.
            pub(super) fn check_actions(&self, actions: &AllowedActions) -> Result<(), String> {
                match self {
                    $(Credential::$variant(credential) => credential.check_actions(actions),)*
                    _ => Ok(()),
                }
            }

            /// Why this rule may not follow `earlier` (rule number `first`).
            pub(super) fn duplicate(&self, earlier: &Credential, first: usize) -> Option<String> {
                match (self, earlier) {
                    $((Credential::$variant(this), Credential::$variant(that)) => {
                        this.duplicate(that, first)
                    })*
                    _ => None,
                }
            }

            /// The kind the broker adds to requests.
            pub fn build(
                &self,
                ctx: &mut BuildContext<'_>,
            ) -> Result<std::sync::Arc<dyn CredentialKind>, CredentialError> {
                match self {
                    $(Credential::$variant(credential) => credential.build(ctx),)*
                    header => crate::capabilities::http_egress::credentials::header_kind(header, ctx),
                }
            }
        }
    };
}

/// A field under a rule that is wrong, and why.
pub(super) struct RuleInvalidAt {
    /// The field, under the rule (`keystone.authUrl`).
    pub(super) field: String,
    /// Why.
    pub(super) reason: String,
}

credential_kinds! {
    /// AWS Signature Version 4 over the whole request, computed by the host.
    aws => Aws(super::aws::AwsCredential),
    /// A Keystone v3 token, obtained by the host, for the catalog's endpoints.
    keystone => Keystone(super::keystone::KeystoneCredential),
    /// Huawei Cloud's `SDK-HMAC-SHA256` over the whole request, computed by the host.
    huaweicloud => HuaweiCloud(super::huaweicloud::HuaweiCloudCredential),
}
