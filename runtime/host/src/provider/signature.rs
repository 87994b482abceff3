//! Which cosign signature a provider must carry, and checking it for a component in
//! the providers directory.
//!
//! Three places name keys: a component's policy (`requireSignature.keys`, with the
//! signature in `NAME.wasm.sig` beside the component, as `cosign sign-blob
//! --output-signature` writes it), `NAME.source.yaml` (`verify.keys`, checked against
//! the signatures in the registry: [`super::oci`]), and the operator's
//! `--provider-trusted-keys`, mounted apart from the providers ConfigMap. The
//! operator's keys can only tighten: with them every provider must be signed by one of
//! them (and, when the ConfigMap also lists keys, by one on both lists), so whoever
//! can write the ConfigMap cannot bring a key of their own.

use std::path::{Path, PathBuf};

use crate::policy::signing::{TrustedKey, key_ids};

/// Why a provider's signature was refused.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// A signature is required and the component has none beside it.
    #[error(
        "{path} is missing: {why}; sign the component with `cosign sign-blob --key KEY \
         --tlog-upload=false --output-signature NAME.wasm.sig NAME.wasm` and publish the \
         signature beside it",
        path = .path.display()
    )]
    Missing {
        /// Where the signature should be.
        path: PathBuf,
        /// What requires it.
        why: &'static str,
    },
    /// The signature verifies with none of the keys.
    #[error("{path}: not a signature of the component by a trusted key ({keys})", path = .path.display())]
    Untrusted {
        /// The signature file.
        path: PathBuf,
        /// The keys tried, by id.
        keys: String,
    },
    /// The keys the ConfigMap lists are all outside `--provider-trusted-keys`.
    #[error(
        "{path}: {field} lists none of the keys --provider-trusted-keys trusts ({trusted}); \
         listed: {listed}",
        path = .path.display()
    )]
    NoCommonKey {
        /// The source or policy file.
        path: PathBuf,
        /// `verify.keys` or `requireSignature.keys`.
        field: &'static str,
        /// The operator's keys, by id.
        trusted: String,
        /// The listed keys, by id.
        listed: String,
    },
    /// The policy requires a signature and `NAME.source.yaml` lists no key to check
    /// the registry's signature with.
    #[error(
        "{path}: the provider's policy requires a signature (requireSignature) but \
         verify.keys is empty",
        path = .path.display()
    )]
    Unverified {
        /// The source file.
        path: PathBuf,
    },
}

impl SignatureError {
    /// Every value [`Self::reason`] takes.
    pub const REASONS: [&'static str; 3] = ["unsigned", "signature", "key_not_trusted"];

    /// A short, stable name of the failure, for metric labels (`unsigned` and
    /// `signature` as the registry path's: [`super::oci::OciError::reason`]).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing { .. } | Self::Unverified { .. } => "unsigned",
            Self::Untrusted { .. } => "signature",
            Self::NoCommonKey { .. } => "key_not_trusted",
        }
    }
}

/// The keys a signature must be made with: those `listed` (at `path`'s `field`),
/// narrowed to the operator's `trusted` keys when there are any, or the operator's
/// alone when none is listed. Empty: no signature required.
pub fn effective_keys(
    path: &Path,
    field: &'static str,
    listed: &[TrustedKey],
    trusted: Option<&[TrustedKey]>,
) -> Result<Vec<TrustedKey>, SignatureError> {
    let Some(trusted) = trusted else {
        return Ok(listed.to_vec());
    };
    if listed.is_empty() {
        return Ok(trusted.to_vec());
    }
    // The operator's copy of each key: the listed one only selects it.
    let common: Vec<TrustedKey> = trusted
        .iter()
        .filter(|key| listed.iter().any(|l| l.id == key.id))
        .cloned()
        .collect();
    if common.is_empty() {
        return Err(SignatureError::NoCommonKey {
            path: path.to_owned(),
            field,
            trusted: key_ids(trusted),
            listed: key_ids(listed),
        });
    }
    Ok(common)
}

/// The file holding the signature of the component at `wasm`: `NAME.wasm.sig`.
pub fn signature_path(wasm: &Path) -> PathBuf {
    let mut name = wasm.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// The ids of `keys` that made `signature` (`None`: the file is missing) of
/// `component` at `wasm`; an error when a key is required and none did.
pub fn check_component(
    wasm: &Path,
    component: &[u8],
    signature: Option<&[u8]>,
    keys: &[TrustedKey],
    why: &'static str,
) -> Result<Vec<String>, SignatureError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let path = signature_path(wasm);
    let Some(signature) = signature else {
        return Err(SignatureError::Missing { path, why });
    };
    let signers: Vec<String> = keys
        .iter()
        .filter(|key| key.signed(component, signature))
        .map(|key| key.short_id().to_owned())
        .collect();
    if signers.is_empty() {
        return Err(SignatureError::Untrusted {
            path,
            keys: key_ids(keys),
        });
    }
    Ok(signers)
}

/// Checks the signature a component from the providers directory (`source`, read for
/// `path`) must carry: its policy's `requireSignature`, the operator's `trusted` keys.
/// A component from a registry was verified when it was pulled.
pub(super) fn check_source(
    path: &Path,
    source: &super::ProviderSource,
    policy: &crate::policy::Policy,
    trusted: Option<&[TrustedKey]>,
) -> Result<(), SignatureError> {
    if source.remote.is_some() {
        return Ok(());
    }
    let listed = policy.require_signature.as_deref().unwrap_or_default();
    let keys = effective_keys(
        &crate::policy::Policy::path_for(path),
        "requireSignature.keys",
        listed,
        trusted,
    )?;
    let why = if policy.require_signature.is_some() {
        "the provider's policy requires a signature (requireSignature)"
    } else {
        "--provider-trusted-keys requires a signature"
    };
    let signers = check_component(
        path,
        &source.component,
        source.signature.as_deref(),
        &keys,
        why,
    )?;
    if !signers.is_empty() {
        tracing::info!(file = %path.display(), signed_by = %signers.join(","), "provider signature verified");
    }
    Ok(())
}
