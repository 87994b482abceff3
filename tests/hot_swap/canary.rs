//! The canary: a version that says everything is gone is kept from serving, and a
//! rollback during the trial ends it.

use super::*;

/// The canary (`--provider-canary-period`): a version that says every instance is gone
/// (its cloud config points at an empty cloud) shadows the serving version, answers
/// differently on the calls compared, and is refused with an event and
/// `reloads{result="canary"}`; no Node is deleted meanwhile and the serving version
/// keeps serving. A good version serves once its period passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_keeps_a_version_that_says_everything_is_gone_from_serving() {
    let swap = SwapStack::start().await;
    let empty = sim_cloud::SimCloud::start("127.0.0.1:0", wasm_ccm_tests::TOKEN)
        .await
        .unwrap();
    swap.add_node("ready").await;
    swap.add_node("partitioned").await;
    let port = listening_port();
    let _ccm = swap.controller_manager(
        port,
        &["--leader-elect=false", "--provider-canary-period=2s"],
    );
    let v1 = sha256_hex(&swap.reference);
    wait_serving(port, &v1).await;
    for name in ["ready", "partitioned"] {
        wait_until(TIMEOUT, "initialized", || swap.initialized(name)).await;
    }
    let nodes: Api<Node> = Api::all(swap.stack.client());
    wasm_ccm_tests::set_ready(&nodes, "partitioned", "Unknown").await;

    // The faulty version: the same component, a policy reaching both clouds, a cloud
    // config naming the empty one.
    let policy = format!(
        "allowedOutboundHosts: ['{a}', '{b}']\ncredentials:\n  - destination: '{a}'\n    bearerTokenFile: token\n  - destination: '{b}'\n    bearerTokenFile: token\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n",
        a = swap.stack.cloud.url(),
        b = empty.url()
    );
    let config = |url: &str| format!(r#"{{"endpoint": "{url}"}}"#);
    let write_config = |text: String| {
        let tmp = swap.stack.cloud_config.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &swap.stack.cloud_config).unwrap();
    };
    write_config(config(&empty.url()));
    kubelet_publish(
        swap.dir(),
        &[
            ("simcloud.wasm", &swap.reference),
            ("simcloud.yaml", policy.as_bytes()),
        ],
    );
    wait_until(
        TIMEOUT,
        "the faulty version refused by its canary",
        || async { reloads(&metrics(port).await, "canary") >= 1.0 },
    )
    .await;
    let m = metrics(port).await;
    assert_eq!(reloads(&m, "success"), 0.0, "{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("wasm_ccm_provider_canary_calls_total")
                && (l.contains("result=\"differ\"") || l.contains("result=\"candidate_error\""))),
        "{m}"
    );
    let events = swap.pod_events().await;
    assert!(
        events.iter().any(|(r, _)| r == "ProviderCanaryStarted"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "ProviderReloadFailed" && n.contains("failed its canary")),
        "{events:?}"
    );
    assert!(nodes.get("partitioned").await.is_ok(), "nothing deleted");

    // A good version serves after its period.
    write_config(config(&swap.stack.cloud.url()));
    let v2 = with_custom_section(&swap.reference, "v2");
    kubelet_publish(
        swap.dir(),
        &[("simcloud.wasm", &v2), ("simcloud.yaml", policy.as_bytes())],
    );
    wait_serving(port, &sha256_hex(&v2)).await;
    let m = metrics(port).await;
    assert_eq!(reloads(&m, "success"), 1.0, "{m}");
    assert_eq!(failed_calls(&m), 0.0, "{m}");
    assert!(nodes.get("partitioned").await.is_ok(), "nothing deleted");
}

/// A version on canary whose files change back to the serving version (an operator
/// rolling back) ends its trial without a verdict: it never serves, the slot the
/// controllers read is empty again, and a later new version gets its own trial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_during_the_canary_ends_the_trial() {
    use std::sync::Arc;
    use wasm_ccm::cloud::shadow::CanarySlot;
    use wasm_ccm::hot_swap::canary::{Canary, CanaryOptions};
    use wasm_ccm::hot_swap::{self, Outcome, ReloadReporter, Reloader};
    use wasm_ccm_host::metrics::Metrics;
    use wasm_ccm_host::provider::{ProviderSource, SharedProvider};

    let swap = SwapStack::start().await;
    let metrics = Metrics::new();
    let loader = wasm_ccm_tests::loader();
    let component = swap.dir().join("simcloud.wasm");
    let config = std::fs::read(&swap.stack.cloud_config).unwrap();
    let shared = SharedProvider::from(loader.load(&component, config).await.unwrap());
    let serving = ProviderSource::read(&component, Some(&swap.stack.cloud_config))
        .unwrap()
        .fingerprint;
    let slot = CanarySlot::default();
    let canary = Canary::new(
        CanaryOptions {
            period: Duration::from_secs(3600),
            max_error_percent: 5.0,
            max_difference_percent: 5.0,
        },
        slot.clone(),
        &metrics,
    );
    let mut reloader = Reloader::new(
        hot_swap::Settings {
            component: component.clone(),
            cloud_config: Some(swap.stack.cloud_config.clone()),
            provider_name: "simcloud".into(),
            controllers: wasm_ccm::controllers::ALL.iter().collect(),
            rescan_period: Duration::from_secs(30),
            debounce: hot_swap::DEBOUNCE,
            allow_untagged_cloud: false,
            canary: Some(canary),
        },
        loader,
        shared.clone(),
        serving,
        Arc::new(ReloadReporter::new(&metrics, None)),
    );
    let v1 = sha256_hex(&swap.reference);
    let v2 = with_custom_section(&swap.reference, "v2");
    swap.publish(&v2);
    assert!(matches!(reloader.check().await, Outcome::OnTrial { .. }));
    assert!(
        slot.get().is_some(),
        "the controllers shadow the version on trial"
    );
    assert!(matches!(reloader.check().await, Outcome::Unchanged));
    // Rolled back: the trial ends, v1 keeps serving.
    swap.publish(&swap.reference);
    assert!(matches!(reloader.check().await, Outcome::Unchanged));
    assert!(slot.get().is_none(), "no trial any more");
    assert_eq!(shared.current().sha256(), v1);
    // v2 again: a new trial.
    swap.publish(&v2);
    assert!(matches!(reloader.check().await, Outcome::OnTrial { .. }));
    assert_eq!(shared.current().sha256(), v1);
}
