//! Hostile guests and hostile clouds, built from `guests/fixtures/hostile`: each
//! misbehaviour is contained, reported clearly, and does not stop a well-behaved
//! provider served by the same host at the same time.

use std::time::{Duration, Instant};

use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;
use wasm_ccm_host::capabilities::http_egress::EgressSettings;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderLoader, TrapKind};
use wasm_ccm_tests::{
    CapturedLogs, ProviderDir, RawBehavior, RawServer, TOKEN, TempDir, act, cloud_config, hostile,
    label, loader, node, other_message, policy_for,
};

async fn reference(loader: &ProviderLoader, cloud: &SimCloud) -> (ProviderDir, Provider) {
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy_for(cloud), TOKEN);
    let provider = loader
        .load(&dir.wasm, cloud_config(cloud))
        .await
        .expect("load reference");
    (dir, provider)
}

/// Runs `calls` reference-provider calls while `misbehaviour` is in flight; all must
/// succeed.
async fn keeps_serving<T>(good: &Provider, misbehaviour: impl Future<Output = T>) -> T {
    let good = good.clone();
    let served = tokio::spawn(async move {
        let v2 = good.instances_v2().unwrap();
        for _ in 0..10 {
            assert!(
                v2.instance_exists(&node("good-node", None, &[]))
                    .await
                    .unwrap()
            );
        }
    });
    let result = misbehaviour.await;
    served
        .await
        .expect("the well-behaved provider kept serving");
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_is_interrupted_while_others_keep_serving() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("good-node")));
    let loader = loader();
    let (_g, good) = reference(&loader, &cloud).await;
    let (_h, bad) = hostile(&loader, "limits: {callTimeout: 1s, poolSize: 1}\n").await;

    let started = Instant::now();
    let err = keeps_serving(&good, act(&bad, &[("hostile/action", "loop")]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Trap {
                kind: TrapKind::Deadline,
                ..
            } | ProviderError::Timeout { .. }
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    // The next call gets a fresh instance.
    assert_eq!(label(&act(&bad, &[]).await.unwrap(), "behaved"), "true");
    let metrics = loader.metrics().encode();
    assert!(
        metrics.contains(r#"wasm_ccm_provider_traps_total{provider="hostile",kind="deadline"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"function="instance-metadata",result="trap"} 1"#)
            || metrics.contains(r#"function="instance-metadata",result="timeout"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn allocating_a_gibibyte_fails_cleanly() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("good-node")));
    let loader = loader();
    let (_g, good) = reference(&loader, &cloud).await;
    let (_h, bad) = hostile(&loader, "limits: {memoryMiB: 64, poolSize: 1}\n").await;

    let err = keeps_serving(&good, act(&bad, &[("hostile/action", "alloc")]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Trap {
                kind: TrapKind::Unreachable,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("hostile"), "{err}");
    assert_eq!(label(&act(&bad, &[]).await.unwrap(), "behaved"), "true");
}

#[tokio::test]
async fn panic_is_a_trap_not_a_crash() {
    let loader = loader();
    let (_h, bad) = hostile(&loader, "").await;
    let err = act(&bad, &[("hostile/action", "panic")]).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Trap {
                kind: TrapKind::Unreachable,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(label(&act(&bad, &[]).await.unwrap(), "behaved"), "true");
}

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

#[tokio::test(flavor = "current_thread")]
async fn guest_sees_no_environment_files_or_sockets_and_its_output_is_logged() {
    let (logs, _guard) = CapturedLogs::install();
    let loader = loader();
    let (_h, bad) = hostile(&loader, "").await;
    let info = act(&bad, &[("hostile/action", "snoop")]).await.unwrap();
    assert_eq!(label(&info, "env"), "");
    assert_eq!(label(&info, "args"), "hostile");
    assert!(
        label(&info, "read-dir-root").starts_with("error"),
        "{info:?}"
    );
    assert!(
        label(&info, "read-etc-passwd").starts_with("error"),
        "{info:?}"
    );
    assert!(label(&info, "tcp-connect").starts_with("error"), "{info:?}");
    let text = logs.text();
    assert!(text.contains("hostile stdout line"), "{text}");
    assert!(text.contains("hostile stderr line"), "{text}");
    assert!(text.contains(r#"provider="hostile""#), "{text}");
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

/// The two ways a guest sends: the SDK's default (the host's buffered
/// `wasm-ccm:http/client`) and `wasi:http/outgoing-handler`'s resources.
const TRANSPORTS: [&str; 2] = ["buffered", "wasi-http"];

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_that_never_answers_times_out() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("good-node")));
    let silent = RawServer::start(RawBehavior::Silent).await;
    let loader = loader();
    let (_g, good) = reference(&loader, &cloud).await;
    let policy = format!(
        "allowedOutboundHosts: ['{}']\nlimits: {{requestTimeout: 500ms, callTimeout: 10s}}\n",
        silent.url()
    );
    let (_h, bad) = hostile(&loader, &policy).await;
    let started = Instant::now();
    let err = keeps_serving(
        &good,
        act(
            &bad,
            &[("hostile/action", "fetch"), ("hostile/url", &silent.url())],
        ),
    )
    .await
    .unwrap_err();
    assert!(other_message(&err).contains("Timeout"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
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

#[tokio::test(flavor = "current_thread")]
async fn guest_text_cannot_forge_log_lines_or_flood_errors() {
    let (logs, _guard) = CapturedLogs::install();
    let loader = loader();
    let (_h, bad) = hostile(&loader, "").await;
    let err = act(&bad, &[("hostile/action", "forge")]).await.unwrap_err();
    let message = other_message(&err);
    assert!(
        message.starts_with(r"ok\n2026-01-01T00:00:00Z  INFO wasm_ccm: FORGED-LINE\r\u{1b}[2J"),
        "{message}"
    );
    assert!(
        message.len() < 2100,
        "cut at 2 KiB: {} bytes",
        message.len()
    );
    assert!(message.ends_with("more bytes)"), "{message}");
    let text = logs.text();
    // The record, its field and the stdout line are there, on lines of their own.
    assert_eq!(text.matches("FORGED-LINE").count(), 3, "{text}");
    assert!(
        text.contains("FORGED-FIELD") && !text.contains("\nFORGED-FIELD"),
        "{text}"
    );
    for line in text.lines() {
        assert!(
            !line.contains("FORGED")
                || line.contains(r#"provider="hostile""#)
                || line.contains("provider=hostile"),
            "a line a guest started: {line:?}"
        );
        assert!(!line.contains('\x1b') && !line.contains('\r'), "{line:?}");
    }
}

#[tokio::test]
async fn a_policy_over_the_memory_budget_is_refused_with_both_numbers() {
    let loader = loader().with_memory_budget(128 << 20);
    let dir = ProviderDir::new(
        "fixture_hostile",
        "hostile",
        "limits: {poolSize: 4, memoryMiB: 64}\n",
        TOKEN,
    );
    let err = loader
        .load(&dir.wasm, Vec::new())
        .await
        .unwrap_err()
        .to_string();
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
        let dir = ProviderDir::new("fixture_hostile", "hostile", &policy(&file), TOKEN);
        let err = loader
            .load(&dir.wasm, Vec::new())
            .await
            .unwrap_err()
            .to_string();
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
    let dir = ProviderDir::new(
        "fixture_hostile",
        "hostile",
        &format!("tls: {{caBundleFile: '{}'}}\n", attacker_ca.display()),
        TOKEN,
    );
    let err = loader
        .load(&dir.wasm, Vec::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("outside the credentials directory") && err.contains("attacker-ca.pem"),
        "{err}"
    );
}

/// This process's resident set size, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hoarded_host_resources_are_bounded_and_never_outlive_a_call() {
    use wasm_ccm_host::capabilities::MAX_RESOURCES;
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("good-node")));
    let loader = loader();
    let (_g, good) = reference(&loader, &cloud).await;
    let silent = RawServer::start(RawBehavior::Silent).await;
    let (_h, bad) = hostile(
        &loader,
        &format!(
            "allowedOutboundHosts: ['{}']\nlimits: {{callTimeout: 2s, requestTimeout: 1s}}\n",
            silent.url()
        ),
    )
    .await;
    let before = rss_kib();
    let mut peak = before;
    for _round in 0..3 {
        for action in ["hoard-fields", "hoard-bodies", "unread-responses"] {
            let url = format!("{}/never-answers", silent.url());
            let outcome = keeps_serving(
                &good,
                act(&bad, &[("hostile/action", action), ("hostile/url", &url)]),
            )
            .await;
            match outcome {
                // It stopped where the host said no: within the bound.
                Ok(info) => {
                    let hoarded: usize = label(&info, "hoarded").parse().unwrap();
                    assert!(hoarded <= MAX_RESOURCES, "{action}: {hoarded}");
                }
                // Or the bound (or the deadline) ended the call: the instance is gone.
                Err(err) => assert!(
                    matches!(
                        err,
                        ProviderError::Trap { .. } | ProviderError::Timeout { .. }
                    ),
                    "{action}: {err}"
                ),
            }
            peak = peak.max(rss_kib());
        }
    }
    let grown_mib = peak.saturating_sub(before) / 1024;
    println!(
        "host RSS: {} MiB before, {} MiB at peak",
        before / 1024,
        peak / 1024
    );
    assert!(grown_mib < 192, "host RSS grew by {grown_mib} MiB");

    // One resource kept past a call is enough: the instance is not reused.
    let metrics_before = loader.metrics().encode();
    let held = |text: &str| {
        wasm_ccm_tests::metric(
            text,
            r#"wasm_ccm_provider_traps_total{provider="hostile",kind="held_resources"}"#,
        )
    };
    for _ in 0..3 {
        act(&bad, &[("hostile/action", "keep-one")]).await.unwrap();
    }
    let after = held(&loader.metrics().encode());
    assert_eq!(
        after - held(&metrics_before),
        3.0,
        "each keeping instance discarded"
    );
    // A call that keeps nothing returns its instance to the pool.
    act(&bad, &[("hostile/action", "behave")]).await.unwrap();
    assert_eq!(held(&loader.metrics().encode()), after);
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
