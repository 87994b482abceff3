//! A hostile provider against the broker's credentials: each test names an attack a
//! provider could make with the credentials the host adds for it, and shows the host
//! refuses it before anything reaches the cloud (or, for logins, that the host does
//! not let itself be made to log in over and over).
//!
//! Keystone attacks run against the real Keystone (tests/keystone-peer) and a service
//! double in its catalog that validates every token with it; AWS attacks and those on
//! the header kinds against a loopback server standing for the cloud, which records
//! what reaches it.

use std::sync::{Arc, Mutex};

use keystone_peer::Settings;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderLoader};
use wasm_ccm_tests::keystone::{Cloud, Loaded, get};
use wasm_ccm_tests::types::InstanceInfo;
use wasm_ccm_tests::{
    ProviderDir, RawBehavior, RawServer, TOKEN, act, hostile, label, loader, other_message,
    refused_policy,
};

/// The hostile fixture's `fetch` with `extra` annotations (method, header, form).
async fn fetch(
    provider: &Provider,
    url: &str,
    extra: &[(&str, &str)],
) -> Result<InstanceInfo, ProviderError> {
    let mut annotations = vec![("hostile/action", "fetch"), ("hostile/url", url)];
    annotations.extend_from_slice(extra);
    act(provider, &annotations).await
}

/// `wasm_ccm_egress_denied_total` of the hostile provider for `reason`.
fn denied(loader: &ProviderLoader, reason: &str) -> u64 {
    wasm_ccm_tests::metric(
        &loader.metrics().encode(),
        &format!(
            r#"wasm_ccm_egress_denied_total{{provider="hostile",host="",reason="{reason}"}} "#
        ),
    ) as u64
}

/// The cloud with an application credential, and the fixture under its rule plus
/// `extra` lines of the rule (e.g. `allowedActions`).
async fn keystone_provider(extra: &str) -> (Cloud, Loaded) {
    let cloud = Cloud::start(Settings::default()).await;
    let (id, secret) = cloud.application_credential("wasm-ccm").await;
    let loaded = cloud
        .provider(
            &format!(
                "      applicationCredentialId: {id}\n      applicationCredentialSecretFile: secret\n{extra}"
            ),
            &secret,
        )
        .await;
    (cloud, loaded)
}

/// Re-login amplification, first way: the provider adds `X-Service-Token: bogus`,
/// which Keystone's middleware answers 401 to, so that the host logs in again for
/// every request. The header (and every header the middleware reads as a credential)
/// is refused before the request leaves.
#[tokio::test(flavor = "current_thread")]
async fn keystone_relogin_amplification_through_a_guest_set_service_token_is_refused() {
    let (cloud, loaded) = keystone_provider("").await;
    let servers = format!("{}/compute/v2.1/servers", cloud.service.url);
    assert_eq!(
        label(
            &fetch(&loaded.provider, &servers, &[]).await.unwrap(),
            "status"
        ),
        "200"
    );
    for header in [
        "X-Service-Token: bogus",
        "X-Storage-Token: bogus",
        "X-Identity-Status: Confirmed",
        "X-Roles: admin",
    ] {
        let refused = fetch(&loaded.provider, &servers, &[("hostile/header", header)]).await;
        assert!(refused.is_err(), "{header}: {refused:?}");
    }
    assert_eq!(denied(&loaded.loader, "guest_credential_header"), 4);
    assert_eq!(
        cloud.service.received().len(),
        1,
        "nothing but the first request reached the service"
    );
    assert_eq!(loaded.logins("success"), 1);
}

/// Re-login amplification, second way: an endpoint answering 401 to a token Keystone
/// still accepts. The host asks Keystone about its token (at most every 10 s) instead
/// of logging in again for each 401; every 401 goes to the provider.
#[tokio::test(flavor = "current_thread")]
async fn keystone_relogin_storm_from_401_answers_to_a_valid_token_is_refused() {
    let (cloud, loaded) = keystone_provider("").await;
    let always = format!("{}/compute/v2.1/always-401", cloud.service.url);
    for _ in 0..20 {
        let answer = fetch(&loaded.provider, &always, &[]).await.unwrap();
        assert_eq!(label(&answer, "status"), "401");
    }
    // One login for all twenty, where each 401 used to be a login.
    assert_eq!(loaded.logins("success"), 1);
    // The token still works.
    let servers = format!("{}/compute/v2.1/servers", cloud.service.url);
    assert_eq!(
        label(
            &fetch(&loaded.provider, &servers, &[]).await.unwrap(),
            "status"
        ),
        "200"
    );
    assert_eq!(loaded.logins("success"), 1);
}

