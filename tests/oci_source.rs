//! Providers from an OCI registry, through the real `wasm-ccm` binary, a real registry
//! (distribution's, TLS and basic auth) and real cosign: `wasm-ccm push`, `cosign
//! sign --key`, then `NAME.source.yaml` in a kubelet-managed providers directory. A
//! signed component is pulled, verified and served; changing the reference swaps;
//! every refusal (another key, no signature, a tampered layer or manifest, a tag
//! alone, a registry failing or hanging, an oversize artifact, credentials outside
//! `--credentials-dir`) leaves the serving version with its metric and Event; a
//! restart with the registry down serves from the cache.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::Api;
use kube::api::ListParams;
use wasm_ccm_host::provider::compile_cache::sha256_hex;
use wasm_ccm_tests::oci_registry::{Fault, FaultyRegistry, PASSWORD, Registry};
use wasm_ccm_tests::{
    Stack, TempDir, kubelet_publish, listening_port, metric, metrics, wait_until, wasm_ccm_bin,
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
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix("wasm_ccm_provider_info{provider=\"simcloud\",sha256=\"")?;
        let (sha, value) = rest.split_once("\"} ")?;
        (value == "1").then(|| sha.to_owned())
    })
}

fn reloads(metrics: &str, result: &str) -> f64 {
    metric(
        metrics,
        &format!("wasm_ccm_provider_reloads_total{{provider=\"simcloud\",result=\"{result}\"}}"),
    )
}

