//! Why a Service gets no address: kube-vip's errors, with a CamelCase reason for the
//! Warning event the caller records.

use std::fmt;
use std::net::IpAddr;

use super::GLOBAL;

/// Why a Service gets no address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// No `cidr-`/`range-` key for the namespace nor `global`.
    NoPool {
        /// The Service's namespace.
        namespace: String,
    },
    /// The pool's value does not parse.
    InvalidPool {
        /// Its key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The pool has no address of the family the single-stack Service asks for.
    NoPoolForFamily {
        /// The pool's key.
        key: String,
    },
    /// A `RequireDualStack` Service, and the pool lacks a family.
    DualStackPoolsMissing {
        /// The pool's key.
        key: String,
    },
    /// kube-vip's `OutOfIPsError`: every address of the pool is taken.
    NoAddressAvailable {
        /// The Service's namespace.
        namespace: String,
        /// The pool's part of the family searched, as kube-vip writes it.
        pool: String,
        /// CIDRs (else ranges).
        cidr: bool,
    },
    /// A dual-stack Service got too few addresses: the errors of each family.
    DualStack {
        /// `PreferDualStack` (no family had one) or `RequireDualStack` (one had none).
        policy: &'static str,
        /// Each family's error.
        errors: Vec<AllocError>,
    },
    /// The requested address is not in the pool.
    RequestedNotInPool {
        /// The address.
        address: IpAddr,
        /// The pool's key.
        key: String,
    },
    /// The requested address is held by another Service, unshareably.
    RequestedInUse {
        /// The address.
        address: IpAddr,
        /// `namespace/name` of the holder.
        holder: String,
    },
}

impl AllocError {
    /// A CamelCase reason for the Warning event the caller records.
    pub fn reason(&self) -> &'static str {
        match self {
            AllocError::NoPool { .. } => "NoAddressPool",
            AllocError::InvalidPool { .. } => "InvalidAddressPool",
            AllocError::NoPoolForFamily { .. } | AllocError::DualStackPoolsMissing { .. } => {
                "NoAddressPoolForIPFamily"
            }
            AllocError::NoAddressAvailable { .. } | AllocError::DualStack { .. } => {
                "NoAddressAvailable"
            }
            AllocError::RequestedNotInPool { .. } => "RequestedAddressNotInPool",
            AllocError::RequestedInUse { .. } => "RequestedAddressInUse",
        }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::NoPool { namespace } => write!(
                f,
                "no address pools could be found for namespace {namespace} \
                 (cidr-{namespace}, cidr-{GLOBAL}, range-{namespace}, range-{GLOBAL})"
            ),
            AllocError::InvalidPool { key, message } => write!(f, "pool {key}: {message}"),
            AllocError::NoPoolForFamily { key } => write!(
                f,
                "could not find suitable pool for the IP family of the service in {key}"
            ),
            AllocError::DualStackPoolsMissing { key } => write!(
                f,
                "service requires dual-stack, but the configuration does not have both \
                 IPv4 and IPv6 pools listed for the namespace ({key})"
            ),
            AllocError::NoAddressAvailable {
                namespace,
                pool,
                cidr,
            } => {
                let what = if *cidr { "cidr" } else { "range" };
                write!(f, "no addresses available in [{namespace}] {what} [{pool}]")
            }
            AllocError::DualStack { policy, errors } => {
                let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let what = if *policy == "PreferDualStack" {
                    "any IP address"
                } else {
                    "required IP addresses"
                };
                write!(
                    f,
                    "could not allocate {what} for {policy} service: {}",
                    errors.join("; ")
                )
            }
            AllocError::RequestedNotInPool { address, key } => {
                write!(f, "requested address {address} is not in pool {key}")
            }
            AllocError::RequestedInUse { address, holder } => {
                write!(f, "requested address {address} is in use by {holder}")
            }
        }
    }
}
