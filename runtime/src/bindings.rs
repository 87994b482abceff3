//! Host bindings generated from the provider contract in `wit/`.
//!
//! The world-level `Provider` type is not used to instantiate guests: it requires every
//! optional export. Instead [`crate::provider`] resolves each exported interface on its
//! own through the per-interface `GuestIndices`, so a provider may export any subset.

wasmtime::component::bindgen!({
    path: "../wit",
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

pub use self::exports::wasm_ccm::provider::{
    clusters, identity, instances, instances_v2, load_balancer, routes, zones,
};
pub use self::wasm_ccm::provider::logging;
pub use self::wasm_ccm::provider::types;

/// The WIT package every provider is checked against.
pub const PACKAGE: &str = "wasm-ccm:provider";
/// The version of [`PACKAGE`] this host implements.
pub const PACKAGE_VERSION: &str = "0.1.0";

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
