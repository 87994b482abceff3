//! # wasm-ccm
//!
//! A Kubernetes cloud-controller-manager whose cloud-specific logic runs as sandboxed
//! WebAssembly components ("providers").
//!
//! Where to start:
//! - [`provider`]: load a provider component and call it through a typed API that
//!   mirrors upstream's `cloudprovider.Interface` ([`provider::ProviderLoader`]).
//! - [`capabilities`]: what a provider can reach: HTTP egress through the host's broker
//!   ([`capabilities::http_egress`]), logging, and a closed WASI context.
//! - [`policy`]: the per-provider policy file (allowlist, credentials, limits).
//! - [`check`]: `wasm-ccm check`, validating a provider before it ships.
//! - [`engine`]: the shared wasmtime engine (pooling allocator, epoch deadlines).
//! - [`controllers`]: cloud-node, cloud-node-lifecycle, service and route, run by
//!   [`daemon::run`].
//! - [`hot_swap`]: switching to a changed provider without a restart.
//! - [`bindings`]: host bindings generated from `wit/`.

// Only the compile cache (`provider::cache`) may use `unsafe`: loading a serialized
// component. Everything else is safe code.
#![deny(unsafe_code)]

pub mod bindings;
pub mod capabilities;
pub mod check;
pub mod controllers;
pub mod convert;
pub mod daemon;
pub mod engine;
pub mod hot_swap;
pub mod metrics;
pub mod playground;
pub mod policy;
pub mod provider;
