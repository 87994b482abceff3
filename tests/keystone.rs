//! Keystone v3 logins by the host, against the real Keystone (tests/keystone-peer) on
//! 127.0.0.1: application-credential and password logins, the catalog answered by the
//! host, the token on the catalog's endpoints only, renewal before expiry, a new login
//! when a token is revoked, and a wrong secret held as a clear error. The `hostile`
//! fixture sends the requests (it prints whatever it gets back), and the endpoint is a
//! service double here that validates every token with Keystone, as OpenStack
//! services do.

use std::time::Duration;

use keystone_peer::Settings;
use wasm_ccm_tests::keystone::{Cloud, PASSWORD, PROJECT, USER, get};
use wasm_ccm_tests::{CapturedLogs, act, label};

#[tokio::test(flavor = "current_thread")]
async fn application_credential_token_reaches_only_the_catalog_endpoints_and_never_the_guest() {
    let (logs, _guard) = CapturedLogs::install_at(tracing::Level::DEBUG);
    let cloud = Cloud::start(Settings::default()).await;
    let (id, secret) = cloud.application_credential("wasm-ccm").await;
    let loaded = cloud
        .provider(
            &format!(
                "      applicationCredentialId: {id}\n      applicationCredentialSecretFile: secret\n"
            ),
            &secret,
        )
        .await;
    let provider = &loaded.provider;

    // The catalog, answered by the host from its login.
    let catalog = get(
        provider,
        &format!("{}/auth/catalog", cloud.keystone.auth_url()),
    )
    .await
    .unwrap();
    assert_eq!(label(&catalog, "status"), "200");
    let body = label(&catalog, "body");
    assert!(body.contains(r#""type":"compute""#), "{body}");
    assert!(
        body.contains(&format!("{}/compute/v2.1", cloud.service.url)),
        "{body}"
    );

    // Nova's public endpoint gets a token Keystone accepts.
    let servers = get(
        provider,
        &format!("{}/compute/v2.1/servers", cloud.service.url),
    )
    .await
    .unwrap();
    assert_eq!(label(&servers, "status"), "200", "{servers:?}");
    let accepted = cloud.service.accepted();
    assert_eq!(accepted.len(), 1);
    let token = &accepted[0];

    // Not the internal endpoint, not another path, not the identity API.
    for url in [
        format!("{}/internal/servers", cloud.service.url),
        format!("{}/other", cloud.service.url),
        format!("{}/users", cloud.keystone.auth_url()),
        format!("{}/auth/tokens", cloud.keystone.auth_url()),
    ] {
        let refused = get(provider, &url).await;
        assert!(refused.is_err(), "{url}: {refused:?}");
    }
    // Nor the guest's own token header.
    let own = act(
        provider,
        &[
            ("hostile/action", "fetch"),
            (
                "hostile/url",
                &format!("{}/compute/v2.1/servers", cloud.service.url),
            ),
            ("hostile/header", "X-Auth-Token: forged"),
        ],
    )
    .await;
    assert!(own.is_err(), "{own:?}");
    assert_eq!(cloud.service.accepted().len(), 1);

    // One login served all of it; the token and the secret are nowhere the guest or
    // the metrics reach.
    assert_eq!(loaded.logins("success"), 1);
    let snoop = act(provider, &[("hostile/action", "snoop")]).await.unwrap();
    let seen = format!(
        "{catalog:?}{servers:?}{snoop:?}{}{}",
        loaded.loader.metrics().encode(),
        logs.text()
    );
    assert!(!seen.contains(token.as_str()), "the token leaked: {seen}");
    assert!(!seen.contains(&secret), "the secret leaked: {seen}");
    let denied = loaded.loader.metrics().encode();
    assert!(
        denied.contains(r#"wasm_ccm_egress_denied_total{provider="hostile",host="",reason="keystone_identity"} 2"#),
        "{denied}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn password_login_is_scoped_to_the_project_and_a_revoked_token_is_replaced_once() {
    let cloud = Cloud::start(Settings::default()).await;
    let loaded = cloud
        .provider(
            &format!(
                "      userName: {USER}\n      userDomainName: Default\n      passwordFile: secret\n      projectName: {PROJECT}\n      projectDomainId: default\n"
            ),
            PASSWORD,
        )
        .await;
    let provider = &loaded.provider;
    let servers = format!("{}/compute/v2.1/servers", cloud.service.url);
    // The endpoint is not known before the first login: the host logs in to find it.
    let first = get(provider, &servers).await.unwrap();
    assert_eq!(label(&first, "status"), "200", "{first:?}");
    let token = cloud.service.accepted()[0].clone();
    assert_eq!(loaded.logins("success"), 1);

    // Revoked: the service answers 401, the host logs in again and sends once more.
    cloud.keystone.revoke(&token).await;
    let second = get(provider, &servers).await.unwrap();
    assert_eq!(label(&second, "status"), "200", "{second:?}");
    let accepted = cloud.service.accepted();
    assert_eq!(accepted.len(), 2);
    assert_ne!(accepted[1], token, "a new token");
    assert_eq!(loaded.logins("success"), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn a_token_is_renewed_before_it_expires() {
    // Tokens live 20 s: renewed half-way, which leaves a request sent just before the
    // renewal 10 s to be validated, ample on a loaded machine.
    let cloud = Cloud::start(Settings {
        token_lifetime: Duration::from_secs(20),
    })
    .await;
    let (id, secret) = cloud.application_credential("short-lived").await;
    let loaded = cloud
        .provider(
            &format!(
                "      applicationCredentialId: {id}\n      applicationCredentialSecretFile: secret\n"
            ),
            &secret,
        )
        .await;
    let provider = &loaded.provider;
    let servers = format!("{}/compute/v2.1/servers", cloud.service.url);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let answer = get(provider, &servers).await.unwrap();
        assert_eq!(label(&answer, "status"), "200", "never a 401: {answer:?}");
        let accepted = cloud.service.accepted();
        if accepted.iter().any(|t| *t != accepted[0]) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no renewal in 60 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Renewed before expiry, not after a 401: the service answered every request it
    // received (a token refused and sent again would show as one received but not
    // accepted). One more renewal is right when Keystone, loaded, took so long to
    // answer that the token came with less than half its life left.
    assert_eq!(
        cloud.service.received().len(),
        cloud.service.accepted().len(),
        "a request was refused"
    );
    assert!(loaded.logins("success") >= 2);
    assert_eq!(loaded.logins("failure"), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_wrong_secret_is_a_clear_error_held_without_a_login_storm() {
    let (logs, _guard) = CapturedLogs::install_at(tracing::Level::DEBUG);
    let cloud = Cloud::start(Settings::default()).await;
    let (id, _) = cloud.application_credential("wasm-ccm").await;
    let wrong = "not-the-secret-5e2b";
    let loaded = cloud
        .provider(
            &format!(
                "      applicationCredentialId: {id}\n      applicationCredentialSecretFile: secret\n"
            ),
            wrong,
        )
        .await;
    let provider = &loaded.provider;
    let catalog = format!("{}/auth/catalog", cloud.keystone.auth_url());
    for _ in 0..5 {
        let refused = get(provider, &catalog).await;
        assert!(refused.is_err(), "{refused:?}");
        assert!(!format!("{refused:?}").contains(wrong));
    }
    // Five requests within the hold: one login.
    assert_eq!(loaded.logins("failure"), 1);
    assert_eq!(loaded.logins("success"), 0);
    assert!(cloud.service.accepted().is_empty());
    // The log says what failed, in Keystone's words, and never the secret.
    let text = logs.text();
    let expected = format!(
        "Keystone login at {}/v3 failed: HTTP 401 Unauthorized: The request you have made requires authentication.",
        cloud.keystone.url()
    );
    assert!(text.contains(&expected), "{text}");
    assert!(!text.contains(wrong), "{text}");
}

/// The trustee's password of the trust tests.
const TRUSTEE_PASSWORD: &str = "trustee-password-7f3a";

/// occm's `trust-id` with `trustee-id`/`trustee-password` (a Magnum cluster's): the
/// host logs in as the trustee, scoped to the trust, and the endpoint gets a token
/// Keystone says is the trust's, in the trustor's project.
#[tokio::test(flavor = "current_thread")]
async fn a_trust_logs_in_as_its_trustee_scoped_to_the_trust() {
    let cloud = Cloud::start(Settings::default()).await;
    let trustee = cloud
        .keystone
        .create_user("cluster-trustee", TRUSTEE_PASSWORD, &cloud.project_id)
        .await;
    let trust = cloud
        .keystone
        .create_trust(
            USER,
            &cloud.user_id,
            PASSWORD,
            PROJECT,
            &cloud.project_id,
            &trustee,
        )
        .await;
    let loaded = cloud
        .provider(
            &format!(
                "      userId: {trustee}\n      passwordFile: secret\n      trustId: {trust}\n"
            ),
            TRUSTEE_PASSWORD,
        )
        .await;
    let servers = get(
        &loaded.provider,
        &format!("{}/compute/v2.1/servers", cloud.service.url),
    )
    .await
    .unwrap();
    assert_eq!(label(&servers, "status"), "200", "{servers:?}");
    let token = cloud.service.accepted()[0].clone();
    let body = cloud.keystone.token_body(&token).await.unwrap();
    assert_eq!(body["OS-TRUST:trust"]["id"], trust.as_str(), "{body}");
    assert_eq!(body["user"]["id"], trustee.as_str(), "{body}");
    assert_eq!(body["project"]["id"], cloud.project_id.as_str(), "{body}");
    assert_eq!(loaded.logins("success"), 1);
}

/// occm's `use-clouds`: a clouds.yaml kept whole in the Secret. Its entry's application
/// credential logs in; the Secret rotated (a new credential, the old one deleted) is
/// read at the next login; an entry whose `auth_url` is not the rule's is refused by
/// name before anything is sent, and no secret of the file is logged.
#[tokio::test(flavor = "current_thread")]
async fn a_clouds_yaml_entry_logs_in_and_a_rotated_file_is_read_at_the_next_login() {
    let (logs, _guard) = CapturedLogs::install_at(tracing::Level::DEBUG);
    let cloud = Cloud::start(Settings::default()).await;
    let clouds = |id: &str, secret: &str| {
        format!(
            "clouds:\n  openstack:\n    auth_type: v3applicationcredential\n    \
             region_name: RegionOne\n    auth:\n      auth_url: {}\n      \
             application_credential_id: {id}\n      application_credential_secret: {secret}\n  \
             elsewhere:\n    auth:\n      auth_url: https://elsewhere.example.com/v3\n      \
             user_id: u\n      password: {secret}\n      project_id: p\n",
            cloud.keystone.auth_url()
        )
    };
    let (first_id, first_secret) = cloud.application_credential("clouds-first").await;
    let loaded = cloud
        .provider_with_file(
            "      cloudsFile: clouds.yaml\n      cloud: openstack\n",
            "clouds.yaml",
            &clouds(&first_id, &first_secret),
        )
        .await;
    let servers = format!("{}/compute/v2.1/servers", cloud.service.url);
    let first = get(&loaded.provider, &servers).await.unwrap();
    assert_eq!(label(&first, "status"), "200", "{first:?}");
    let token = cloud.service.accepted()[0].clone();
    let body = cloud.keystone.token_body(&token).await.unwrap();
    assert_eq!(
        body["application_credential"]["id"],
        first_id.as_str(),
        "{body}"
    );

    // Rotated: the Secret holds a new credential, the old one is deleted.
    let (second_id, second_secret) = cloud.application_credential("clouds-second").await;
    std::fs::write(
        loaded.dir.dir.path().join("clouds.yaml"),
        clouds(&second_id, &second_secret),
    )
    .unwrap();
    cloud
        .keystone
        .delete_application_credential(&cloud.user_id, &first_id)
        .await;
    let second = get(&loaded.provider, &servers).await.unwrap();
    assert_eq!(label(&second, "status"), "200", "{second:?}");
    let accepted = cloud.service.accepted();
    let body = cloud
        .keystone
        .token_body(accepted.last().unwrap())
        .await
        .unwrap();
    assert_eq!(
        body["application_credential"]["id"],
        second_id.as_str(),
        "{body}"
    );
    assert_eq!(loaded.logins("success"), 2);

    // An entry for another identity endpoint: refused by name, nothing sent there.
    let elsewhere = cloud
        .provider_with_file(
            "      cloudsFile: clouds.yaml\n      cloud: elsewhere\n",
            "clouds.yaml",
            &clouds(&second_id, &second_secret),
        )
        .await;
    let refused = get(&elsewhere.provider, &servers).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(elsewhere.logins("success"), 0);
    let text = logs.text();
    assert!(
        text.contains(
            "clouds.yaml: clouds.elsewhere.auth.auth_url `https://elsewhere.example.com/v3` is \
             not the rule's authUrl"
        ),
        "{text}"
    );
    for secret in [&first_secret, &second_secret] {
        assert!(
            !text.contains(secret.as_str()),
            "a secret was logged: {text}"
        );
        assert!(!format!("{refused:?}").contains(secret.as_str()));
    }
}
