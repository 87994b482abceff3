//! `wasm-ccm check FILE.wasm`: validates a provider before it ships.
//!
//! Reports the provider name, the contract version, which optional interfaces it
//! exports, what it imports, and its size against the 1 MiB ConfigMap limit. Any
//! problem is a [`CheckError`] naming the file and the reason.

use std::fmt;
use std::path::Path;

use crate::contract::Interface;
use crate::engine::EngineSettings;
use crate::provider::{Inspection, LoadError, ProviderLoader};

/// The most a ConfigMap can hold (data and binaryData together).
pub const CONFIGMAP_LIMIT_BYTES: usize = 1 << 20;

/// Share of the ConfigMap limit above which `check` warns.
pub const SIZE_WARNING_RATIO: f64 = 0.75;

/// Why a provider failed the check.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The engine could not be created.
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    /// The component is not a valid provider.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The component does not fit in a ConfigMap.
    #[error(
        "{path}: {size} bytes is over the {limit}-byte ConfigMap limit; build with \
         `--release` and `opt-level = \"s\"`, and strip debug info",
        path = .path.display(),
        limit = CONFIGMAP_LIMIT_BYTES
    )]
    TooLarge {
        /// The file.
        path: std::path::PathBuf,
        /// Its size in bytes.
        size: usize,
    },
}

/// A passed check.
#[derive(Debug, Clone)]
pub struct Report {
    /// What inspecting the component found.
    pub inspection: Inspection,
}

impl Report {
    /// True when the file uses more than [`SIZE_WARNING_RATIO`] of the ConfigMap limit.
    pub fn size_warning(&self) -> bool {
        self.inspection.size as f64 > CONFIGMAP_LIMIT_BYTES as f64 * SIZE_WARNING_RATIO
    }

    /// The report as JSON, for scripts.
    pub fn to_json(&self) -> serde_json::Value {
        let i = &self.inspection;
        let mut exports = vec!["identity"];
        exports.extend(i.exports.names());
        serde_json::json!({
            "file": i.path.display().to_string(),
            "provider": i.provider_name,
            "contract": i.package,
            "exports": exports,
            "imports": i.imports,
            "sizeBytes": i.size,
            "configMapLimitBytes": CONFIGMAP_LIMIT_BYTES,
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inspection;
        let mut exports = vec!["identity"];
        exports.extend(i.exports.names());
        let missing: Vec<&str> = Interface::ALL
            .iter()
            .filter(|interface| !i.exports.contains(**interface))
            .map(|interface| interface.wit_name())
            .collect();
        writeln!(f, "file:      {}", i.path.display())?;
        writeln!(f, "provider:  {}", i.provider_name)?;
        writeln!(f, "contract:  {}", i.package)?;
        writeln!(f, "exports:   {}", exports.join(", "))?;
        if !missing.is_empty() {
            writeln!(
                f,
                "not exported (controllers using them are skipped): {}",
                missing.join(", ")
            )?;
        }
        writeln!(f, "imports:")?;
        for import in &i.imports {
            writeln!(f, "  {import}")?;
        }
        writeln!(
            f,
            "size:      {} bytes ({:.1} KiB), {:.0}% of the 1 MiB ConfigMap limit{}",
            i.size,
            i.size as f64 / 1024.0,
            i.size as f64 * 100.0 / CONFIGMAP_LIMIT_BYTES as f64,
            if self.size_warning() {
                " (warning: little room left)"
            } else {
                ""
            }
        )?;
        write!(f, "result:    ok")
    }
}

/// Checks one provider file.
pub async fn check(path: &Path) -> Result<Report, CheckError> {
    let loader = ProviderLoader::new(&EngineSettings {
        max_instances: 4,
        ..EngineSettings::default()
    })?;
    let inspection = loader.inspect(path).await?;
    if inspection.size > CONFIGMAP_LIMIT_BYTES {
        return Err(CheckError::TooLarge {
            path: path.to_owned(),
            size: inspection.size,
        });
    }
    Ok(Report { inspection })
}
