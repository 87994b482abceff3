//! The secure port's flags, under upstream's names (`k8s.io/apiserver`'s
//! `SecureServingOptions`, `DelegatingAuthenticationOptions` and
//! `DelegatingAuthorizationOptions`, with the defaults upstream's cloud controller
//! manager gives them).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::flags::{parse_go_bool, parse_go_duration};

/// Flags of the secure port (`/healthz`, `/readyz`, `/livez`, `/metrics`).
#[derive(Debug, Clone, clap::Args)]
pub struct ServingArgs {
    /// The IP address the secure port listens on (0.0.0.0: every IPv4 interface, `::`:
    /// every interface). The health and metrics clients (probes, scrapers) must reach it.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// The port serving `/healthz`, `/readyz`, `/livez` and `/metrics` over HTTPS with
    /// authentication and authorization; 0 serves nothing. A listening socket handed
    /// down (`LISTEN_FDS=1`, systemd's socket activation) is served instead of binding
    /// one, and must listen on `--bind-address:--secure-port`.
    #[arg(long, default_value_t = 10258)]
    pub secure_port: u16,
    /// File with the x509 certificate for HTTPS (the server certificate, then any
    /// intermediates), PEM. Re-read when it changes. Without it (and
    /// `--tls-private-key-file`) a self-signed certificate is generated in memory.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// File with the private key matching `--tls-cert-file`, PEM. Re-read when it
    /// changes.
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// PEM bundle of certificate authorities: a client certificate signed by one of
    /// them authenticates as its Common Name, in groups its Organizations. When unset,
    /// the `client-ca-file` of ConfigMap `kube-system/extension-apiserver-authentication`
    /// is used (unless `--authentication-skip-lookup`).
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Do not read ConfigMap `kube-system/extension-apiserver-authentication` for the
    /// client certificate authority.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub authentication_skip_lookup: bool,
    /// Start even when ConfigMap `kube-system/extension-apiserver-authentication`
    /// cannot be read (client certificates are then not accepted).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub authentication_tolerate_lookup_failure: bool,
    /// How long a bearer token's `TokenReview` answer is kept.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub authentication_token_webhook_cache_ttl: Duration,
    /// How long a `SubjectAccessReview` that allowed is kept.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// How long a `SubjectAccessReview` that denied is kept.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    /// Paths served to anyone authenticated or anonymous, without a
    /// `SubjectAccessReview`: exact, or a prefix ending in `*`. Comma-separated; an
    /// empty value sends every path to a `SubjectAccessReview`.
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    pub authorization_always_allow_paths: Vec<String>,
    /// Serve the port over plain HTTP with no authentication or authorization: anyone
    /// reaching it reads `/metrics`. For a process on a developer's machine only.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub serve_plain_http: bool,
    /// The listening socket handed down by the process that started this one
    /// (`LISTEN_FDS`), served instead of binding `--bind-address:--secure-port`.
    #[arg(skip)]
    pub inherited: super::inherited::InheritedSocket,
}

impl ServingArgs {
    /// Checks the flags that go together.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(_), None) => {
                return Err("--tls-cert-file needs --tls-private-key-file".into());
            }
            (None, Some(_)) => {
                return Err("--tls-private-key-file needs --tls-cert-file".into());
            }
            _ => {}
        }
        if self.serve_plain_http && (self.tls_cert_file.is_some() || self.client_ca_file.is_some())
        {
            return Err(
                "--serve-plain-http serves no TLS: drop --tls-cert-file, --tls-private-key-file \
                 and --client-ca-file, or --serve-plain-http"
                    .into(),
            );
        }
        for path in self.always_allow_paths() {
            if !path.starts_with('/') {
                return Err(format!(
                    "--authorization-always-allow-paths: {path:?} is not a path (it must start with /)"
                ));
            }
            if path.trim_end_matches('*').contains('*') {
                return Err(format!(
                    "--authorization-always-allow-paths: {path:?}: only a trailing * is allowed"
                ));
            }
        }
        Ok(())
    }

    /// `--authorization-always-allow-paths` without empty entries.
    pub fn always_allow_paths(&self) -> impl Iterator<Item = &str> {
        self.authorization_always_allow_paths
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
    }
}
