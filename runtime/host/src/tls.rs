//! The process's TLS crypto provider.
//!
//! Every TLS client and server here uses rustls with *ring*, as kube does. sigstore
//! (the cosign signature checks of [`crate::provider::oci`]) brings rustls's aws-lc-rs
//! backend into the build too, and with two backends compiled in rustls picks neither
//! by itself: `rustls::ClientConfig::builder()` (kube's client) panics and reqwest
//! falls back to aws-lc-rs. [`install_crypto_provider`] makes *ring* the process
//! default; every binary calls it first, and every client this crate builds calls it
//! before building.

use std::sync::Once;

/// Installs *ring* as the process's default rustls crypto provider (once; a provider
/// installed earlier is kept).
///
/// ```
/// wasm_ccm_host::tls::install_crypto_provider();
/// assert!(rustls::crypto::CryptoProvider::get_default().is_some());
/// ```
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
