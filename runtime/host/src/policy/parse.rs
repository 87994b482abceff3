//! Reading a policy file: the YAML as written (unknown fields refused, naming them),
//! checked and turned into a [`Policy`].

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::kinds::RawCredential;
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
    require_signature: Option<RawRequireSignature>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequireSignature {
    keys: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTls {
    ca_bundle_file: Option<PathBuf>,
    client_certificate_file: Option<PathBuf>,
    client_key_file: Option<PathBuf>,
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
                require_signature: None,
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
            let mut raw = raw;
            let rule = RuleContext {
                destination: &destination,
                allow_plaintext: raw.allow_plaintext,
                resolve: &resolve,
            };
            let mut kinds = raw
                .kinds(&rule)
                .map_err(|e| invalid(&format!("{field}.{}", e.field), &e.reason))?;
            if kinds.len() != 1 {
                let keys: Vec<String> = CREDENTIAL_KEYS.iter().map(|k| format!("`{k}`")).collect();
                let (last, rest) = keys.split_last().expect("kinds are registered");
                return Err(invalid(
                    &field,
                    &format!("set exactly one of {} or {last}", rest.join(", ")),
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
                Some(entries) => {
                    Some(credential.parse_actions(&entries).map_err(|(i, reason)| {
                        invalid(&format!("{field}.allowedActions[{i}]"), &reason)
                    })?)
                }
            };
            if let Some(actions) = &allowed_actions {
                credential
                    .check_actions(actions)
                    .map_err(|reason| invalid(&format!("{field}.allowedActions"), &reason))?;
            }
            if let Some(reason) =
                credentials
                    .iter()
                    .enumerate()
                    .find_map(|(first, r): (usize, &CredentialRule)| {
                        credential.duplicate(&r.credential, first)
                    })
            {
                return Err(invalid(&format!("{field}.{}", credential.key()), &reason));
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
        let require_signature = match raw.require_signature {
            None => None,
            Some(required) if required.keys.is_empty() => {
                return Err(invalid(
                    "requireSignature.keys",
                    "lists no key: name the cosign public keys a signature may be made with",
                ));
            }
            Some(required) => Some(
                required
                    .keys
                    .iter()
                    .enumerate()
                    .map(|(i, pem)| {
                        super::signing::TrustedKey::parse(pem).map_err(|reason| {
                            invalid(&format!("requireSignature.keys[{i}]"), &reason)
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(Self {
            allowed_outbound_hosts,
            credentials,
            instance_limits,
            egress_limits: limits,
            tls_ca_bundle,
            tls_client_certificate,
            service_annotations: raw.service_annotations,
            require_signature,
        })
    }
}
