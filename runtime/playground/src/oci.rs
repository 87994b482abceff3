//! `--provider oci://REGISTRY/REPOSITORY@sha256:...`: the playground pulls the
//! component once (digests checked, the cosign signature verified with `--key`), to
//! learn its name and show what was verified, then installs `NAME.source.yaml` (not
//! the component) in the providers directory, with the registry's credentials and CA
//! bundle in the credentials directory: the controllers pull it themselves, as in a
//! cluster.

use std::path::{Path, PathBuf};

use wasm_ccm_host::provider::oci::{FileAccess, OciFetcher, SourceSpec};

use crate::seeding::{Options, PlaygroundError};

/// A component pulled from a registry.
pub struct Pulled {
    /// The component, written to the work directory (for its name and the demonstration).
    pub file: PathBuf,
    /// The source to install as `NAME.source.yaml`.
    pub source: String,
    /// What was pulled and verified, for the banner.
    pub about: Vec<String>,
}

/// The reference `--provider` names, if it is one.
pub fn reference(options: &Options) -> Option<&str> {
    options
        .provider
        .as_deref()
        .and_then(Path::to_str)
        .filter(|p| p.starts_with("oci://"))
}

/// Pulls and verifies `reference` with `--key`, `--registry-credentials` and
/// `--registry-ca`.
pub async fn pull(reference: &str, options: &Options) -> Result<Pulled, PlaygroundError> {
    let failed = |message: String| PlaygroundError::Provider {
        path: reference.into(),
        message,
    };
    let keys = options
        .provider_keys
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .map_err(|err| failed(format!("--key {}: {err}", path.display())))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let spec = SourceSpec::from_parts(
        reference,
        keys.clone(),
        options.registry_credentials.clone(),
        options.registry_ca.clone(),
        Path::new("--provider"),
    )
    .map_err(|err| failed(err.to_string()))?;
    let fetched = OciFetcher::reading(FileAccess::Anywhere)
        .fetch(&spec)
        .await
        .map_err(|err| failed(err.to_string()))?;
    let dir = options.work_dir.join("pulled");
    let name = spec
        .reference
        .repository()
        .rsplit('/')
        .next()
        .unwrap_or("provider");
    let file = dir.join(format!("{name}.wasm"));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&file, &fetched.component))
        .map_err(|source| PlaygroundError::Write {
            path: file.clone(),
            source,
        })?;
    let mut source = format!("reference: oci://{}\n", spec.display_reference());
    if options.registry_credentials.is_some() {
        source.push_str("credentialsFile: registry.json\n");
    }
    if options.registry_ca.is_some() {
        source.push_str("caFile: registry-ca.pem\n");
    }
    if !keys.is_empty() {
        source.push_str("verify:\n  keys:\n");
        for key in &keys {
            source.push_str("    - |\n");
            for line in key.lines() {
                source.push_str(&format!("      {line}\n"));
            }
        }
    }
    let verified = if fetched.signers.is_empty() {
        "signature not checked (no --key)".to_owned()
    } else {
        format!(
            "cosign signature verified, signed by {}",
            fetched.signers.join(", ")
        )
    };
    Ok(Pulled {
        file,
        source,
        about: vec![
            format!(
                "provider:                 oci://{}",
                spec.display_reference()
            ),
            format!(
                "                          layer {} ({} bytes), {verified}",
                fetched.layer_digest,
                fetched.component.len()
            ),
        ],
    })
}

/// Installs `pulled` as `NAME.source.yaml` in `providers`, the registry's files in
/// `credentials` (where the source names them).
pub fn install(
    pulled: &Pulled,
    name: &str,
    providers: &Path,
    credentials: &Path,
    options: &Options,
) -> Result<(), PlaygroundError> {
    let copy = |from: &Path, to: PathBuf| {
        std::fs::copy(from, &to)
            .map(drop)
            .map_err(|source| PlaygroundError::Write { path: to, source })
    };
    if let Some(file) = &options.registry_credentials {
        copy(file, credentials.join("registry.json"))?;
    }
    if let Some(file) = &options.registry_ca {
        copy(file, credentials.join("registry-ca.pem"))?;
    }
    let _ = std::fs::remove_file(providers.join(format!("{name}.wasm")));
    let path = providers.join(format!("{name}.source.yaml"));
    std::fs::write(&path, &pulled.source).map_err(|source| PlaygroundError::Write { path, source })
}
