//! The sandbox around a provider: egress only where the policy allows, credentials
//! injected by the host, and loading errors that name the file and the reason.

use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::{ProviderDir, Simulated, TOKEN, cloud_config, loader, node, policy_for};

#[tokio::test]
async fn request_outside_the_allowlist_never_reaches_the_network() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("n")));
    // The allowlist names another port: the cloud's own address is not allowed.
    let other = format!(
        "http://127.0.0.1:{}",
        cloud.addr().port().wrapping_add(1).max(1)
    );
    let policy = format!("allowedOutboundHosts: ['{other}']\n");
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy, TOKEN);
    let provider = loader()
        .load(&dir.wasm, cloud_config(&cloud))
        .await
        .unwrap();

    let err = provider
        .instances_v2()
        .unwrap()
        .instance_exists(&node("n", None, &[]))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("denied by the host's egress policy"),
        "{err}"
    );
    assert!(!err.is_instance_not_found());
    assert_eq!(
        cloud.total_requests(),
        0,
        "the denied request reached the cloud"
    );
}

#[tokio::test]
async fn no_policy_file_means_no_egress() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let dir = ProviderDir::new("reference_provider", "simcloud", "", TOKEN);
    std::fs::remove_file(dir.dir.path().join("simcloud.yaml")).unwrap();
    let provider = loader()
        .load(&dir.wasm, cloud_config(&cloud))
        .await
        .unwrap();
    let err = provider
        .clusters()
        .unwrap()
        .list_clusters()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("denied"), "{err}");
    assert_eq!(cloud.total_requests(), 0);
}

#[tokio::test]
async fn host_injects_the_bearer_token() {
    let sim = Simulated::start().await;
    sim.cloud
        .with_state(|s| s.create_instance(NewInstance::named("n")));
    let v2 = sim.provider.instances_v2().unwrap();
    assert!(v2.instance_exists(&node("n", None, &[])).await.unwrap());
    assert_eq!(sim.cloud.with_state(|s| s.unauthorized), 0);

    // A rotated Secret with a wrong token: the cloud refuses, the error says so.
    std::fs::write(sim.dir.dir.path().join("token"), "wrong-token").unwrap();
    let err = v2.instance_exists(&node("n", None, &[])).await.unwrap_err();
    assert!(err.to_string().contains("HTTP 401"), "{err}");
    assert_eq!(sim.cloud.with_state(|s| s.unauthorized), 1);

    // Rotated back: works again without reloading the provider.
    std::fs::write(sim.dir.dir.path().join("token"), TOKEN).unwrap();
    assert!(v2.instance_exists(&node("n", None, &[])).await.unwrap());
}

#[tokio::test]
async fn failing_initialize_fails_the_load_with_the_reason() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let dir = ProviderDir::new("fixture_hostile", "hostile", "", TOKEN);
    let err = loader()
        .load(&dir.wasm, b"fail".to_vec())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("hostile.wasm"), "{text}");
    assert!(
        text.contains("refusing to start: the config says fail"),
        "{text}"
    );

    // The reference provider explains a bad cloud config.
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy_for(&cloud), TOKEN);
    let err = loader()
        .load(&dir.wasm, b"{\"endpoint\": 3}".to_vec())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("invalid cloud config"), "{err}");
    let err = loader().load(&dir.wasm, Vec::new()).await.unwrap_err();
    assert!(
        err.to_string().contains("the cloud config is empty"),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_policy_names_the_file_and_field() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let dir = ProviderDir::new(
        "reference_provider",
        "simcloud",
        "allowedHosts: []\n",
        TOKEN,
    );
    let err = loader()
        .load(&dir.wasm, cloud_config(&cloud))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("simcloud.yaml"), "{text}");
    assert!(text.contains("allowedHosts"), "{text}");
}

/// An interceptor registered with the broker (`wasm-ccm conformance`'s `Throttle`):
/// the host answers the next allowed request 429 with `Retry-After` itself, the SDK
/// makes that the contract's `retry-after` with the same delay, and nothing reaches the
/// cloud; the request after it does.
#[tokio::test]
async fn throttling_answered_by_the_host_never_reaches_the_cloud() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("n")));
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy_for(&cloud), TOKEN);
    let loader = loader();
    let provider = loader.load(&dir.wasm, cloud_config(&cloud)).await.unwrap();
    let v2 = provider.instances_v2().unwrap();
    let before = cloud.total_requests();

    loader.broker().set_interceptor(Some(std::sync::Arc::new(
        wasm_ccm::cli::conformance::Throttle::new(1, std::time::Duration::from_secs(7)),
    )));
    let err = v2.instance_exists(&node("n", None, &[])).await.unwrap_err();
    match err.cloud() {
        Some(wasm_ccm_host::provider::CloudError::RetryAfter { delay, .. }) => {
            assert_eq!(*delay, std::time::Duration::from_secs(7))
        }
        other => panic!("expected retry-after, got {other:?} ({err})"),
    }
    assert_eq!(cloud.total_requests(), before, "the throttled request left");

    assert!(v2.instance_exists(&node("n", None, &[])).await.unwrap());
    assert!(cloud.total_requests() > before);
}

/// Every request says who sent it (`User-Agent: wasm-ccm/<version> (provider <name>)`,
/// for the cloud's logs and support), unless the provider sets its own.
#[tokio::test]
async fn requests_carry_the_host_s_user_agent_unless_the_provider_sets_one() {
    let echo = wasm_ccm_tests::RawServer::start(wasm_ccm_tests::RawBehavior::Respond(
        std::sync::Arc::new(|request: &str| (200, request.to_owned())),
    ))
    .await;
    let policy = format!("allowedOutboundHosts: ['{}']\n", echo.url());
    let loader = loader();
    let (_dir, provider) = wasm_ccm_tests::hostile(&loader, &policy).await;
    let sent = |header: Option<&'static str>| {
        let (provider, url) = (provider.clone(), echo.url());
        async move {
            let mut annotations = vec![("hostile/action", "fetch"), ("hostile/url", url.as_str())];
            annotations.extend(header.map(|h| ("hostile/header", h)));
            let answer = wasm_ccm_tests::act(&provider, &annotations).await.unwrap();
            wasm_ccm_tests::label(&answer, "body").to_ascii_lowercase()
        }
    };
    let ours = sent(None).await;
    let expected = format!(
        "user-agent: wasm-ccm/{} (provider hostile)",
        env!("CARGO_PKG_VERSION")
    );
    assert!(ours.contains(&expected), "{ours}");
    let theirs = sent(Some("User-Agent: hostile-sdk/1.0")).await;
    assert!(
        theirs.contains("user-agent: hostile-sdk/1.0") && !theirs.contains("wasm-ccm/"),
        "{theirs}"
    );
}
