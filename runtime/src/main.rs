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
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    daemon: wasm_ccm::daemon::DaemonArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a provider component before it ships: contract version, exported
    /// interfaces, imports, and size against the 1 MiB ConfigMap limit.
    Check {
        /// The provider component (`.wasm`).
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run everything on this machine with no cluster and no cloud account: the
    /// Kubernetes API server double, the simulated cloud and the reference provider,
    /// with seeded nodes and a LoadBalancer Service. Stays up until Ctrl-C.
    Playground {
        /// Number of nodes (and cloud instances) to seed.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Where to write the kubeconfig for kubectl (printed either way).
        #[arg(long, default_value_os_t = std::env::temp_dir().join("wasm-ccm-playground/kubeconfig"))]
        kubeconfig_out: PathBuf,
        /// Run only the API server double and the simulated cloud.
        #[arg(long)]
        without_ccm: bool,
        /// Address of the API server double.
        #[arg(long, default_value = "127.0.0.1:0")]
        api_listen: String,
        /// Address of the simulated cloud.
        #[arg(long, default_value = "127.0.0.1:0")]
        cloud_listen: String,
        /// The reference provider component.
        #[arg(
            long,
            default_value = "target/wasm32-wasip2/release/reference_provider.wasm"
        )]
        provider: PathBuf,
        /// Directory for the provider directory, credentials and cloud config.
        #[arg(long, default_value_os_t = std::env::temp_dir().join("wasm-ccm-playground"))]
        work_dir: PathBuf,
    },
}

fn init_tracing(format: &str, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The controller manager logs what it does; the tools only warnings.
    init_tracing(
        &cli.log_format,
        if cli.command.is_none() {
            "info"
        } else {
            "warn"
        },
    );
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let Some(command) = cli.command else {
        return runtime.block_on(async { exit_code(wasm_ccm::daemon::run(cli.daemon).await) });
    };
    match command {
        Command::Check { file, json } => runtime.block_on(async {
            exit_code(wasm_ccm::check::check(&file).await.map(|report| {
                if json {
                    println!("{:#}", report.to_json());
                } else {
                    println!("{report}");
                }
            }))
        }),
        Command::Playground {
            nodes,
            kubeconfig_out,
            without_ccm,
            api_listen,
            cloud_listen,
            provider,
            work_dir,
        } => runtime.block_on(async {
            let options = wasm_ccm::playground::Options {
                nodes,
                kubeconfig_out,
                without_ccm,
                api_listen,
                cloud_listen,
                provider,
                work_dir,
            };
            exit_code(wasm_ccm::playground::run(options).await)
        }),
    }
}

fn exit_code<E: std::error::Error>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", error_chain(&err));
            ExitCode::FAILURE
        }
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
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
