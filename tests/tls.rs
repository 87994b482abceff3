//! The policy's TLS settings against a real TLS server on 127.0.0.1 that trusts one
//! private CA and requires a client certificate from it (as some private clouds'
//! APIs do): with `tls.caBundleFile` and the client certificate the provider's request
//! goes through; without the certificate the server refuses the handshake; a key
//! outside the credentials directory is refused when the policy loads.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasm_ccm_host::capabilities::http_egress::EgressSettings;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::ProviderLoader;
use wasm_ccm_tests::{ProviderDir, TOKEN, act, loader};

/// A CA, and certificates it issued: the server's for 127.0.0.1 and a client's.
struct Pki {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    server: (CertificateDer<'static>, PrivateKeyDer<'static>),
    client_pem: (String, String),
}

fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["wasm-ccm".to_string()])
        .unwrap()
        .signed_by(&client_key, &ca)
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        ca_der: ca.der().clone(),
        server: (
            server.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        ),
        client_pem: (client.pem(), client_key.serialize_pem()),
    }
}

/// A TLS server requiring a client certificate issued by the CA; answers `200 ok`.
async fn mutual_tls_server(pki: &Pki) -> u16 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_der.clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![pki.server.0.clone()], pki.server.1.clone_key())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

fn policy(port: u16, client: bool) -> String {
    let mut policy = format!(
        "allowedOutboundHosts: ['https://127.0.0.1:{port}']\ntls:\n  caBundleFile: ca.pem\n"
    );
    if client {
        policy.push_str("  clientCertificateFile: client.crt\n  clientKeyFile: client.key\n");
    }
    policy
}

fn provider_dir(pki: &Pki, policy: &str) -> ProviderDir {
    let dir = ProviderDir::new("fixture_hostile", "hostile", policy, TOKEN);
    std::fs::write(dir.dir.path().join("ca.pem"), &pki.ca_pem).unwrap();
    std::fs::write(dir.dir.path().join("client.crt"), &pki.client_pem.0).unwrap();
    std::fs::write(dir.dir.path().join("client.key"), &pki.client_pem.1).unwrap();
    dir
}

#[tokio::test]
async fn the_client_certificate_is_presented_and_required() {
    let pki = pki();
    let port = mutual_tls_server(&pki).await;
    let url = format!("https://127.0.0.1:{port}/v2.1/servers");
    let fetch = [("hostile/action", "fetch"), ("hostile/url", url.as_str())];

    let with = provider_dir(&pki, &policy(port, true));
    let provider = loader().load(&with.wasm, Vec::new()).await.unwrap();
    let info = act(&provider, &fetch).await.unwrap();
    let status = info
        .additional_labels
        .iter()
        .find(|(k, _)| k == "status")
        .map(|(_, v)| v.clone());
    assert_eq!(status.as_deref(), Some("200"), "{info:?}");

    // The same CA, no client certificate: the server ends the handshake.
    let without = provider_dir(&pki, &policy(port, false));
    let provider = loader().load(&without.wasm, Vec::new()).await.unwrap();
    let refused = act(&provider, &fetch).await;
    assert!(refused.is_err(), "{refused:?}");
}

#[tokio::test]
async fn a_client_key_outside_the_credentials_directory_is_refused() {
    let pki = pki();
    // The CA bundle inside the credentials directory (where it must be); the client
    // certificate and key outside it.
    let policy =
        policy(443, true).replace("caBundleFile: ca.pem", "caBundleFile: credentials/ca.pem");
    let dir = provider_dir(&pki, &policy);
    let secrets = dir.dir.path().join("credentials");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("ca.pem"), &pki.ca_pem).unwrap();
    let loader = ProviderLoader::with_options(
        &EngineSettings::default(),
        &EgressSettings {
            credentials_dir: Some(secrets.clone()),
            ..EgressSettings::default()
        },
        Metrics::new(),
    )
    .unwrap();
    let err = loader
        .load(&dir.wasm, Vec::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("client.crt") && err.contains("outside the credentials directory"),
        "{err}"
    );
}
