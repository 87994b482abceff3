//! `wasm-ccm push`: a component as a WebAssembly OCI artifact (the layout `wkg` and
//! `oras push FILE:application/wasm` write): a manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose one layer is `application/wasm`.

use oci_client::Reference;
use oci_client::client::{Config, ImageLayer};

use super::error::OciError;
use super::pull::{WASM_CONFIG_MEDIA_TYPE, WASM_MEDIA_TYPE};
use super::registry_auth::{Access, FileAccess};
use super::spec::SourceSpec;
use crate::provider::compile_cache::sha256_hex;

/// Pushes `component` to `reference` (`REGISTRY/REPOSITORY:TAG`, without `oci://`),
/// with the credentials and CA bundle of `source` (its reference is ignored), and
/// returns the reference pinned by the manifest digest the registry stored, ready for
/// `NAME.source.yaml`.
pub async fn push(
    reference: &str,
    component: &[u8],
    credentials_file: Option<&std::path::Path>,
    ca_file: Option<&std::path::Path>,
) -> Result<String, OciError> {
    let written = reference.trim_start_matches("oci://");
    let invalid = |reason: String| OciError::Spec {
        path: "REFERENCE".into(),
        field: "reference",
        reason,
    };
    let target: Reference = written
        .parse()
        .map_err(|err| invalid(format!("{written:?}: {err}")))?;
    if target.digest().is_some() {
        return Err(invalid(format!(
            "{written:?}: push to a tag; the registry names the digest"
        )));
    }
    // The files, read as the tools read them: the ones given on the command line.
    let spec = SourceSpec {
        path: "REFERENCE".into(),
        reference: target.clone(),
        digest: String::new(),
        credentials_file: credentials_file.map(ToOwned::to_owned),
        ca_file: ca_file.map(ToOwned::to_owned),
        keys: Vec::new(),
        max_size: u64::MAX,
    };
    let access = Access::for_spec(&spec, &FileAccess::Anywhere)?;
    let client = access.client(&spec)?;
    let layer_digest = format!("sha256:{}", sha256_hex(component));
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {"exports": [], "imports": []},
    });
    let failed = |what: &str, err: oci_client::errors::OciDistributionError| OciError::Pull {
        reference: written.to_owned(),
        detail: format!("{what}: {}", super::pull::chain(&err)),
    };
    client
        .push(
            &target,
            &[ImageLayer::new(
                component.to_vec(),
                WASM_MEDIA_TYPE.into(),
                None,
            )],
            Config::new(
                serde_json::to_vec(&config).expect("a JSON value serializes"),
                WASM_CONFIG_MEDIA_TYPE.into(),
                None,
            ),
            &access.auth,
            None,
        )
        .await
        .map_err(|err| failed("pushing", err))?;
    // The digest printed is what gets signed: it must name a manifest whose one layer
    // is this component, whatever the registry (or a push racing for the tag) did.
    let (manifest, _) = client
        .pull_manifest_raw(
            &target,
            &access.auth,
            &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE],
        )
        .await
        .map_err(|err| failed("reading the pushed manifest back", err))?;
    let parsed: oci_client::manifest::OciImageManifest = serde_json::from_slice(&manifest)
        .map_err(|err| OciError::MediaType {
            reference: written.to_owned(),
            found: format!("the pushed tag now names something else ({err})"),
        })?;
    let ours = matches!(parsed.layers.as_slice(), [layer] if layer.digest == layer_digest);
    if !ours {
        return Err(OciError::DigestMismatch {
            reference: written.to_owned(),
            what: "pushed tag's layer",
            expected: layer_digest,
            actual: parsed
                .layers
                .iter()
                .map(|l| l.digest.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let digest = format!("sha256:{}", sha256_hex(&manifest));
    Ok(format!(
        "oci://{}/{}@{digest}",
        target.registry(),
        target.repository()
    ))
}