/// Octavia's pecan reads `_method` from the query or a form body, so a `DELETE` that
/// `allowedActions` allows would become an update (`?_method=put`), and a `GET` a
/// create; method override headers do the same on other servers. All are refused;
/// the plain requests pass.
#[tokio::test(flavor = "current_thread")]
async fn octavia_method_override_through_query_form_or_header_is_refused() {
    let (cloud, loaded) =
        keystone_provider("    allowedActions: ['GET **/servers', 'DELETE **/servers/*']\n").await;
    let servers = format!("{}/compute/v2.1/servers", cloud.service.url);
    let one = format!("{servers}/s1");
    assert_eq!(
        label(
            &fetch(&loaded.provider, &servers, &[]).await.unwrap(),
            "status"
        ),
        "200"
    );
    assert_eq!(
        label(
            &fetch(&loaded.provider, &one, &[("hostile/method", "DELETE")])
                .await
                .unwrap(),
            "status"
        ),
        "200"
    );
    let attacks: [(&str, Vec<(&str, &str)>); 5] = [
        (
            &format!("{one}?_method=put"),
            vec![("hostile/method", "DELETE")],
        ),
        (
            &format!("{one}?_METHOD=post"),
            vec![("hostile/method", "DELETE")],
        ),
        (&format!("{servers}?%5Fmethod=post"), vec![]),
        (&servers, vec![("hostile/form", "name=x&_method=post")]),
        (
            &servers,
            vec![("hostile/header", "X-HTTP-Method-Override: POST")],
        ),
    ];
    for (url, extra) in &attacks {
        let refused = fetch(&loaded.provider, url, extra).await;
        assert!(refused.is_err(), "{url} {extra:?}: {refused:?}");
    }
    assert_eq!(
        denied(&loaded.loader, "method_override"),
        attacks.len() as u64
    );
    assert_eq!(
        cloud.service.received().len(),
        2,
        "only the plain requests reached the service: {:?}",
        cloud.service.received()
    );
}

/// `allowedActions` of a bearer rule are read from the method a request carries, while
/// Rack, Laravel, Symfony, Express's `method-override` and pecan take a `_method` in the
/// query or a form, or an override header, for the method: `GET /things/t1?_method=DELETE`
/// would delete under a rule that allows reading. Each spelling is refused before the
/// token is added and never reaches the server (the guest is told the request was
/// denied, the metric says why); the plain `GET` reaches it with the token.
#[tokio::test(flavor = "current_thread")]
async fn method_overrides_under_a_bearer_rule_s_allowed_actions_never_reach_the_server() {
    let arrived = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = arrived.clone();
    let server = RawServer::start(RawBehavior::Respond(Arc::new(move |request: &str| {
        record.lock().unwrap().push(request.to_owned());
        (200, "{}".to_owned())
    })))
    .await;
    let base = server.url();
    let policy = format!(
        "allowedOutboundHosts: ['{base}']\ncredentials:\n  - destination: '{base}'\n    bearerTokenFile: token\n    allowedActions: ['GET /things/*', 'POST /things']\n"
    );
    let loader = loader();
    let (_dir, provider) = hostile(&loader, &policy).await;
    let things = format!("{base}/things");
    let one = format!("{things}/t1");
    let read = fetch(&provider, &one, &[]).await.unwrap();
    assert_eq!(label(&read, "status"), "200");
    let post = ("hostile/method", "POST");
    let attacks: [(String, Vec<(&str, &str)>); 7] = [
        (format!("{one}?_method=DELETE"), vec![]),
        (format!("{one}?_METHOD=delete"), vec![]),
        (format!("{one}?%5Fmethod=DELETE"), vec![]),
        (format!("{one}?a=1;_method=DELETE"), vec![]),
        (
            things.clone(),
            vec![post, ("hostile/form", "name=x&_method=DELETE")],
        ),
        (
            things.clone(),
            vec![post, ("hostile/header", "X-HTTP-Method-Override: DELETE")],
        ),
        (
            things.clone(),
            vec![post, ("hostile/header", "X-Method-Override: DELETE")],
        ),
    ];
    for (url, extra) in &attacks {
        let refused = fetch(&provider, url, extra).await.unwrap_err();
        assert_eq!(
            other_message(&refused),
            "request denied by the host's egress policy",
            "{url} {extra:?}"
        );
    }
    assert_eq!(denied(&loader, "method_override"), attacks.len() as u64);
    let arrived = arrived.lock().unwrap();
    assert_eq!(arrived.len(), 1, "only the plain GET arrived: {arrived:?}");
    assert!(
        arrived[0].starts_with("GET /things/t1 HTTP/1.1\r\n")
            && arrived[0].contains(&format!("Bearer {TOKEN}")),
        "{}",
        arrived[0]
    );
}

