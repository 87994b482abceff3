//! The one reader of what a provider version consists of — component, policy, cloud
//! config — used by start-up and hot swap alike. It reads consistently through
//! kubelet's `..data` symlink.
//!
//! kubelet publishes a ConfigMap volume as `DIR/..2026_11_22_05_38_35.123/` holding the
//! files, `DIR/..data -> ..2026_...` and `DIR/NAME.wasm -> ..data/NAME.wasm`; an update
//! writes a new timestamped directory, renames a `..data_tmp` symlink over `..data`
//! and removes the old directory. Resolving `..data` once and reading every file
//! from the directory it points to gives one consistent version even while an update
//! is under way. A plain directory (no `..data`) is read as is.
//!
//! In place of `NAME.wasm` the directory may hold `NAME.source.yaml`, naming the
//! component in an OCI registry by digest ([`super::oci`]). Reading it involves no
//! network: the source is parsed and fingerprinted, and the loader pulls the component
//! only when the fingerprint is new, so an unchanged reference never reaches the
//! registry.

use std::path::{Path, PathBuf};

use super::compile_cache::sha256_hex;
use super::oci::{self, OciError, SourceSpec};
use crate::policy::{Policy, PolicyError};

/// What identifies a provider version: a change in any part is a new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// SHA-256 of the component; for a component from a registry, the hex of the
    /// manifest digest its source pins.
    pub component: String,
    /// SHA-256 of `NAME.source.yaml`, or of the signature `NAME.wasm.sig` beside a
    /// component in the directory; `None` without either.
    pub source: Option<String>,
    /// SHA-256 of the policy file, `None` without one.
    pub policy: Option<String>,
    /// SHA-256 of the cloud config (empty without `--cloud-config`).
    pub cloud_config: String,
}

/// One consistent read of the files making up a provider version.
#[derive(Debug)]
pub struct ProviderSource {
    /// The component's bytes; empty for a component from a registry until the loader
    /// pulled it ([`Self::remote`]).
    pub component: Vec<u8>,
    /// Where the component comes from when `NAME.source.yaml` names it.
    pub remote: Option<SourceSpec>,
    /// `NAME.wasm.sig` beside a component in the directory, when there is one (a
    /// cosign signature, base64: [`super::signature`]).
    pub signature: Option<Vec<u8>>,
    /// The policy file's text, `None` without one (no egress, default limits).
    pub policy: Option<String>,
    /// Where the policy came from when not from next to the component (`--policy`).
    pub policy_path: Option<PathBuf>,
    /// The cloud config passed to `initialize` (empty without one).
    pub cloud_config: Vec<u8>,
    /// What identifies this version.
    pub fingerprint: Fingerprint,
}

/// Why a provider's files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The component file is not in the directory (removed from the ConfigMap).
    #[error("{path} is missing")]
    Missing {
        /// The component's path.
        path: PathBuf,
    },
    /// A file exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The policy file is not UTF-8 text.
    #[error("{path} is not UTF-8 text")]
    PolicyNotText {
        /// The policy file.
        path: PathBuf,
    },
    /// Both `NAME.wasm` and `NAME.source.yaml` are present: which one serves would be
    /// a guess.
    #[error(
        "{wasm} and {source} are both present; keep one: the component itself, or its \
         OCI source",
        wasm = .wasm.display(),
        source = .source_file.display()
    )]
    Both {
        /// The component's path.
        wasm: PathBuf,
        /// The source's path.
        source_file: PathBuf,
    },
    /// `NAME.source.yaml` is not valid (or names a tag without a digest).
    #[error(transparent)]
    Remote(#[from] OciError),
    /// The directory's `..data` kept changing while it was read.
    #[error("{dir} changed while it was read, {READ_ATTEMPTS} times in a row")]
    Unstable {
        /// The directory.
        dir: PathBuf,
    },
}

/// How many times a read is retried when `..data` changes under it.
const READ_ATTEMPTS: usize = 3;

/// The directory files of `dir` are read from: the target of `dir/..data` when it
/// exists, else `dir` itself.
pub fn resolve(dir: &Path) -> PathBuf {
    match std::fs::canonicalize(dir.join("..data")) {
        Ok(target) if target.is_dir() => target,
        _ => dir.to_owned(),
    }
}

