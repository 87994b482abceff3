//! The subcommands beside the controller manager, for provider authors and operators:
//! `check` (validate a component and its policy), `push` (a component to an OCI
//! registry), `call` (one export under the real
//! sandbox), `conformance` (the contract's rules against a cloud), `new` (a provider
//! crate) and `import-occm-config` (occm's cloud.conf to the OpenStack provider's
//! files; the work is the `occm-config` crate's, next to the provider). Each has its
//! module ([`sandboxed`]: the component, policy and credentials directory `check`,
//! `call` and `conformance` take); [`run`] dispatches, `main.rs` only parses the
//! command line.

pub mod call;
pub mod check;
pub mod conformance;
mod exit;
pub mod import_occm_config;
pub mod new;
pub mod push;
pub mod sandboxed;

use std::process::ExitCode;

use clap::Subcommand;

pub use exit::exit_code;

/// The subcommands; each module holds its arguments and its `main`.
#[derive(Subcommand)]
pub enum Command {
    /// Validate a provider component before it ships: contract version, exported
    /// interfaces, imports, size against the 1 MiB ConfigMap limit, and the policy next
    /// to it (FILE.yaml, or --policy); with --cloud-config, load it and run `initialize`
    /// (credential files only inside --credentials-dir, none without it).
    Check(check::Args),
    /// Run one export of a provider under the real sandbox (its policy is FILE.yaml
    /// next to it, or --policy; credential files only inside --credentials-dir, none
    /// without it) and print the result as JSON: `{"ok": ...}` or the contract's error
    /// case. Arguments are JSON, @FILE, or plain strings; a node may be just its name.
    /// `wasm-ccm call p.wasm --cloud-config c.json instances-v2.instance-metadata node-1`
    Call(call::Call),
    /// Create a provider crate: the SDK, the contract's WIT, the exports chosen, a
    /// policy, a cloud config example and a unit test against a mock cloud. It builds
    /// with `cargo build --target wasm32-wasip2` and passes `wasm-ccm check` as generated.
    New(new::Args),
    /// Convert cloud-provider-openstack's cloud.conf (with its Keystone secret) into the
    /// OpenStack provider's files under OUT: cloud-config/cloud.conf without secrets,
    /// providers/openstack.yaml (the policy's keystone rule), credentials/ (the secret,
    /// for the credentials Secret), and cluster-name.yaml (occm's --cluster-name, from
    /// --cluster-name or --occm-deployment, for deploy/openstack).
    ImportOccmConfig(import_occm_config::Args),
    /// Drive a provider against its (real or emulated) cloud (credential files only
    /// inside --credentials-dir, none without it) and check the contract's rules;
    /// prints a pass/fail table and exits non-zero on a failure. Mutating checks touch
    /// only what they create, and clean it up.
    Conformance(conformance::Conformance),
    /// Push a provider component to an OCI registry as a WebAssembly artifact (one
    /// `application/wasm` layer) after `check` passed on it; prints the reference
    /// pinned by digest for NAME.source.yaml, and the cosign command signing it.
    /// `wasm-ccm push aws.wasm oci://registry.example.com/providers/aws:1.4.0`
    Push(push::Args),
}

/// Runs `command` on `runtime`; its exit code.
pub fn run(command: Command, runtime: &tokio::runtime::Runtime) -> ExitCode {
    match command {
        Command::Check(args) => runtime.block_on(check::main(args)),
        Command::Call(args) => runtime.block_on(call::main(args)),
        Command::New(args) => new::main(args),
        Command::ImportOccmConfig(args) => import_occm_config::main(args),
        Command::Conformance(args) => runtime.block_on(conformance::main(args)),
        Command::Push(args) => runtime.block_on(push::main(args)),
    }
}
