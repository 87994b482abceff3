//! Pulling a component by digest: the manifest (hashed against the pinned digest), its
//! one layer (announced size against the limit, received bytes capped at it, hashed
//! against the manifest's digest). Two layouts: the WebAssembly OCI artifact (the
//! layer is the component, `application/wasm`), and an image whose one layer (a tar,
//! gzipped or not) holds `NAME.wasm`, as `FROM scratch` + `COPY NAME.wasm /` builds
//! it (the same image mounts as an image volume).

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

/// A pulled artifact: its manifest and its one layer, as the registry stores them.
/// [`open`] checks them and takes the component out; the cache keeps them as they
/// are, so a hit is checked the same way.
#[derive(Debug)]
pub(super) struct Artifact {
    /// The manifest's bytes.
    pub manifest: Vec<u8>,
    /// The layer's bytes.
    pub layer: Vec<u8>,
}

/// A component taken out of an [`Artifact`].
#[derive(Debug)]
pub(super) struct Opened {
    /// The component's bytes.
    pub component: Vec<u8>,
    /// The layer's digest.
    pub layer_digest: String,
}

/// Pulls the artifact `spec` pins: the manifest by digest (hashed against it), then
/// its one layer (the announced size within the limit, the bytes received capped at
/// it and hashed against the manifest's digest).
pub(super) async fn pull(
    client: &Client,
    auth: &RegistryAuth,
    spec: &SourceSpec,
) -> Result<Artifact, OciError> {
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
    let manifest = body.to_vec();
    let (_, layer) = checked_manifest(&manifest, spec)?;
    let mut stream = client
        .pull_blob_stream(reference, &layer)
        .await
        .map_err(|err| classify(&name, "layer", &layer.digest, err))?;
    let announced = u64::try_from(layer.size).unwrap_or(u64::MAX);
    let mut bytes = Vec::with_capacity(announced.min(spec.max_size) as usize);
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
        if (bytes.len() + chunk.len()) as u64 > spec.max_size {
            return Err(OciError::TooLarge {
                reference: name,
                size: (bytes.len() + chunk.len()) as u64,
                limit: spec.max_size,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Artifact {
        manifest,
        layer: bytes,
    })
}

/// The manifest `bytes`, hashed against `spec`'s digest and parsed, and its one
/// layer's descriptor, whose announced size is within the limit.
fn checked_manifest(
    bytes: &[u8],
    spec: &SourceSpec,
) -> Result<(Layout, oci_client::manifest::OciDescriptor), OciError> {
    let name = spec.display_reference();
    // oci-client checks this too; the pin is ours to keep, so check it here.
    let actual = format!("sha256:{}", sha256_hex(bytes));
    if actual != spec.digest {
        return Err(OciError::DigestMismatch {
            reference: name,
            what: "manifest",
            expected: spec.digest.clone(),
            actual,
        });
    }
    let manifest: OciImageManifest =
        serde_json::from_slice(bytes).map_err(|err| OciError::MediaType {
            reference: name.clone(),
            found: format!("a manifest that is not an image manifest ({err})"),
        })?;
    let (layer, layout) = component_layer(&name, &manifest)?;
    let announced = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if announced > spec.max_size {
        return Err(OciError::TooLarge {
            reference: name,
            size: announced,
            limit: spec.max_size,
        });
    }
    Ok((layout, layer.clone()))
}

/// Checks `artifact` against `spec` (manifest digest, layer size and digest) and
/// takes the component out of its layer. No network; CPU-bound (hashing, unpacking).
pub(super) fn open(artifact: Artifact, spec: &SourceSpec) -> Result<Opened, OciError> {
    let name = spec.display_reference();
    let (layout, layer) = checked_manifest(&artifact.manifest, spec)?;
    if artifact.layer.len() as u64 > spec.max_size {
        return Err(OciError::TooLarge {
            reference: name,
            size: artifact.layer.len() as u64,
            limit: spec.max_size,
        });
    }
    let actual = format!("sha256:{}", sha256_hex(&artifact.layer));
    if actual != layer.digest {
        return Err(OciError::DigestMismatch {
            reference: name,
            what: "layer",
            expected: layer.digest,
            actual,
        });
    }
    let component = match layout {
        Layout::Wasm => artifact.layer,
        Layout::Tar { gzip } => {
            let wanted = spec
                .path
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(|f| f.strip_suffix(".source.yaml"))
                .map(|name| format!("{name}.wasm"));
            extract(
                &artifact.layer,
                gzip,
                wanted.as_deref(),
                spec.max_size,
                &name,
            )?
        }
    };
    Ok(Opened {
        component,
        layer_digest: layer.digest,
    })
}

/// How the component is stored in its layer.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// The layer is the component.
    Wasm,
    /// The layer is a tar archive (gzipped or not) holding it.
    Tar { gzip: bool },
}

/// The component `file` (`NAME.wasm`; with none, the archive's one `.wasm` file) in
/// the tar archive `blob`, at most `limit` bytes; no more than a few times `limit` is
/// unpacked looking for it.
fn extract(
    blob: &[u8],
    gzip: bool,
    file: Option<&str>,
    limit: u64,
    reference: &str,
) -> Result<Vec<u8>, OciError> {
    use std::io::Read;
    let not_found = |what: String| OciError::MediaType {
        reference: reference.to_owned(),
        found: what,
    };
    let unpacked: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(blob))
    } else {
        Box::new(blob)
    };
    // A layer that inflates without end (or holds much else) stops here.
    let cap = limit.saturating_mul(4).saturating_add(1 << 20);
    let capped = Capped {
        inner: unpacked,
        left: cap,
        hit: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    };
    let hit = capped.hit.clone();
    let over = || OciError::TooLarge {
        reference: reference.to_owned(),
        size: cap,
        limit: cap,
    };
    let mut archive = tar::Archive::new(capped);
    let wanted = |path: &std::path::Path| match file {
        Some(file) => path.file_name().is_some_and(|n| n == file),
        None => path.extension().is_some_and(|x| x == "wasm"),
    };
    let described = file.unwrap_or("a .wasm file").to_owned();
    let unreadable = |err: std::io::Error| {
        not_found(format!(
            "an image layer that is not a tar archive holding {described}: {err}"
        ))
    };
    let mut found: Option<Vec<u8>> = None;
    let entries = archive.entries().map_err(unreadable)?;
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(_) if hit.load(std::sync::atomic::Ordering::Relaxed) => return Err(over()),
            Err(err) => return Err(unreadable(err)),
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(unreadable)?.into_owned();
        if !wanted(&path) {
            continue;
        }
        if found.is_some() {
            return Err(not_found(format!(
                "an image layer holding more than one {described}"
            )));
        }
        if entry.size() > limit {
            return Err(OciError::TooLarge {
                reference: reference.to_owned(),
                size: entry.size(),
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).map_err(unreadable)?;
        found = Some(bytes);
    }
    if found.is_none() && hit.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(over());
    }
    found.ok_or_else(|| not_found(format!("an image layer without {described}")))
}

