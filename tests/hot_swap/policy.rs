//! Policy changes: a valid one reloads, an invalid one is refused, and a tightened one
//! applies even when its component is refused.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_changes_reload_and_invalid_policies_are_refused() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    let port = listening_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &v1).await;

    // An invalid policy: refused, naming the file and the field.
    let policy = String::from_utf8(swap.policy.clone()).unwrap();
    let invalid = policy.replace("callTimeout: 10s", "callTimeout: soon");
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", &swap.reference),
            ("simcloud.yaml", invalid.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the invalid policy refused", || async {
        reloads(&metrics(port).await, "policy") == 1.0
    })
    .await;
    wait_until(TIMEOUT, "an event naming the field", || async {
        swap.pod_events().await.iter().any(|(reason, note)| {
            reason == "ProviderReloadFailed"
                && note.contains("simcloud.yaml")
                && note.contains("callTimeout")
        })
    })
    .await;

    // A valid change (a shorter call timeout): the same component, re-initialized.
    let shorter = policy.replace("callTimeout: 10s", "callTimeout: 5s");
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", &swap.reference),
            ("simcloud.yaml", shorter.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the policy change reloaded", || async {
        reloads(&metrics(port).await, "success") == 1.0
    })
    .await;
    assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));
    // While it was checked, the candidate's own calls were labelled as a candidate;
    // the serving series counts only the version loaded at start-up.
    let text = metrics(port).await;
    let identity_calls = |provider: &str| {
        metric(
            &text,
            &format!(
                r#"wasm_ccm_provider_calls_total{{provider="{provider}",interface="identity",function="has-cluster-id",result="ok"}}"#
            ),
        )
    };
    assert_eq!(identity_calls("candidate"), 1.0, "{text}");
    assert_eq!(identity_calls("simcloud"), 1.0, "{text}");
    swap.add_node("after-policy").await;
    wait_until(TIMEOUT, "after-policy initialized", || {
        swap.initialized("after-policy")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tightened_policy_applies_even_when_its_component_is_refused() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    let port = listening_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &v1).await;
    swap.add_node("before").await;
    wait_until(TIMEOUT, "before initialized", || swap.initialized("before")).await;

    // The operator narrows the allowlist (the cloud is no longer allowed) in the same
    // update as a component that is refused: the narrower policy must still apply.
    let narrowed = "allowedOutboundHosts:\n  - https://api.example.com\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n";
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", b"not a component"),
            ("simcloud.yaml", narrowed.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the component refused", || async {
        reloads(&metrics(port).await, "not_wasm") == 1.0
    })
    .await;
    wait_until(
        TIMEOUT,
        "the policy applied to the serving version",
        || async { reloads(&metrics(port).await, "policy_applied") == 1.0 },
    )
    .await;
    assert_eq!(serving(&metrics(port).await).as_deref(), Some(v1.as_str()));

    // The serving version is now held to it: the cloud is out of reach.
    swap.add_node("after").await;
    wait_until(TIMEOUT, "the old egress denied", || async {
        metric(
            &metrics(port).await,
            r#"wasm_ccm_egress_denied_total{provider="simcloud",host="",reason="not_allowed"}"#,
        ) >= 1.0
    })
    .await;
    assert!(
        !swap.initialized("after").await,
        "no cloud call may succeed"
    );
    wait_until(TIMEOUT, "an event saying the policy applies", || async {
        swap.pod_events().await.iter().any(|(reason, note)| {
            reason == "ProviderPolicyApplied" && note.contains("the changed policy now applies")
        })
    })
    .await;
}
