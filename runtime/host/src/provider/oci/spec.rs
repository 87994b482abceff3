//! `NAME.source.yaml`: where a provider's component comes from when it is not in the
//! providers directory itself.
//!
//! ```yaml
//! # Pinned by digest: a tag alone is refused.
//! reference: oci://registry.example.com/providers/aws@sha256:4f6b...
//! # Optional: a Docker config.json (an image pull Secret's .dockerconfigjson) and a CA
//! # bundle for the registry, both inside --credentials-dir.
//! credentialsFile: registry/.dockerconfigjson
//! caFile: registry/ca.crt
//! # Optional: the component must carry a cosign signature made by one of these keys.
//! verify:
//!   keys:
//!     - |
//!       -----BEGIN PUBLIC KEY-----
//!       MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE...
//!       -----END PUBLIC KEY-----
//! # Optional: the largest component accepted (default 64).
//! maxSizeMiB: 64
//! ```

use std::path::{Path, PathBuf};

use oci_client::Reference;
use serde::Deserialize;

use super::error::OciError;
pub use crate::policy::signing::TrustedKey;

/// The file name of a provider's source next to where `NAME.wasm` would be.
pub fn source_path(wasm: &Path) -> PathBuf {
    wasm.with_extension("source.yaml")
}

/// The default of `maxSizeMiB`.
pub const DEFAULT_MAX_SIZE_MIB: u64 = 64;

/// A parsed `NAME.source.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    /// The file it was read from, for messages.
    pub path: PathBuf,
    /// The reference, pinned by digest.
    pub reference: Reference,
    /// The manifest digest (`sha256:...`).
    pub digest: String,
    /// The registry's credentials, a Docker `config.json`, inside `--credentials-dir`.
    pub credentials_file: Option<PathBuf>,
    /// The CA bundle the registry's certificate is checked against (beside the
    /// system's roots), inside `--credentials-dir`.
    pub ca_file: Option<PathBuf>,
    /// The keys a signature must be made with; empty: no signature needed.
    pub keys: Vec<TrustedKey>,
    /// The largest component accepted, in bytes.
    pub max_size: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    reference: String,
    credentials_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    verify: RawVerify,
    #[serde(rename = "maxSizeMiB")]
    max_size_mib: Option<u64>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVerify {
    #[serde(default)]
    keys: Vec<String>,
}