/// A catalog endpoint on Keystone's own origin (`https://cloud/` for Neutron,
/// `https://cloud/identity/v3` for Keystone, as some clouds publish them): the identity
/// API behind a doubled slash, an encoded letter or a dot segment is still the identity
/// API, and never gets the token.
#[tokio::test(flavor = "current_thread")]
async fn identity_api_behind_a_doubled_slash_or_an_encoding_gets_no_token() {
    let cloud = Cloud::start(Settings::default()).await;
    cloud
        .keystone
        .register_endpoint(
            "network",
            "neutron",
            "public",
            &format!("{}/", cloud.keystone.url()),
        )
        .await;
    let (id, secret) = cloud.application_credential("wasm-ccm").await;
    let loaded = cloud
        .provider(
            &format!(
                "      applicationCredentialId: {id}\n      applicationCredentialSecretFile: secret\n"
            ),
            &secret,
        )
        .await;
    // The catalog (and with it the Neutron endpoint) is known after the first login.
    let catalog = get(
        &loaded.provider,
        &format!("{}/auth/catalog", cloud.keystone.auth_url()),
    )
    .await
    .unwrap();
    assert!(label(&catalog, "body").contains("neutron"), "{catalog:?}");
    let origin = cloud.keystone.url();
    let attacks = [
        format!("{origin}//v3/users"),
        format!("{origin}/%763/users"),
        format!("{origin}/v2.0/../v3/credentials"),
        format!("{origin}/v3//auth/tokens"),
    ];
    for url in &attacks {
        let refused = get(&loaded.provider, url).await;
        assert!(refused.is_err(), "{url}: {refused:?}");
    }
    assert_eq!(
        denied(&loaded.loader, "keystone_identity"),
        attacks.len() as u64
    );
}

/// An AWS rule's `allowedActions` read where EC2 reads the action: a second `Action`
/// in another spelling, after a `;`, in an encoded or multipart body, or an
/// `X-Amz-Target` beside it, would let a listed action stand in for another. Each is
/// refused before signing; the plain request is signed and sent.
#[tokio::test]
async fn aws_actions_hidden_behind_another_reading_of_the_form_are_refused() {
    let echo = RawServer::start(RawBehavior::Respond(std::sync::Arc::new(
        |request: &str| (200, request.to_owned()),
    )))
    .await;
    let policy = format!(
        "allowedOutboundHosts: ['{url}']\ncredentials:\n  - destination: '{url}'\n    aws: {{region: us-east-1, service: ec2, accessKeyIdFile: aws-id, secretAccessKeyFile: aws-secret}}\n    allowedActions: ['ec2:Describe*']\n",
        url = echo.url()
    );
    let dir = ProviderDir::new("fixture_hostile", "hostile", &policy, TOKEN);
    std::fs::write(dir.dir.path().join("aws-id"), "AKIDEXAMPLE").unwrap();
    std::fs::write(dir.dir.path().join("aws-secret"), "secret-example").unwrap();
    let loader = loader();
    let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
    let send = |url: String, extra: Vec<(&'static str, &'static str)>| {
        let provider = provider.clone();
        async move {
            let mut annotations = vec![
                ("hostile/action", "fetch"),
                ("hostile/url", url.as_str()),
                ("hostile/method", "POST"),
            ];
            annotations.extend(extra);
            act(&provider, &annotations).await
        }
    };
    let base = echo.url();
    let signed = send(
        base.clone(),
        vec![(
            "hostile/form",
            "Action=DescribeInstances&Version=2016-11-15",
        )],
    )
    .await
    .unwrap();
    assert!(
        label(&signed, "body").contains("AWS4-HMAC-SHA256"),
        "{signed:?}"
    );
    let attacks: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            base.clone(),
            vec![(
                "hostile/form",
                "Action=DescribeInstances&action=TerminateInstances",
            )],
        ),
        (
            base.clone(),
            vec![(
                "hostile/form",
                "Action=DescribeInstances;Action=TerminateInstances",
            )],
        ),
        (
            format!("{base}?Action=DescribeInstances"),
            vec![("hostile/form", "Action=TerminateInstances")],
        ),
        (
            format!("{base}?ACTION=TerminateInstances"),
            vec![("hostile/form", "Action=DescribeInstances")],
        ),
        (
            base.clone(),
            vec![
                ("hostile/form", "Action=DescribeInstances"),
                (
                    "hostile/header",
                    "X-Amz-Target: AmazonEC2.TerminateInstances",
                ),
            ],
        ),
        (
            base.clone(),
            vec![
                ("hostile/form", "Action=DescribeInstances"),
                ("hostile/header", "Content-Encoding: gzip"),
            ],
        ),
    ];
    let before = echo.connections.load(std::sync::atomic::Ordering::SeqCst);
    for (url, extra) in attacks {
        let refused = send(url.clone(), extra.clone()).await;
        assert!(refused.is_err(), "{url} {extra:?}: {refused:?}");
    }
    assert_eq!(
        echo.connections.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "nothing reached the endpoint"
    );
}

