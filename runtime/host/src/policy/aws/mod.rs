//! The `aws` credential kind: requests signed with AWS Signature Version 4 by the host.
//!
//! ```yaml
//! credentials:
//!   # Static keys from a mounted Secret (re-read when rotated).
//!   - destination: https://*.eu-west-1.amazonaws.com
//!     aws:
//!       services: [ec2, elasticloadbalancing]     # what the host may sign for
//!       accessKeyIdFile: aws/access-key-id
//!       secretAccessKeyFile: aws/secret-access-key
//!       sessionTokenFile: aws/session-token      # optional
//!   # Web identity (EKS IRSA): the projected service-account token is exchanged with
//!   # STS AssumeRoleWithWebIdentity for temporary credentials, cached until shortly
//!   # before they expire.
//!   - destination: https://ec2.eu-west-1.amazonaws.com
//!     aws:
//!       region: eu-west-1                         # optional: from the host name
//!       service: ec2                              # or `services`: from the host name
//!       webIdentity:
//!         roleArn: arn:aws:iam::111122223333:role/wasm-ccm
//!         webIdentityTokenFile: aws/web-identity-token
//!         stsEndpoint: https://sts.eu-west-1.amazonaws.com   # optional
//!         sessionName: wasm-ccm                              # optional
//! ```
//!
//! The signing service is the rule's `service`, or the one the request's host name
//! implies ([`signing_scope`]: `<service>.<region>.amazonaws.com`, `-fips`, `.cn`,
//! `api.aws`, VPC endpoints, and the global `<service>.amazonaws.com` as `us-east-1`)
//! when it is one of the rule's `services`; the region likewise. The host never signs
//! for a service that hands out credentials ([`CREDENTIAL_SERVICES`]: STS, IAM, ...):
//! a signed `GetSessionToken` or `CreateAccessKey` would give the provider keys.
//!
//! An `aws` destination is HTTPS (or loopback), and a wildcard one lies under an AWS
//! domain. The STS endpoint, which receives the web-identity token, is an AWS STS
//! endpoint over HTTPS (or loopback, for emulators); the host calls it itself, so it
//! need not (and should not) be in `allowedOutboundHosts`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::allowlist::HostPattern;
use super::{RuleInvalid as Invalid, rule_invalid as invalid};
use scope::is_scope_label;
pub use scope::{is_region, is_sts_host, signing_scope};

pub mod actions;
mod scope;

/// Services the host never signs for: they hand out credentials.
pub const CREDENTIAL_SERVICES: [&str; 7] = [
    "sts",
    "iam",
    "sso",
    "sso-oauth",
    "signin",
    "cognito-identity",
    "cognito-idp",
];

/// AWS domains an `aws` wildcard destination may cover.
const AWS_SUFFIXES: [&str; 3] = [".amazonaws.com", ".amazonaws.com.cn", ".api.aws"];

/// AWS SigV4 signing for a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsCredential {
    /// The signing region; from the host name when `None`.
    pub region: Option<String>,
    /// The signing service name (`ec2`, `elasticloadbalancing`); when `None`, the one
    /// the host name implies, if it is in `services`.
    pub service: Option<String>,
    /// The services the host may sign for when `service` is not set.
    pub services: Vec<String>,
    /// Where the keys come from.
    pub source: AwsSource,
    /// The rule's destination is one host (or loopback): a request to it is signed for
    /// the service the rule or the provider names. Under a wildcard destination, a
    /// request is signed only for the service its host name implies, so a host of
    /// another service under the same domain (an S3 bucket, an `execute-api` stage)
    /// never receives a signature, nor a session token, meant for this one.
    pub pinned: bool,
}

/// Where the host gets AWS credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsSource {
    /// Keys in Secret files.
    Static {
        /// The file holding the access key ID.
        access_key_id_file: PathBuf,
        /// The file holding the secret access key.
        secret_access_key_file: PathBuf,
        /// The file holding a session token, for temporary keys.
        session_token_file: Option<PathBuf>,
    },
    /// Temporary credentials from STS `AssumeRoleWithWebIdentity`.
    WebIdentity(WebIdentity),
}

/// The `webIdentity` settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WebIdentity {
    /// The role to assume.
    pub role_arn: String,
    /// The projected service-account token (re-read at each exchange).
    pub token_file: PathBuf,
    /// The STS endpoint the token is sent to.
    pub sts_endpoint: url::Url,
    /// The role session name (in CloudTrail).
    pub session_name: String,
}

impl AwsCredential {
    /// The Secret files the credential is read from.
    pub fn files(&self) -> Vec<&Path> {
        match &self.source {
            AwsSource::Static {
                access_key_id_file,
                secret_access_key_file,
                session_token_file,
            } => {
                let mut files = vec![access_key_id_file.as_path(), secret_access_key_file];
                files.extend(session_token_file.as_deref());
                files
            }
            AwsSource::WebIdentity(web) => vec![&web.token_file],
        }
    }

