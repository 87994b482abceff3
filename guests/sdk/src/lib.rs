//! The SDK for writing wasm-ccm providers: WebAssembly components that implement
//! Kubernetes' cloud-provider interface for one cloud, run by the wasm-ccm host.
//!
//! A provider reaches its cloud only through the host: [`http`] sends whole requests
//! to the host's broker (the `wasm-ccm:http/client` import: one call per request;
//! [`WasiHttp`] sends over `wasi:http/outgoing-handler` instead), which
//! checks the provider
//! policy's allowlist, adds credentials (the provider never sees them) and enforces
//! deadlines and size limits. This crate owns what every provider would otherwise
//! rewrite:
//!
//! | module | what |
//! | --- | --- |
//! | [`provider`] | the [`Provider`] trait and one trait per contract interface, exported with [`export_provider!`] from a plain struct that holds the provider's state |
//! | [`cache`] | the host's cache shared by all instances of the version serving (TTL, byte cap) |
//! | [`events`] | Kubernetes Events on the object of the current call |
//! | [`annotations`] | annotations on the Service of the current load-balancer call (under the policy's `serviceAnnotations`) |
//! | [`deadline`] | the time left for the current call |
//! | [`services`] | the cluster's LoadBalancer Services, read-only (which addresses are taken) |
//! | [`gcfg`] | cloud configs in gcfg (git-config) syntax, as Kubernetes cloud providers write them |
//! | [`http`] | requests with every method, JSON/form/raw bodies, query building; transport errors that keep their [`ErrorKind`](http::ErrorKind) |
//! | [`cloud_error`] | HTTP answers to the contract's [`CloudError`](types::CloudError): 429/503 with `Retry-After` (seconds or HTTP-date) → `retry-after`, 404 → not found |
//! | [`paginate`] | follows page tokens, with a bound on pages and a check for repeated tokens |
//! | [`provider_id`] | `<name>://<id>` parsing and formatting |
//! | [`log`] | records the host logs under the provider's name; a [`log`](https://docs.rs/log) facade logger |
//! | [`testing`] | a mock transport, so provider logic is unit-tested natively with `cargo test` |
//! | [`url`] | endpoint URLs and percent-encoding |
//!
//! The contract's WIT ships in this crate's `wit/` directory (`wasm-ccm new` copies it
//! into a new provider's `contract/deps/`, next to the provider's world). Start with
//! `wasm-ccm new`, or read `guests/README.md`.
//!
//! # A provider in one file
//!
//! The provider's own bindings export the interfaces it implements and take the
//! contract's types from this crate (`with`), so the SDK's helpers and the exports
//! speak the same [`CloudError`](types::CloudError):
//!
//! ```ignore
//! mod bindings {
//!     wit_bindgen::generate!({
//!         path: "contract",
//!         inline: "package example:cloud;
//!                  world cloud { export wasm-ccm:provider/identity@0.3.0;
//!                                export wasm-ccm:provider/instances-v2@0.3.0; }",
//!         world: "example:cloud/cloud",
//!         with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types },
//!     });
//! }
//! ```
//!
//! The provider itself is a plain struct built by `initialize`:
//!
//! ```
//! use wasm_ccm_guest::http::Request;
//! use wasm_ccm_guest::types::{CloudError, InstanceInfo, Node};
//! use wasm_ccm_guest::{InstancesV2, Provider, cloud_error};
//!
//! struct Example {
//!     endpoint: String,
//! }
//!
//! impl Provider for Example {
//!     const NAME: &'static str = "example";
//!
//!     fn initialize(cloud_config: &[u8]) -> Result<Self, String> {
//!         let endpoint = std::str::from_utf8(cloud_config)
//!             .map_err(|_| "the cloud config is not UTF-8".to_owned())?;
//!         Ok(Example { endpoint: endpoint.trim().to_owned() })
//!     }
//! }
//!
//! impl InstancesV2 for Example {
//!     fn instance_exists(&self, node: Node) -> Result<bool, CloudError> {
//!         let url = format!("{}/instances/{}", self.endpoint, node.metadata.name);
//!         let response = Request::get(&url).send()?;
//!         cloud_error::exists(&response, "get instance")
//!     }
//!     fn instance_shutdown(&self, _node: Node) -> Result<bool, CloudError> {
//!         Ok(false)
//!     }
//!     fn instance_metadata(&self, _node: Node) -> Result<InstanceInfo, CloudError> {
//!         Err(CloudError::NotImplemented)
//!     }
//! }
//!
//! # mod bindings {
//! #     wit_bindgen::generate!({
//! #         path: "wit",
//! #         inline: "package example:cloud;
//! #                  world cloud { export wasm-ccm:provider/identity@0.3.0;
//! #                                export wasm-ccm:provider/instances-v2@0.3.0; }",
//! #         world: "example:cloud/cloud",
//! #         with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types },
//! #     });
//! # }
//! // Exported, with the bindings above:
//! wasm_ccm_guest::export_provider!(Example with_types_in bindings, exports: [instances_v2]);
//! # fn main() {}
//! ```
//!
//! and its logic is tested natively with [`testing::MockTransport`].

#![forbid(unsafe_code)]

pub mod annotations;
pub mod cache;
pub mod cloud_error;
pub mod deadline;
pub mod events;
pub mod gcfg;
pub mod http;
pub mod log;
pub mod paginate;
pub mod provider;
pub mod provider_id;
pub mod services;
pub mod testing;
pub mod transport;
pub mod url;

pub use provider::{
    Clusters, Instances, InstancesBatch, InstancesV2, LoadBalancer, LoadBalancerName, Provider,
    Routes, Zones, default_load_balancer_name,
};
pub use transport::{Transport, WasiHttp};

/// The contract's shared records (`wasm-ccm:provider/types`): nodes, services,
/// load balancer status, routes and [`CloudError`](types::CloudError). A provider's
/// bindings take them from here with
/// `with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types }`.
pub use contract_types::wasm_ccm::provider::types;

/// The contract's types, generated from this crate's copy of the contract (with
/// `PartialEq` for tests).
#[doc(hidden)]
pub mod contract_types {
    wit_bindgen::generate!({
        path: "wit",
        inline: "
            package wasm-ccm:guest-types;
            world types {
                import wasm-ccm:provider/types@0.3.0;
            }
        ",
        world: "wasm-ccm:guest-types/types",
        additional_derives: [PartialEq],
        generate_all,
    });
}

/// The imports: the contract's `host-capabilities` (`wasi:http/outgoing-handler`,
/// `logging`, `cache`, `events`, `deadline`, `annotations`, `services`) and `wasm-ccm:http/client`, the host's
/// buffered HTTP client that [`http`] sends with.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        inline: "
            package wasm-ccm:guest-imports;
            world imports {
                include wasm-ccm:provider/host-capabilities@0.3.0;
                import wasm-ccm:http/client@0.1.0;
            }
        ",
        world: "wasm-ccm:guest-imports/imports",
        with: { "wasm-ccm:provider/types@0.3.0": crate::types },
        generate_all,
    });
}

#[doc(hidden)]
pub mod __private {
    //! What [`export_provider!`](crate::export_provider) expands to refers to.
    pub use std::cell::RefCell;
    pub use std::rc::Rc;
}
