//! Refused versions (each with its metric and Event), a failing `initialize` after a
//! cloud config change, and a component removed from the ConfigMap: the previous
//! version keeps serving.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_versions_leave_the_previous_one_serving() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    let port = listening_port();
    let _ccm = swap.controller_manager(
        port,
        &["--leader-elect=false", "--provider-rescan-period=300ms"],
    );
    wait_serving(port, &v1).await;

    let truncated = swap.reference[..swap.reference.len() / 2].to_vec();
    let other_world = std::fs::read(guest("fixture-other-world")).unwrap();
    let stub = std::fs::read(guest("fixture_simcloud_stub")).unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("truncated component", &truncated, "compile"),
        (
            "not WebAssembly",
            b"#!/bin/sh\necho not a provider\n",
            "not_wasm",
        ),
        ("a component of another world", &other_world, "other_world"),
        (
            "a version without load-balancer",
            &stub,
            "interface_dropped",
        ),
    ];
    for (i, (what, bytes, reason)) in cases.iter().enumerate() {
        swap.publish(bytes);
        wait_until(TIMEOUT, &format!("{what} refused as {reason}"), || async {
            reloads(&metrics(port).await, reason) == 1.0
        })
        .await;
        assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));
        // The previous version still initializes Nodes.
        let node = format!("after-refusal-{i}");
        swap.add_node(&node).await;
        wait_until(TIMEOUT, &format!("{node} initialized"), || {
            swap.initialized(&node)
        })
        .await;
    }

    // A cloud config change re-initializes: with the stub still published, its
    // `initialize` now fails.
    let config = std::fs::read_to_string(&swap.stack.cloud_config).unwrap();
    let failing = config.replace('}', r#", "zone": "fail-initialize"}"#);
    std::fs::write(&swap.stack.cloud_config, &failing).unwrap();
    // `initialize` may fail on a passing condition: the version is retried every
    // rescan, and the unchanged failure is not published again.
    wait_until(
        TIMEOUT,
        "initialize failure refused, then retried",
        || async { reloads(&metrics(port).await, "initialize") >= 3.0 },
    )
    .await;
    let m = metrics(port).await;
    assert_eq!(serving(&m).as_deref(), Some(v1.as_str()));
    assert_eq!(reloads(&m, "success"), 0.0, "{m}");
    assert_eq!(failed_calls(&m), 0.0, "{m}");

    wait_until(
        TIMEOUT,
        "a ProviderReloadFailed event per refusal",
        || async {
            let events = swap.pod_events().await;
            let failed: Vec<_> = events
                .iter()
                .filter(|(reason, _)| reason == "ProviderReloadFailed")
                .collect();
            let initialize = failed
                .iter()
                .filter(|(_, note)| note.contains("initialize failed"))
                .count();
            failed.len() >= 5
                && initialize == 1
                && failed.iter().any(|(_, note)| {
                    note.contains("simcloud.wasm")
                        && note.contains("does not export instances-v2 or instances")
                })
        },
    )
    .await;

    // Removed from the ConfigMap: the loaded version keeps serving.
    kubelet_publish(swap.dir(), &[("simcloud.yaml", &swap.policy)]);
    wait_until(TIMEOUT, "a ProviderFileMissing event", || async {
        swap.pod_events()
            .await
            .iter()
            .any(|(reason, _)| reason == "ProviderFileMissing")
    })
    .await;
    swap.add_node("after-removal").await;
    wait_until(TIMEOUT, "after-removal initialized", || {
        swap.initialized("after-removal")
    })
    .await;

    // The reference provider back, with the changed cloud config: a new version.
    swap.publish(&swap.reference);
    wait_until(TIMEOUT, "the reference provider reloaded", || async {
        reloads(&metrics(port).await, "success") == 1.0
    })
    .await;
    assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));
}
