//! The `wasm-ccm` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kubernetes cloud-controller-manager with WebAssembly providers.
///
/// Without a subcommand it runs the controller manager:
/// `wasm-ccm --cloud-provider NAME --providers-dir DIR [--kubeconfig FILE] ...`
#[derive(Parser)]
#[command(
    name = "wasm-ccm",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Log format: text or json.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Log verbosity as upstream components take it (`-v 4`, `--v=4`): 0 to 3 log
    /// what the controller manager does (info), 4 adds debug records (every provider
    /// call, outbound request and reconcile of wasm-ccm's own crates), 5 and up trace.
    /// `RUST_LOG`, when set, takes precedence (e.g. `RUST_LOG=wasm_ccm_host=debug`).
    #[arg(short = 'v', long = "v", global = true, value_name = "LEVEL")]
    verbosity: Option<u8>,
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    daemon: wasm_ccm::daemon::DaemonArgs,
}

#[derive(Subcommand)]
enum Command {
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
        #[arg(long, default_value = wasm_ccm::scaffold::DEFAULT_EXPORTS)]
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

fn init_tracing(format: &str, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(wasm_ccm::colour_logs())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    wasm_ccm::allocator::limit_arenas();
    let cli = Cli::parse();
    // The controller manager logs what it does; the tools only warnings (unless -v).
    let level = match (cli.verbosity, cli.command.is_none()) {
        (Some(0..=3), _) | (None, true) => "info",
        (None, false) => "warn",
        // Our crates only: the libraries' debug records would bury them.
        (Some(4), _) => "info,wasm_ccm=debug,wasm_ccm_host=debug",
        (Some(_), _) => "info,wasm_ccm=trace,wasm_ccm_host=trace",
    };
    init_tracing(&cli.log_format, level);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let Some(command) = cli.command else {
        let json = cli.log_format == "json";
        return runtime
            .block_on(async { daemon_exit_code(wasm_ccm::daemon::run(cli.daemon).await, json) });
    };
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
            exit_code(
                wasm_ccm_host::check::check(&file, &options)
                    .await
                    .map(|report| {
                        if json {
                            println!("{:#}", report.to_json());
                        } else {
                            println!("{report}");
                        }
                    }),
            )
        }),
        Command::ImportOccmConfig {
            cloud_conf,
            out,
            credentials_dir,
        } => {
            let imported = std::fs::read_to_string(&cloud_conf)
                .map_err(|source| wasm_ccm::occm_import::ImportError::Io {
                    path: cloud_conf.clone(),
                    source,
                })
                .and_then(|text| {
                    wasm_ccm::occm_import::convert(&text, &cloud_conf, &credentials_dir)
                })
                .and_then(|imported| wasm_ccm::occm_import::write(&imported, &out));
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
            let request = wasm_ccm::call::Call {
                file,
                cloud_config,
                policy,
                credentials_dir,
                function,
                args,
            };
            exit_code(
                wasm_ccm::call::call(&request)
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
            let request = wasm_ccm::scaffold::NewProvider {
                name,
                dir,
                exports,
                sdk: match sdk_path {
                    Some(path) => wasm_ccm::scaffold::Sdk::Path(path),
                    None => wasm_ccm::scaffold::Sdk::default_for_this_build(),
                },
            };
            exit_code(
                wasm_ccm::scaffold::generate(&request).map(|generated| println!("{generated}")),
            )
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
            let request = wasm_ccm::conformance::Conformance {
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
            match wasm_ccm::conformance::run(&request).await {
                Ok(report) => {
                    println!("{report}");
                    if report.passed() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(err) => exit_code::<wasm_ccm::call::CallError>(Err(err)),
            }
        }),
    }
}

fn exit_code<E: std::error::Error>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", wasm_ccm::error_chain(&err));
            ExitCode::FAILURE
        }
    }
}

/// The controller manager's end: with `--log-format json` a fatal error is a record
/// like every other line, so a log pipeline keeps it.
fn daemon_exit_code<E: std::error::Error>(result: Result<(), E>, json: bool) -> ExitCode {
    match result {
        Err(err) if json => {
            tracing::error!(error = %wasm_ccm::error_chain(&err), "wasm-ccm stopped");
            ExitCode::FAILURE
        }
        result => exit_code(result),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    /// The arguments of upstream's example manifests (occm's
    /// `manifests/controller-manager/openstack-cloud-controller-manager-{ds,pod}.yaml`,
    /// cloud-provider-aws's `examples/existing-cluster` and its chart's values), with
    /// kubelet's `$(VAR)` substitutions done: each flag is served, or refused naming it.
    #[test]
    fn upstream_manifests_flags_are_served_or_refused_by_name() {
        let served: [&[&str]; 4] = [
            // occm's DaemonSet.
            &[
                "--v=1",
                "--cluster-name=kubernetes",
                "--cloud-config=/etc/config/cloud.conf",
                "--cloud-provider=openstack",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
            ],
            // cloud-provider-aws's superset-role overlay.
            &[
                "--v=2",
                "--cloud-provider=aws",
                "--use-service-account-credentials=false",
                "--configure-cloud-routes=false",
            ],
            // cloud-provider-aws's chart.
            &["--v=2", "--cloud-provider=aws"],
            // Bare booleans, as pflag takes them.
            &[
                "--leader-elect",
                "--allow-untagged-cloud",
                "--configure-cloud-routes",
                "--provider-hot-swap=F",
            ],
        ];
        for args in served {
            let cli = Cli::try_parse_from(std::iter::once("wasm-ccm").chain(args.iter().copied()))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert!(!cli.daemon.use_service_account_credentials);
        }
        let bare =
            Cli::try_parse_from(["wasm-ccm", "--leader-elect", "--allow-untagged-cloud"]).unwrap();
        assert!(bare.daemon.leader_elect && bare.daemon.allow_untagged_cloud);
        let off =
            Cli::try_parse_from(["wasm-ccm", "--leader-elect=false", "--provider-hot-swap=0"])
                .unwrap();
        assert!(!off.daemon.leader_elect && !off.daemon.provider_hot_swap);

        // occm's Pod manifest and cloud-provider-aws's base DaemonSet: a
        // ServiceAccount per controller, refused naming the flag.
        for args in [
            &[
                "--v=1",
                "--cluster-name=kubernetes",
                "--cloud-config=/etc/config/cloud.conf",
                "--cloud-provider=openstack",
                "--use-service-account-credentials=true",
                "--bind-address=127.0.0.1",
            ][..],
            &[
                "--v=2",
                "--cloud-provider=aws",
                "--use-service-account-credentials=true",
                "--configure-cloud-routes=false",
            ],
        ] {
            let Err(e) =
                Cli::try_parse_from(std::iter::once("wasm-ccm").chain(args.iter().copied()))
            else {
                panic!("{args:?} accepted");
            };
            let e = e.to_string();
            assert!(e.contains("--use-service-account-credentials"), "{e}");
        }
        // A value pflag would refuse.
        let e = Cli::try_parse_from(["wasm-ccm", "--leader-elect=yes"])
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("--leader-elect") && e.contains("yes"), "{e}");
    }
}
