//! Who may have signed a provider: cosign public keys, as `NAME.source.yaml`'s
//! `verify.keys`, a policy's `requireSignature.keys` and the files of
//! `--provider-trusted-keys` list them.
//!
//! A key is PEM (`cosign generate-key-pair` writes `cosign.pub`): ECDSA P-256/P-384,
//! RSA or Ed25519. Its id, the SHA-256 of its PEM body, tells keys apart (the first 16
//! hex digits name it in messages).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A cosign public key a provider's signature may be made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// The key, PEM.
    pub pem: String,
    /// The SHA-256 of its PEM body (64 hex digits): two keys are the same key when
    /// their ids are equal.
    pub id: String,
}

impl TrustedKey {
    /// Parses a PEM public key cosign signs with.
    pub fn parse(pem: &str) -> Result<Self, String> {
        sigstore::crypto::CosignVerificationKey::try_from_pem(pem.as_bytes())
            .map_err(|err| format!("not a public key cosign verifies with: {err}"))?;
        let body: String = pem
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .flat_map(|line| line.trim().chars())
            .collect();
        Ok(Self {
            pem: pem.trim().to_owned() + "\n",
            id: hex::encode(Sha256::digest(body.as_bytes())),
        })
    }

    /// The first 16 hex digits of [`Self::id`], for messages.
    pub fn short_id(&self) -> &str {
        &self.id[..16]
    }

    /// Whether this key made `signature` (base64, as `cosign sign-blob
    /// --output-signature` writes it) of `blob`.
    pub fn signed(&self, blob: &[u8], signature: &[u8]) -> bool {
        let Ok(key) = sigstore::crypto::CosignVerificationKey::try_from_pem(self.pem.as_bytes())
        else {
            return false;
        };
        let Ok(text) = std::str::from_utf8(signature) else {
            return false;
        };
        key.verify_signature(
            sigstore::crypto::Signature::Base64Encoded(text.trim().as_bytes()),
            blob,
        )
        .is_ok()
    }
}

/// `keys`' short ids, comma-separated.
pub fn key_ids(keys: &[TrustedKey]) -> String {
    keys.iter()
        .map(TrustedKey::short_id)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why `--provider-trusted-keys` cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TrustedKeysError {
    /// The directory or a file in it cannot be read.
    #[error("--provider-trusted-keys {path}: {source}", path = .path.display())]
    Read {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a public key cosign verifies with.
    #[error("--provider-trusted-keys {path}: {reason}", path = .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The directory holds no key: nothing could ever be verified.
    #[error("--provider-trusted-keys {path}: no public key (*.pub or *.pem) in it", path = .path.display())]
    Empty {
        /// The directory.
        path: PathBuf,
    },
}

/// The keys in `dir`: every `*.pub` and `*.pem` file (a mounted ConfigMap or Secret
/// of public keys; kubelet's `..` entries are skipped).
pub fn read_trusted_keys(dir: &Path) -> Result<Vec<TrustedKey>, TrustedKeysError> {
    let unreadable = |path: &Path| {
        let path = path.to_owned();
        move |source| TrustedKeysError::Read { path, source }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(unreadable(dir))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with("..") && (name.ends_with(".pub") || name.ends_with(".pem"))
        })
        .collect();
    files.sort();
    let mut keys = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(unreadable(&file))?;
        let key = TrustedKey::parse(&text).map_err(|reason| TrustedKeysError::Invalid {
            path: file.clone(),
            reason,
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(TrustedKeysError::Empty {
            path: dir.to_owned(),
        });
    }
    Ok(keys)
}
