//! A client of the controller manager's secure port: HTTPS GETs with a bearer token
//! or a client certificate, trusting a test CA or (for the self-signed certificate)
//! any certificate, returning the certificate the server presented.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use kube_apiserver_peer::pki::{Issued, TestCa};

/// How a request authenticates and what server certificate it trusts.
#[derive(Clone, Default)]
pub struct Credentials {
    /// `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// A client certificate.
    pub client: Option<Issued>,
    /// The CA the server certificate must chain to (for `localhost`); `None`: any.
    pub trust: Option<CertificateDer<'static>>,
}

impl Credentials {
    /// A bearer token, any server certificate.
    pub fn token(token: &str) -> Self {
        Self {
            token: Some(token.into()),
            ..Self::default()
        }
    }
}

/// An answer of the secure port.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: String,
    /// The certificate the server presented.
    pub server_certificate: CertificateDer<'static>,
}

/// A TLS connection to 127.0.0.1:`port` (server name `localhost`) with
/// `credentials`' client certificate and trust (its token is for the requests).
pub async fn connect(
    port: u16,
    credentials: &Credentials,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    connect_from([127, 0, 0, 1].into(), port, credentials).await
}

/// A TCP connection to 127.0.0.1:`port` from the loopback address `source` (any of
/// 127.0.0.0/8: a client of its own, as the server counts clients).
pub async fn tcp_from(
    source: std::net::IpAddr,
    port: u16,
) -> std::io::Result<tokio::net::TcpStream> {
    assert!(source.is_loopback(), "tests connect from loopback only");
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((source, 0).into())?;
    socket.connect(([127, 0, 0, 1], port).into()).await
}

/// [`connect`] from the loopback address `source`.
pub async fn connect_from(
    source: std::net::IpAddr,
    port: u16,
    credentials: &Credentials,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match &credentials.trust {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.clone()).unwrap();
            builder.with_root_certificates(roots)
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(any_certificate()),
    };
    let config = match &credentials.client {
        Some(issued) => {
            let chain = CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let tcp = tcp_from(source, port).await?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// `GET path` over HTTPS on 127.0.0.1:`port` (server name `localhost`).
pub async fn https_get(
    port: u16,
    path: &str,
    credentials: &Credentials,
) -> std::io::Result<Answer> {
    crate::within_request_timeout(port, tls_get(port, path, credentials)).await
}

async fn tls_get(port: u16, path: &str, credentials: &Credentials) -> std::io::Result<Answer> {
    let mut tls = connect(port, credentials).await?;
    let server_certificate = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let authorization = credentials
        .token
        .as_ref()
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    tls.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    // A server closing without close_notify is fine for a Connection: close read.
    if let Err(err) = tls.read_to_end(&mut raw).await
        && err.kind() != std::io::ErrorKind::UnexpectedEof
    {
        return Err(err);
    }
    let (status, body) = crate::parse_response(&raw);
    Ok(Answer {
        status,
        body,
        server_certificate,
    })
}

/// The DNS names and IP addresses a certificate is for.
pub fn subject_alt_names(der: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_string()),
            GeneralName::IPAddress(ip) => match ip.len() {
                4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap()).to_string()),
                16 => {
                    Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap()).to_string())
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// A verifier accepting any server certificate (the self-signed one is unknown in
/// advance); the handshake's signatures are still checked.
fn any_certificate() -> Arc<dyn ServerCertVerifier> {
    Arc::new(AnyCertificate(Arc::new(
        rustls::crypto::ring::default_provider(),
    )))
}

/// Accepts any server certificate (the self-signed one is unknown in advance); the
/// handshake's signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
