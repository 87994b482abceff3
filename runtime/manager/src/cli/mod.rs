//! The subcommands beside the controller manager, for provider authors and operators:
//! `check` (validate a component and its policy), `call` (one export under the real
//! sandbox), `conformance` (the contract's rules against a cloud), `new` (a provider
//! crate) and `import-occm-config` (occm's cloud.conf to the OpenStack provider's
//! files). Each has its module; [`run`] dispatches, `main.rs` only parses the command
//! line.

pub mod call;
pub mod check;
pub mod conformance;
pub mod import_occm_config;
pub mod new;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Validate a provider component before it ships: contract version, exported
    /// interfaces, imports, size against the 1 MiB ConfigMap limit, and the policy next
    /// to it (FILE.yaml, or --policy); with --cloud-config, load it and run `initialize`.
    Check {
        /// The provider component (`.wasm`).
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// A cloud config to run the provider's `initialize` with, under its policy.
        #[arg(long)]
        cloud_config: Option<PathBuf>,
        /// The provider policy, instead of FILE.yaml next to the component.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Run one export of a provider under the real sandbox (its policy is FILE.yaml
    /// next to it, or --policy) and print the result as JSON: `{"ok": ...}` or the contract's error
    /// case. Arguments are JSON, @FILE, or plain strings; a node may be just its name.
    /// `wasm-ccm call p.wasm --cloud-config c.json instances-v2.instance-metadata node-1`
    Call {
        /// The provider component (`.wasm`).
        file: PathBuf,
        /// The cloud config for `initialize`.
        #[arg(long)]
        cloud_config: Option<PathBuf>,
        /// The provider policy, instead of FILE.yaml next to the component.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The directory credential files must lie in, as the controller manager's
        /// --credentials-dir (default: the policy's directory).
        #[arg(long)]
        credentials_dir: Option<PathBuf>,
        /// INTERFACE.FUNCTION, e.g. `instances-v2.instance-metadata`.
        function: String,
        /// The function's arguments, in order.
        args: Vec<String>,
    },
    /// Create a provider crate: the SDK, the contract's WIT, the exports chosen, a
    /// policy, a cloud config example and a unit test against a mock cloud. It builds
    /// with `cargo build --target wasm32-wasip2` and passes `wasm-ccm check` as generated.
    New {
        /// The provider name (`--cloud-provider NAME`, provider IDs `NAME://...`).
        name: String,
        /// The directory to create (default: ./NAME-provider).
        dir: Option<PathBuf>,
        /// Interfaces to export besides identity, comma-separated: instances-v2,
        /// load-balancer, routes, clusters.
        #[arg(long, default_value = new::DEFAULT_EXPORTS)]
        exports: String,
        /// Depend on the SDK at this path (a checkout's guests/sdk) instead of the
        /// default: this build's checkout when present, else crates.io.
        #[arg(long)]
        sdk_path: Option<PathBuf>,
    },
    /// Convert cloud-provider-openstack's cloud.conf (with its Keystone secret) into the
    /// OpenStack provider's files under OUT: cloud-config/cloud.conf without secrets,
    /// providers/openstack.yaml (the policy's keystone rule), and credentials/
    /// (the secret, for the credentials Secret).
    ImportOccmConfig {
        /// occm's cloud.conf.
        cloud_conf: PathBuf,
        /// The directory to write into.
        #[arg(long)]
        out: PathBuf,
        /// Where the credentials Secret is mounted (the policy names the files there).
        #[arg(long, default_value = "/etc/wasm-ccm/credentials")]
        credentials_dir: String,
    },
    /// Drive a provider against its (real or emulated) cloud and check the contract's
    /// rules; prints a pass/fail table and exits non-zero on a failure. Mutating checks
    /// touch only what they create, and clean it up.
    Conformance {
        /// The provider component (`.wasm`); its policy is FILE.yaml next to it.
        file: PathBuf,
        /// The cloud config for `initialize`.
        #[arg(long)]
        cloud_config: PathBuf,
        /// The provider policy, instead of FILE.yaml next to the component.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The directory credential files must lie in, as the controller manager's
        /// --credentials-dir (default: the policy's directory).
        #[arg(long)]
        credentials_dir: Option<PathBuf>,

        /// A node whose instance exists in the cloud (repeatable).
        #[arg(long = "node")]
        nodes: Vec<String>,
        /// A Kubernetes Service of type LoadBalancer (JSON) to create, update and
        /// delete a load balancer for.
        #[arg(long)]
        service: Option<PathBuf>,
        /// A Kubernetes Service (JSON) that another controller serves: the provider
        /// must answer implemented-elsewhere and create nothing.
        #[arg(long)]
        elsewhere_service: Option<PathBuf>,
        /// A destination CIDR to create and delete a route to the first node for.
        #[arg(long)]
        route_cidr: Option<String>,
        /// The cluster name given to load balancer and route calls.
        #[arg(long, default_value = "kubernetes")]
        cluster_name: String,
    },
}

/// Runs `command` on `runtime`; its exit code.
pub fn run(command: Command, runtime: &tokio::runtime::Runtime) -> ExitCode {
    match command {
        Command::Check {
            file,
            json,
            cloud_config,
            policy,
        } => runtime.block_on(async {
            let options = wasm_ccm_host::check::CheckOptions {
                cloud_config,
                policy,
            };
            exit_code(check::run(&file, json, &options).await)
        }),
        Command::ImportOccmConfig {
            cloud_conf,
            out,
            credentials_dir,
        } => {
            let imported = std::fs::read_to_string(&cloud_conf)
                .map_err(|source| import_occm_config::ImportError::Io {
                    path: cloud_conf.clone(),
                    source,
                })
                .and_then(|text| import_occm_config::convert(&text, &cloud_conf, &credentials_dir))
                .and_then(|imported| import_occm_config::write(&imported, &out));
            exit_code(imported.map(|written| {
                for path in written {
                    println!("wrote {}", path.display());
                }
            }))
        }
        Command::Call {
            file,
            cloud_config,
            policy,
            credentials_dir,
            function,
            args,
        } => runtime.block_on(async {
            let request = call::Call {
                file,
                cloud_config,
                policy,
                credentials_dir,
                function,
                args,
            };
            exit_code(
                call::call(&request)
                    .await
                    .map(|result| println!("{result:#}")),
            )
        }),
        Command::New {
            name,
            dir,
            exports,
            sdk_path,
        } => {
            let request = new::NewProvider {
                name,
                dir,
                exports,
                sdk: match sdk_path {
                    Some(path) => new::Sdk::Path(path),
                    None => new::Sdk::default_for_this_build(),
                },
            };
            exit_code(new::generate(&request).map(|generated| println!("{generated}")))
        }
        Command::Conformance {
            file,
            cloud_config,
            policy,
            credentials_dir,
            nodes,
            service,
            elsewhere_service,
            route_cidr,
            cluster_name,
        } => runtime.block_on(async {
            let request = conformance::Conformance {
                file,
                policy,
                credentials_dir,
                cloud_config,
                nodes,
                service,
                elsewhere_service,
                route_cidr,
                cluster_name,
            };
            match conformance::run(&request).await {
                Ok(report) => {
                    println!("{report}");
                    if report.passed() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(err) => exit_code::<call::CallError>(Err(err)),
            }
        }),
    }
}

/// Success, or the error and its causes on stderr and a failure.
pub fn exit_code<E: std::error::Error>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", crate::error_chain(&err));
            ExitCode::FAILURE
        }
    }
}
