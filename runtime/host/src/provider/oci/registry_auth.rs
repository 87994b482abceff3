//! What a pull presents to the registry: the credentials from a Docker `config.json`
//! (an image pull Secret's `.dockerconfigjson`) and the CA bundle its certificate is
//! checked against, both read only inside `--credentials-dir`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use super::error::OciError;
use super::spec::SourceSpec;
use crate::capabilities::http_egress::credentials::{CredentialError, confined_path};

/// How long connecting to the registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the registry may stay silent mid-answer.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest credentials file or CA bundle read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// A credentials file or CA bundle, at most [`MAX_FILE_BYTES`].
fn read_limited(path: &Path) -> Result<Vec<u8>, CredentialError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|source| CredentialError::Read {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(CredentialError::Invalid {
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

/// Credentials and trust for one registry.
pub(super) struct Access {
    pub auth: RegistryAuth,
    ca_pem: Option<Vec<u8>>,
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// Which files a source may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileAccess {
    /// None (no `--credentials-dir`): a source naming a file is refused.
    Nothing,
    /// Only inside this directory (`--credentials-dir`): relative names are inside it.
    Inside(PathBuf),
    /// Any file (the tools, given the files on their command line).
    Anywhere,
}

impl Access {
    /// Reads the files `spec` names as `files` allows.
    pub(super) fn for_spec(spec: &SourceSpec, files: &FileAccess) -> Result<Self, OciError> {
        let read = |field: &'static str, file: &Path| -> Result<Vec<u8>, OciError> {
            let failed = |source| OciError::File {
                path: spec.path.clone(),
                field,
                source,
            };
            let path = match files {
                FileAccess::Nothing => {
                    return Err(failed(CredentialError::OutsideDir {
                        path: file.to_owned(),
                        dir: "(no credentials directory)".into(),
                    }));
                }
                FileAccess::Inside(dir) => {
                    confined_path(Some(dir), &dir.join(file)).map_err(failed)?
                }
                FileAccess::Anywhere => file.to_owned(),
            };
            read_limited(&path).map_err(failed)
        };
        let credentials = spec
            .credentials_file
            .as_deref()
            .map(|file| read("credentialsFile", file).map(|bytes| (file, bytes)))
            .transpose()?;
        let auth = match credentials {
            None => RegistryAuth::Anonymous,
            Some((file, bytes)) => {
                let invalid = || OciError::File {
                    path: spec.path.clone(),
                    field: "credentialsFile",
                    source: CredentialError::Invalid {
                        path: file.to_owned(),
                    },
                };
                let config: DockerConfig = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
                credentials_for(&config, spec.reference.registry()).ok_or_else(|| {
                    OciError::Spec {
                        path: spec.path.clone(),
                        field: "credentialsFile",
                        reason: format!(
                            "{} has no credentials for {} (auths.\"{}\" with auth, or username and password)",
                            file.display(),
                            spec.reference.registry(),
                            spec.reference.registry()
                        ),
                    }
                })?
            }
        };
        let ca_pem = spec
            .ca_file
            .as_deref()
            .map(|file| read("caFile", file))
            .transpose()?;
        Ok(Self { auth, ca_pem })
    }

    /// The registry client.
    pub(super) fn client(&self, spec: &SourceSpec) -> Result<oci_client::Client, OciError> {
        crate::tls::install_crypto_provider();
        let config = oci_client::client::ClientConfig {
            extra_root_certificates: self
                .ca_pem
                .iter()
                .map(|pem| oci_client::client::Certificate {
                    encoding: oci_client::client::CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            // A manifest list is refused: a provider is one component.
            platform_resolver: None,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            user_agent: concat!("wasm-ccm/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        oci_client::Client::try_from(config).map_err(|err| OciError::Pull {
            reference: spec.display_reference(),
            detail: format!("building the registry client: {err}"),
        })
    }

    /// The signature client's configuration: the same trust.
    pub(super) fn sigstore_config(&self) -> sigstore::registry::ClientConfig {
        crate::tls::install_crypto_provider();
        sigstore::registry::ClientConfig {
            extra_root_certificates: self
                .ca_pem
                .iter()
                .map(|pem| sigstore::registry::Certificate {
                    encoding: sigstore::registry::CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The signature client's credentials: the same.
    pub(super) fn sigstore_auth(&self) -> sigstore::registry::Auth {
        match &self.auth {
            RegistryAuth::Anonymous => sigstore::registry::Auth::Anonymous,
            RegistryAuth::Basic(user, password) => {
                sigstore::registry::Auth::Basic(user.clone(), password.clone())
            }
            RegistryAuth::Bearer(token) => sigstore::registry::Auth::Bearer(token.clone()),
        }
    }
}

/// The credentials `config` holds for `registry` (keys as `docker login` writes them:
/// `host[:port]`, or with `https://` and a path).
fn credentials_for(config: &DockerConfig, registry: &str) -> Option<RegistryAuth> {
    // Docker Hub's names: `docker login` writes https://index.docker.io/v1/.
    let hub = |host: &str| {
        matches!(
            host,
            "docker.io" | "index.docker.io" | "registry-1.docker.io"
        )
    };
    let entry = config.auths.iter().find_map(|(key, entry)| {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default();
        (host == registry || (hub(host) && hub(registry))).then_some(entry)
    })?;
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Some(RegistryAuth::Basic(user.clone(), password.clone()));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(entry.auth.as_deref()?.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some(RegistryAuth::Basic(user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_entries_match_the_registry_host() {
        let config: DockerConfig = serde_json::from_str(
            r#"{"auths": {
                "https://index.docker.io/v1/": {"auth": "b3RoZXI6eA=="},
                "127.0.0.1:5000": {"auth": "dXNlcjpwYXNzOndvcmQ="},
                "registry.example.com": {"username": "u", "password": "p"}
            }}"#,
        )
        .unwrap();
        let basic = |user: &str, password: &str| RegistryAuth::Basic(user.into(), password.into());
        let show = |auth: Option<RegistryAuth>| {
            format!(
                "{:?}",
                auth.map(|a| match a {
                    RegistryAuth::Basic(u, p) => (u, p),
                    _ => (String::new(), String::new()),
                })
            )
        };
        assert_eq!(
            show(credentials_for(&config, "127.0.0.1:5000")),
            show(Some(basic("user", "pass:word")))
        );
        assert_eq!(
            show(credentials_for(&config, "registry.example.com")),
            show(Some(basic("u", "p")))
        );
        assert!(credentials_for(&config, "127.0.0.1:5001").is_none());
        assert_eq!(
            show(credentials_for(&config, "docker.io")),
            show(Some(basic("other", "x")))
        );
    }
}
