//! The `wasm-ccm` binary.

use std::process::ExitCode;

use clap::Parser;

/// Kubernetes cloud-controller-manager with WebAssembly providers.
///
/// Without a subcommand it runs the controller manager:
/// `wasm-ccm --cloud-provider NAME --providers-dir DIR [--kubeconfig FILE] ...`
/// A flag given twice takes its last value, as upstream's (pflag) do: a chart's or an
/// overlay's extra arguments may override one set before them.
#[derive(Parser)]
#[command(
    name = "wasm-ccm",
    version,
    about,
    args_conflicts_with_subcommands = true,
    args_override_self = true
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
    command: Option<wasm_ccm::cli::Command>,
    #[command(flatten)]
    daemon: wasm_ccm::daemon::DaemonArgs,
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
    // TLS on *ring* for every client and server, before any is built.
    wasm_ccm_host::tls::install_crypto_provider();
    let mut cli = Cli::parse();
    // The controller manager logs what it does; the tools only warnings (unless -v).
    let level = match (cli.verbosity, cli.command.is_none()) {
        (Some(0..=3), _) | (None, true) => "info",
        (None, false) => "warn",
        // Our crates only: the libraries' debug records would bury them.
        (Some(4), _) => "info,wasm_ccm=debug,wasm_ccm_host=debug",
        (Some(_), _) => "info,wasm_ccm=trace,wasm_ccm_host=trace",
    };
    init_tracing(&cli.log_format, level);
    if cli.command.is_none() {
        // SAFETY: no thread has started (the tracing subscriber starts none; the async
        // runtime starts below), so nothing reads the environment it changes.
        cli.daemon.serving.inherited =
            unsafe { wasm_ccm::serving::inherited::InheritedSocket::from_env() };
    }
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
    wasm_ccm::cli::run(command, &runtime)
}

/// The controller manager's end: with `--log-format json` a fatal error is a record
/// like every other line, so a log pipeline keeps it.
fn daemon_exit_code<E: std::error::Error>(result: Result<(), E>, json: bool) -> ExitCode {
    match result {
        Err(err) if json => {
            tracing::error!(error = %wasm_ccm::error_chain(&err), "wasm-ccm stopped");
            ExitCode::FAILURE
        }
        result => wasm_ccm::cli::exit_code(result),
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