/// `allowedActions` on a rule that signs for a REST protocol service (EKS, S3, ...):
/// those ignore `X-Amz-Target`, so `X-Amz-Target: Any.DescribeCluster` on
/// `DELETE /clusters/prod` would pass as a listed action. Such a policy is refused
/// when it is read, naming the service.
#[tokio::test]
async fn allowed_actions_for_a_rest_protocol_service_are_refused_at_load() {
    let policy = "allowedOutboundHosts: ['https://eks.eu-west-1.amazonaws.com']\ncredentials:\n  - destination: 'https://*.eu-west-1.amazonaws.com'\n    aws: {services: [ec2, eks], accessKeyIdFile: aws-id, secretAccessKeyFile: aws-secret}\n    allowedActions: ['ec2:Describe*', 'eks:DescribeCluster']\n";
    let err = refused_policy(&loader(), policy).await;
    assert!(
        err.contains("hostile.yaml")
            && err.contains("credentials[0].allowedActions")
            && err.contains("`eks`"),
        "{err}"
    );
}

/// The web-identity token goes to the rule's `stsEndpoint`: a host whose first label
/// is `sts` but which is an S3 bucket (`sts.s3.amazonaws.com`) would receive it. Only
/// STS's own host names (or a loopback emulator) are accepted.
#[tokio::test]
async fn a_web_identity_token_for_an_sts_lookalike_host_is_refused_at_load() {
    let policy = "allowedOutboundHosts: ['https://ec2.us-east-1.amazonaws.com']\ncredentials:\n  - destination: 'https://ec2.us-east-1.amazonaws.com'\n    aws:\n      services: [ec2]\n      webIdentity: {roleArn: 'arn:aws:iam::111122223333:role/ccm', webIdentityTokenFile: token, stsEndpoint: 'https://sts.s3.amazonaws.com'}\n";
    let err = refused_policy(&loader(), policy).await;
    assert!(
        err.contains("credentials[0].aws.webIdentity.stsEndpoint")
            && err.contains("sts.s3.amazonaws.com"),
        "{err}"
    );
}

/// Two rules with the same Keystone login and different `allowedActions`: the first
/// rule's list would silently apply to both. Refused when the policy is read.
#[tokio::test]
async fn two_rules_for_one_keystone_login_are_refused_at_load() {
    let rule = |actions: &str| {
        format!(
            "  - destination: https://keystone.example.com:5000\n    keystone: {{authUrl: 'https://keystone.example.com:5000/v3', applicationCredentialId: a1, applicationCredentialSecretFile: secret}}\n    allowedActions: ['{actions}']\n"
        )
    };
    let policy = format!(
        "credentials:\n{}{}",
        rule("GET **/servers"),
        rule("DELETE **/servers/*")
    );
    let err = refused_policy(&loader(), &policy).await;
    assert!(
        err.contains("credentials[1].keystone") && err.contains("credentials[0]"),
        "{err}"
    );
}