/// Reads `file` of `dir` from `version` (the resolved `..data` of `dir`), `None` when
/// it does not exist.
fn read_in(
    version: &Path,
    dir: &Path,
    file: &std::ffi::OsStr,
) -> Result<Option<Vec<u8>>, SourceError> {
    let resolved = version.join(file);
    let path = if resolved.exists() {
        resolved
    } else {
        // Files placed next to a mounted ConfigMap (or a plain directory).
        dir.join(file)
    };
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SourceError::Read { path, source }),
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

impl ProviderSource {
    /// The policy of this version, parsed; its file (next to `wasm` unless given with
    /// [`Self::with_policy_file`]) names it in errors and anchors its relative paths.
    pub fn policy(&self, wasm: &Path) -> Result<Policy, PolicyError> {
        let path = self
            .policy_path
            .clone()
            .unwrap_or_else(|| Policy::path_for(wasm));
        match &self.policy {
            Some(text) => Policy::parse(text, &path),
            None => Ok(Policy::default()),
        }
    }

    /// The same files with the policy read from `path` instead of the one next to the
    /// component (the tools' `--policy`).
    pub fn with_policy_file(mut self, path: &Path) -> Result<Self, SourceError> {
        let bytes = std::fs::read(path).map_err(|source| SourceError::Read {
            path: path.to_owned(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|_| SourceError::PolicyNotText {
            path: path.to_owned(),
        })?;
        self.fingerprint.policy = Some(sha256_hex(text.as_bytes()));
        self.policy = Some(text);
        self.policy_path = Some(path.to_owned());
        Ok(self)
    }

    /// The same files with `cloud_config` as the cloud config.
    pub fn with_cloud_config(mut self, cloud_config: Vec<u8>) -> Self {
        self.fingerprint.cloud_config = sha256_hex(&cloud_config);
        self.cloud_config = cloud_config;
        self
    }

    /// Reads the component `wasm` (a path in the providers directory), the policy next
    /// to it and the cloud config.
    ///
    /// Each directory's `..data` is resolved once and every file read from that one
    /// version; the link is checked again afterwards, and the read repeated if kubelet
    /// switched it meanwhile, so the fingerprint is always of bytes from one version.
    pub fn read(wasm: &Path, cloud_config: Option<&Path>) -> Result<Self, SourceError> {
        let (dir, _) = split(wasm);
        let config_dir = cloud_config.map(|path| split(path).0);
        for _ in 0..READ_ATTEMPTS {
            let version = resolve(&dir);
            let config_version = config_dir.as_deref().map(resolve);
            let read =
                Self::read_versions(wasm, &version, cloud_config, config_version.as_deref())?;
            let unchanged =
                resolve(&dir) == version && config_dir.as_deref().map(resolve) == config_version;
            if unchanged {
                return Ok(read);
            }
        }
        Err(SourceError::Unstable { dir })
    }

    fn read_versions(
        wasm: &Path,
        version: &Path,
        cloud_config: Option<&Path>,
        config_version: Option<&Path>,
    ) -> Result<Self, SourceError> {
        let (dir, file) = split(wasm);
        let source_file = oci::source_path(wasm);
        let spec_text = read_in(version, &dir, source_file.file_name().unwrap_or_default())?;
        let (component, remote, source) = match (read_in(version, &dir, file)?, spec_text) {
            (Some(_), Some(_)) => {
                return Err(SourceError::Both {
                    wasm: wasm.to_owned(),
                    source_file,
                });
            }
            (None, None) => {
                return Err(SourceError::Missing {
                    path: wasm.to_owned(),
                });
            }
            (Some(component), None) => (component, None, None),
            (None, Some(bytes)) => {
                let text = String::from_utf8(bytes).map_err(|_| OciError::Spec {
                    path: source_file.clone(),
                    field: "yaml",
                    reason: "not UTF-8 text".into(),
                })?;
                let spec = SourceSpec::parse(&text, &source_file)?;
                (Vec::new(), Some(spec), Some(sha256_hex(text.as_bytes())))
            }
        };
        let policy_path = Policy::path_for(wasm);
        let policy = read_in(version, &dir, policy_path.file_name().unwrap_or_default())?
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|_| SourceError::PolicyNotText {
                    path: policy_path.clone(),
                })
            })
            .transpose()?;
        let signature = match remote {
            Some(_) => None,
            None => {
                let path = super::signature::signature_path(wasm);
                read_in(version, &dir, path.file_name().unwrap_or_default())?
            }
        };
        let source = source.or_else(|| signature.as_deref().map(sha256_hex));
        let cloud_config = match (cloud_config, config_version) {
            (Some(path), Some(config_version)) => {
                let (dir, file) = split(path);
                read_in(config_version, &dir, file)?.ok_or_else(|| SourceError::Read {
                    path: path.to_owned(),
                    source: std::io::ErrorKind::NotFound.into(),
                })?
            }
            _ => Vec::new(),
        };
        let fingerprint = Fingerprint {
            component: match &remote {
                Some(spec) => spec.digest.trim_start_matches("sha256:").to_owned(),
                None => sha256_hex(&component),
            },
            source,
            policy: policy.as_deref().map(|p| sha256_hex(p.as_bytes())),
            cloud_config: sha256_hex(&cloud_config),
        };
        Ok(Self {
            component,
            remote,
            signature,
            policy,
            policy_path: None,
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
            std::env::temp_dir().join(format!("wasm-ccm-source-{name}-{}", std::process::id()));
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
        let first = ProviderSource::read(&wasm, None).unwrap();
        assert_eq!(first.component, b"one");
        symlink("..v2", dir.0.join("..data_tmp")).unwrap();
        std::fs::rename(dir.0.join("..data_tmp"), dir.0.join("..data")).unwrap();
        let second = ProviderSource::read(&wasm, None).unwrap();
        assert_eq!(second.component, b"two");
        assert_ne!(first.fingerprint, second.fingerprint);
    }

    #[test]
    fn plain_directories_and_missing_files() {
        let dir = temp("plain");
        let wasm = dir.0.join("p.wasm");
        assert!(matches!(
            ProviderSource::read(&wasm, None),
            Err(SourceError::Missing { .. })
        ));
        std::fs::write(&wasm, b"one").unwrap();
        let config = dir.0.join("cloud.conf");
        let err = ProviderSource::read(&wasm, Some(&config)).unwrap_err();
        assert!(err.to_string().contains("cloud.conf"), "{err}");
        std::fs::write(&config, b"x").unwrap();
        let a = ProviderSource::read(&wasm, Some(&config)).unwrap();
        assert_eq!(a.policy, None);
        std::fs::write(&config, b"y").unwrap();
        let b = ProviderSource::read(&wasm, Some(&config)).unwrap();
        assert_ne!(
            a.fingerprint, b.fingerprint,
            "a cloud config change is a new version"
        );
    }

    #[test]
    fn a_source_file_stands_for_the_component() {
        let dir = temp("remote");
        let wasm = dir.0.join("p.wasm");
        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        std::fs::write(
            dir.0.join("p.source.yaml"),
            format!("reference: oci://127.0.0.1:5000/p@{digest}\n"),
        )
        .unwrap();
        let read = ProviderSource::read(&wasm, None).unwrap();
        assert!(read.component.is_empty(), "nothing is pulled while reading");
        assert_eq!(read.remote.as_ref().unwrap().digest, digest);
        assert_eq!(read.fingerprint.component, &digest[7..]);
        // Another source text pinning the same digest is another version.
        std::fs::write(
            dir.0.join("p.source.yaml"),
            format!("reference: oci://127.0.0.1:5000/p@{digest}\nmaxSizeMiB: 8\n"),
        )
        .unwrap();
        let again = ProviderSource::read(&wasm, None).unwrap();
        assert_ne!(read.fingerprint, again.fingerprint);
        // Both files: which one serves would be a guess.
        std::fs::write(&wasm, b"component").unwrap();
        let err = ProviderSource::read(&wasm, None).unwrap_err();
        assert!(matches!(err, SourceError::Both { .. }), "{err}");
        assert!(err.to_string().contains("p.source.yaml"), "{err}");
        // A tag alone is refused while reading.
        std::fs::remove_file(&wasm).unwrap();
        std::fs::write(dir.0.join("p.source.yaml"), "reference: oci://r/p:v1\n").unwrap();
        match ProviderSource::read(&wasm, None) {
            Err(SourceError::Remote(err)) => assert_eq!(err.reason(), "tag_only"),
            other => panic!("{other:?}"),
        }
    }
}
