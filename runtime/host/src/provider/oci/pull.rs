//! Pulling a component by digest: the manifest (hashed against the pinned digest), its
//! one `application/wasm` layer (announced size against the limit, received bytes
//! capped at it, hashed against the manifest's digest).

use futures_util::StreamExt;
use oci_client::Client;
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;

use super::error::OciError;
use super::spec::SourceSpec;
use crate::provider::compile_cache::sha256_hex;

/// The media type of a component layer (the WebAssembly OCI artifact layout, as
/// `wkg`, `oras push FILE:application/wasm` and `wasm-ccm push` write it).
pub const WASM_MEDIA_TYPE: &str = "application/wasm";
/// The config media type of that layout.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// A pulled component.
#[derive(Debug)]
pub(super) struct Pulled {
    /// Its bytes, hashed against the layer's digest.
    pub component: Vec<u8>,
    /// The layer's digest.
    pub layer_digest: String,
}

/// Pulls the component `spec` pins.
pub(super) async fn pull(
    client: &Client,
    auth: &RegistryAuth,
    spec: &SourceSpec,
) -> Result<Pulled, OciError> {
    let reference = &spec.reference;
    let name = spec.display_reference();
    let (body, _) = client
        .pull_manifest_raw(
            reference,
            auth,
            &[
                OCI_IMAGE_MEDIA_TYPE,
                oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
            ],
        )
        .await
        .map_err(|err| classify(&name, "manifest", &spec.digest, err))?;
    // oci-client checks this too; the pin is ours to keep, so check it here.
    let actual = format!("sha256:{}", sha256_hex(&body));
    if actual != spec.digest {
        return Err(OciError::DigestMismatch {
            reference: name,
            what: "manifest",
            expected: spec.digest.clone(),
            actual,
        });
    }
    let manifest: OciImageManifest =
        serde_json::from_slice(&body).map_err(|err| OciError::MediaType {
            reference: name.clone(),
            found: format!("a manifest that is not an image manifest ({err})"),
        })?;
    let layer = wasm_layer(&name, &manifest)?;
    let announced = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if announced > spec.max_size {
        return Err(OciError::TooLarge {
            reference: name,
            size: announced,
            limit: spec.max_size,
        });
    }
    let mut stream = client
        .pull_blob_stream(reference, layer)
        .await
        .map_err(|err| classify(&name, "layer", &layer.digest, err))?;
    let mut component = Vec::with_capacity(announced.min(spec.max_size) as usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| {
            match err
                .get_ref()
                .and_then(|e| e.downcast_ref::<oci_client::errors::DigestError>())
            {
                Some(_) => OciError::DigestMismatch {
                    reference: name.clone(),
                    what: "layer",
                    expected: layer.digest.clone(),
                    actual: "other content".into(),
                },
                None => OciError::Pull {
                    reference: name.clone(),
                    detail: format!("reading the layer: {err}"),
                },
            }
        })?;
        if (component.len() + chunk.len()) as u64 > spec.max_size {
            return Err(OciError::TooLarge {
                reference: name,
                size: (component.len() + chunk.len()) as u64,
                limit: spec.max_size,
            });
        }
        component.extend_from_slice(&chunk);
    }
    let actual = format!("sha256:{}", sha256_hex(&component));
    if actual != layer.digest {
        return Err(OciError::DigestMismatch {
            reference: name,
            what: "layer",
            expected: layer.digest.clone(),
            actual,
        });
    }
    Ok(Pulled {
        component,
        layer_digest: layer.digest.clone(),
    })
}

/// The manifest's one component layer.
fn wasm_layer<'m>(
    name: &str,
    manifest: &'m OciImageManifest,
) -> Result<&'m oci_client::manifest::OciDescriptor, OciError> {
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_MEDIA_TYPE => Ok(layer),
        layers => Err(OciError::MediaType {
            reference: name.to_owned(),
            found: if layers.is_empty() {
                "no layers".into()
            } else {
                format!(
                    "layers of media types {}",
                    layers
                        .iter()
                        .map(|l| l.media_type.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        }),
    }
}

/// What an oci-client error means here.
fn classify(
    name: &str,
    what: &'static str,
    expected: &str,
    err: oci_client::errors::OciDistributionError,
) -> OciError {
    use oci_client::errors::{DigestError, OciDistributionError as E};
    match err {
        E::DigestError(DigestError::VerificationError { actual, .. }) => OciError::DigestMismatch {
            reference: name.to_owned(),
            what,
            expected: expected.to_owned(),
            actual,
        },
        E::ManifestParsingError(detail) | E::IncompatibleLayerMediaTypeError(detail) => {
            OciError::MediaType {
                reference: name.to_owned(),
                found: detail,
            }
        }
        err => OciError::Pull {
            reference: name.to_owned(),
            detail: format!("the {what}: {}", chain(&err)),
        },
    }
}

/// An error with its sources, `: `-separated (reqwest's top level says only "error
/// sending request").
pub(super) fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        let more = next.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = next.source();
    }
    text
}
