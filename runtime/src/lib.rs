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
//! - [`bindings`]: host bindings generated from `wit/`.

#![forbid(unsafe_code)]

pub mod bindings;
pub mod capabilities;
pub mod check;
pub mod controllers;
pub mod convert;
pub mod daemon;
pub mod engine;
pub mod metrics;
pub mod playground;
pub mod policy;
pub mod provider;