/// A reader ending after `left` bytes, noting when more was asked for.
struct Capped<R> {
    inner: R,
    left: u64,
    hit: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl<R: std::io::Read> std::io::Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            self.hit.store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(0);
        }
        let max = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let read = self.inner.read(&mut buf[..max])?;
        self.left -= read as u64;
        Ok(read)
    }
}

/// The manifest's one layer and how the component is stored in it.
fn component_layer<'m>(
    name: &str,
    manifest: &'m OciImageManifest,
) -> Result<(&'m oci_client::manifest::OciDescriptor, Layout), OciError> {
    use oci_client::manifest::{
        IMAGE_DOCKER_LAYER_GZIP_MEDIA_TYPE, IMAGE_DOCKER_LAYER_TAR_MEDIA_TYPE,
        IMAGE_LAYER_GZIP_MEDIA_TYPE, IMAGE_LAYER_MEDIA_TYPE,
    };
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_MEDIA_TYPE => Ok((layer, Layout::Wasm)),
        [layer]
            if layer.media_type == IMAGE_LAYER_MEDIA_TYPE
                || layer.media_type == IMAGE_DOCKER_LAYER_TAR_MEDIA_TYPE =>
        {
            Ok((layer, Layout::Tar { gzip: false }))
        }
        [layer]
            if layer.media_type == IMAGE_LAYER_GZIP_MEDIA_TYPE
                || layer.media_type == IMAGE_DOCKER_LAYER_GZIP_MEDIA_TYPE =>
        {
            Ok((layer, Layout::Tar { gzip: true }))
        }
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
            // A registry's error body ends up in Events: the start of it says enough.
            detail: shortened(&format!("the {what}: {}", chain(&err)), MAX_DETAIL),
        },
    }
}

