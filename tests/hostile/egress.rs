//! A guest's outgoing requests: the allowlist, credential headers, a false
//! `content-length`, credentials injected by the host, and AWS signing per service.

use super::*;

#[tokio::test]
async fn request_to_a_host_not_allowed_is_denied_before_the_network() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let loader = loader();
    let (_h, bad) = hostile(
        &loader,
        "allowedOutboundHosts: ['https://api.example.com']\n",
    )
    .await;
    let url = format!("{}/v1/instances", cloud.url());
    let err = act(&bad, &[("hostile/action", "fetch"), ("hostile/url", &url)])
        .await
        .unwrap_err();
    assert_eq!(
        other_message(&err),
        "request denied by the host's egress policy"
    );
    assert_eq!(cloud.total_requests(), 0);
    let metrics = loader.metrics().encode();
    assert!(
        metrics.contains(
            r#"wasm_ccm_egress_denied_total{provider="hostile",host="",reason="not_allowed"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn guest_authorization_header_on_a_credentialed_destination_is_refused() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let loader = loader();
    let (_h, bad) = hostile(&loader, &policy_for(&cloud)).await;
    let url = format!("{}/v1/instances", cloud.url());
    for transport in TRANSPORTS {
        let err = act(
            &bad,
            &[
                ("hostile/action", "fetch"),
                ("hostile/url", &url),
                ("hostile/header", "Authorization: Bearer stolen"),
                ("hostile/transport", transport),
            ],
        )
        .await
        .unwrap_err();
        assert_eq!(
            other_message(&err),
            "request denied by the host's egress policy",
            "{transport}"
        );
    }
    assert_eq!(
        cloud.total_requests(),
        0,
        "the request must not reach the cloud"
    );
    assert!(
        loader
            .metrics()
            .encode()
            .contains(r#"reason="guest_credential_header"} 2"#)
    );
}

/// A `content-length` other than the body's could run the body into the next request
/// on a pooled connection: refused by both ways out before anything is sent.
#[tokio::test]
async fn a_content_length_other_than_the_bodys_never_leaves_the_host() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let loader = loader();
    let (_h, bad) = hostile(&loader, &policy_for(&cloud)).await;
    let url = format!("{}/v1/instances", cloud.url());
    for (transport, length) in [("buffered", "0"), ("buffered", "1000"), ("wasi-http", "0")] {
        let err = act(
            &bad,
            &[
                ("hostile/action", "fetch"),
                ("hostile/method", "POST"),
                ("hostile/url", &url),
                ("hostile/form", "name=smuggled&then=GET%20/admin"),
                ("hostile/header", &format!("Content-Length: {length}")),
                ("hostile/transport", transport),
            ],
        )
        .await
        .unwrap_err();
        let message = other_message(&err);
        assert!(
            message.contains("content-length")
                || message.contains("HttpRequestBodySize")
                || message.contains("invalid header"),
            "{transport} {length}: {message}"
        );
    }
    assert_eq!(cloud.total_requests(), 0, "nothing reached the cloud");
}

#[tokio::test]
async fn credential_round_trip_without_the_guest_ever_seeing_the_token() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("n1")));
    let loader = loader();
    let (_h, bad) = hostile(&loader, &policy_for(&cloud)).await;
    let url = format!("{}/v1/instances", cloud.url());
    let info = act(&bad, &[("hostile/action", "fetch"), ("hostile/url", &url)])
        .await
        .unwrap();
    assert_eq!(label(&info, "status"), "200", "the host injected the token");
    assert!(label(&info, "body").contains("n1"));
    assert_eq!(cloud.with_state(|s| s.unauthorized), 0);

    // Everything the guest can see: the response, its environment, files.
    let snoop = act(&bad, &[("hostile/action", "snoop")]).await.unwrap();
    let seen = format!("{info:?}{snoop:?}");
    assert!(!seen.contains(TOKEN), "the guest saw the token: {seen}");

    let metrics = loader.metrics().encode();
    let expected = format!(
        r#"wasm_ccm_egress_requests_total{{provider="hostile",host="{}",method="GET",status="200"}} 1"#,
        cloud.url()
    );
    assert!(metrics.contains(&expected), "{metrics}");
}

/// On an endpoint whose name says no service (an emulator serving them all), the
/// provider names the AWS service of its request: the host signs for it only when the
/// rule's `services` lists it, and the header naming it never leaves the host.
#[tokio::test]
async fn a_named_aws_service_is_signed_only_when_listed_and_never_sent() {
    let echo = RawServer::start(RawBehavior::Respond(std::sync::Arc::new(
        |request: &str| (200, request.to_owned()),
    )))
    .await;
    let policy = format!(
        "allowedOutboundHosts: ['{url}']\ncredentials:\n  - destination: '{url}'\n    aws: {{region: us-east-1, services: [ec2, elasticloadbalancing], accessKeyIdFile: aws-id, secretAccessKeyFile: aws-secret}}\n",
        url = echo.url()
    );
    let dir = ProviderDir::new("fixture_hostile", "hostile", &policy, TOKEN);
    std::fs::write(dir.dir.path().join("aws-id"), "AKIDEXAMPLE").unwrap();
    std::fs::write(dir.dir.path().join("aws-secret"), "secret-example").unwrap();
    let provider = loader().load(&dir.wasm, Vec::new()).await.unwrap();
    let send = |service: &'static str| {
        let url = echo.url();
        let provider = provider.clone();
        async move {
            act(
                &provider,
                &[
                    ("hostile/action", "fetch"),
                    ("hostile/url", &url),
                    (
                        "hostile/header",
                        &format!("x-wasm-ccm-aws-service: {service}"),
                    ),
                ],
            )
            .await
        }
    };
    let info = send("elasticloadbalancing").await.unwrap();
    assert_eq!(label(&info, "status"), "200");
    let seen = label(&info, "body").to_ascii_lowercase();
    assert!(
        seen.contains("/us-east-1/elasticloadbalancing/aws4_request"),
        "signed for the named service: {seen}"
    );
    assert!(
        !seen.contains("x-wasm-ccm-aws-service"),
        "the header stays in the host: {seen}"
    );
    // A service the rule does not list is not signed for: the request does not leave.
    let refused = send("s3").await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!format!("{refused:?}").contains("aws4_request"));
}
