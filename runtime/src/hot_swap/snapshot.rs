//! Reading what a provider version consists of — component, policy, cloud config —
//! consistently, through kubelet's `..data` symlink.
//!
//! kubelet publishes a ConfigMap volume as `DIR/..2026_11_22_05_38_35.123/` holding the
//! files, `DIR/..data -> ..2026_...` and `DIR/NAME.wasm -> ..data/NAME.wasm`; an update
//! writes a new timestamped directory, renames a `..data_tmp` symlink over `..data`
//! and removes the old directory. Resolving `..data` once and reading every file
//! from the directory it points to gives one consistent version even while an update
//! is under way. A plain directory (no `..data`) is read as is.

use std::path::{Path, PathBuf};

use crate::policy::Policy;
use crate::provider::cache::sha256_hex;
use crate::provider::{LoadError, Provider, ProviderLoader};

/// What identifies a provider version: a change in any part is a new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// SHA-256 of the component.
    pub component: String,
    /// SHA-256 of the policy file, `None` without one.
    pub policy: Option<String>,
    /// SHA-256 of the cloud config (empty without `--cloud-config`).
    pub cloud_config: String,
}

/// One consistent read of the files making up a provider version.
#[derive(Debug)]
pub struct Snapshot {
    pub component: Vec<u8>,
    pub policy: Option<String>,
    pub cloud_config: Vec<u8>,
    pub fingerprint: Fingerprint,
}

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The component file is not in the directory (removed from the ConfigMap).
    #[error("{path} is missing")]
    Missing { path: PathBuf },
    /// A file exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The policy file is not UTF-8 text.
    #[error("{path} is not UTF-8 text")]
    PolicyNotText { path: PathBuf },
}

/// The directory files of `dir` are read from: the target of `dir/..data` when it
/// exists, else `dir` itself.
pub fn resolve(dir: &Path) -> PathBuf {
    match std::fs::canonicalize(dir.join("..data")) {
        Ok(target) if target.is_dir() => target,
        _ => dir.to_owned(),
    }
}

/// Reads `file` of `dir` (through `..data`), `None` when it does not exist.
fn read_in(dir: &Path, file: &std::ffi::OsStr) -> Result<Option<Vec<u8>>, SnapshotError> {
    let resolved = resolve(dir).join(file);
    let path = if resolved.exists() {
        resolved
    } else {
        // Files placed next to a mounted ConfigMap (or a plain directory).
        dir.join(file)
    };
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SnapshotError::Read { path, source }),
    }
}

/// Splits a file path into its directory and name.
fn split(path: &Path) -> (PathBuf, &std::ffi::OsStr) {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    (dir.to_owned(), path.file_name().unwrap_or_default())
}

impl Snapshot {
    /// Loads this version as the component at `path` (which names it in errors), with
    /// the policy and cloud config read alongside it.
    pub async fn load(self, loader: &ProviderLoader, path: &Path) -> Result<Provider, LoadError> {
        let policy = match &self.policy {
            Some(text) => Policy::parse(text, &Policy::path_for(path))?,
            None => Policy::default(),
        };
        loader
            .load_bytes(path, self.component, policy, self.cloud_config)
            .await
    }

    /// Reads the component `wasm` (a path in the providers directory), the policy next
    /// to it and the cloud config.
    pub fn read(wasm: &Path, cloud_config: Option<&Path>) -> Result<Self, SnapshotError> {
        let (dir, file) = split(wasm);
        let component = read_in(&dir, file)?.ok_or_else(|| SnapshotError::Missing {
            path: wasm.to_owned(),
        })?;
        let policy_path = Policy::path_for(wasm);
        let policy = read_in(&dir, policy_path.file_name().unwrap_or_default())?
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|_| SnapshotError::PolicyNotText {
                    path: policy_path.clone(),
                })
            })
            .transpose()?;
        let cloud_config = match cloud_config {
            Some(path) => {
                let (dir, file) = split(path);
                read_in(&dir, file)?.ok_or_else(|| SnapshotError::Read {
                    path: path.to_owned(),
                    source: std::io::ErrorKind::NotFound.into(),
                })?
            }
            None => Vec::new(),
        };
        let fingerprint = Fingerprint {
            component: sha256_hex(&component),
            policy: policy.as_deref().map(|p| sha256_hex(p.as_bytes())),
            cloud_config: sha256_hex(&cloud_config),
        };
        Ok(Self {
            component,
            policy,
            cloud_config,
            fingerprint,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn temp(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("wasm-ccm-snapshot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    #[cfg(unix)]
    #[test]
    fn reads_the_version_data_points_to() {
        use std::os::unix::fs::symlink;
        let dir = temp("data");
        for (version, bytes) in [("..v1", b"one"), ("..v2", b"two")] {
            std::fs::create_dir(dir.0.join(version)).unwrap();
            std::fs::write(dir.0.join(version).join("p.wasm"), bytes).unwrap();
        }
        symlink("..v1", dir.0.join("..data")).unwrap();
        symlink("..data/p.wasm", dir.0.join("p.wasm")).unwrap();
        let wasm = dir.0.join("p.wasm");
        let first = Snapshot::read(&wasm, None).unwrap();
        assert_eq!(first.component, b"one");
        symlink("..v2", dir.0.join("..data_tmp")).unwrap();
        std::fs::rename(dir.0.join("..data_tmp"), dir.0.join("..data")).unwrap();
        let second = Snapshot::read(&wasm, None).unwrap();
        assert_eq!(second.component, b"two");
        assert_ne!(first.fingerprint, second.fingerprint);
    }

    #[test]
    fn plain_directories_and_missing_files() {
        let dir = temp("plain");
        let wasm = dir.0.join("p.wasm");
        assert!(matches!(
            Snapshot::read(&wasm, None),
            Err(SnapshotError::Missing { .. })
        ));
        std::fs::write(&wasm, b"one").unwrap();
        let config = dir.0.join("cloud.conf");
        let err = Snapshot::read(&wasm, Some(&config)).unwrap_err();
        assert!(err.to_string().contains("cloud.conf"), "{err}");
        std::fs::write(&config, b"x").unwrap();
        let a = Snapshot::read(&wasm, Some(&config)).unwrap();
        assert_eq!(a.policy, None);
        std::fs::write(&config, b"y").unwrap();
        let b = Snapshot::read(&wasm, Some(&config)).unwrap();
        assert_ne!(
            a.fingerprint, b.fingerprint,
            "a cloud config change is a new version"
        );
    }
}
