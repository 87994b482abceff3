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
    /// Refused by a credential kind before the allowlist
    /// ([`super::credentials::Route::Refuse`]: what the kind keeps for itself, ...).
    #[error("{message}")]
    Kind {
        /// The kind's metric label ([`super::credentials::DENIAL_REASONS`]).
        reason: &'static str,
        /// Why, for the log.
        message: String,
    },
    /// The request asks the server to take it for another method than the one it
    /// carries (a method override), on a request the host adds a credential to.
    #[error(
        "{0} asks the server to take the request for another method (a method override), \
         refused on requests the host adds a credential to: send the request with that method \
         instead"
    )]
    MethodOverride(String),
    /// The request's API action is not in the credential rule's `allowedActions`.
    #[error("{0}")]
    Action(String),
    /// The credential for this destination could not be read.
    #[error("credential for this destination is unavailable: {0}")]
    Credential(String),
}

impl Denial {
    /// Every value [`Self::reason`] takes but the credential kinds' own
    /// ([`Self::reasons`]).
    const GENERIC_REASONS: [&'static str; 13] = [
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
        "method_override",
        "action",
        "credential_unavailable",
    ];

    /// Every value [`Self::reason`] takes: the address rules' labels and the credential
    /// kinds' included.
    pub fn reasons() -> impl Iterator<Item = &'static str> {
        Self::GENERIC_REASONS
            .into_iter()
            .chain(super::credentials::DENIAL_REASONS.iter().copied())
    }

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
            Denial::Kind { reason, .. } => reason,
            Denial::MethodOverride(_) => "method_override",
            Denial::Action(_) => "action",
            Denial::Credential(_) => "credential_unavailable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `reasons()` (the metric's pre-initialized series) lists every label a denial can
    /// carry: each variant's, each address rule's and each credential kind's.
    #[test]
    fn every_reason_is_listed() {
        let mut denials = vec![
            Denial::BadUri("x".into()),
            Denial::Method("TRACE".into()),
            Denial::NotAllowed {
                scheme: "https".into(),
                host: "h".into(),
                port: 443,
            },
            Denial::Loopback("127.0.0.1".into()),
            Denial::GuestCredentialHeader("authorization".into()),
            Denial::MethodOverride("_method".into()),
            Denial::Action("ec2:TerminateInstances".into()),
            Denial::Credential("missing".into()),
        ];
        for ip in [
            "169.254.169.254",
            "168.63.129.16",
            "0.0.0.0",
            "224.0.0.1",
            "fd00:ec2::254",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "ff02::1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let never = address::never_reachable(ip).expect("an address never reachable");
            denials.push(Denial::Never { ip, never });
            denials.push(Denial::NeverByName {
                label: never.label,
                message: String::new(),
            });
        }
        // Each kind's refusals, under its own labels.
        for reason in super::super::credentials::DENIAL_REASONS {
            denials.push(Denial::Kind {
                reason,
                message: String::new(),
            });
        }
        let reasons: Vec<_> = Denial::reasons().collect();
        for denial in &denials {
            assert!(
                reasons.contains(&denial.reason()),
                "{:?} is not in Denial::reasons()",
                denial.reason()
            );
        }
    }
}
