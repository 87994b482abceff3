//! Contract 0.2 (`wasm-ccm:provider@0.2.0`, frozen in `wit/v0.2/`): its bindings.
//!
//! 0.3 changed no record: it added the `services` import, `cache.add` and
//! `identity.declined-interfaces`. So 0.2's `types` are bound to the current ones
//! (`with`), and a 0.2 component's exports are called with the same values as a
//! current component's. What differs:
//! - its imports are 0.2's interfaces (`logging`, `cache`, `events`, `deadline`,
//!   `annotations` at `@0.2.0`): they answer through the current capabilities
//!   ([`crate::capabilities::compat`]);
//! - it cannot import `services` (a component importing it with 0.2 exports is
//!   refused: `inspect.rs`), and declines no interface.

// Generated from `wit/v0.2/`; the WIT documents each item. Both versions of the
// package are in scope when generating, so bindgen names the module `provider0_2_0`;
// the re-exports give it the current version's paths.
pub(crate) mod bindings {
    pub mod exports {
        pub mod wasm_ccm {
            pub use super::super::generated::exports::wasm_ccm::provider0_2_0 as provider;
        }
    }
    pub mod wasm_ccm {
        pub use super::generated::wasm_ccm::provider0_2_0 as provider;
    }
    #[allow(missing_docs)]
    mod generated {
        wasmtime::component::bindgen!({
            path: ["../../wit", "../../wit/v0.2"],
            world: "wasm-ccm:provider/provider@0.2.0",
            imports: { default: async },
            exports: { default: async },
            additional_derives: [PartialEq, Eq],
            with: {
                "wasi:http": wasmtime_wasi_http::p2::bindings::http,
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
                "wasm-ccm:provider/types@0.2.0": crate::contract::types,
            },
        });
    }
}

/// 0.2's imports, answered through the current capabilities.
pub use self::bindings::wasm_ccm::provider::{annotations, cache, deadline, events, logging};

/// The name under which a 0.2 component imports the (function-less) `types` interface.
pub(crate) const TYPES: &str = "wasm-ccm:provider/types@0.2.0";
