//! Each way a source is refused leaves the serving version, with its metric and Event.

use super::*;

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
