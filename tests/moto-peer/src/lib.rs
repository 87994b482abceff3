//! moto, the AWS emulator, as a peer for the tests and the playground: its server
//! started on 127.0.0.1, a small signed Query-protocol client for setting up and
//! inspecting its state, and a [`World`] (VPC, subnets, route table, instances, IAM
//! users and a role) for the AWS provider.
//!
//! `scripts/ensure-moto.sh` installs the pinned moto into the tools venv and sets
//! `MOTO_SERVER`; every request goes to 127.0.0.1. The server runs with what AWS does
//! and moto does not where a controller depends on it (`src/aws_defaults.py`: a
//! Classic Load Balancer's default health check).
//!
//! The crate root holds the account, the region, access keys and the [`Moto`] handle;
//! starting the server, the signed client, reading moto's state back, XML answers and
//! the [`World`] are in the modules below.

mod client;
mod inspect;
mod server;
mod world;
mod xml;

pub use client::Service;
pub use inspect::IngressRule;
pub use world::{LaunchedInstance, World, provider_actions};
pub use xml::{text, text_at, texts};

/// The account moto uses.
pub const ACCOUNT: &str = "123456789012";
/// The region of every test.
pub const REGION: &str = "us-east-1";

/// An access key pair.
#[derive(Debug, Clone)]
pub struct Keys {
    pub id: String,
    pub secret: String,
    pub session_token: Option<String>,
}

impl Keys {
    /// Keys for a moto without authentication (any key is accepted).
    pub fn anonymous() -> Self {
        Self {
            id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }
}

/// A running moto server, stopped on drop.
pub struct Moto {
    child: tokio::process::Child,
    pub port: u16,
    client: reqwest::Client,
    /// The keys the test's own calls are signed with.
    pub keys: Keys,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Installs the process's rustls crypto provider (ring) if none is yet: reqwest's
/// clients need one.
pub fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