    /// The service and region to sign a request to `host` for: the rule's `service`,
    /// else the one the provider named ([`SERVICE_HEADER`]) or the host name implies,
    /// when it is in `services`; `None` when nothing allows it (a named service the
    /// rule does not allow is never signed for, whatever the host name says), and,
    /// unless the rule is [`pinned`](Self::pinned), when the host name implies no
    /// service or another one.
    pub fn scope_for(&self, host: &str, named: Option<&str>) -> Option<(String, String)> {
        let derived = signing_scope(host);
        if !self.pinned && derived.is_none() {
            return None;
        }
        let service = match (&self.service, named) {
            (Some(service), None) => service.clone(),
            (Some(service), Some(named)) => (service == named).then(|| service.clone())?,
            (None, Some(named)) => self.services.iter().find(|s| s.as_str() == named)?.clone(),
            (None, None) => derived
                .as_ref()
                .map(|d| d.0.clone())
                .filter(|s| self.services.contains(s))?,
        };
        if CREDENTIAL_SERVICES.contains(&service.as_str()) {
            return None;
        }
        if !self.pinned
            && derived
                .as_ref()
                .is_some_and(|(derived, _)| *derived != service)
        {
            return None;
        }
        let region = self
            .region
            .clone()
            .or_else(|| derived.as_ref().map(|d| d.1.clone()))?;
        Some((service, region))
    }
}

/// The request header in which a provider names the AWS service it calls (e.g.
/// `elasticloadbalancing`), for endpoints whose host name does not say it: an
/// emulator serving every service on one address (moto, LocalStack), a proxy. The
/// host signs for the named service only when the rule's `services` lists it, and
/// removes the header before the request leaves.
pub const SERVICE_HEADER: &str = "x-wasm-ccm-aws-service";

/// The `aws` fields of a credential rule, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAws {
    region: Option<String>,
    service: Option<String>,
    #[serde(default)]
    services: Vec<String>,
    access_key_id_file: Option<PathBuf>,
    secret_access_key_file: Option<PathBuf>,
    session_token_file: Option<PathBuf>,
    web_identity: Option<RawWebIdentity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWebIdentity {
    role_arn: String,
    web_identity_token_file: PathBuf,
    sts_endpoint: Option<String>,
    session_name: Option<String>,
}

impl RawAws {
    /// Validates the rule for `destination`; `resolve` anchors relative paths.
    pub(super) fn validate(
        self,
        destination: &HostPattern,
        resolve: impl Fn(PathBuf) -> PathBuf,
    ) -> Result<AwsCredential, Invalid> {
        let names = [
            ("region", self.region.as_ref()),
            ("service", self.service.as_ref()),
        ]
        .into_iter()
        .chain(self.services.iter().map(|s| ("services", Some(s))));
        for (field, value) in names {
            if let Some(value) = value
                && !is_scope_label(value)
            {
                return Err(invalid(
                    field,
                    format!(
                        "`{value}` is not a valid AWS {field} name (lowercase letters, digits, `-`)"
                    ),
                ));
            }
        }
        for (field, service) in self
            .service
            .iter()
            .map(|s| ("service", s))
            .chain(self.services.iter().map(|s| ("services", s)))
        {
            if CREDENTIAL_SERVICES.contains(&service.as_str()) {
                return Err(invalid(
                    field,
                    format!(
                        "the host never signs for `{service}`: a signed request to it could hand \
                         the provider credentials"
                    ),
                ));
            }
        }
        if self.service.is_some() && !self.services.is_empty() {
            return Err(invalid("services", "set `service` or `services`, not both"));
        }
        if self.service.is_none() && self.services.is_empty() {
            return Err(invalid(
                "services",
                "list the AWS services the host may sign for (e.g. [ec2, elasticloadbalancing]), \
                 or set `service`",
            ));
        }
        if destination.allows_http() && !destination.names_loopback() {
            return Err(invalid(
                "destination",
                "AWS credentials go only over https:// (or to a loopback emulator)",
            ));
        }
        if let Some(suffix) = destination.wildcard_suffix()
            && !AWS_SUFFIXES.iter().any(|aws| suffix.ends_with(aws))
        {
            return Err(invalid(
                "destination",
                format!("a wildcard AWS destination must lie under an AWS domain, not `*{suffix}`"),
            ));
        }
        let source = match (
            self.access_key_id_file,
            self.secret_access_key_file,
            self.web_identity,
        ) {
            (Some(id), Some(secret), None) => AwsSource::Static {
                access_key_id_file: resolve(id),
                secret_access_key_file: resolve(secret),
                session_token_file: self.session_token_file.map(&resolve),
            },
            (None, None, Some(web)) => {
                if self.session_token_file.is_some() {
                    return Err(invalid(
                        "sessionTokenFile",
                        "goes with static keys, not with webIdentity",
                    ));
                }
                AwsSource::WebIdentity(web.validate(self.region.as_deref(), resolve)?)
            }
            (Some(_), None, None) => {
                return Err(invalid(
                    "secretAccessKeyFile",
                    "is required with accessKeyIdFile",
                ));
            }
            (None, Some(_), None) => {
                return Err(invalid(
                    "accessKeyIdFile",
                    "is required with secretAccessKeyFile",
                ));
            }
            _ => {
                return Err(invalid(
                    "webIdentity",
                    "set either `accessKeyIdFile` and `secretAccessKeyFile`, or `webIdentity`",
                ));
            }
        };
        let credential = AwsCredential {
            region: self.region,
            service: self.service,
            services: self.services,
            source,
            pinned: destination.exact_host().is_some(),
        };
        // A destination naming one host must say what to sign for: its name, the rule's
        // `service`, or `services` with a `region` (the provider names which service
        // each request is for, e.g. on an emulator serving them all on one address).
        if let Some(host) = destination.exact_host()
            && credential.scope_for(host, None).is_none()
            && (credential.services.is_empty() || credential.region.is_none())
        {
            return Err(invalid(
                "service",
                format!(
                    "`{host}` is not the endpoint of one of `services` \
                     (`<service>.<region>.amazonaws.com`): set `service` and `region` to sign for, \
                     or `services` and `region` for providers that name the service they call"
                ),
            ));
        }
        Ok(credential)
    }
}

