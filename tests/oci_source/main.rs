//! Providers from an OCI registry, through the real `wasm-ccm` binary, a real registry
//! (distribution's, TLS and basic auth) and real cosign: `wasm-ccm push`, `cosign
//! sign --key`, then `NAME.source.yaml` in a kubelet-managed providers directory. A
//! signed component is pulled, verified and served; changing the reference swaps;
//! every refusal (another key, no signature, a tampered layer or manifest, a tag
//! alone, a registry failing or hanging, an oversize artifact, credentials outside
//! `--credentials-dir`) leaves the serving version with its metric and Event; a
//! restart with the registry down serves from the cache.

mod refusals;
mod signatures;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::Api;
use kube::api::ListParams;
use wasm_ccm_host::provider::compile_cache::sha256_hex;
use wasm_ccm_tests::oci_registry::{Fault, FaultyRegistry, PASSWORD, Registry};
use wasm_ccm_tests::{
    Stack, TempDir, kubelet_publish, listening_port, metrics, wait_until, wasm_ccm_bin,
    with_custom_section,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const POD: &str = "wasm-ccm-0";
const NAMESPACE: &str = "kube-system";

/// A stack whose providers directory (also its credentials directory) is a
/// kubelet-managed ConfigMap volume holding `simcloud.source.yaml` and the policy,
/// with a registry beside it.
struct OciStack {
    stack: Stack,
    registry: Registry,
    reference: Vec<u8>,
    policy: Vec<u8>,
    artifacts: TempDir,
    cache: TempDir,
}

impl OciStack {
    async fn start() -> Self {
        let stack = Stack::start().await;
        let registry = Registry::start().await;
        let dir = stack.dir.dir.path();
        let reference = std::fs::read(&stack.dir.wasm).unwrap();
        let policy = std::fs::read(dir.join("simcloud.yaml")).unwrap();
        std::fs::remove_file(&stack.dir.wasm).unwrap();
        std::fs::remove_file(dir.join("simcloud.yaml")).unwrap();
        // The registry's files, in the credentials directory as an operator mounts them.
        std::fs::write(dir.join("registry.json"), registry.docker_config(PASSWORD)).unwrap();
        std::fs::copy(&registry.ca_file, dir.join("registry-ca.pem")).unwrap();
        Self {
            stack,
            registry,
            reference,
            policy,
            artifacts: TempDir::new("oci-artifacts"),
            cache: TempDir::new("oci-cache"),
        }
    }

    fn dir(&self) -> &Path {
        self.stack.dir.dir.path()
    }

    /// `wasm-ccm push` of `component` to `repo:tag`: the reference pinned by digest
    /// (without `oci://`).
    async fn push(&self, component: &[u8], tag: &str) -> String {
        let file = self.artifacts.path().join(format!("simcloud-{tag}.wasm"));
        std::fs::write(&file, component).unwrap();
        let out = tokio::process::Command::new(wasm_ccm_bin())
            .arg("push")
            .arg(&file)
            .arg(format!(
                "oci://{}/providers/simcloud:{tag}",
                self.registry.host
            ))
            .arg("--registry-credentials")
            .arg(self.dir().join("registry.json"))
            .arg("--registry-ca")
            .arg(&self.registry.ca_file)
            .output()
            .await
            .expect("run wasm-ccm push");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "wasm-ccm push failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pinned = stdout
            .lines()
            .find_map(|l| l.strip_prefix("reference: oci://"))
            .unwrap_or_else(|| panic!("no reference in {stdout}"))
            .to_owned();
        assert!(pinned.contains("@sha256:"), "{pinned}");
        pinned
    }

    /// `wasm-ccm check oci://REFERENCE --key KEY` with the registry's files: whether
    /// it passed, and what it printed.
    async fn check_reference(&self, reference: &str, key: &Path) -> (bool, String) {
        let out = tokio::process::Command::new(wasm_ccm_bin())
            .arg("check")
            .arg(format!("oci://{reference}"))
            .arg("--key")
            .arg(key)
            .arg("--registry-credentials")
            .arg(self.dir().join("registry.json"))
            .arg("--registry-ca")
            .arg(&self.registry.ca_file)
            .output()
            .await
            .expect("run wasm-ccm check");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), printed)
    }

    /// A kubelet update of the ConfigMap to `source` (a `NAME.source.yaml`) and the
    /// unchanged policy.
    fn publish(&self, source: &str) {
        kubelet_publish(
            self.dir(),
            &[
                ("simcloud.source.yaml", source.as_bytes()),
                ("simcloud.yaml", &self.policy),
            ],
        );
    }

    fn controller_manager(&self, port: u16, extra: &[&str]) -> tokio::process::Child {
        let cache = format!("--provider-cache-dir={}", self.cache.path().display());
        let mut flags = vec![
            "--leader-elect=false",
            "--provider-rescan-period=300ms",
            cache.as_str(),
        ];
        flags.extend_from_slice(extra);
        self.stack
            .controller_manager_command(port, &flags)
            .env("POD_NAME", POD)
            .env("POD_NAMESPACE", NAMESPACE)
            .kill_on_drop(true)
            .spawn()
            .expect("start wasm-ccm")
    }

    /// Events about the controller manager's Pod: (reason, note).
    async fn pod_events(&self) -> Vec<(String, String)> {
        Api::<CoreEvent>::namespaced(self.stack.client(), NAMESPACE)
            .list(&ListParams::default().fields(&format!("involvedObject.name={POD}")))
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `NAME.source.yaml` for `reference` trusting `keys` (PEM), with the registry's files.
fn source(reference: &str, keys: &[&str]) -> String {
    let mut text = format!(
        "reference: oci://{reference}\ncredentialsFile: registry.json\ncaFile: registry-ca.pem\n"
    );
    if !keys.is_empty() {
        text.push_str("verify:\n  keys:\n");
        for key in keys {
            text.push_str("    - |\n");
            for line in key.lines() {
                text.push_str(&format!("      {line}\n"));
            }
        }
    }
    text
}

/// The SHA-256 of the version serving, from `wasm_ccm_provider_info`.
fn serving(metrics: &str) -> Option<String> {
    wasm_ccm_tests::serving_sha256(metrics, "simcloud")
}

fn reloads(metrics: &str, result: &str) -> f64 {
    wasm_ccm_tests::provider_reloads(metrics, "simcloud", result)
}

async fn wait_serving(port: u16, sha256: &str) {
    wasm_ccm_tests::wait_serving_sha256(port, "simcloud", sha256, TIMEOUT).await;
}

/// Flips one byte in the middle of `file` (same length, other content).
fn tamper(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(file, bytes).unwrap();
}

/// Changes one hex digit of the first digest a stored manifest names: still a valid
/// manifest, no longer the content its digest names.
fn tamper_manifest(file: &Path) {
    let mut text = std::fs::read_to_string(file).unwrap();
    let at = text.find("sha256:").expect("a digest in the manifest") + "sha256:".len();
    let digit = if &text[at..=at] == "0" { "1" } else { "0" };
    text.replace_range(at..=at, digit);
    std::fs::write(file, text).unwrap();
}

fn public_key_file(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(format!("{name}.pub"));
    std::fs::write(&path, pem).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_component_is_pulled_served_swapped_by_reference_and_served_from_cache() {
    let mut oci = OciStack::start().await;
    let (k1, k1_pub) = oci.registry.key_pair("k1");
    let v1 = oci.reference.clone();
    let v2 = with_custom_section(&oci.reference, "v2");
    let ref1 = oci.push(&v1, "v1").await;
    let ref2 = oci.push(&v2, "v2").await;
    oci.registry.sign(&k1, &ref1);
    oci.registry.sign(&k1, &ref2);

    // `wasm-ccm check oci://` pulls and verifies as the controller manager does.
    let keys = oci.artifacts.path();
    let k1_file = public_key_file(keys, "k1", &k1_pub);
    let (_, k2_pub) = oci.registry.key_pair("k2");
    let k2_file = public_key_file(keys, "k2", &k2_pub);
    let (ok, printed) = oci.check_reference(&ref1, &k1_file).await;
    assert!(ok, "{printed}");
    let digest = ref1.split_once('@').unwrap().1;
    assert!(
        printed.contains(&format!("digest:       {digest}")),
        "{printed}"
    );
    assert!(
        printed.contains("cosign signature verified, signed by"),
        "{printed}"
    );
    assert!(printed.contains("k1.pub"), "{printed}");
    assert!(
        printed.contains("simcloud"),
        "the component's report follows: {printed}"
    );
    let (ok, printed) = oci.check_reference(&ref1, &k2_file).await;
    assert!(
        !ok && printed.contains("none made by a trusted key"),
        "{printed}"
    );

    oci.publish(&source(&ref1, &[&k1_pub]));
    let port = listening_port();
    let ccm = oci.controller_manager(port, &[]);
    wait_serving(port, &sha256_hex(&v1)).await;

    // Changing the reference is a hot swap.
    oci.publish(&source(&ref2, &[&k1_pub]));
    wait_serving(port, &sha256_hex(&v2)).await;
    assert_eq!(reloads(&metrics(port).await, "success"), 1.0);

    // An image whose one layer holds simcloud.wasm (as `FROM scratch` + `COPY`
    // builds it, and as an image volume mounts it) serves too.
    let v3 = with_custom_section(&oci.reference, "image");
    let image = oci
        .registry
        .push_image(
            "providers/simcloud-image",
            "v3",
            &[("etc/os-release", b"ID=scratch\n"), ("simcloud.wasm", &v3)],
        )
        .await;
    oci.registry.sign(&k1, &image);
    oci.publish(&source(&image, &[&k1_pub]));
    wait_serving(port, &sha256_hex(&v3)).await;

    // A restart with the registry down serves the pinned version from the cache,
    // checked again as a pull is (the image's layer unpacked again).
    drop(ccm);
    oci.registry.stop().await;
    let port = listening_port();
    let ccm = oci.controller_manager(port, &[]);
    wait_serving(port, &sha256_hex(&v3)).await;
    // And swaps back to a version it pulled before, still without the registry.
    oci.publish(&source(&ref2, &[&k1_pub]));
    wait_serving(port, &sha256_hex(&v2)).await;
    drop(ccm);
    oci.registry.run().await;
}
