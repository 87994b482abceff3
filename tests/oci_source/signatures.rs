//! Signatures beyond the registry's: a ConfigMap component's `NAME.wasm.sig` its
//! policy requires, and the operator's `--provider-trusted-keys`.

use super::*;

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
        || async { reloads(&metrics(port).await, "key_not_trusted") >= 1.0 },
    )
    .await;
    // ...nor drop the signature: a source listing no key still needs k1's.
    oci.publish(&source(&theirs, &[]));
    wait_until(
        TIMEOUT,
        "k2's signature refused under the operator's keys",
        || async { reloads(&metrics(port).await, "signature") >= 1.0 },
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
