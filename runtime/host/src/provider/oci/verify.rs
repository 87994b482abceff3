//! Cosign signatures of a pulled digest, checked with sigstore: the signatures cosign
//! stores beside an artifact (the `sha256-<hex>.sig` tag, and Sigstore bundles among
//! its referrers) are fetched, each one's payload must name the pinned digest, and the
//! keys of [`SourceSpec::keys`] that verify one of them are the signers.
//!
//! Key signatures need no transparency log: `cosign sign --key K --tlog-upload=false`
//! signs offline, and nothing here reaches Rekor or Fulcio.

use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};
use sigstore::cosign::{ClientBuilder, CosignCapabilities, SignatureLayer};
use sigstore::registry::{Auth, OciReference};

use super::error::OciError;
use super::spec::{SourceSpec, TrustedKey};

/// The ids of the keys of `spec` that signed its digest; an error when none did.
pub(super) async fn signers(
    config: sigstore::registry::ClientConfig,
    auth: &Auth,
    spec: &SourceSpec,
) -> Result<Vec<String>, OciError> {
    let name = spec.display_reference();
    let pull_failed = |detail: String| OciError::Pull {
        reference: name.clone(),
        detail,
    };
    let mut client = ClientBuilder::default()
        .with_oci_client_config(config)
        .build()
        .map_err(|err| pull_failed(format!("building the signature client: {err}")))?;
    let image = OciReference::with_digest(
        spec.reference.registry().to_owned(),
        spec.reference.repository().to_owned(),
        spec.digest.clone(),
    );
    let layers = client
        .trusted_signature_layers(auth, &image)
        .await
        .map_err(|err| pull_failed(format!("fetching signatures: {err}")))?;
    // A registry answering for another digest cannot lend that digest's signatures.
    let layers: Vec<SignatureLayer> = layers
        .into_iter()
        .filter(|layer| layer.simple_signing.critical.image.docker_manifest_digest == spec.digest)
        .collect();
    if layers.is_empty() {
        return Err(OciError::Unsigned {
            reference: name,
            digest: spec.digest.clone(),
        });
    }
    let signers = signed_by(&layers, &spec.keys);
    if signers.is_empty() {
        return Err(OciError::Untrusted {
            reference: name,
            count: layers.len(),
            keys: crate::policy::signing::key_ids(&spec.keys),
        });
    }
    Ok(signers)
}

/// The ids of `keys` that made one of `layers`' signatures.
fn signed_by(layers: &[SignatureLayer], keys: &[TrustedKey]) -> Vec<String> {
    keys.iter()
        .filter(|key| {
            let verifier: Box<dyn VerificationConstraint> =
                match PublicKeyVerifier::try_from(key.pem.as_bytes()) {
                    Ok(verifier) => Box::new(verifier),
                    Err(_) => return false,
                };
            sigstore::cosign::verify_constraints(layers, std::iter::once(&verifier)).is_ok()
        })
        .map(|key| key.id.clone())
        .collect()
}
