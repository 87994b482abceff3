//! Why a provider could not be taken from an OCI registry.

use std::path::PathBuf;
use std::time::Duration;

use crate::capabilities::http_egress::credentials::CredentialError;

/// Why a provider could not be taken from an OCI registry. Every message names the
/// `NAME.source.yaml` or the `oci://` reference it is about.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// `NAME.source.yaml` is not valid: YAML, an unknown field, a bad key.
    #[error("{path}: {field}: {reason}", path = .path.display())]
    Spec {
        /// The source file.
        path: PathBuf,
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The reference names a tag but no digest: a tag can be moved to other content,
    /// a digest cannot.
    #[error(
        "{path}: reference {reference} has no digest; pin it as oci://REGISTRY/REPOSITORY@sha256:... \
         (a tag alone can be moved to other content)",
        path = .path.display()
    )]
    TagOnly {
        /// The source file.
        path: PathBuf,
        /// The reference as written.
        reference: String,
    },
    /// A file the source names (registry credentials, CA bundle) cannot be used: it
    /// lies outside `--credentials-dir`, or cannot be read or parsed.
    #[error("{path}: {field}: {source}", path = .path.display())]
    File {
        /// The source file.
        path: PathBuf,
        /// `credentialsFile` or `caFile`.
        field: &'static str,
        /// Why it cannot be used.
        #[source]
        source: CredentialError,
    },
    /// The registry could not be reached or answered with an error (401, 404, 500,
    /// a reset connection). The same reference is tried again on the next rescan.
    #[error("oci://{reference}: pulling failed: {detail}")]
    Pull {
        /// The reference.
        reference: String,
        /// What failed, as the registry client reports it.
        detail: String,
    },
    /// The registry did not finish within the pull timeout. Tried again on the next
    /// rescan.
    #[error("oci://{reference}: the registry did not answer within {after:?}")]
    Timeout {
        /// The reference.
        reference: String,
        /// The timeout.
        after: Duration,
    },
    /// Content does not hash to the digest that names it: the manifest to the
    /// reference's digest, or the layer to the manifest's.
    #[error(
        "oci://{reference}: the {what} does not match its digest: expected {expected}, got {actual}"
    )]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// `manifest` or `layer`.
        what: &'static str,
        /// The digest that names it.
        expected: String,
        /// The digest of what was received.
        actual: String,
    },
    /// The manifest is not a WebAssembly component artifact: an index, or layers of
    /// other media types.
    #[error(
        "oci://{reference}: not a WebAssembly component artifact: {found} (expected one \
         layer: the component, of media type application/wasm, as `wasm-ccm push` or \
         `oras push REF FILE.wasm:application/wasm` push it; or an image layer holding \
         NAME.wasm)"
    )]
    MediaType {
        /// The reference.
        reference: String,
        /// What was found instead.
        found: String,
    },
    /// The component is larger than `maxSizeMiB` allows.
    #[error(
        "oci://{reference}: the component is {size} bytes, over the limit of {limit} (maxSizeMiB)"
    )]
    TooLarge {
        /// The reference.
        reference: String,
        /// Its size (announced or received).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// No cosign signature of this digest was found in the registry.
    #[error(
        "oci://{reference}: no cosign signature of {digest} found (sign it with `cosign sign --key KEY REF@DIGEST`)"
    )]
    Unsigned {
        /// The reference.
        reference: String,
        /// The manifest digest.
        digest: String,
    },
    /// Signatures exist, but none verifies with a key the source trusts.
    #[error("oci://{reference}: {count} signature(s) found, none made by a trusted key ({keys})")]
    Untrusted {
        /// The reference.
        reference: String,
        /// How many signatures were checked.
        count: usize,
        /// The trusted keys, by id.
        keys: String,
    },
}

impl OciError {
    /// Every value [`Self::reason`] takes.
    pub const REASONS: [&'static str; 11] = [
        "source_invalid",
        "tag_only",
        "credentials_outside_dir",
        "credentials",
        "pull_failed",
        "pull_timeout",
        "digest_mismatch",
        "media_type",
        "too_large",
        "unsigned",
        "signature",
    ];

    /// A short, stable name of the failure, for metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Spec { .. } => "source_invalid",
            Self::TagOnly { .. } => "tag_only",
            Self::File { source, .. } => match source {
                CredentialError::OutsideDir { .. } => "credentials_outside_dir",
                _ => "credentials",
            },
            Self::Pull { .. } => "pull_failed",
            Self::Timeout { .. } => "pull_timeout",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::MediaType { .. } => "media_type",
            Self::TooLarge { .. } => "too_large",
            Self::Unsigned { .. } => "unsigned",
            Self::Untrusted { .. } => "signature",
        }
    }

    /// Whether the same source may succeed later without a change: the registry was
    /// down, slow, or the signature not pushed yet.
    pub fn may_pass_later(&self) -> bool {
        matches!(
            self,
            Self::Pull { .. } | Self::Timeout { .. } | Self::Unsigned { .. }
        )
    }
}
