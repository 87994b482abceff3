//! Why a request was refused before it left the host: one reason per rule, each
//! with a bounded metric label.

use std::net::IpAddr;

use crate::policy::address;

/// Why a request was refused before it left the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// The URI has no host, an unsupported scheme, or user info.
    #[error("request URI `{0}` has no usable scheme and host (or carries user info)")]
    BadUri(String),
    /// `TRACE` or `CONNECT`.
    #[error("method {0} is not allowed")]
    Method(String),
    /// No `allowedOutboundHosts` pattern matches.
    #[error("{scheme}://{host}:{port} is not in the provider's allowedOutboundHosts")]
    NotAllowed {
        /// The request's scheme.
        scheme: String,
        /// The request's host.
        host: String,
        /// The request's port.
        port: u16,
    },
    /// The destination is an address no provider may reach.
    #[error("{ip} is {}, which providers may never reach", .never.what)]
    Never {
        /// The address (normalized).
        ip: IpAddr,
        /// What it is.
        never: address::Never,
    },
    /// The destination name resolves, or a connection went, only to such addresses.
    #[error("{message}")]
    NeverByName {
        /// The metric label of the first refused address.
        label: &'static str,
        /// What was refused, for the log.
        message: String,
    },
    /// Loopback, through a pattern that does not name it.
    #[error(
        "{0} is this host's loopback; a provider reaches it only through an allowedOutboundHosts \
         entry naming a loopback address or localhost"
    )]
    Loopback(String),
    /// The guest set a header that the host injects for this destination.
    #[error(
        "the provider set its own `{0}` header on a destination whose credentials the host injects"
    )]
    GuestCredentialHeader(String),
    /// A request to Keystone's identity API other than reading the catalog.
    #[error(
        "the identity API is the host's (it logs in for the provider); the provider reads the \
         service catalog with GET {0}"
    )]
    KeystoneIdentity(String),
    /// The request's API action is not in the credential rule's `allowedActions`.
    #[error("{0}")]
    Action(String),
    /// The credential for this destination could not be read.
    #[error("credential for this destination is unavailable: {0}")]
    Credential(String),
}

impl Denial {
    /// Every value [`Self::reason`] takes (the address rules' labels included).
    pub const REASONS: [&'static str; 13] = [
        "bad_uri",
        "method",
        "not_allowed",
        "link_local",
        "metadata",
        "unspecified",
        "not_unicast",
        "tunnel",
        "loopback",
        "guest_credential_header",
        "keystone_identity",
        "action",
        "credential_unavailable",
    ];

    /// A short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Denial::BadUri(_) => "bad_uri",
            Denial::Method(_) => "method",
            Denial::NotAllowed { .. } => "not_allowed",
            Denial::Never { never, .. } => never.label,
            Denial::NeverByName { label, .. } => label,
            Denial::Loopback(_) => "loopback",
            Denial::GuestCredentialHeader(_) => "guest_credential_header",
            Denial::KeystoneIdentity(_) => "keystone_identity",
            Denial::Action(_) => "action",
            Denial::Credential(_) => "credential_unavailable",
        }
    }
}
