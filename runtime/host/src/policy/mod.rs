//! The provider policy: the YAML file next to a provider's `.wasm` (`NAME.yaml` beside
//! `NAME.wasm`) that says where the provider may send requests, which credentials the
//! host injects on its behalf, and the limits it runs under.
//!
//! ```yaml
//! allowedOutboundHosts:
//!   - https://api.example-cloud.net
//!   - http://127.0.0.1:8000-9000
//! credentials:
//!   - destination: https://api.example-cloud.net
//!     bearerTokenFile: /etc/wasm-ccm/credentials/token
//! limits:
//!   callTimeout: 10s
//!   memoryMiB: 64
//!   maxResponseBytes: 4194304
//!   poolSize: 4
//!   maxConcurrentRequests: 16
//!   requestsPerSecond: 20
//! tls:
//!   caBundleFile: /etc/wasm-ccm/credentials/ca.pem
//!   clientCertificateFile: /etc/wasm-ccm/credentials/client.crt   # mutual TLS
//!   clientKeyFile: /etc/wasm-ccm/credentials/client.key
//! serviceAnnotations:        # what the provider may write on its Services
//!   - loadbalancer.example-cloud.net/
//! ```
//!
//! A credential rule that can match plain `http://` is refused unless its destination
//! is loopback or the rule says `allowPlaintext: true`. Unknown fields are rejected,
//! naming the file and the field. Relative credential
//! paths are resolved against the directory holding the policy file. Durations use
//! the Go grammar of [`duration`] (`1m30s`), like every flag.
//!
//! The rules every layer uses live here, at the bottom: host patterns ([`allowlist`]),
//! the addresses no provider reaches ([`address`]) and durations ([`duration`]).

pub mod actions;
pub mod address;
pub mod allowlist;
pub mod annotations;
pub mod aws;
pub mod duration;
pub mod huaweicloud;
pub mod keystone;
mod kinds;
pub mod signing;

use std::path::{Path, PathBuf};
use std::time::Duration;

use allowlist::{HostPattern, PatternError};
pub use duration::{DurationError, parse_duration};
pub use kinds::{Credential, CredentialSpec, KEYS as CREDENTIAL_KEYS, RuleContext};

/// Errors reading a policy file.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file exists but cannot be read.
    #[error("cannot read provider policy {path}: {source}")]
    Read {
        /// The policy file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML for the policy schema (unknown field, wrong type...).
    #[error("invalid provider policy {path}: {source}")]
    Parse {
        /// The policy file.
        path: PathBuf,
        /// What the YAML parser found (with the field and position).
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A host pattern in `allowedOutboundHosts` or `credentials[].destination` is malformed.
    #[error("invalid provider policy {path}: field `{field}`: {source}")]
    Pattern {
        /// The policy file.
        path: PathBuf,
        /// The field, e.g. `allowedOutboundHosts[2]`.
        field: String,
        /// What is wrong with the pattern.
        #[source]
        source: PatternError,
    },
    /// A value is out of range or inconsistent.
    #[error("invalid provider policy {path}: field `{field}`: {reason}")]
    Invalid {
        /// The policy file.
        path: PathBuf,
        /// The field, e.g. `limits.poolSize`.
        field: String,
        /// What is wrong with the value.
        reason: String,
    },
}

/// A parsed, validated provider policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Where requests may go. Empty means nothing is allowed.
    pub allowed_outbound_hosts: Vec<HostPattern>,
    /// Credentials the host adds to requests, first match wins.
    pub credentials: Vec<CredentialRule>,
    /// Limits of the provider's instances: deadline, memory, pool size.
    pub instance_limits: InstanceLimits,
    /// Limits of the provider's outbound requests.
    pub egress_limits: EgressLimits,
    /// Extra CA certificates (PEM) trusted for this provider's HTTPS destinations,
    /// for private clouds.
    pub tls_ca_bundle: Option<PathBuf>,
    /// The client certificate the host presents to HTTPS destinations that ask for
    /// one (mutual TLS), for private clouds.
    pub tls_client_certificate: Option<ClientCertificate>,
    /// `serviceAnnotations`: the key prefixes the provider may write on the Service of
    /// a load-balancer call ([`annotations`]); none by default.
    pub service_annotations: Vec<String>,
    /// `requireSignature.keys`: a component from the providers directory must have a
    /// cosign signature (`NAME.wasm.sig`) made by one of these; `None`: no signature
    /// needed.
    pub require_signature: Option<Vec<signing::TrustedKey>>,
}

