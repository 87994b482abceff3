//! A test certificate authority: serving and client certificates (PEM) for servers on
//! 127.0.0.1 and the clients that call them.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::CertificateDer;

/// A certificate authority issuing serving and client certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    /// A new self-signed CA.
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "wasm-ccm test CA");
        Self {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A serving certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Issued {
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        self.issue(params)
    }

    /// A client certificate for user `name` in `groups` (Common Name, Organizations).
    pub fn client(&self, name: &str, groups: &[&str]) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        self.issue(params)
    }

    /// A client certificate whose subject holds each of `names` as a Common Name, in
    /// order (Go, and so Kubernetes, takes the last as the user).
    pub fn client_named(&self, names: &[&str]) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        for (i, name) in names.iter().enumerate() {
            // rcgen keeps one value per type: further Common Names by their OID.
            let kind = match i {
                0 => DnType::CommonName,
                _ => DnType::CustomDnType(vec![2, 5, 4, 3]),
            };
            params.distinguished_name.push(kind, *name);
        }
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
