//! # wasm-ccm-host
//!
//! Runs wasm-ccm providers: cloud-specific logic compiled to WebAssembly components
//! that implement the provider contract in `wit/`, each in a sandbox whose only way
//! out is the host's HTTP broker. This crate knows nothing of Kubernetes; the
//! controller manager (`wasm-ccm`) turns Kubernetes objects into the calls made here.
//!
//! Where to start:
//! - [`provider::ProviderLoader`]: turns a provider's files (read by
//!   [`provider::ProviderSource`]: component, policy, cloud config) into a
//!   [`provider::Provider`], whose typed handles call the component's exports; **the**
//!   table of optional interfaces ([`provider::Interface`], `provider/interfaces.rs`)
//!   that inspection, loading, pooling and the call handles are derived from.
//! - [`contract`]: the bindings generated from `wit/`, the contract versions, and the
//!   adapter that loads components built against contract 0.1.
//! - [`capabilities`]: what a provider can reach, one module per capability: HTTP
//!   egress through the broker ([`capabilities::http_egress`]), logging, and a closed
//!   WASI context.
//! - [`policy`]: the per-provider policy file (allowlist, credentials, limits), with
//!   the allowlist grammar ([`policy::allowlist`]) and the duration grammar
//!   ([`policy::duration`]) every layer uses.
//! - [`check`]: `wasm-ccm check`, validating a provider before it ships.
//! - [`engine`]: the shared wasmtime engine (pooling allocator, epoch deadlines).
//! - [`metrics`]: the Prometheus registry, with the provider and egress families.
//!
//! Layers, bottom up: `policy` ← `metrics`, `engine` ← `contract` ← `capabilities` ←
//! `provider` ← `check`: the bindings know nothing of the store state the capabilities
//! keep, nor of providers.

// Only the compile cache (`provider::compile_cache`) may use `unsafe`: loading a serialized
// component. Everything else is safe code.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod capabilities;
pub mod check;
pub mod contract;
pub mod engine;
pub mod metrics;
pub mod policy;
pub mod provider;
pub mod tls;