/// A client certificate chain and its private key (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// `tls.clientCertificateFile`: the certificate chain, leaf first.
    pub certificate_file: PathBuf,
    /// `tls.clientKeyFile`: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

impl Default for Policy {
    /// The policy of a provider that has no policy file: no egress, default limits.
    fn default() -> Self {
        Self {
            allowed_outbound_hosts: Vec::new(),
            credentials: Vec::new(),
            instance_limits: InstanceLimits::default(),
            egress_limits: EgressLimits::default(),
            tls_ca_bundle: None,
            tls_client_certificate: None,
            service_annotations: Vec::new(),
            require_signature: None,
        }
    }
}

/// One credential injection rule.
#[derive(Debug, Clone)]
pub struct CredentialRule {
    /// Requests matching this pattern get the credential.
    pub destination: HostPattern,
    /// What to inject.
    pub credential: Credential,
    /// `allowedActions`: the only API actions the credential may be used for (any
    /// when absent).
    pub allowed_actions: Option<actions::AllowedActions>,
}

/// The most the HTTP transport buffers of a response head before the broker sees it
/// (hyper's HTTP/1 read buffer: 8 KiB + 100 x 4 KiB), counted in a policy's
/// worst-case memory for every request in flight.
pub const RESPONSE_HEAD_BUFFER_BYTES: usize = 8192 + 4096 * 100;

/// The largest request body a provider may send (buffered by the host).
pub const MAX_REQUEST_BODY_BYTES: usize = 2 << 20;

/// The largest `limits.poolSize`.
pub const MAX_POOL_SIZE: usize = 64;
/// The largest `limits.memoryMiB` (the engine's per-instance maximum, 512 MiB by
/// default, may be lower: the loader checks that too).
pub const MAX_MEMORY_MIB: usize = 4096;
/// The largest `limits.cacheKiB` (256 MiB).
pub const MAX_CACHE_KIB: usize = 256 << 10;
/// The longest `limits.callTimeout` and `limits.requestTimeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// What a call keeps after its last request for the provider to answer: one second,
/// or a tenth of a shorter `callTimeout`. A request starts only while its whole
/// `requestTimeout` plus this is left before the call's deadline, so no request runs
/// past it; `callTimeout` must exceed `requestTimeout` by at least this.
pub fn call_grace(call_timeout: Duration) -> Duration {
    (call_timeout / 10).min(Duration::from_secs(1))
}

/// The `requestTimeout` of a policy that sets none: 10 s, or less in a short call, so
/// that two requests fit in one (`(callTimeout - grace) / 2`).
pub fn default_request_timeout(call_timeout: Duration) -> Duration {
    ((call_timeout - call_grace(call_timeout)) / 2).min(Duration::from_secs(10))
}

/// The largest `limits.maxResponseBytes`.
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// The largest `limits.maxConcurrentRequests`.
pub const MAX_CONCURRENT_REQUESTS: usize = 1024;
/// The smallest `limits.requestsPerSecond` (one request every 1,000 s).
pub const MIN_REQUESTS_PER_SECOND: f64 = 0.001;
/// The largest `limits.requestsPerSecond`.
pub const MAX_REQUESTS_PER_SECOND: f64 = 100_000.0;
/// The largest `limits.burst`.
pub const MAX_BURST: u32 = 100_000;

/// Limits of a provider's instances (the `limits` fields about calls and memory).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceLimits {
    /// `callTimeout`: deadline for one provider call, including the HTTP requests it makes.
    pub call_timeout: Duration,
    /// `memoryMiB`: what all the linear memories and tables of one instance may hold
    /// together.
    pub memory_bytes: usize,
    /// `poolSize`: initialized instances kept (and the maximum concurrent calls).
    pub pool_size: usize,
    /// `cacheKiB`: the most bytes the version's shared cache (the `cache` import) holds.
    pub cache_bytes: usize,
}

