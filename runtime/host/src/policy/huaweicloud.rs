//! The `huaweicloud` credential kind: requests signed by the host with an access key
//! (AK/SK), as Huawei Cloud's SDKs sign them (`SDK-HMAC-SHA256`).
//!
//! ```yaml
//! credentials:
//!   - destination: https://*.ap-southeast-1.myhuaweicloud.com
//!     huaweicloud:
//!       accessKeyIdFile: huaweicloud/access-key-id
//!       secretAccessKeyFile: huaweicloud/secret-access-key
//!       securityTokenFile: huaweicloud/security-token   # optional: temporary keys
//!       projectId: 0f5b3e2c8a4d4b7f9e1c2d3a4b5c6d7e      # optional: X-Project-Id
//!       services: [ecs, elb, vpc]                       # the default
//!     allowedActions: ["GET /v1/*/cloudservers/detail", "POST /v2/*/elb/loadbalancers"]
//! ```
//!
//! The host signs a request only for a service the rule names: the first label of the
//! host name (`<service>.<region>.<domain>`), or the rule's `service` for a destination
//! of one host whose name says none (an endpoint of a private cloud, an emulator). It
//! never signs for IAM ([`CREDENTIAL_SERVICES`]), which hands out credentials. The keys
//! are read from their files at each request whose files changed (rotation without a
//! restart); `allowedActions` are `METHOD /path` patterns.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::allowlist::HostPattern;
use super::{RuleInvalid as Invalid, rule_invalid as invalid};

/// The services a rule signs for by default: what a cloud-controller-manager calls
/// (Elastic Cloud Server, Elastic Load Balance, Virtual Private Cloud).
pub const DEFAULT_SERVICES: [&str; 3] = ["ecs", "elb", "vpc"];

/// Services the host never signs for: with a signature, they hand out credentials.
pub const CREDENTIAL_SERVICES: [&str; 2] = ["iam", "sts"];

/// An access key and the services it signs for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HuaweiCloudCredential {
    /// The file holding the access key ID (AK).
    pub access_key_id_file: PathBuf,
    /// The file holding the secret access key (SK).
    pub secret_access_key_file: PathBuf,
    /// The file holding a temporary key's security token, sent as `X-Security-Token`.
    pub security_token_file: Option<PathBuf>,
    /// The project sent as `X-Project-Id`.
    pub project_id: Option<String>,
    /// The services the host signs for, read from the host name.
    pub services: Vec<String>,
    /// The service of a destination whose host name says none.
    pub service: Option<String>,
    /// For a wildcard destination (`*.<suffix>`), the suffix: a service's host is
    /// `<service>.<suffix>`, one label before it.
    pub suffix: Option<String>,
}

impl HuaweiCloudCredential {
    /// The Secret files the credential is read from.
    pub fn files(&self) -> Vec<&Path> {
        let mut files = vec![
            self.access_key_id_file.as_path(),
            self.secret_access_key_file.as_path(),
        ];
        files.extend(self.security_token_file.as_deref());
        files
    }

    /// The service a request to `host` is signed for, if the rule signs for it: the
    /// host's first label when it is one of `services` (and, under a wildcard
    /// destination, the one label before its suffix), else the rule's `service` (a
    /// destination of one host). Never for a host named for a service that hands out
    /// credentials.
    pub fn service_for(&self, host: &str) -> Option<&str> {
        let host = host.to_ascii_lowercase();
        let (first, rest) = host.split_once('.').unwrap_or((&host, ""));
        if CREDENTIAL_SERVICES.contains(&first) {
            return None;
        }
        let under_suffix = self.suffix.as_deref().is_none_or(|suffix| rest == suffix);
        if let Some(service) = self.services.iter().find(|s| *s == first)
            && under_suffix
        {
            return Some(service);
        }
        self.service.as_deref().filter(|_| self.suffix.is_none())
    }
}

/// The `huaweicloud` fields of a credential rule, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHuaweiCloud {
    access_key_id_file: PathBuf,
    secret_access_key_file: PathBuf,
    security_token_file: Option<PathBuf>,
    project_id: Option<String>,
    services: Option<Vec<String>>,
    service: Option<String>,
}

impl super::CredentialSpec for HuaweiCloudCredential {
    type Raw = RawHuaweiCloud;

