//! The `aws` credential kind: requests signed with AWS Signature Version 4 by the host.
//!
//! ```yaml
//! credentials:
//!   # Static keys from a mounted Secret (re-read when rotated).
//!   - destination: https://*.eu-west-1.amazonaws.com
//!     aws:
//!       accessKeyIdFile: aws/access-key-id
//!       secretAccessKeyFile: aws/secret-access-key
//!       sessionTokenFile: aws/session-token      # optional
//!   # Web identity (EKS IRSA): the projected service-account token is exchanged with
//!   # STS AssumeRoleWithWebIdentity for temporary credentials, cached until shortly
//!   # before they expire.
//!   - destination: https://*.eu-west-1.amazonaws.com
//!     aws:
//!       region: eu-west-1                         # optional: from the host name
//!       service: ec2                              # optional: from the host name
//!       webIdentity:
//!         roleArn: arn:aws:iam::111122223333:role/wasm-ccm
//!         webIdentityTokenFile: aws/web-identity-token
//!         stsEndpoint: https://sts.eu-west-1.amazonaws.com   # optional
//!         sessionName: wasm-ccm                              # optional
//! ```
//!
//! The signing service and region come from the rule when set, else from the request's
//! host name ([`signing_scope`]: `<service>.<region>.amazonaws.com`, `-fips`, `.cn`,
//! `api.aws`, VPC endpoints, and the global `<service>.amazonaws.com` as `us-east-1`).
//! The STS endpoint must be HTTPS (or loopback) and in `allowedOutboundHosts`: it
//! receives the web-identity token.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::allowlist::HostPattern;

/// AWS SigV4 signing for a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsCredential {
    /// The signing region; from the host name when `None`.
    pub region: Option<String>,
    /// The signing service name (`ec2`, `elasticloadbalancing`); from the host name
    /// when `None`.
    pub service: Option<String>,
    /// Where the keys come from.
    pub source: AwsSource,
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

    /// The service and region to sign a request to `host` for: the rule's, else what
    /// the host name says.
    pub fn scope_for(&self, host: &str) -> Option<(String, String)> {
        let derived = signing_scope(host);
        let service = self
            .service
            .clone()
            .or_else(|| derived.as_ref().map(|d| d.0.clone()))?;
        let region = self
            .region
            .clone()
            .or_else(|| derived.as_ref().map(|d| d.1.clone()))?;
        Some((service, region))
    }
}

/// The signing service and region an AWS endpoint's host name implies, e.g.
/// `ec2.eu-west-1.amazonaws.com` → (`ec2`, `eu-west-1`); `None` for other names.
pub fn signing_scope(host: &str) -> Option<(String, String)> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let stem = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))
        .or_else(|| host.strip_suffix(".api.aws"))?;
    let labels: Vec<&str> = stem.split('.').collect();
    let (service, region) = match labels.as_slice() {
        // Global endpoints: sts.amazonaws.com, iam.amazonaws.com.
        [service] => (*service, "us-east-1"),
        // VPC endpoints: vpce-0123-abcd.ec2.eu-west-1.vpce.amazonaws.com.
        [.., service, region, "vpce"] => (*service, *region),
        [.., service, region] => (*service, *region),
        [] => return None,
    };
    let service = service.strip_suffix("-fips").unwrap_or(service);
    if !is_scope_label(service) || !is_scope_label(region) {
        return None;
    }
    Some((service.to_owned(), region.to_owned()))
}