impl SourceSpec {
    /// Parses the text of `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Self, OciError> {
        let invalid = |field, reason: String| OciError::Spec {
            path: path.to_owned(),
            field,
            reason,
        };
        let raw: Raw =
            serde_saphyr::from_str(text).map_err(|err| invalid("yaml", err.to_string()))?;
        Self::build(raw, path)
    }

    /// A source as the tools take it on their command line: `reference`
    /// (`oci://...@sha256:...`), the PEM public keys a signature may be made with,
    /// and the registry's files (read where they are). `origin` names it in errors.
    pub fn from_parts(
        reference: &str,
        keys: Vec<String>,
        credentials_file: Option<PathBuf>,
        ca_file: Option<PathBuf>,
        origin: &Path,
    ) -> Result<Self, OciError> {
        let raw = Raw {
            reference: reference.to_owned(),
            credentials_file,
            ca_file,
            verify: RawVerify { keys },
            max_size_mib: Some(4096),
        };
        Self::build(raw, origin)
    }

    fn build(raw: Raw, path: &Path) -> Result<Self, OciError> {
        let invalid = |field, reason: String| OciError::Spec {
            path: path.to_owned(),
            field,
            reason,
        };
        let written = raw.reference.trim();
        let Some(rest) = written.strip_prefix("oci://") else {
            return Err(invalid(
                "reference",
                format!("{written:?} must start with oci://"),
            ));
        };
        let reference: Reference = rest
            .parse()
            .map_err(|err| invalid("reference", format!("{written:?}: {err}")))?;
        let Some(digest) = reference.digest().map(str::to_owned) else {
            return Err(OciError::TagOnly {
                path: path.to_owned(),
                reference: written.to_owned(),
            });
        };
        let valid_digest = digest.strip_prefix("sha256:").is_some_and(|hex| {
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        });
        if !valid_digest {
            return Err(invalid(
                "reference",
                format!("{written:?}: the digest must be sha256: and 64 lowercase hex digits"),
            ));
        }
        // The tag, if any, only documents: the digest decides.
        let reference = Reference::with_digest(
            reference.registry().to_owned(),
            reference.repository().to_owned(),
            digest.clone(),
        );
        let keys = raw
            .verify
            .keys
            .iter()
            .enumerate()
            .map(|(i, pem)| {
                TrustedKey::parse(pem).map_err(|reason| OciError::Spec {
                    path: path.to_owned(),
                    field: "verify.keys",
                    reason: format!("key {i}: {reason}"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let max_size_mib = raw.max_size_mib.unwrap_or(DEFAULT_MAX_SIZE_MIB);
        if max_size_mib == 0 || max_size_mib > 4096 {
            return Err(invalid(
                "maxSizeMiB",
                format!("{max_size_mib} is not between 1 and 4096"),
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            reference,
            digest,
            credentials_file: raw.credentials_file,
            ca_file: raw.ca_file,
            keys,
            max_size: max_size_mib << 20,
        })
    }

    /// The reference as written in messages, without `oci://`.
    pub fn display_reference(&self) -> String {
        self.reference.whole()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(text: &str) -> Result<SourceSpec, OciError> {
        SourceSpec::parse(text, Path::new("/p/aws.source.yaml"))
    }

    #[test]
    fn a_digest_pins_the_reference() {
        let spec = parse(&format!(
            "reference: oci://127.0.0.1:5000/p/aws:v1@{DIGEST}\n"
        ))
        .unwrap();
        assert_eq!(spec.digest, DIGEST);
        assert_eq!(spec.reference.registry(), "127.0.0.1:5000");
        assert_eq!(spec.reference.repository(), "p/aws");
        assert_eq!(spec.reference.tag(), None, "the tag only documents");
        assert_eq!(spec.max_size, 64 << 20);
        assert!(spec.keys.is_empty());
    }

    #[test]
    fn a_tag_alone_is_refused() {
        let err = parse("reference: oci://127.0.0.1:5000/p/aws:v1\n").unwrap_err();
        assert_eq!(err.reason(), "tag_only");
        assert!(err.to_string().contains("/p/aws.source.yaml"), "{err}");
        assert!(err.to_string().contains("has no digest"), "{err}");
    }

    #[test]
    fn invalid_fields_are_named() {
        for (text, field) in [
            ("reference: 127.0.0.1/p/aws\n".to_owned(), "reference"),
            ("reference: oci://r/p@sha256:abc\n".to_owned(), "reference"),
            (
                format!("reference: oci://r/p@{DIGEST}\nmaxSizeMiB: 0\n"),
                "maxSizeMiB",
            ),
            (
                format!("reference: oci://r/p@{DIGEST}\nverify:\n  keys: [nope]\n"),
                "verify.keys",
            ),
            (
                format!("reference: oci://r/p@{DIGEST}\nverfy: {{}}\n"),
                "yaml",
            ),
        ] {
            match parse(&text) {
                Err(OciError::Spec { field: got, .. }) => assert_eq!(got, field, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn keys_get_stable_ids() {
        // cosign's public key format: an ECDSA P-256 SubjectPublicKeyInfo, PEM.
        let key = rcgen::KeyPair::generate().unwrap().public_key_pem();
        let indented: String = key.lines().map(|l| format!("      {l}\n")).collect();
        let text = format!("reference: oci://r/p@{DIGEST}\nverify:\n  keys:\n    - |\n{indented}");
        let first = parse(&text).unwrap();
        let again = parse(&text).unwrap();
        assert_eq!(first.keys.len(), 1);
        assert_eq!(first.keys[0].id.len(), 64);
        assert_eq!(first.keys[0].short_id().len(), 16);
        assert_eq!(first.keys[0].id, again.keys[0].id);
        let other = rcgen::KeyPair::generate().unwrap().public_key_pem();
        assert_ne!(TrustedKey::parse(&other).unwrap().id, first.keys[0].id);
    }
}