    fn validate(raw: RawHuaweiCloud, rule: &super::RuleContext<'_>) -> Result<Self, Invalid> {
        let services = raw
            .services
            .unwrap_or_else(|| DEFAULT_SERVICES.map(String::from).to_vec());
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        for service in services.iter().chain(&raw.service) {
            if !name_ok(service) {
                return Err(invalid(
                    "services",
                    format!("`{service}` is not a service name (lower-case letters, digits, -)"),
                ));
            }
            if CREDENTIAL_SERVICES.contains(&service.as_str()) {
                return Err(invalid(
                    "services",
                    format!(
                        "`{service}` hands out credentials: the host never signs for it (a \
                         signed request there would give the provider keys)"
                    ),
                ));
            }
        }
        if services.is_empty() && raw.service.is_none() {
            return Err(invalid("services", "name at least one service"));
        }
        if let Some(service) = &raw.service
            && rule.destination.to_string().contains('*')
        {
            return Err(invalid(
                "service",
                format!(
                    "`{service}` is for a destination of one host whose name says no service; \
                     `{}` is a wildcard: list the services its host names say in `services`",
                    rule.destination
                ),
            ));
        }
        if let Some(project) = &raw.project_id
            && (project.is_empty() || !project.chars().all(|c| c.is_ascii_alphanumeric()))
        {
            return Err(invalid(
                "projectId",
                format!("`{project}` is not a project ID (letters and digits)"),
            ));
        }
        https_or_loopback(rule.destination)?;
        let written = rule.destination.to_string();
        let host = written
            .split_once("://")
            .map_or(written.as_str(), |(_, rest)| rest);
        let host = host
            .split([':', '/'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let suffix = host.strip_prefix("*.").map(str::to_owned);
        let first = host.split('.').next().unwrap_or_default();
        if CREDENTIAL_SERVICES.contains(&first) {
            return Err(invalid(
                "destination",
                format!("`{written}` is a service that hands out credentials: never signed for"),
            ));
        }
        Ok(HuaweiCloudCredential {
            access_key_id_file: (rule.resolve)(raw.access_key_id_file),
            secret_access_key_file: (rule.resolve)(raw.secret_access_key_file),
            security_token_file: raw.security_token_file.map(rule.resolve),
            project_id: raw.project_id,
            services,
            service: raw.service,
            suffix,
        })
    }

    fn files(&self) -> Vec<&Path> {
        HuaweiCloudCredential::files(self)
    }
}

/// A signature's destination is HTTPS, or loopback (an emulator).
fn https_or_loopback(destination: &HostPattern) -> Result<(), Invalid> {
    if destination.allows_http() && !destination.names_loopback() {
        return Err(invalid(
            "destination",
            format!("`{destination}` can match plain http://: a signed request is sent over https"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::CredentialSpec;

    fn check(destination: &str, yaml: &str) -> Result<HuaweiCloudCredential, String> {
        let raw: RawHuaweiCloud = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        let destination = HostPattern::parse(destination).unwrap();
        let resolve = |p: PathBuf| Path::new("/creds").join(p);
        HuaweiCloudCredential::validate(
            raw,
            &crate::policy::RuleContext {
                destination: &destination,
                allow_plaintext: false,
                resolve: &resolve,
            },
        )
        .map_err(|e| format!("{}: {}", e.field, e.reason))
    }

    const KEYS: &str = "accessKeyIdFile: ak\nsecretAccessKeyFile: sk\n";

    #[test]
    fn services_come_from_the_host_name_and_never_include_iam() {
        let rule = check("https://*.ap-southeast-1.myhuaweicloud.com", KEYS).unwrap();
        assert_eq!(rule.services, DEFAULT_SERVICES.map(String::from).to_vec());
        assert_eq!(
            rule.files(),
            [Path::new("/creds/ak"), Path::new("/creds/sk")]
        );
        assert_eq!(
            rule.service_for("ecs.ap-southeast-1.myhuaweicloud.com"),
            Some("ecs")
        );
        for not_signed in [
            "iam.ap-southeast-1.myhuaweicloud.com",
            // A bucket named `ecs` under another service: not one label before the suffix.
            "ecs.obs.ap-southeast-1.myhuaweicloud.com",
            "ecs.ap-southeast-2.myhuaweicloud.com",
        ] {
            assert_eq!(rule.service_for(not_signed), None, "{not_signed}");
        }
        let single = check("http://127.0.0.1:8443", &format!("{KEYS}service: ecs\n")).unwrap();
        assert_eq!(single.service_for("127.0.0.1"), Some("ecs"));
        for (destination, extra, field) in [
            (
                "https://*.myhuaweicloud.com",
                "services: [ecs, iam]\n",
                "services:",
            ),
            ("https://*.myhuaweicloud.com", "service: ecs\n", "service:"),
            (
                "https://*.myhuaweicloud.com",
                "services: [ECS]\n",
                "services:",
            ),
            (
                "https://*.myhuaweicloud.com",
                "projectId: 'a/b'\n",
                "projectId:",
            ),
            ("http://*.myhuaweicloud.com", "", "destination:"),
            (
                "https://iam.ap-southeast-1.myhuaweicloud.com",
                "service: ecs\n",
                "destination:",
            ),
        ] {
            let err = check(destination, &format!("{KEYS}{extra}")).unwrap_err();
            assert!(err.starts_with(field), "{extra}: {err}");
        }
    }
}
