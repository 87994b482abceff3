//! The secure port's TLS: the serving certificate (from `--tls-cert-file` and
//! `--tls-private-key-file`, re-read when they change, or self-signed in memory) and
//! the client certificate authorities.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM block of the expected kind.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The private key does not fit the certificate, or its algorithm is not supported.
    #[error("{key} does not go with {cert}: {source}")]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls' reason.
        #[source]
        source: rustls::Error,
    },
    /// The self-signed certificate could not be generated.
    #[error("generating a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    /// The client certificate authorities cannot verify certificates.
    #[error("client CA {origin}: {source}")]
    ClientCa {
        /// Where the authorities came from.
        origin: String,
        /// rustls' reason.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a file for [`certificate_from_pem`] or [`client_ca_from_pem`].
pub fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The certificate chain and key of `--tls-cert-file` / `--tls-private-key-file`
/// (`cert_pem` and `key_pem` are their contents, read by the caller).
pub fn certificate_from_pem(
    (cert, cert_pem): (&Path, &[u8]),
    (key, key_pem): (&Path, &[u8]),
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: cert.to_owned(),
            what: format!("not a PEM certificate bundle: {e}"),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: cert.to_owned(),
            what: "no CERTIFICATE block".into(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem {
        path: key.to_owned(),
        what: format!("no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
    })?;
    let certified =
        CertifiedKey::from_der(chain, private, &provider()).map_err(|source| TlsError::Key {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        })?;
    Ok(Arc::new(certified))
}

/// A self-signed certificate for `localhost`, this host's name, the loopback
/// addresses and `bind` (when it is one address), generated in memory as upstream
/// does when no certificate is given.
pub fn self_signed(bind: IpAddr) -> Result<Arc<CertifiedKey>, TlsError> {
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if let Some(host) = crate::hostname().filter(|h| h != "localhost") {
        names.push(host);
    }
    if !bind.is_unspecified() && !bind.is_loopback() {
        names.push(bind.to_string());
    }
    let generated = rcgen::generate_simple_self_signed(names)?;
    let key = PrivateKeyDer::Pkcs8(generated.signing_key.serialize_der().into());
    let certified = CertifiedKey::from_der(vec![generated.cert.der().clone()], key, &provider())?;
    Ok(Arc::new(certified))
}

/// Client certificate authorities from a PEM bundle; `origin` names it in errors.
pub fn client_ca_from_pem(origin: &str, pem: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let bad = |what: String| TlsError::Pem {
        path: PathBuf::from(origin),
        what,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| bad(format!("not a PEM certificate bundle: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("not a usable certificate authority: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("no CERTIFICATE block".into()));
    }
    Ok(Arc::new(roots))
}

/// The TLS configuration new connections get: the current serving certificate and
/// client certificate authorities. Changing either builds a new configuration;
/// connections already open keep theirs, but their client certificates are verified
/// again against the current authorities on every request ([`Self::verify_client`]).
pub struct TlsState {
    current: Mutex<Current>,
}

/// The certificate, the client CA and what is built from them, changed together.
struct Current {
    certificate: Arc<CertifiedKey>,
    client_ca: Option<(String, Arc<RootCertStore>)>,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    config: Arc<rustls::ServerConfig>,
}

impl TlsState {
    /// Serves `certificate`, with no client certificate authority yet.
    pub fn new(certificate: Arc<CertifiedKey>) -> Result<Self, TlsError> {
        let (config, verifier) = build(&certificate, None)?;
        Ok(Self {
            current: Mutex::new(Current {
                certificate,
                client_ca: None,
                verifier,
                config,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        self.lock().config.clone()
    }

    /// Serves `certificate` to new connections.
    pub fn set_certificate(&self, certificate: Arc<CertifiedKey>) -> Result<(), TlsError> {
        let mut current = self.lock();
        let (config, verifier) = build(&certificate, current.client_ca.as_ref())?;
        *current = Current {
            certificate,
            client_ca: current.client_ca.take(),
            verifier,
            config,
        };
        Ok(())
    }

    /// Verifies client certificates against `ca` (`origin`, the authorities' source,
    /// for errors); `None` accepts no client certificates.
    pub fn set_client_ca(&self, ca: Option<(String, Arc<RootCertStore>)>) -> Result<(), TlsError> {
        let mut current = self.lock();
        let (config, verifier) = build(&current.certificate, ca.as_ref())?;
        current.client_ca = ca;
        current.verifier = verifier;
        current.config = config;
        Ok(())
    }

    /// Whether the client certificate `chain` (end entity first) verifies against the
    /// current client authorities now: a certificate expired, or of an authority
    /// removed since the connection's handshake, no longer authenticates.
    pub fn verify_client(&self, chain: &[CertificateDer<'static>]) -> bool {
        let Some(verifier) = self.lock().verifier.clone() else {
            return false;
        };
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return false;
        };
        verifier
            .verify_client_cert(end_entity, intermediates, UnixTime::now())
            .is_ok()
    }
}

/// A server configuration and the client certificate verifier it holds.
type Built = (
    Arc<rustls::ServerConfig>,
    Option<Arc<dyn ClientCertVerifier>>,
);

/// The server configuration: HTTP/1.1, the certificate, client certificates requested
/// (not required) when there are authorities to verify them, and no session
/// resumption (a resumed session would carry a client certificate unverified).
fn build(
    certificate: &Arc<CertifiedKey>,
    client_ca: Option<&(String, Arc<RootCertStore>)>,
) -> Result<Built, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let verifier = match client_ca {
        Some((origin, roots)) => Some(
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|source| TlsError::ClientCa {
                    origin: origin.clone(),
                    source,
                })?,
        ),
        None => None,
    };
    let builder = match &verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(Fixed(certificate.clone())));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok((Arc::new(config), verifier))
}

/// One certificate for every client hello.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_another_certificate_is_refused_naming_both_files() {
        let a = rcgen::generate_simple_self_signed(vec!["a".to_owned()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".to_owned()]).unwrap();
        let err = certificate_from_pem(
            (Path::new("/tls/tls.crt"), a.cert.pem().as_bytes()),
            (
                Path::new("/tls/tls.key"),
                b.signing_key.serialize_pem().as_bytes(),
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/tls/tls.key does not go with /tls/tls.crt"),
            "{err}"
        );
    }

    #[test]
    fn files_without_pem_blocks_are_named() {
        let a = rcgen::generate_simple_self_signed(vec!["a".to_owned()]).unwrap();
        let err = certificate_from_pem(
            (Path::new("/tls/tls.crt"), b"garbage"),
            (
                Path::new("/tls/tls.key"),
                a.signing_key.serialize_pem().as_bytes(),
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("/tls/tls.crt: no CERTIFICATE block"),
            "{err}"
        );
        let err = certificate_from_pem(
            (Path::new("/tls/tls.crt"), a.cert.pem().as_bytes()),
            (Path::new("/tls/tls.key"), a.cert.pem().as_bytes()),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("/tls/tls.key: no PEM private key"), "{err}");
        let err = client_ca_from_pem("--client-ca-file /ca.crt", b"").unwrap_err();
        assert!(err.to_string().contains("no CERTIFICATE block"), "{err}");
    }

    #[test]
    fn the_self_signed_certificate_serves_a_tls_configuration() {
        let state = TlsState::new(self_signed("10.0.0.5".parse().unwrap()).unwrap()).unwrap();
        assert_eq!(state.current().alpn_protocols, [b"http/1.1".to_vec()]);
        let ca = rcgen::generate_simple_self_signed(vec!["ca".to_owned()]).unwrap();
        let roots = client_ca_from_pem("test", ca.cert.pem().as_bytes()).unwrap();
        state.set_client_ca(Some(("test".into(), roots))).unwrap();
    }
}
