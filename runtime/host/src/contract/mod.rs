//! The provider contract: host bindings generated from `wit/` and the contract
//! versions the host loads ([`Version`]). It knows nothing of the store state the
//! capabilities keep nor of providers: the host's imports are implemented in
//! [`crate::capabilities`], and the table of optional interfaces, with their export
//! lookups and typed call handles, is [`crate::provider::interfaces`].
//!
//! The current version (`wasm-ccm:provider@0.3.0`, [`types`]) is what the rest of the
//! host and the controller manager speak. Components built against an older version
//! keep loading unchanged: [`v0_2`] holds 0.2's bindings (its records are the current
//! ones, so its calls need no conversion; its imports answer through the current
//! capabilities), [`v0_1`] holds 0.1's and the adapter converting its records to and
//! from the current ones, so a call handle reaches an older component exactly as it
//! reaches a current one.
//!
//! The world-level `Provider` type that `bindgen!` generates is not used to
//! instantiate guests: it requires every optional export. Instead each exported
//! interface is resolved on its own through its `GuestIndices`, so a provider may
//! export any subset.

// Generated from `wit/`; the WIT documents each item.
#[allow(missing_docs)]
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "provider",
        imports: { default: async },
        exports: { default: async },
        additional_derives: [PartialEq, Eq],
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

pub mod v0_1;
pub mod v0_2;

/// The records and variants that cross the boundary (`wasm-ccm:provider/types`).
pub use self::bindings::wasm_ccm::provider::types;
/// The host-side imports of the current version: `annotations`, `cache`, `deadline`,
/// `events`, `logging`, `services` (implemented in [`crate::capabilities`]).
pub use self::bindings::wasm_ccm::provider::{
    annotations, cache, deadline, events, logging, services,
};

/// The WIT package every provider is checked against.
pub const PACKAGE: &str = "wasm-ccm:provider";
/// The version of [`PACKAGE`] this host implements (and new providers are built against).
pub const PACKAGE_VERSION: &str = Version::CURRENT.as_str();

/// A version of the contract the host loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// `wasm-ccm:provider@0.1.0`: the first contract; adapted by the host.
    V0_1,
    /// `wasm-ccm:provider@0.2.0`: batched instance calls, the shared cache, events,
    /// deadlines, richer views, optional `get-load-balancer-name`.
    V0_2,
    /// `wasm-ccm:provider@0.3.0`: the `services` import (the cluster's LoadBalancer
    /// Services, read-only) and `identity.declined-interfaces`.
    V0_3,
}

impl Version {
    /// The version new providers are built against.
    pub const CURRENT: Version = Version::V0_3;
    /// Every version the host loads, oldest first.
    pub const ALL: [Version; 3] = [Version::V0_1, Version::V0_2, Version::V0_3];

    /// The package version, e.g. `0.3.0`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Version::V0_1 => "0.1.0",
            Version::V0_2 => "0.2.0",
            Version::V0_3 => "0.3.0",
        }
    }

    /// The version named by a package version string.
    pub fn parse(version: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == version)
    }

    /// Whether this is an older version the host adapts.
    pub fn is_deprecated(self) -> bool {
        self != Self::CURRENT
    }

    /// The fully qualified name of one of this version's interfaces:
    /// `wasm-ccm:provider/NAME@VERSION`.
    pub fn interface_name(self, name: &str) -> String {
        format!("{PACKAGE}/{name}@{}", self.as_str())
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PACKAGE}@{}", self.as_str())
    }
}

/// The fully qualified name of one of the current version's interfaces:
/// `wasm-ccm:provider/NAME@VERSION`.
pub fn interface_name(name: &str) -> String {
    Version::CURRENT.interface_name(name)
}

/// Upstream's `cloudprovider.DefaultLoadBalancerName`: `a` + the Service UID without
/// dashes, cut to 32 characters. What the host answers for a provider that does not
/// export `load-balancer-name`.
pub fn default_load_balancer_name(service: &types::Service) -> String {
    let mut name: String = std::iter::once('a')
        .chain(service.metadata.uid.chars().filter(|c| *c != '-'))
        .collect();
    name.truncate(32);
    name
}

impl types::ObjectMeta {
    /// Metadata with only a name.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            namespace: String::new(),
            uid: String::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
            deletion_timestamp: None,
        }
    }
}

impl types::Node {
    /// A Node view with only a name (and no provider ID, addresses or conditions).
    pub fn named(name: &str) -> Self {
        Self {
            metadata: types::ObjectMeta::named(name),
            provider_id: None,
            pod_cidrs: Vec::new(),
            taints: Vec::new(),
            addresses: Vec::new(),
            conditions: Vec::new(),
            unschedulable: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_name_interfaces() {
        assert_eq!(Version::parse("0.1.0"), Some(Version::V0_1));
        assert_eq!(Version::parse("0.2.0"), Some(Version::V0_2));
        assert_eq!(Version::parse("0.3.0"), Some(Version::V0_3));
        assert_eq!(Version::parse("0.4.0"), None);
        assert!(Version::V0_1.is_deprecated());
        assert!(Version::V0_2.is_deprecated());
        assert!(!Version::CURRENT.is_deprecated());
        assert_eq!(
            Version::V0_1.interface_name("routes"),
            "wasm-ccm:provider/routes@0.1.0"
        );
        assert_eq!(Version::V0_3.to_string(), "wasm-ccm:provider@0.3.0");
    }
}
