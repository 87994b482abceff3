//! `wasm-ccm check FILE.wasm [--json] [--cloud-config FILE] [--policy FILE]
//! [--credentials-dir DIR]`: the host's check engine ([`wasm_ccm_host::check`]:
//! contract version, exports, imports, size, the policy, and `initialize` with a cloud
//! config, credential files confined as `call` and `conformance` confine them) run on a
//! component, its report printed as text or JSON.
//!
//! `wasm-ccm check oci://REGISTRY/REPOSITORY@sha256:... [--key cosign.pub ...]
//! [--registry-credentials FILE] [--registry-ca FILE]` pulls the component as the
//! controller manager does (digests checked, the cosign signature verified with the
//! keys given), prints the digest, the signers and the verification, then checks it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wasm_ccm_host::check::{CheckError, CheckOptions, check};
use wasm_ccm_host::provider::oci::{FileAccess, OciError, OciFetcher, SourceSpec};

use super::exit::exit_code;
use super::sandboxed::Sandboxed;

/// `wasm-ccm check`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The component, its policy and credentials directory. FILE may be an
    /// `oci://REGISTRY/REPOSITORY@sha256:...` reference.
    #[command(flatten)]
    pub provider: Sandboxed,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// A cloud config to run the provider's `initialize` with, under its policy.
    #[arg(long)]
    pub cloud_config: Option<PathBuf>,
    /// With an oci:// reference: a cosign public key (PEM) the registry's signature
    /// must verify with; repeat for several (any one suffices). Without it the
    /// signature is not checked, and the report says so.
    #[arg(long = "key", value_name = "FILE")]
    pub keys: Vec<PathBuf>,
    /// With an oci:// reference: a Docker config.json holding the registry's
    /// credentials.
    #[arg(long)]
    pub registry_credentials: Option<PathBuf>,
    /// With an oci:// reference: a CA bundle (PEM) the registry's certificate is
    /// checked against, besides the system's roots.
    #[arg(long)]
    pub registry_ca: Option<PathBuf>,
}

/// Why `check` of a reference failed before the component was checked.
#[derive(Debug, thiserror::Error)]
enum CheckOciError {
    /// A key file cannot be read.
    #[error("--key {path}: {source}", path = .path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The pull or the verification failed.
    #[error(transparent)]
    Oci(#[from] OciError),
    /// The pulled component cannot be written for the check.
    #[error("cannot write the pulled component to {path}: {source}", path = .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The component failed the check.
    #[error(transparent)]
    Check(#[from] CheckError),
}

/// Runs `wasm-ccm check`: the report on stdout, or the error on stderr.
pub async fn main(args: Args) -> ExitCode {
    let Sandboxed {
        file,
        policy,
        credentials_dir,
    } = args.provider.clone();
    let options = CheckOptions {
        cloud_config: args.cloud_config.clone(),
        policy,
        credentials_dir,
        for_registry: false,
    };
    match file.to_str().filter(|f| f.starts_with("oci://")) {
        Some(reference) => exit_code(check_reference(reference, &args, options).await),
        None => exit_code(run(&file, args.json, &options).await),
    }
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

/// Pulls and verifies `reference` as the controller manager does, prints what was
/// verified, then checks the component (no ConfigMap size limit: it ships through the
/// registry).
async fn check_reference(
    reference: &str,
    args: &Args,
    mut options: CheckOptions,
) -> Result<(), CheckOciError> {
    let keys = args
        .keys
        .iter()
        .map(|path| {
            std::fs::read_to_string(path).map_err(|source| CheckOciError::Key {
                path: path.clone(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let spec = SourceSpec::from_parts(
        reference,
        keys,
        args.registry_credentials.clone(),
        args.registry_ca.clone(),
        Path::new("the command line"),
    )?;
    let fetched = OciFetcher::reading(FileAccess::Anywhere)
        .fetch(&spec)
        .await?;
    let verification = if spec.keys.is_empty() {
        "not checked (no --key given)".to_owned()
    } else {
        let by: Vec<String> = spec
            .keys
            .iter()
            .zip(&args.keys)
            .filter(|(key, _)| fetched.signers.iter().any(|s| s == key.short_id()))
            .map(|(key, file)| format!("{} ({})", key.short_id(), file.display()))
            .collect();
        format!("cosign signature verified, signed by {}", by.join(", "))
    };
    if args.json {
        println!(
            "{:#}",
            serde_json::json!({
                "reference": format!("oci://{}", spec.display_reference()),
                "digest": spec.digest,
                "layerDigest": fetched.layer_digest,
                "signers": fetched.signers,
                "verification": verification,
            })
        );
    } else {
        println!("reference:    oci://{}", spec.display_reference());
        println!("digest:       {}", spec.digest);
        println!(
            "layer:        {} ({} bytes)",
            fetched.layer_digest,
            fetched.component.len()
        );
        println!("verification: {verification}");
    }
    // A directory of its own (created here, 0700; never one that was there before).
    let dir = std::env::temp_dir().join(format!(
        "wasm-ccm-check-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    let created = {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&dir)
    };
    let written = created.and_then(|()| {
        let name = spec
            .reference
            .repository()
            .rsplit('/')
            .next()
            .unwrap_or("provider");
        let file = dir.join(format!("{name}.wasm"));
        std::fs::write(&file, &fetched.component).map(|()| file)
    });
    let file = written.map_err(|source| CheckOciError::Write {
        path: dir.clone(),
        source,
    })?;
    options.for_registry = true;
    let result = run(&file, args.json, &options).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(result?)
}
