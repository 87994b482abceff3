//! `wasm-ccm check FILE.wasm [--json] [--cloud-config FILE] [--policy FILE]
//! [--credentials-dir DIR]`: the host's check engine ([`wasm_ccm_host::check`]:
//! contract version, exports, imports, size, the policy, and `initialize` with a cloud
//! config, credential files confined as `call` and `conformance` confine them) run on a
//! component, its report printed as text or JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wasm_ccm_host::check::{CheckError, CheckOptions, check};

use super::exit::exit_code;
use super::sandboxed::Sandboxed;

/// `wasm-ccm check`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The component, its policy and credentials directory.
    #[command(flatten)]
    pub provider: Sandboxed,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// A cloud config to run the provider's `initialize` with, under its policy.
    #[arg(long)]
    pub cloud_config: Option<PathBuf>,
}

/// Runs `wasm-ccm check`: the report on stdout, or the error on stderr.
pub async fn main(args: Args) -> ExitCode {
    let Sandboxed {
        file,
        policy,
        credentials_dir,
    } = args.provider;
    let options = CheckOptions {
        cloud_config: args.cloud_config,
        policy,
        credentials_dir,
        for_registry: false,
    };
    exit_code(run(&file, args.json, &options).await)
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
