//! Reading mounted Secret files: with a credentials directory (`--credentials-dir`,
//! the Secret's mount), every file is read through its canonical path, which must lie
//! inside that directory. A policy ships next to a vendor's component, so it must not
//! be able to name the service-account token or any other file of the host, directly
//! or through a symlink.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use http::HeaderValue;

/// Why a credential could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The Secret file cannot be read.
    #[error("cannot read credential file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file's content cannot be used as a header value.
    #[error("credential file {path} does not hold a valid header value")]
    Invalid {
        /// The file.
        path: PathBuf,
    },
    /// The file (or what its symlinks lead to) is outside the credentials directory.
    #[error(
        "credential file {path} is outside the credentials directory {dir} (--credentials-dir); \
         mount the Secret there and name files inside it"
    )]
    OutsideDir {
        /// The file named by the policy.
        path: PathBuf,
        /// The credentials directory.
        dir: PathBuf,
    },
}

/// Reads Secret files, only inside the credentials directory when there is one.
#[derive(Debug)]
pub struct Confinement {
    /// The canonical credentials directory files must lie in, if confined.
    pub(super) dir: Option<PathBuf>,
}

/// What identifies a version of a file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl FileStamp {
    /// The stamps of `files`, in order.
    pub(super) fn of_all<'a>(
        files: impl IntoIterator<Item = &'a Path>,
    ) -> Result<Vec<Self>, CredentialError> {
        files.into_iter().map(Self::of).collect()
    }

    pub(super) fn of(path: &Path) -> Result<Self, CredentialError> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|source| CredentialError::Read {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode: meta.ino(),
        })
    }
}

/// The content of the Secret file `file`, read only when it lies inside `dir` (the
/// credentials directory) when there is one: for files outside credential rules, such
/// as the TLS client key.
pub fn read_secret_file(dir: Option<&Path>, file: &Path) -> Result<String, CredentialError> {
    read_trimmed(&confined_path(dir, file)?)
}

/// The path to read `file` through: its canonical path, checked to lie inside `dir`
/// (the credentials directory) when there is one: for files outside credential rules
/// that are secret or decide whom the host trusts, such as the policy's CA bundle.
pub fn confined_path(dir: Option<&Path>, file: &Path) -> Result<PathBuf, CredentialError> {
    let dir = dir
        .map(|dir| {
            std::fs::canonicalize(dir).map_err(|source| CredentialError::Read {
                path: dir.to_owned(),
                source,
            })
        })
        .transpose()?;
    Confinement { dir }.confined(file)
}

impl Confinement {
    /// The path to read `file` through: its canonical path, checked to lie inside the
    /// credentials directory when there is one.
    pub(super) fn confined(&self, file: &Path) -> Result<PathBuf, CredentialError> {
        let Some(dir) = &self.dir else {
            return Ok(file.to_owned());
        };
        let real = std::fs::canonicalize(file).map_err(|source| CredentialError::Read {
            path: file.to_owned(),
            source,
        })?;
        if !real.starts_with(dir) {
            return Err(CredentialError::OutsideDir {
                path: file.to_owned(),
                dir: dir.clone(),
            });
        }
        Ok(real)
    }

    /// The trimmed content of `file`, read through its confined path.
    pub fn read_trimmed(&self, file: &Path) -> Result<String, CredentialError> {
        read_trimmed(&self.confined(file)?)
    }
}

fn read_trimmed(path: &Path) -> Result<String, CredentialError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| CredentialError::Read {
            path: path.to_owned(),
            source,
        })
}

pub(super) fn sensitive(value: String, path: &Path) -> Result<HeaderValue, CredentialError> {
    let mut value = HeaderValue::try_from(value).map_err(|_| CredentialError::Invalid {
        path: path.to_owned(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}
