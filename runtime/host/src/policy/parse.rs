//! Reading a policy file: the YAML as written (unknown fields refused, naming them),
//! checked and turned into a [`Policy`].

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPolicy {
    #[serde(default)]
    allowed_outbound_hosts: Vec<String>,
    #[serde(default)]
    credentials: Vec<RawCredential>,
    #[serde(default)]
    limits: RawLimits,
    tls: Option<RawTls>,
    #[serde(default)]
    service_annotations: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTls {
    ca_bundle_file: Option<PathBuf>,
    client_certificate_file: Option<PathBuf>,
    client_key_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCredential {
    destination: String,
    #[serde(default)]
    allow_plaintext: bool,
    bearer_token_file: Option<PathBuf>,
    basic: Option<RawBasic>,
    header: Option<RawHeader>,
    aws: Option<aws::RawAws>,
    keystone: Option<keystone::RawKeystone>,
    allowed_actions: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawBasic {
    username_file: PathBuf,
    password_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawHeader {
    name: String,
    value_file: PathBuf,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLimits {
    call_timeout: Option<String>,
    request_timeout: Option<String>,
    #[serde(rename = "memoryMiB")]
    memory_mib: Option<usize>,
    max_response_bytes: Option<usize>,
    pool_size: Option<usize>,
    #[serde(rename = "cacheKiB")]
    cache_kib: Option<usize>,
    max_concurrent_requests: Option<usize>,
    requests_per_second: Option<f64>,
    burst: Option<u32>,
}

impl Policy {
    /// Parses policy text; `path` names the file in errors and anchors relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, PolicyError> {
        let raw: RawPolicy = if text.trim().is_empty() {
            RawPolicy {
                allowed_outbound_hosts: Vec::new(),
                credentials: Vec::new(),
                limits: RawLimits::default(),
                tls: None,
                service_annotations: Vec::new(),
            }
        } else {
            serde_saphyr::from_str(text).map_err(|source| PolicyError::Parse {
                path: path.to_owned(),
                source: Box::new(source),
            })?
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let pattern_error = |field: String, source| PolicyError::Pattern {
            path: path.to_owned(),
            field,
            source,
        };
        let invalid = |field: &str, reason: &str| PolicyError::Invalid {
            path: path.to_owned(),
            field: field.to_owned(),
            reason: reason.to_owned(),
        };

        let mut allowed_outbound_hosts = Vec::new();
        for (i, pattern) in raw.allowed_outbound_hosts.iter().enumerate() {
            allowed_outbound_hosts.push(
                HostPattern::parse(pattern)
                    .map_err(|e| pattern_error(format!("allowedOutboundHosts[{i}]"), e))?,
            );
        }

        let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let mut credentials = Vec::new();
        for (i, raw) in raw.credentials.into_iter().enumerate() {
            let field = format!("credentials[{i}]");
            let destination = HostPattern::parse(&raw.destination)
                .map_err(|e| pattern_error(format!("{field}.destination"), e))?;
            if destination.allows_http() && !destination.names_loopback() && !raw.allow_plaintext {
                return Err(invalid(
                    &format!("{field}.destination"),
                    &format!(
                        "`{}` can match plain http://, which would send the credential in clear \
                         text; use https://, a loopback destination, or set `allowPlaintext: true`",
                        raw.destination
                    ),
                ));
            }
            let mut kinds = Vec::new();
            if let Some(file) = raw.bearer_token_file {
                kinds.push(Credential::Bearer {
                    token_file: resolve(file),
                });
            }
            if let Some(basic) = raw.basic {
                kinds.push(Credential::Basic {
                    username_file: resolve(basic.username_file),
                    password_file: resolve(basic.password_file),
                });
            }
            if let Some(header) = raw.header {
                if http::HeaderName::from_bytes(header.name.as_bytes()).is_err() {
                    return Err(invalid(
                        &format!("{field}.header.name"),
                        &format!("`{}` is not a valid HTTP header name", header.name),
                    ));
                }
                kinds.push(Credential::Header {
                    name: header.name.to_ascii_lowercase(),
                    value_file: resolve(header.value_file),
                });
            }
            if let Some(raw_aws) = raw.aws {
                let credential = raw_aws
                    .validate(&destination, resolve)
                    .map_err(|e| invalid(&format!("{field}.aws.{}", e.field), &e.reason))?;
                kinds.push(Credential::Aws(credential));
            }
            if let Some(raw_keystone) = raw.keystone {
                let credential = raw_keystone
                    .validate(&destination, raw.allow_plaintext, resolve)
                    .map_err(|e| invalid(&format!("{field}.keystone.{}", e.field), &e.reason))?;
                kinds.push(Credential::Keystone(credential));
            }
            if kinds.len() != 1 {
                return Err(invalid(
                    &field,
                    "set exactly one of `bearerTokenFile`, `basic`, `header`, `aws` or `keystone`",
                ));
            }
            let credential = kinds.remove(0);
            let allowed_actions = match raw.allowed_actions {
                None => None,
                Some(entries) if entries.is_empty() => {
                    return Err(invalid(
                        &format!("{field}.allowedActions"),
                        "is empty, which would refuse every request: list the actions, or remove the field to allow any",
                    ));
                }
                Some(entries) => Some(
                    match credential {
                        Credential::Aws(_) => actions::AllowedActions::parse_aws(&entries),
                        _ => actions::AllowedActions::parse_requests(&entries),
                    }
                    .map_err(|(i, reason)| {
                        invalid(&format!("{field}.allowedActions[{i}]"), &reason)
                    })?,
                ),
            };
            if let (Credential::Aws(aws), Some(actions)) = (&credential, &allowed_actions) {
                let signed = aws.service.iter().chain(&aws.services).map(String::as_str);
                if let Some(service) = signed
                    .chain(actions.aws_services())
                    .find(|service| aws::actions::aws_protocol(service).is_none())
                {
                    return Err(invalid(
                        &format!("{field}.allowedActions"),
                        &format!(
                            "`{service}` names its actions by method and path (a REST protocol), \
                             which the host does not read: allowedActions can guard only Query \
                             and JSON protocol services (ec2, elasticloadbalancing, ...); sign for \
                             `{service}` in a rule without allowedActions, or leave it out"
                        ),
                    ));
                }
            }
            if let Credential::Keystone(keystone) = &credential
                && let Some(first) = credentials.iter().position(|r: &CredentialRule| {
                    r.credential == Credential::Keystone(keystone.clone())
                })
            {
                return Err(invalid(
                    &format!("{field}.keystone"),
                    &format!(
                        "the same Keystone login as credentials[{first}]: one login gets one \
                         rule (and one allowedActions); merge them"
                    ),
                ));
            }
            credentials.push(CredentialRule {
                destination,
                credential,
                allowed_actions,
            });
        }

        let instance_defaults = InstanceLimits::default();
        let egress_defaults = EgressLimits::default();
        let duration = |field: &str, value: Option<String>, default: Duration| match value {
            None => Ok(default),
            Some(text) => parse_duration(&text).map_err(|e| invalid(field, &e.to_string())),
        };
        let instance_limits = InstanceLimits {
            call_timeout: duration(
                "limits.callTimeout",
                raw.limits.call_timeout,
                instance_defaults.call_timeout,
            )?,
            memory_bytes: match raw.limits.memory_mib {
                None => instance_defaults.memory_bytes,
                Some(mib) => mib
                    .checked_mul(1 << 20)
                    .ok_or_else(|| invalid("limits.memoryMiB", "is too large"))?,
            },
            pool_size: raw.limits.pool_size.unwrap_or(instance_defaults.pool_size),
            cache_bytes: match raw.limits.cache_kib {
                None => instance_defaults.cache_bytes,
                Some(kib) => kib
                    .checked_mul(1 << 10)
                    .ok_or_else(|| invalid("limits.cacheKiB", "is too large"))?,
            },
        };
        let limits = EgressLimits {
            request_timeout: duration(
                "limits.requestTimeout",
                raw.limits.request_timeout,
                default_request_timeout(instance_limits.call_timeout),
            )?,
            max_response_bytes: raw
                .limits
                .max_response_bytes
                .unwrap_or(egress_defaults.max_response_bytes),
            max_concurrent_requests: raw
                .limits
                .max_concurrent_requests
                .unwrap_or(egress_defaults.max_concurrent_requests),
            requests_per_second: raw.limits.requests_per_second,
            burst: raw.limits.burst,
        };
        // Every limit has a range, so no value can panic or starve the host.
        let range = |field: &str, value: u128, lo: u128, hi: u128, unit: &str| {
            if value < lo || value > hi {
                Err(invalid(
                    field,
                    &format!("{value} is out of range: must be between {lo} and {hi}{unit}"),
                ))
            } else {
                Ok(())
            }
        };
        range(
            "limits.poolSize",
            instance_limits.pool_size as u128,
            1,
            MAX_POOL_SIZE as u128,
            "",
        )?;
        range(
            "limits.memoryMiB",
            (instance_limits.memory_bytes >> 20) as u128,
            2,
            MAX_MEMORY_MIB as u128,
            " MiB",
        )?;
        range(
            "limits.cacheKiB",
            (instance_limits.cache_bytes >> 10) as u128,
            0,
            MAX_CACHE_KIB as u128,
            " KiB",
        )?;
        range(
            "limits.callTimeout",
            instance_limits.call_timeout.as_millis(),
            1,
            MAX_TIMEOUT.as_millis(),
            " ms",
        )?;
        range(
            "limits.requestTimeout",
            limits.request_timeout.as_millis(),
            1,
            MAX_TIMEOUT.as_millis(),
            " ms",
        )?;
        range(
            "limits.maxResponseBytes",
            limits.max_response_bytes as u128,
            1,
            MAX_RESPONSE_BYTES as u128,
            " bytes",
        )?;
        range(
            "limits.maxConcurrentRequests",
            limits.max_concurrent_requests as u128,
            1,
            MAX_CONCURRENT_REQUESTS as u128,
            "",
        )?;
        // A request starts only while its whole timeout (and the grace after it) fits
        // before the call's deadline: a call shorter than that could send nothing.
        let grace = call_grace(instance_limits.call_timeout);
        if limits.request_timeout + grace > instance_limits.call_timeout {
            return Err(invalid(
                "limits.requestTimeout",
                &format!(
                    "{:?} leaves no room for a request in a call: limits.callTimeout ({:?}) must exceed it by at least {:?}",
                    limits.request_timeout, instance_limits.call_timeout, grace,
                ),
            ));
        }
        if let Some(rate) = limits.requests_per_second
            && !(rate.is_finite()
                && (MIN_REQUESTS_PER_SECOND..=MAX_REQUESTS_PER_SECOND).contains(&rate))
        {
            return Err(invalid(
                "limits.requestsPerSecond",
                &format!(
                    "{rate} is out of range: must be a number between {MIN_REQUESTS_PER_SECOND} and {MAX_REQUESTS_PER_SECOND}"
                ),
            ));
        }
        if let Some(burst) = limits.burst {
            range("limits.burst", u128::from(burst), 1, MAX_BURST as u128, "")?;
            if limits.requests_per_second.is_none() {
                return Err(invalid("limits.burst", "needs limits.requestsPerSecond"));
            }
        }
        let (tls_ca_bundle, tls_client_certificate) = match raw.tls {
            None => (None, None),
            Some(tls) => {
                let client = match (tls.client_certificate_file, tls.client_key_file) {
                    (None, None) => None,
                    (Some(certificate), Some(key)) => Some(ClientCertificate {
                        certificate_file: resolve(certificate),
                        key_file: resolve(key),
                    }),
                    (Some(_), None) => {
                        return Err(invalid(
                            "tls.clientKeyFile",
                            "a client certificate needs its private key",
                        ));
                    }
                    (None, Some(_)) => {
                        return Err(invalid(
                            "tls.clientCertificateFile",
                            "a client key needs its certificate",
                        ));
                    }
                };
                (tls.ca_bundle_file.map(resolve), client)
            }
        };
        for (i, prefix) in raw.service_annotations.iter().enumerate() {
            annotations::check_prefix(prefix)
                .map_err(|reason| invalid(&format!("serviceAnnotations[{i}]"), &reason))?;
        }
        Ok(Self {
            allowed_outbound_hosts,
            credentials,
            instance_limits,
            egress_limits: limits,
            tls_ca_bundle,
            tls_client_certificate,
            service_annotations: raw.service_annotations,
        })
    }
}