async fn wait_serving(port: u16, sha256: &str) {
    wait_until(TIMEOUT, &format!("version {sha256} serving"), || async {
        serving(&metrics(port).await).as_deref() == Some(sha256)
    })
    .await;
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
    oci.publish(&source(&ref2, &[&k1_pub]));
    wait_serving(port, &sha256_hex(&v2)).await;

    // A restart with the registry down serves the pinned version from the cache.
    drop(ccm);
    oci.registry.stop().await;
    let port = listening_port();
    let _ccm = oci.controller_manager(port, &[]);
    wait_serving(port, &sha256_hex(&v2)).await;
    oci.registry.run().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_sources_leave_the_serving_version_with_a_metric_and_an_event() {
    let oci = OciStack::start().await;
    let (k1, k1_pub) = oci.registry.key_pair("k1");
    let (k2, k2_pub) = oci.registry.key_pair("k2");
    let keys = oci.artifacts.path();
    let k1_file = public_key_file(keys, "k1", &k1_pub);
    let k2_file = public_key_file(keys, "k2", &k2_pub);
    let v1 = oci.reference.clone();
    let ref1 = oci.push(&v1, "v1").await;
    oci.registry.sign(&k1, &ref1);
    oci.publish(&source(&ref1, &[&k1_pub]));
    let port = listening_port();
    let _ccm = oci.controller_manager(port, &["--provider-pull-timeout=3s"]);
    let v1_sha = sha256_hex(&v1);
    wait_serving(port, &v1_sha).await;

    // Signed with another key: refused, as `cosign verify` judges it too.
    let other_key = oci.push(&with_custom_section(&v1, "k2"), "k2").await;
    oci.registry.sign(&k2, &other_key);
    assert!(!oci.registry.cosign_verifies(&k1_file, &other_key));
    assert!(oci.registry.cosign_verifies(&k2_file, &other_key));
    // Not signed at all.
    let unsigned = oci
        .push(&with_custom_section(&v1, "unsigned"), "unsigned")
        .await;
    // A layer altered in the registry's storage after it was signed.
    let tampered_layer = with_custom_section(&v1, "tampered-layer");
    let tampered_ref = oci.push(&tampered_layer, "tampered-layer").await;
    oci.registry.sign(&k1, &tampered_ref);
    tamper(
        &oci.registry
            .blob_file(&format!("sha256:{}", sha256_hex(&tampered_layer))),
    );
    assert!(
        oci.registry.cosign_verifies(&k1_file, &tampered_ref),
        "the signature covers the manifest, which is intact"
    );
    // A manifest altered after it was signed: it no longer hashes to its digest.
    let tampered_manifest = oci
        .push(
            &with_custom_section(&v1, "tampered-manifest"),
            "tampered-manifest",
        )
        .await;
    oci.registry.sign(&k1, &tampered_manifest);
    let manifest_digest = tampered_manifest.split_once('@').unwrap().1.to_owned();
    tamper_manifest(&oci.registry.blob_file(&manifest_digest));
    // Over the size limit (a 2 MiB custom section; the source allows 1 MiB).
    let big = with_custom_section(&v1, &"x".repeat(2 << 20));
    let big_ref = oci.push(&big, "big").await;
    oci.registry.sign(&k1, &big_ref);
    // Registries that fail, with certificates the source's CA bundle trusts.
    let failing = FaultyRegistry::start(&oci.registry.ca, Fault::Status500).await;
    let hanging = FaultyRegistry::start(&oci.registry.ca, Fault::Hang).await;
    // A digest never pulled (one pulled before is served from the cache, wherever the
    // source says it is). No credentials: registry.json's entry is for the registry.
    let never_pulled = oci
        .push(&with_custom_section(&v1, "never-pulled"), "never-pulled")
        .await;
    oci.registry.sign(&k1, &never_pulled);
    let elsewhere = |host: &str| {
        source(
            &never_pulled.replacen(&oci.registry.host, host, 1),
            &[&k1_pub],
        )
        .replace("credentialsFile: registry.json\n", "")
    };
    // Credentials outside --credentials-dir.
    let outside = TempDir::new("outside-credentials");
    std::fs::write(
        outside.path().join("registry.json"),
        oci.registry.docker_config(PASSWORD),
    )
    .unwrap();
    let outside_source = source(&ref1, &[&k1_pub]).replace(
        "credentialsFile: registry.json",
        &format!(
            "credentialsFile: {}",
            outside.path().join("registry.json").display()
        ),
    );
    let tag_only = format!("{}:v1", ref1.split_once('@').unwrap().0);

    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "signed with another key",
            source(&other_key, &[&k1_pub]),
            "signature",
            "none made by a trusted key",
        ),
        (
            "unsigned",
            source(&unsigned, &[&k1_pub]),
            "unsigned",
            "no cosign signature",
        ),
        (
            "a tampered layer",
            source(&tampered_ref, &[&k1_pub]),
            "digest_mismatch",
            "layer does not match its digest",
        ),
        (
            "a tampered manifest",
            source(&tampered_manifest, &[&k1_pub]),
            "digest_mismatch",
            "manifest",
        ),
        (
            "a tag alone",
            source(&tag_only, &[&k1_pub]),
            "tag_only",
            "has no digest",
        ),
        (
            "over the size limit",
            source(&big_ref, &[&k1_pub]) + "maxSizeMiB: 1\n",
            "too_large",
            "over the limit",
        ),
        (
            "a registry answering 500",
            elsewhere(&failing.host),
            "pull_failed",
            "pulling failed",
        ),
        (
            "a registry that hangs",
            elsewhere(&hanging.host),
            "pull_timeout",
            "did not answer within",
        ),
        (
            "credentials outside --credentials-dir",
            outside_source,
            "credentials_outside_dir",
            "credentialsFile",
        ),
    ];
    for (what, text, reason, says) in &cases {
        oci.publish(text);
        wait_until(TIMEOUT, &format!("{what} refused as {reason}"), || async {
            reloads(&metrics(port).await, reason) >= 1.0
        })
        .await;
        assert_eq!(
            serving(&metrics(port).await).as_deref(),
            Some(v1_sha.as_str()),
            "{what}: the serving version changed"
        );
        wait_until(
            TIMEOUT,
            &format!("{what}: a ProviderReloadFailed Event saying {says:?}"),
            || async {
                oci.pod_events()
                    .await
                    .iter()
                    .any(|(r, note)| r == "ProviderReloadFailed" && note.contains(says))
            },
        )
        .await;
    }
    assert_eq!(reloads(&metrics(port).await, "success"), 0.0);
}

