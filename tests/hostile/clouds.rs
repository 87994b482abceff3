//! Hostile clouds: one that never answers, endless or huge bodies, huge header
//! sections, and garbage answers.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_that_never_answers_times_out() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("good-node")));
    let silent = RawServer::start(RawBehavior::Silent).await;
    let loader = loader();
    let (_g, good) = reference(&loader, &cloud).await;
    let policy = format!(
        "allowedOutboundHosts: ['{}']\nlimits: {{requestTimeout: 500ms, callTimeout: 5s}}\n",
        silent.url()
    );
    let (_h, bad) = hostile(&loader, &policy).await;
    let err = keeps_serving(
        &good,
        act(
            &bad,
            &[("hostile/action", "fetch"), ("hostile/url", &silent.url())],
        ),
    )
    .await
    .unwrap_err();
    // The broker's request timeout answered (a cloud error the guest passed on) before
    // the 5 s call timeout, which would be `ProviderError::Timeout`: so the policy's
    // 500 ms held, not the default 10 s.
    assert!(other_message(&err).contains("Timeout"), "{err}");
    assert!(silent.connections.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

#[tokio::test]
async fn endless_or_huge_bodies_are_cut_at_the_limit() {
    let loader = loader();
    for behavior in [RawBehavior::HugeWithLength, RawBehavior::EndlessChunked] {
        let server = RawServer::start(behavior.clone()).await;
        let policy = format!(
            "allowedOutboundHosts: ['{}']\nlimits: {{maxResponseBytes: 1048576, requestTimeout: 20s}}\n",
            server.url()
        );
        let (_h, bad) = hostile(&loader, &policy).await;
        for transport in TRANSPORTS {
            let err = act(
                &bad,
                &[
                    ("hostile/action", "fetch"),
                    ("hostile/url", &server.url()),
                    ("hostile/transport", transport),
                ],
            )
            .await
            .unwrap_err();
            assert!(
                other_message(&err).contains("HttpResponseBodySize"),
                "{behavior:?} {transport}: {err}"
            );
        }
    }
}

/// A cloud answering with a huge header section: headers count against
/// `maxResponseBytes` like the body, so the provider never holds more than it says.
#[tokio::test]
async fn response_headers_count_against_max_response_bytes() {
    let loader = loader();
    // 90 fields of 128 bytes: 11.25 KiB of headers, a 2-byte body.
    let server = RawServer::start(RawBehavior::ManyHeaders(90)).await;
    let policy = |max: usize| {
        format!(
            "allowedOutboundHosts: ['{}']\nlimits: {{maxResponseBytes: {max}}}\n",
            server.url()
        )
    };
    let (_h, small) = hostile(&loader, &policy(8192)).await;
    for transport in TRANSPORTS {
        let err = act(
            &small,
            &[
                ("hostile/action", "fetch"),
                ("hostile/url", &server.url()),
                ("hostile/transport", transport),
            ],
        )
        .await
        .unwrap_err();
        assert!(
            other_message(&err).contains("HttpResponseHeaderSectionSize"),
            "{transport}: {err}"
        );
    }
    let (_h, large) = hostile(&loader, &policy(65536)).await;
    let answer = act(
        &large,
        &[("hostile/action", "fetch"), ("hostile/url", &server.url())],
    )
    .await
    .unwrap();
    assert_eq!(label(&answer, "status"), "200");
}

#[tokio::test]
async fn garbage_from_the_cloud_is_a_clear_error() {
    let garbage = RawServer::start(RawBehavior::Fixed("<html>502 Bad Gateway</html>")).await;
    let loader = loader();
    let dir = ProviderDir::new(
        "reference_provider",
        "simcloud",
        &format!("allowedOutboundHosts: ['{}']\n", garbage.url()),
        TOKEN,
    );
    let config = format!(r#"{{"endpoint": "{}"}}"#, garbage.url()).into_bytes();
    let provider = loader.load(&dir.wasm, config).await.unwrap();
    let err = provider
        .instances_v2()
        .unwrap()
        .instance_exists(&node("n", None, &[]))
        .await
        .unwrap_err();
    assert!(
        !err.is_instance_not_found(),
        "garbage must never read as 'instance gone'"
    );
    assert!(
        other_message(&err).contains("unexpected response body"),
        "{err}"
    );
}
