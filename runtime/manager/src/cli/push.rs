//! `wasm-ccm push FILE.wasm oci://REGISTRY/REPOSITORY:TAG [--registry-credentials FILE]
//! [--registry-ca FILE]`: a provider component pushed as a WebAssembly OCI artifact
//! (one `application/wasm` layer), after `wasm-ccm check` passed on it. It prints the
//! reference pinned by digest, for `NAME.source.yaml`, and the cosign command that
//! signs it.

use std::path::PathBuf;
use std::process::ExitCode;

use wasm_ccm_host::check::{CheckError, CheckOptions, check};
use wasm_ccm_host::provider::oci::{self, OciError};

use super::exit::exit_code;

/// `wasm-ccm push`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The provider component (`.wasm`), checked as `wasm-ccm check` checks it first.
    pub file: PathBuf,
    /// Where to push it: oci://REGISTRY/REPOSITORY:TAG.
    pub reference: String,
    /// A Docker config.json holding the registry's credentials (as `docker login`
    /// writes it); without it the push is anonymous.
    #[arg(long)]
    pub registry_credentials: Option<PathBuf>,
    /// A CA bundle (PEM) the registry's certificate is checked against, besides the
    /// system's roots.
    #[arg(long)]
    pub registry_ca: Option<PathBuf>,
}

/// Why the push failed.
#[derive(Debug, thiserror::Error)]
enum PushError {
    /// The component did not pass the check.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The component could not be read.
    #[error("cannot read {path}: {source}", path = .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The registry refused or failed.
    #[error(transparent)]
    Oci(#[from] OciError),
}

/// Runs `wasm-ccm push`: the pinned reference on stdout, or the error on stderr.
pub async fn main(args: Args) -> ExitCode {
    exit_code(run(&args).await)
}

async fn run(args: &Args) -> Result<(), PushError> {
    let options = CheckOptions {
        for_registry: true,
        ..CheckOptions::default()
    };
    let report = check(&args.file, &options).await?;
    let component = std::fs::read(&args.file).map_err(|source| PushError::Read {
        path: args.file.clone(),
        source,
    })?;
    let pinned = oci::push(
        &args.reference,
        &component,
        args.registry_credentials.as_deref(),
        args.registry_ca.as_deref(),
    )
    .await?;
    let bare = pinned.trim_start_matches("oci://");
    println!(
        "pushed {} (provider {:?}, {} bytes) to {}",
        args.file.display(),
        report.inspection.provider_name,
        component.len(),
        args.reference
    );
    println!("reference: {pinned}");
    println!("sign it:   cosign sign --key cosign.key --tlog-upload=false {bare}");
    println!("serve it:  NAME.source.yaml in the providers ConfigMap, with `reference: {pinned}`");
    Ok(())
}