impl Default for InstanceLimits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(30),
            memory_bytes: 64 << 20,
            pool_size: 4,
            cache_bytes: 1 << 20,
        }
    }
}

/// Limits of a provider's outbound requests (the `limits` fields about egress).
#[derive(Debug, Clone, PartialEq)]
pub struct EgressLimits {
    /// `requestTimeout`: timeout for one outbound HTTP request.
    pub request_timeout: Duration,
    /// `maxResponseBytes`: largest response body handed to the guest.
    pub max_response_bytes: usize,
    /// `maxConcurrentRequests`: outbound requests in flight at once.
    pub max_concurrent_requests: usize,
    /// `requestsPerSecond`: token bucket rate; none for unlimited.
    pub requests_per_second: Option<f64>,
    /// `burst`: token bucket size; defaults to `requests_per_second` rounded up.
    pub burst: Option<u32>,
}

impl Default for EgressLimits {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(10),
            max_response_bytes: 4 << 20,
            max_concurrent_requests: 16,
            requests_per_second: None,
            burst: None,
        }
    }
}

mod parse;

impl Policy {
    /// The most host memory this policy lets a provider use: every pooled instance at
    /// its full linear memory, the shared cache full, plus every request in flight with
    /// a full request body, a full response buffered (headers and body, both counted in
    /// `maxResponseBytes`) and the transport's buffer for a response head
    /// ([`RESPONSE_HEAD_BUFFER_BYTES`]).
    pub fn worst_case_bytes(&self) -> u64 {
        let instances =
            self.instance_limits.pool_size as u64 * self.instance_limits.memory_bytes as u64;
        let per_request = (self.egress_limits.max_response_bytes
            + MAX_REQUEST_BODY_BYTES
            + RESPONSE_HEAD_BUFFER_BYTES) as u64;
        instances
            + self.instance_limits.cache_bytes as u64
            + self.egress_limits.max_concurrent_requests as u64 * per_request
    }

    /// The policy path for a provider file: `dir/NAME.wasm` -> `dir/NAME.yaml`.
    pub fn path_for(wasm: &Path) -> PathBuf {
        wasm.with_extension("yaml")
    }

    /// Every file the policy has the host read, with the field naming it: the
    /// credential rules' files (`credentials[N]`), the CA bundle and the client
    /// certificate and key (`tls.*`).
    pub fn files(&self) -> Vec<(String, &Path)> {
        let mut files: Vec<(String, &Path)> = self
            .credentials
            .iter()
            .enumerate()
            .flat_map(|(i, rule)| {
                rule.credential
                    .files()
                    .into_iter()
                    .map(move |file| (format!("credentials[{i}]"), file))
            })
            .collect();
        if let Some(bundle) = &self.tls_ca_bundle {
            files.push(("tls.caBundleFile".into(), bundle.as_path()));
        }
        if let Some(client) = &self.tls_client_certificate {
            files.push((
                "tls.clientCertificateFile".into(),
                client.certificate_file.as_path(),
            ));
            files.push(("tls.clientKeyFile".into(), client.key_file.as_path()));
        }
        files
    }

    /// The policy without anything that reads a file ([`Self::files`]): no credential
    /// rules, no CA bundle, no client certificate. What the tools load without a
    /// credentials directory, so a vendor's policy reads no file of the operator's.
    pub fn without_files(self) -> Self {
        Self {
            credentials: Vec::new(),
            tls_ca_bundle: None,
            tls_client_certificate: None,
            ..self
        }
    }
}

/// A field of a credential kind's rule (`aws`, `keystone`) that is wrong, and why.
#[derive(Debug)]
pub struct RuleInvalid {
    /// The field under the kind's key, e.g. `webIdentity.roleArn` or `authUrl`.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// A [`RuleInvalid`] of `field`.
pub fn rule_invalid(field: &'static str, reason: impl Into<String>) -> RuleInvalid {
    RuleInvalid {
        field,
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests;
