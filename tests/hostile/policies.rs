//! Policies refused at load: over the memory budget, and credential or CA files
//! outside the credentials directory.

use super::*;

#[tokio::test]
async fn a_policy_over_the_memory_budget_is_refused_with_both_numbers() {
    let loader = loader().with_memory_budget(128 << 20);
    let err = refused_policy(&loader, "limits: {poolSize: 4, memoryMiB: 64}\n").await;
    assert!(
        err.contains("hostile.yaml")
            && err.contains("limits")
            && err.contains("359 MiB")
            && err.contains("128 MiB"),
        "{err}"
    );
    // Within the budget it loads.
    let dir = ProviderDir::new(
        "fixture_hostile",
        "hostile",
        "limits: {poolSize: 1, memoryMiB: 16, maxConcurrentRequests: 4}\n",
        TOKEN,
    );
    loader.load(&dir.wasm, Vec::new()).await.unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn credential_and_ca_files_outside_the_credentials_directory_are_refused() {
    let secrets = TempDir::new("secrets");
    let elsewhere = TempDir::new("elsewhere");
    std::fs::write(secrets.path().join("token"), TOKEN).unwrap();
    // What a vendor's policy must not be able to hand out: the pod's own token.
    let service_account = elsewhere.path().join("serviceaccount-token");
    std::fs::write(&service_account, "the pod's service-account token").unwrap();
    std::os::unix::fs::symlink(&service_account, secrets.path().join("escape")).unwrap();
    let loader = ProviderLoader::with_options(
        &EngineSettings::default(),
        &EgressSettings {
            credentials_dir: Some(secrets.path().to_owned()),
            ..EgressSettings::default()
        },
        Metrics::new(),
    )
    .unwrap();
    let policy = |file: &std::path::Path| {
        format!(
            "allowedOutboundHosts: ['https://api.example.com']\ncredentials:\n- destination: https://api.example.com\n  bearerTokenFile: '{}'\n",
            file.display()
        )
    };
    for file in [
        service_account.clone(),
        secrets.path().join("escape"),
        secrets
            .path()
            .join("../")
            .join(elsewhere.path().file_name().unwrap())
            .join("serviceaccount-token"),
    ] {
        let err = refused_policy(&loader, &policy(&file)).await;
        assert!(
            err.contains("outside the credentials directory")
                && err.contains(&file.display().to_string()),
            "{err}"
        );
    }
    let dir = ProviderDir::new(
        "fixture_hostile",
        "hostile",
        &policy(&secrets.path().join("token")),
        TOKEN,
    );
    loader
        .load(&dir.wasm, Vec::new())
        .await
        .expect("a file inside the credentials directory loads");
    // Nor can it add a trust anchor of its own for the host's connections (a CA that
    // would let a server it names pass for the cloud, the Keystone login included).
    let attacker_ca = elsewhere.path().join("attacker-ca.pem");
    std::fs::write(&attacker_ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let err = refused_policy(
        &loader,
        &format!("tls: {{caBundleFile: '{}'}}\n", attacker_ca.display()),
    )
    .await;
    assert!(
        err.contains("outside the credentials directory") && err.contains("attacker-ca.pem"),
        "{err}"
    );
}