/// The reference provider's policy with `requireSignature` listing `keys`.
fn policy_requiring(policy: &[u8], keys: &[&str]) -> Vec<u8> {
    let mut text = String::from_utf8(policy.to_vec()).unwrap();
    text.push_str("requireSignature:\n  keys:\n");
    for key in keys {
        text.push_str("    - |\n");
        for line in key.lines() {
            text.push_str(&format!("      {line}\n"));
        }
    }
    text.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_component_carries_the_signature_its_policy_requires() {
    use wasm_ccm_tests::oci_registry::{cosign_verifies_blob, key_pair, sign_blob};
    let oci = OciStack::start().await;
    let keys = oci.artifacts.path();
    let (k1, k1_pub) = key_pair(keys, "k1");
    let (k2, _) = key_pair(keys, "k2");
    let policy = policy_requiring(&oci.policy, &[&k1_pub]);
    let v1 = oci.reference.clone();
    let v2 = with_custom_section(&v1, "v2");
    let signed = |component: &[u8], key: &Path, name: &str| {
        let file = keys.join(name);
        std::fs::write(&file, component).unwrap();
        let signature = sign_blob(keys, key, &file);
        (file, signature)
    };
    let (v1_file, v1_sig) = signed(&v1, &k1, "v1.wasm");
    assert!(cosign_verifies_blob(
        keys,
        &keys.join("k1.pub"),
        &v1_sig,
        &v1_file
    ));
    let publish = |component: &[u8], signature: Option<&[u8]>| {
        let mut files: Vec<(&str, &[u8])> =
            vec![("simcloud.wasm", component), ("simcloud.yaml", &policy)];
        if let Some(signature) = signature {
            files.push(("simcloud.wasm.sig", signature));
        }
        kubelet_publish(oci.dir(), &files);
    };
    publish(&v1, Some(&v1_sig));
    let port = listening_port();
    let _ccm = oci.controller_manager(port, &[]);
    wait_serving(port, &sha256_hex(&v1)).await;

    // No signature beside it.
    publish(&v2, None);
    wait_until(TIMEOUT, "an unsigned version refused", || async {
        reloads(&metrics(port).await, "unsigned") >= 1.0
    })
    .await;
    // A signature by a key the policy does not list; cosign agrees it is not k1's.
    let (v2_file, by_k2) = signed(&v2, &k2, "v2.wasm");
    assert!(!cosign_verifies_blob(
        keys,
        &keys.join("k1.pub"),
        &by_k2,
        &v2_file
    ));
    publish(&v2, Some(&by_k2));
    wait_until(
        TIMEOUT,
        "a version signed by another key refused",
        || async { reloads(&metrics(port).await, "signature") >= 1.0 },
    )
    .await;
    // v1's signature beside v2: a signature of other content.
    publish(&v2, Some(&v1_sig));
    wait_until(TIMEOUT, "another component's signature refused", || async {
        reloads(&metrics(port).await, "signature") >= 2.0
    })
    .await;
    assert_eq!(
        serving(&metrics(port).await).as_deref(),
        Some(sha256_hex(&v1).as_str())
    );
    let notes = oci.pod_events().await;
    assert!(
        notes.iter().any(|(r, n)| r == "ProviderReloadFailed" && n.contains("simcloud.wasm.sig is missing")),
        "{notes:?}"
    );

    // Signed by k1: it serves.
    let (_, by_k1) = signed(&v2, &k1, "v2.wasm");
    publish(&v2, Some(&by_k1));
    wait_serving(port, &sha256_hex(&v2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_trusted_keys_narrow_the_keys_the_configmap_lists() {
    let oci = OciStack::start().await;
    let (k1, k1_pub) = oci.registry.key_pair("k1");
    let (k2, k2_pub) = oci.registry.key_pair("k2");
    // The operator trusts k1 only, from a directory apart from the ConfigMap.
    let trusted = TempDir::new("trusted-keys");
    std::fs::write(trusted.path().join("release.pub"), &k1_pub).unwrap();
    let trusted_flag = format!("--provider-trusted-keys={}", trusted.path().display());

    let v1 = oci.reference.clone();
    let ref1 = oci.push(&v1, "v1").await;
    oci.registry.sign(&k1, &ref1);
    // The source lists both keys: narrowed to k1, which signed it.
    oci.publish(&source(&ref1, &[&k1_pub, &k2_pub]));
    let port = listening_port();
    let _ccm = oci.controller_manager(port, &[&trusted_flag]);
    wait_serving(port, &sha256_hex(&v1)).await;

    // Whoever writes the ConfigMap cannot bring their own key...
    let theirs = oci
        .push(&with_custom_section(&v1, "theirs"), "theirs")
        .await;
    oci.registry.sign(&k2, &theirs);
    oci.publish(&source(&theirs, &[&k2_pub]));
    wait_until(
        TIMEOUT,
        "a source trusting only an untrusted key refused",
        || async { reloads(&metrics(port).await, "signature") >= 1.0 },
    )
    .await;
    // ...nor drop the signature: a source listing no key still needs k1's.
    oci.publish(&source(&theirs, &[]));
    wait_until(
        TIMEOUT,
        "k2's signature refused under the operator's keys",
        || async { reloads(&metrics(port).await, "signature") >= 2.0 },
    )
    .await;
    // ...nor put an unsigned component in the ConfigMap itself.
    kubelet_publish(
        oci.dir(),
        &[
            ("simcloud.wasm", &with_custom_section(&v1, "unsigned")),
            ("simcloud.yaml", &oci.policy),
        ],
    );
    wait_until(
        TIMEOUT,
        "an unsigned ConfigMap component refused",
        || async { reloads(&metrics(port).await, "unsigned") >= 1.0 },
    )
    .await;
    assert_eq!(
        serving(&metrics(port).await).as_deref(),
        Some(sha256_hex(&v1).as_str())
    );
    let notes = oci.pod_events().await;
    assert!(
        notes
            .iter()
            .any(|(r, n)| r == "ProviderReloadFailed" && n.contains("--provider-trusted-keys")),
        "{notes:?}"
    );
}
