//! # wasm-ccm
//!
//! The controller manager: Kubernetes controllers with upstream
//! `k8s.io/cloud-provider` semantics, whose cloud-specific logic runs in a sandboxed
//! WebAssembly provider hosted by [`wasm_ccm_host`].
//!
//! Where to start:
//! - [`daemon::run`]: the process — flags ([`daemon::options`]), health and metrics,
//!   loading the provider, leader election, starting the controllers.
//! - [`controllers`]: cloud-node, cloud-node-lifecycle, service and route, behind one
//!   table ([`controllers::ALL`]: name, what each needs from the provider, how it runs).
//! - [`cloud`]: the seam between Kubernetes objects and the provider contract. The
//!   controllers call a [`cloud::Cloud`] and never touch the contract's bindings.
//! - [`hot_swap`]: switching to a changed provider without a restart.
//! - [`serving`]: the secure port (HTTPS, delegated authentication and authorization)
//!   in front of health and metrics.
//! - [`cli`]: the subcommands (`check`, `call`, `conformance`, `new`,
//!   `import-occm-config`); `main.rs` parses the command line and dispatches.
//!
//! Crates: this one depends on `wasm-ccm-host` (which knows nothing of Kubernetes)
//! and, for `import-occm-config`, on `occm-config` (occm's cloud.conf tooling, next to
//! the OpenStack provider, which shares its key table); the playground
//! (`wasm-ccm-playground`) depends on this crate and the host, and is the only one
//! that links the API server double and the simulated cloud.

#![deny(unsafe_code)]

pub mod allocator;
pub mod cli;
pub mod cloud;
pub mod controllers;
pub mod daemon;
pub mod events;
pub mod flags;
pub mod hot_swap;
pub mod metrics;
pub mod serving;

/// This host's name (the Pod's, in a cluster), if the kernel says one.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// An error and its sources on one line, each cause once: what the binaries print.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Whether the binaries colour their text logs: only for a person at a terminal —
/// never into a file, a pipe or a container log — and never with `NO_COLOR` set
/// (<https://no-color.org>).
pub fn colour_logs() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