fn is_scope_label(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The `aws` field of a credential rule as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawAws {
    region: Option<String>,
    service: Option<String>,
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

/// A field of the `aws` rule that is wrong, and why.
pub(super) struct Invalid {
    /// The field under the rule's `aws`, e.g. `webIdentity.roleArn`.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Invalid {
    Invalid {
        field,
        reason: reason.into(),
    }
}

impl RawAws {
    /// Validates the rule; `resolve` anchors relative paths, `allowed` is the policy's
    /// allowlist (the STS endpoint must be in it), `destination` the rule's.
    pub(super) fn validate(
        self,
        destination: &HostPattern,
        resolve: impl Fn(PathBuf) -> PathBuf,
        allowed: &[HostPattern],
    ) -> Result<AwsCredential, Invalid> {
        for (field, value) in [("region", &self.region), ("service", &self.service)] {
            if let Some(value) = value
                && !is_scope_label(value)
            {
                return Err(invalid(
                    field,
                    format!(
                        "`{value}` is not a valid AWS {field} (lowercase letters, digits, `-`)"
                    ),
                ));
            }
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
                AwsSource::WebIdentity(web.validate(self.region.as_deref(), resolve, allowed)?)
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
            source,
        };
        // A destination naming one host must say what to sign for.
        if let Some(host) = destination.exact_host()
            && credential.scope_for(host).is_none()
        {
            return Err(invalid(
                "service",
                format!(
                    "`{host}` is not an AWS endpoint name (`<service>.<region>.amazonaws.com`): \
                     set `service` and `region` to sign for"
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
        allowed: &[HostPattern],
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
        let port = sts_endpoint.port_or_known_default().unwrap_or(0);
        let scheme = sts_endpoint.scheme();
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(super::address::is_loopback);
        if !sts_endpoint.username().is_empty()
            || sts_endpoint.password().is_some()
            || !(scheme == "https" || (scheme == "http" && loopback))
        {
            return Err(invalid(
                "webIdentity.stsEndpoint",
                format!(
                    "`{endpoint}` must be an https:// URL (http:// only on loopback) without user info: \
                     it receives the web-identity token"
                ),
            ));
        }
        let listed = allowed
            .iter()
            .any(|p| p.matches(scheme, &host, port) && (!loopback || p.names_loopback()));
        if !listed {
            return Err(invalid(
                "webIdentity.stsEndpoint",
                format!("`{endpoint}` is not in allowedOutboundHosts"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Credential, Policy};

    fn parse(text: &str) -> Result<Policy, String> {
        Policy::parse(text, Path::new("/providers/aws.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn aws_rules_parse() {
        let policy = parse(
            "allowedOutboundHosts: ['https://*.eu-west-1.amazonaws.com', 'http://127.0.0.1:5000']\n\
             credentials:\n\
             - destination: https://*.eu-west-1.amazonaws.com\n\
             \x20 aws: {accessKeyIdFile: aws/id, secretAccessKeyFile: /secrets/key, sessionTokenFile: aws/token}\n\
             - destination: http://127.0.0.1:5000\n\
             \x20 aws:\n\
             \x20   region: us-east-1\n\
             \x20   service: ec2\n\
             \x20   webIdentity: {roleArn: 'arn:aws:iam::111122223333:role/ccm', webIdentityTokenFile: aws/sa-token, stsEndpoint: 'http://127.0.0.1:5000'}\n",
        )
        .unwrap();
        let Credential::Aws(keys) = &policy.credentials[0].credential else {
            panic!("an aws rule")
        };
        assert_eq!(
            keys.source,
            AwsSource::Static {
                access_key_id_file: "/providers/aws/id".into(),
                secret_access_key_file: "/secrets/key".into(),
                session_token_file: Some("/providers/aws/token".into()),
            }
        );
        assert_eq!(
            keys.scope_for("ec2.eu-west-1.amazonaws.com"),
            Some(("ec2".into(), "eu-west-1".into()))
        );
        let Credential::Aws(web) = &policy.credentials[1].credential else {
            panic!("an aws rule")
        };
        let AwsSource::WebIdentity(identity) = &web.source else {
            panic!("web identity")
        };
        assert_eq!(identity.session_name, "wasm-ccm");
        assert_eq!(identity.token_file, Path::new("/providers/aws/sa-token"));
        assert_eq!(
            web.scope_for("127.0.0.1"),
            Some(("ec2".into(), "us-east-1".into()))
        );
        assert_eq!(web.files(), [Path::new("/providers/aws/sa-token")]);
    }

    #[test]
    fn bad_aws_rules_name_the_field() {
        let allowed = "allowedOutboundHosts: ['https://sts.us-east-1.amazonaws.com', 'https://ec2.us-east-1.amazonaws.com', 'http://127.0.0.1:5000']\n";
        let web = |fields: &str| {
            format!(
                "{allowed}credentials: [{{destination: 'https://ec2.us-east-1.amazonaws.com', aws: {{webIdentity: {{roleArn: 'arn:aws:iam::1:role/r', webIdentityTokenFile: t{fields}}}}}}}]\n"
            )
        };
        for (text, field) in [
            (
                format!(
                    "{allowed}credentials: [{{destination: 'https://ec2.us-east-1.amazonaws.com', aws: {{accessKeyIdFile: a}}}}]\n"
                ),
                "credentials[0].aws.secretAccessKeyFile",
            ),
            (
                format!(
                    "{allowed}credentials: [{{destination: 'https://ec2.us-east-1.amazonaws.com', aws: {{}}}}]\n"
                ),
                "credentials[0].aws.webIdentity",
            ),
            (
                format!(
                    "{allowed}credentials: [{{destination: 'http://127.0.0.1:5000', aws: {{accessKeyIdFile: a, secretAccessKeyFile: b}}}}]\n"
                ),
                "credentials[0].aws.service",
            ),
            (
                format!(
                    "{allowed}credentials: [{{destination: 'https://ec2.us-east-1.amazonaws.com', aws: {{region: 'US East', accessKeyIdFile: a, secretAccessKeyFile: b}}}}]\n"
                ),
                "credentials[0].aws.region",
            ),
            (
                web("").replace("role/r", "user/r"),
                "credentials[0].aws.webIdentity.roleArn",
            ),
            (
                web(", stsEndpoint: 'https://sts.evil.example'"),
                "credentials[0].aws.webIdentity.stsEndpoint",
            ),
            (
                web(", stsEndpoint: 'http://sts.us-east-1.amazonaws.com'"),
                "credentials[0].aws.webIdentity.stsEndpoint",
            ),
            (
                web(", sessionName: 'a b'"),
                "credentials[0].aws.webIdentity.sessionName",
            ),
        ] {
            let err = parse(&text).unwrap_err();
            assert!(err.contains(&format!("`{field}`")), "{text}\n-> {err}");
        }
        // Without an explicit endpoint, the regional STS endpoint must be allowed.
        let err = parse(
            "allowedOutboundHosts: ['https://ec2.eu-west-1.amazonaws.com']\n\
             credentials: [{destination: 'https://ec2.eu-west-1.amazonaws.com', aws: {region: eu-west-1, webIdentity: {roleArn: 'arn:aws:iam::1:role/r', webIdentityTokenFile: t}}}]\n",
        )
        .unwrap_err();
        assert!(err.contains("https://sts.eu-west-1.amazonaws.com"), "{err}");
    }

    #[test]
    fn scopes_from_aws_host_names() {
        let scope = |host: &str| signing_scope(host).map(|(s, r)| format!("{s}/{r}"));
        for (host, expected) in [
            ("ec2.eu-west-1.amazonaws.com", Some("ec2/eu-west-1")),
            ("EC2.EU-WEST-1.AMAZONAWS.COM.", Some("ec2/eu-west-1")),
            (
                "elasticloadbalancing.us-east-2.amazonaws.com",
                Some("elasticloadbalancing/us-east-2"),
            ),
            (
                "ec2-fips.us-gov-west-1.amazonaws.com",
                Some("ec2/us-gov-west-1"),
            ),
            ("ec2.cn-north-1.amazonaws.com.cn", Some("ec2/cn-north-1")),
            ("ec2.eu-west-1.api.aws", Some("ec2/eu-west-1")),
            ("sts.amazonaws.com", Some("sts/us-east-1")),
            (
                "vpce-0123-abcd.ec2.eu-west-1.vpce.amazonaws.com",
                Some("ec2/eu-west-1"),
            ),
            ("amazonaws.com", None),
            ("ec2.eu-west-1.amazonaws.com.evil.example", None),
            ("127.0.0.1", None),
            ("localhost", None),
        ] {
            assert_eq!(scope(host).as_deref(), expected, "{host}");
        }
    }
}