/// How much of a registry's error is kept (for logs and Events).
const MAX_DETAIL: usize = 400;

/// `text`, cut to at most `max` bytes (on a character boundary) with `…` when cut.
fn shortened(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
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

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(files: &[(&str, &[u8])], gzip: bool) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, bytes) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, path, *bytes).unwrap();
        }
        let tar = builder.into_inner().unwrap();
        if !gzip {
            return tar;
        }
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&tar).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn long_registry_errors_are_cut() {
        let long = "é".repeat(300);
        let cut = shortened(&long, 401);
        assert!(
            cut.len() <= 401 + '…'.len_utf8() && cut.ends_with('…'),
            "{cut}"
        );
        assert_eq!(shortened("short", 400), "short");
    }

    #[test]
    fn an_image_layer_gives_up_its_component() {
        for gzip in [false, true] {
            let layer = archive(&[("etc/motd", b"hi"), ("./aws.wasm", b"\0asm")], gzip);
            let got = extract(&layer, gzip, Some("aws.wasm"), 1 << 20, "r/p").unwrap();
            assert_eq!(got, b"\0asm");
            // The tools, which know no name, take the one .wasm file.
            assert_eq!(
                extract(&layer, gzip, None, 1 << 20, "r/p").unwrap(),
                b"\0asm"
            );
            let err = extract(&layer, gzip, Some("gcp.wasm"), 1 << 20, "r/p").unwrap_err();
            assert!(err.to_string().contains("without gcp.wasm"), "{err}");
        }
        let two = archive(&[("a/aws.wasm", b"1"), ("b/aws.wasm", b"2")], true);
        let err = extract(&two, true, Some("aws.wasm"), 1 << 20, "r/p").unwrap_err();
        assert!(err.to_string().contains("more than one aws.wasm"), "{err}");
        let big = archive(&[("aws.wasm", &[0u8; 4096])], true);
        let err = extract(&big, true, Some("aws.wasm"), 1024, "r/p").unwrap_err();
        assert_eq!(err.reason(), "too_large");
        assert!(extract(b"not a tar", true, Some("aws.wasm"), 1024, "r/p").is_err());
    }

    #[test]
    fn a_layer_inflating_past_a_few_times_the_limit_is_not_unpacked_to_the_end() {
        // 64 MiB of zeros under another name, then the component: the search stops
        // long before (the limit is 1 MiB).
        let filler = vec![0u8; 64 << 20];
        let layer = archive(&[("filler", &filler), ("aws.wasm", b"\0asm")], true);
        assert!(layer.len() < 1 << 20, "a small layer: {}", layer.len());
        let err = extract(&layer, true, Some("aws.wasm"), 1 << 20, "r/p").unwrap_err();
        assert_eq!(err.reason(), "too_large", "{err}");
    }
}
