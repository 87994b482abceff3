//! `wasm-ccm check FILE.wasm [--json] [--cloud-config FILE] [--policy FILE]`: the host's
//! check engine ([`wasm_ccm_host::check`]: contract version, exports, imports, size,
//! the policy, and `initialize` with a cloud config) run on a component, its report
//! printed as text or JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wasm_ccm_host::check::{CheckError, CheckOptions, check};

use super::exit::exit_code;

/// `wasm-ccm check`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The provider component (`.wasm`).
    pub file: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// A cloud config to run the provider's `initialize` with, under its policy.
    #[arg(long)]
    pub cloud_config: Option<PathBuf>,
    /// The provider policy, instead of FILE.yaml next to the component.
    #[arg(long)]
    pub policy: Option<PathBuf>,
}

/// Runs `wasm-ccm check`: the report on stdout, or the error on stderr.
pub async fn main(args: Args) -> ExitCode {
    let options = CheckOptions {
        cloud_config: args.cloud_config,
        policy: args.policy,
    };
    exit_code(run(&args.file, args.json, &options).await)
}

/// Checks `file` and prints the report (`json`: as JSON).
pub async fn run(file: &Path, json: bool, options: &CheckOptions) -> Result<(), CheckError> {
    let report = check(file, options).await?;
    if json {
        println!("{:#}", report.to_json());
    } else {
        println!("{report}");
    }
    Ok(())
}
