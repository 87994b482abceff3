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

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::error::OciError;
use super::spec::{SourceSpec, TrustedKey};

/// A signature of the pinned digest by a trusted key, as cosign stored it: kept in
/// the cache and checked again on every hit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StoredSignature {
    /// The signed payload (cosign's simple signing JSON), base64.
    pub payload: String,
    /// The signature, base64.
    pub signature: String,
}

/// What verifying found: who signed, and their signatures.
#[derive(Debug)]
pub(super) struct Verified {
    /// The signers' short ids.
    pub signers: Vec<String>,
    /// Their signatures, for the cache.
    pub signatures: Vec<StoredSignature>,
}

/// The keys of `spec` that signed its digest, with their signatures; an error when
/// none did.
pub(super) async fn signers(
    config: sigstore::registry::ClientConfig,
    auth: &Auth,
    spec: &SourceSpec,
) -> Result<Verified, OciError> {
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
    let signatures = layers
        .iter()
        .filter_map(|layer| {
            let signature = layer.signature.clone()?;
            spec.keys
                .iter()
                .any(|key| key.signed(&layer.raw_data, signature.as_bytes()))
                .then(|| StoredSignature {
                    payload: base64::engine::general_purpose::STANDARD.encode(&layer.raw_data),
                    signature,
                })
        })
        .collect();
    Ok(Verified {
        signers,
        signatures,
    })
}

/// The short ids of `keys` that made one of `signatures` of `digest` (a cosign simple
/// signing payload naming it): the check of a cache hit, offline.
pub(super) fn check_stored(
    signatures: &[StoredSignature],
    digest: &str,
    keys: &[TrustedKey],
) -> Vec<String> {
    let names_digest = |payload: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(payload).is_ok_and(|json| {
            json["critical"]["image"]["docker-manifest-digest"].as_str() == Some(digest)
        })
    };
    let mut signers: Vec<String> = Vec::new();
    for stored in signatures {
        let Ok(payload) = base64::engine::general_purpose::STANDARD.decode(&stored.payload) else {
            continue;
        };
        if !names_digest(&payload) {
            continue;
        }
        for key in keys {
            if key.signed(&payload, stored.signature.as_bytes())
                && !signers.iter().any(|s| s == key.short_id())
            {
                signers.push(key.short_id().to_owned());
            }
        }
    }
    signers
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
        .map(|key| key.short_id().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::SigningKey as _;

    #[test]
    fn stored_signatures_are_checked_again_against_the_current_keys() {
        let digest = "sha256:00ff";
        let pair = rcgen::KeyPair::generate().unwrap();
        let key = TrustedKey::parse(&pair.public_key_pem()).unwrap();
        let other =
            TrustedKey::parse(&rcgen::KeyPair::generate().unwrap().public_key_pem()).unwrap();
        let sign = |payload: &str| StoredSignature {
            payload: base64::engine::general_purpose::STANDARD.encode(payload),
            signature: base64::engine::general_purpose::STANDARD
                .encode(pair.sign(payload.as_bytes()).unwrap()),
        };
        let of = |digest: &str| {
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"r/p"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
            )
        };
        let good = sign(&of(digest));
        assert_eq!(
            check_stored(
                std::slice::from_ref(&good),
                digest,
                &[other.clone(), key.clone()]
            ),
            [key.short_id()]
        );
        assert!(
            check_stored(std::slice::from_ref(&good), digest, &[other]).is_empty(),
            "a key no longer trusted"
        );
        assert!(
            check_stored(
                &[sign(&of("sha256:0bad"))],
                digest,
                std::slice::from_ref(&key)
            )
            .is_empty(),
            "another digest's"
        );
        let mut forged = good;
        forged.payload =
            base64::engine::general_purpose::STANDARD.encode(of(digest).replace("r/p", "x/y"));
        assert!(
            check_stored(&[forged], digest, &[key]).is_empty(),
            "a payload it did not sign"
        );
    }
}
