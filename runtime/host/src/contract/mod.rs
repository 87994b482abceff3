//! The provider contract: host bindings generated from `wit/`, and the one table of
//! its optional interfaces ([`interfaces`]).
//!
//! The world-level `Provider` type that `bindgen!` generates is not used to
//! instantiate guests: it requires every optional export. Instead each exported
//! interface is resolved on its own through its `GuestIndices`, so a provider may
//! export any subset; [`Interface`] lists them and everything per interface
//! (inspection, export lookups, pooled instances' handles, the typed call handles)
//! is derived from that one table.

// Generated from `wit/`; the WIT documents each item.
#[allow(missing_docs)]
mod bindings {
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

#[macro_use]
mod table;
pub mod interfaces;

pub use self::bindings::wasm_ccm::provider::logging;
/// The records and variants that cross the boundary (`wasm-ccm:provider/types`).
pub use self::bindings::wasm_ccm::provider::types;
pub use self::interfaces::{
    Clusters, Instances, InstancesV2, Interface, LoadBalancer, Routes, Zones,
};
pub(crate) use self::interfaces::{Guests, Indices};
pub(crate) use self::table::ContractMismatch;
pub use self::table::Exports;

/// The WIT package every provider is checked against.
pub const PACKAGE: &str = "wasm-ccm:provider";
/// The version of [`PACKAGE`] this host implements.
pub const PACKAGE_VERSION: &str = "0.1.0";

/// The fully qualified name of one of the package's interfaces:
/// `wasm-ccm:provider/NAME@VERSION`.
pub fn interface_name(name: &str) -> String {
    format!("{PACKAGE}/{name}@{PACKAGE_VERSION}")
}

impl types::Node {
    /// A Node view with only a name (and no provider ID, addresses or conditions).
    pub fn named(name: &str) -> Self {
        Self {
            metadata: types::ObjectMeta {
                name: name.into(),
                namespace: String::new(),
                uid: String::new(),
                labels: Vec::new(),
                annotations: Vec::new(),
            },
            provider_id: None,
            pod_cidrs: Vec::new(),
            taints: Vec::new(),
            addresses: Vec::new(),
            conditions: Vec::new(),
        }
    }
}