impl RawWebIdentity {
    fn validate(
        self,
        region: Option<&str>,
        resolve: impl Fn(PathBuf) -> PathBuf,
    ) -> Result<WebIdentity, Invalid> {
        let arn_ok = self.role_arn.starts_with("arn:aws")
            && self
                .role_arn
                .split(':')
                .nth(5)
                .is_some_and(|r| r.starts_with("role/"));
        if !arn_ok {
            return Err(invalid(
                "webIdentity.roleArn",
                format!(
                    "`{}` is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)",
                    self.role_arn
                ),
            ));
        }
        let session_name = self.session_name.unwrap_or_else(|| "wasm-ccm".into());
        let session_ok = (2..=64).contains(&session_name.len())
            && session_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+=,.@-_".contains(&b));
        if !session_ok {
            return Err(invalid(
                "webIdentity.sessionName",
                "must be 2 to 64 of the characters A-Z a-z 0-9 + = , . @ - _",
            ));
        }
        let endpoint = match self.sts_endpoint {
            Some(text) => text,
            None => match region {
                Some(region) if region.starts_with("cn-") => {
                    format!("https://sts.{region}.amazonaws.com.cn")
                }
                Some(region) => format!("https://sts.{region}.amazonaws.com"),
                None => "https://sts.amazonaws.com".into(),
            },
        };
        let sts_endpoint = url::Url::parse(&endpoint).map_err(|e| {
            invalid(
                "webIdentity.stsEndpoint",
                format!("`{endpoint}` is not a URL: {e}"),
            )
        })?;
        let host = match sts_endpoint.host() {
            Some(url::Host::Domain(name)) => name.trim_end_matches('.').to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => String::new(),
        };
        let scheme = sts_endpoint.scheme();
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(super::address::is_loopback);
        let is_sts = is_sts_host(&host);
        let acceptable = sts_endpoint.username().is_empty()
            && sts_endpoint.password().is_none()
            && ((scheme == "https" && (is_sts || loopback)) || (scheme == "http" && loopback));
        if !acceptable {
            return Err(invalid(
                "webIdentity.stsEndpoint",
                format!(
                    "`{endpoint}` must be an AWS STS endpoint over https:// (sts.<region>.amazonaws.com), \
                     or a loopback emulator, without user info: it receives the web-identity token"
                ),
            ));
        }
        Ok(WebIdentity {
            role_arn: self.role_arn,
            token_file: resolve(self.web_identity_token_file),
            sts_endpoint,
            session_name,
        })
    }
}

impl super::CredentialSpec for AwsCredential {
    type Raw = RawAws;

    fn validate(raw: RawAws, rule: &super::RuleContext<'_>) -> Result<Self, Invalid> {
        raw.validate(rule.destination, rule.resolve)
    }

    fn files(&self) -> Vec<&Path> {
        AwsCredential::files(self)
    }

    /// `service:Action` patterns.
    fn parse_actions(
        &self,
        entries: &[String],
    ) -> Result<super::actions::AllowedActions, (usize, String)> {
        super::actions::AllowedActions::parse_aws(entries)
    }

    /// Only Query and JSON protocol services name their actions where the host reads
    /// them.
    fn check_actions(&self, actions: &super::actions::AllowedActions) -> Result<(), String> {
        let signed = self
            .service
            .iter()
            .chain(&self.services)
            .map(String::as_str);
        match signed
            .chain(actions.aws_services())
            .find(|service| actions::aws_protocol(service).is_none())
        {
            Some(service) => Err(format!(
                "`{service}` names its actions by method and path (a REST protocol), which the \
                 host does not read: allowedActions can guard only Query and JSON protocol \
                 services (ec2, elasticloadbalancing, ...); sign for `{service}` in a rule \
                 without allowedActions, or leave it out"
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
