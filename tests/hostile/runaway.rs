//! Runaway guests: an infinite loop, a 1 GiB allocation, a panic, and hoarded host
//! resources are contained while a well-behaved provider keeps serving.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_is_interrupted_while_others_keep_serving() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("good-node")));
    let loader = loader();
    let (_g, good) = reference(&loader, &cloud).await;
    let (_h, bad) = hostile(&loader, "limits: {callTimeout: 1s, poolSize: 1}\n").await;

    // Interrupted by this policy's callTimeout (1 s), not the default (30 s), which
    // would end it too: the guard fails the test at 20 s, ample on a loaded machine.
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        keeps_serving(&good, act(&bad, &[("hostile/action", "loop")])),
    )
    .await
    .expect("the loop was interrupted")
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
    if let ProviderError::Timeout { after, .. } = &err {
        assert_eq!(*after, Duration::from_secs(1), "the policy's callTimeout");
    }
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
