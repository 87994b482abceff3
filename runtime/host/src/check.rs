//! `wasm-ccm check FILE.wasm [--cloud-config FILE] [--credentials-dir DIR]`: validates
//! a provider before it ships.
//!
//! Reports the provider name, the contract version, which optional interfaces it
//! exports, what it imports, its size against the 1 MiB ConfigMap limit, and the
//! policy next to it (`FILE.yaml`, parsed as the controller manager would). With a
//! cloud config, it also loads the provider under that policy and runs `initialize`,
//! confined as every tool is ([`ToolLoader`]): credential files only inside
//! `--credentials-dir`, none without it (the report says which, and what was left
//! out). Any problem is a [`CheckError`] naming the file and the reason.

use std::fmt;
use std::path::Path;

use crate::engine::EngineSettings;
use crate::policy::{Policy, PolicyError};
use crate::provider::Interface;
use crate::provider::{ConfineError, CredentialFiles, Inspection, LoadError, ToolLoader};

/// The most a ConfigMap can hold (data and binaryData together).
pub const CONFIGMAP_LIMIT_BYTES: usize = 1 << 20;

/// Share of the ConfigMap limit above which `check` warns.
pub const SIZE_WARNING_RATIO: f64 = 0.75;

/// Why a provider failed the check.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The engine could not be created, or `--credentials-dir` cannot be used.
    #[error(transparent)]
    Confine(#[from] ConfineError),
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
    /// The policy next to the component is invalid (the error names file and field).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The policy or the cloud config could not be read.
    #[error("cannot read {path}: {source}", path = .path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What to check besides the component.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// A cloud config to run `initialize` with (under the policy).
    pub cloud_config: Option<std::path::PathBuf>,
    /// The policy, when not the one next to the component (`FILE.yaml`); it must exist.
    pub policy: Option<std::path::PathBuf>,
    /// The directory the policy's credential files must lie in (`--credentials-dir`);
    /// without it none is read.
    pub credentials_dir: Option<std::path::PathBuf>,
    /// The component ships through an OCI registry (`wasm-ccm push`), not in a
    /// ConfigMap: the ConfigMap's size limit does not apply.
    pub for_registry: bool,
}

/// The policy checked: the one given, or the one next to the component.
#[derive(Debug, Clone)]
pub struct PolicySummary {
    /// Its file.
    pub path: std::path::PathBuf,
    /// Allowed outbound host patterns.
    pub allowed_hosts: usize,
    /// Credential rules.
    pub credentials: usize,
}

/// A passed check.
#[derive(Debug, Clone)]
pub struct Report {
    /// What inspecting the component found.
    pub inspection: Inspection,
    /// The policy next to the component; `None` when there is none (no outbound
    /// requests allowed).
    pub policy: Option<PolicySummary>,
    /// The cloud config `initialize` succeeded with, when one was given.
    pub initialized_with: Option<std::path::PathBuf>,
    /// Which files the policy may have read.
    pub credential_files: CredentialFiles,
    /// What of the policy that confinement leaves out, as `FIELD (FILE)`.
    pub left_out: Vec<String>,
}

impl Report {
    /// True when the file uses more than [`SIZE_WARNING_RATIO`] of the ConfigMap limit.
    pub fn size_warning(&self) -> bool {
        self.inspection.size as f64 > CONFIGMAP_LIMIT_BYTES as f64 * SIZE_WARNING_RATIO
    }

    /// Warnings that do not fail the check.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let version = self.inspection.version;
        if version.is_deprecated() {
            warnings.push(format!(
                "built against {version}, an older contract the host adapts: rebuild with the \
                 current SDK ({}) for batched instance calls, the shared cache, events and \
                 deadlines",
                crate::contract::Version::CURRENT
            ));
        }
        if self.size_warning() {
            warnings.push(format!(
                "{} bytes is over {:.0}% of the 1 MiB ConfigMap limit",
                self.inspection.size,
                SIZE_WARNING_RATIO * 100.0
            ));
        }
        warnings
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
            "contractVersion": i.version.as_str(),
            "warnings": self.warnings(),
            "exports": exports,
            "imports": i.imports,
            "sizeBytes": i.size,
            "configMapLimitBytes": CONFIGMAP_LIMIT_BYTES,
            "policy": self.policy.as_ref().map(|p| serde_json::json!({
                "file": p.path.display().to_string(),
                "allowedOutboundHosts": p.allowed_hosts,
                "credentials": p.credentials,
            })),
            "initialized": self.initialized_with.as_ref().map(|p| p.display().to_string()),
            "credentialFiles": {
                "dir": match &self.credential_files {
                    CredentialFiles::None => None,
                    CredentialFiles::Inside(dir) => Some(dir.display().to_string()),
                },
                "leftOut": self.left_out,
            },
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
        if i.version.is_deprecated() {
            writeln!(
                f,
                "warning:   an older contract, adapted by the host: rebuild with the current \
                 SDK ({}) for batched instance calls, the shared cache, events and deadlines",
                crate::contract::Version::CURRENT
            )?;
        }
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
        match &self.policy {
            Some(p) => writeln!(
                f,
                "policy:    {} ({} allowed outbound host(s), {} credential rule(s))",
                p.path.display(),
                p.allowed_hosts,
                p.credentials
            )?,
            None => writeln!(
                f,
                "policy:    none next to the component (no outbound requests allowed)"
            )?,
        }
        let left_out = if self.left_out.is_empty() {
            String::new()
        } else {
            format!("; left out: {}", self.left_out.join(", "))
        };
        writeln!(f, "credentials: {}{left_out}", self.credential_files)?;
        if let Some(config) = &self.initialized_with {
            writeln!(f, "initialize: ok with {}", config.display())?;
        }
        write!(f, "result:    ok")
    }
}

/// Checks one provider file, its policy, and (with a cloud config) `initialize`.
pub async fn check(path: &Path, options: &CheckOptions) -> Result<Report, CheckError> {
    let loader = ToolLoader::new(
        &EngineSettings {
            max_instances: 4,
            ..EngineSettings::default()
        },
        path,
        options.policy.as_deref(),
        options.credentials_dir.as_deref(),
    )?;
    let inspection = loader.inspect().await?;
    if inspection.size > CONFIGMAP_LIMIT_BYTES && !options.for_registry {
        return Err(CheckError::TooLarge {
            path: path.to_owned(),
            size: inspection.size,
        });
    }
    let policy_path = options
        .policy
        .clone()
        .unwrap_or_else(|| Policy::path_for(path));
    let (policy, left_out) = match std::fs::read_to_string(&policy_path) {
        Ok(text) => {
            let policy = Policy::parse(&text, &policy_path)?;
            let left_out = loader.credential_files().left_out(&policy);
            let summary = PolicySummary {
                path: policy_path,
                allowed_hosts: policy.allowed_outbound_hosts.len(),
                credentials: policy.credentials.len(),
            };
            (Some(summary), left_out)
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && options.policy.is_none() => {
            (None, Vec::new())
        }
        Err(source) => {
            return Err(CheckError::Read {
                path: policy_path,
                source,
            });
        }
    };
    let initialized_with = match &options.cloud_config {
        Some(config) => {
            let bytes = std::fs::read(config).map_err(|source| CheckError::Read {
                path: config.clone(),
                source,
            })?;
            loader.load(bytes).await?;
            Some(config.clone())
        }
        None => None,
    };
    Ok(Report {
        inspection,
        policy,
        initialized_with,
        credential_files: loader.credential_files().clone(),
        left_out,
    })
}
