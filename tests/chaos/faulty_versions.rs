//! The faulty versions scenario: broken provider versions hot-swapped in, and which
//! guard stops each.

use std::time::{Duration, Instant};

use crate::{Row, SETTLE, quiet, set_ready};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::{Stack, http_get, initialized, kubelet_node, listening_port};

/// The result of one faulty version.
struct Faulty {
    version: &'static str,
    stopped_by: String,
    deleted: usize,
}

pub(crate) async fn faulty_versions() -> Row {
    let stack = Stack::start().await;
    let empty = sim_cloud::SimCloud::start("127.0.0.1:0", wasm_ccm_tests::TOKEN)
        .await
        .unwrap();
    let dir = stack.dir.dir.path().to_owned();
    let reference = std::fs::read(&stack.dir.wasm).unwrap();
    std::fs::remove_file(&stack.dir.wasm).unwrap();
    std::fs::remove_file(dir.join("simcloud.yaml")).unwrap();
    // One policy reaching both clouds, published as kubelet publishes a ConfigMap.
    let policy = format!(
        "allowedOutboundHosts: ['{a}', '{b}']\ncredentials:\n  - destination: '{a}'\n    bearerTokenFile: token\n  - destination: '{b}'\n    bearerTokenFile: token\nlimits:\n  callTimeout: 10s\n  poolSize: 2\n",
        a = stack.cloud.url(),
        b = empty.url()
    );
    let publish = |wasm: &[u8]| {
        wasm_ccm_tests::kubelet_publish(
            &dir,
            &[
                ("simcloud.wasm", wasm),
                ("simcloud.yaml", policy.as_bytes()),
            ],
        )
    };
    let config = |url: &str| {
        let tmp = stack.cloud_config.with_extension("tmp");
        std::fs::write(&tmp, format!(r#"{{"endpoint": "{url}"}}"#)).unwrap();
        std::fs::rename(&tmp, &stack.cloud_config).unwrap();
    };
    publish(&reference);
    let count = 6;
    stack.cloud.with_state(|s| {
        for i in 0..count {
            s.create_instance(NewInstance::named(&format!("n{i}")));
        }
    });
    let api: Api<Node> = Api::all(stack.client());
    for i in 0..count {
        api.create(
            &PostParams::default(),
            &kubelet_node(&format!("n{i}"), "True"),
        )
        .await
        .unwrap();
    }
    let started = Instant::now();
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for canary in [true, false] {
        let port = listening_port();
        let mut flags = vec![
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
        ];
        if canary {
            flags.push("--provider-canary-period=3s");
        }
        config(&stack.cloud.url());
        publish(&reference);
        let mut ccm = quiet(&stack, port, &flags);
        // Serving (its provider loaded from the files as they are now) and leading.
        let deadline = Instant::now() + SETTLE;
        while !http_get(port, "/readyz")
            .await
            .is_ok_and(|(_, body)| body.contains("controllers running"))
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for i in 0..count {
            let name = format!("n{i}");
            let deadline = Instant::now() + SETTLE;
            while !initialized(&api, &name).await && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // A partition: half the Nodes NotReady; their instances exist.
        for i in 0..count / 2 {
            set_ready(&api, &format!("n{i}"), "Unknown").await;
        }
        let text = async || wasm_ccm_tests::metrics(port).await;
        let reloads = |text: &str, result: &str| {
            wasm_ccm_tests::metric(
                text,
                &format!(
                    "wasm_ccm_provider_reloads_total{{provider=\"simcloud\",result=\"{result}\"}}"
                ),
            )
        };
        let present = async || {
            api.list(&ListParams::default())
                .await
                .map(|l| l.items.len())
                .unwrap_or(count)
        };
        let wait_for = async |result: &str| {
            let deadline = Instant::now() + SETTLE;
            loop {
                let t = text().await;
                if reloads(&t, result) >= 1.0 {
                    return true;
                }
                if Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let outcome = async |version: &'static str, reason: &str, stopped_by: &str| Faulty {
            version,
            stopped_by: if wait_for(reason).await {
                stopped_by.into()
            } else {
                "NOT STOPPED".into()
            },
            deleted: count - present().await,
        };
        if canary {
            publish(b"not a component");
            results.push(outcome("garbage bytes", "not_wasm", "load checks (not_wasm)").await);
            let stub = std::fs::read(wasm_ccm_tests::guest("fixture_simcloud_stub")).unwrap();
            publish(&stub);
            let dropped = "load checks (interface_dropped)";
            results.push(outcome("drops instances-v2", "interface_dropped", dropped).await);
            config(&empty.url());
            publish(&reference);
            let stopped = "canary (refused after 3 s)";
            results.push(outcome("every instance gone, canary on", "canary", stopped).await);
        } else {
            config(&empty.url());
            publish(&reference);
            let swapped = wait_for("success").await;
            // Ten lifecycle passes over the NotReady Nodes with the faulty version
            // serving.
            let fresh = "wasm_ccm_node_deletion_guard_answers_total{answer=\"fresh_version\"}";
            let deadline = Instant::now() + SETTLE;
            let mut ignored = 0.0;
            while ignored < (10 * (count / 2)) as f64 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                ignored = wasm_ccm_tests::metric(&text().await, fresh);
            }
            results.push(Faulty {
                version: "every instance gone, canary off",
                stopped_by: if swapped {
                    format!(
                        "node deletion guard (swapped in; {ignored:.0} \"gone\" answers of the fresh version ignored)"
                    )
                } else {
                    "NOT SWAPPED".into()
                },
                deleted: count - present().await,
            });
        }
        ccm.kill().await.ok();
        for i in 0..count / 2 {
            set_ready(&api, &format!("n{i}"), "True").await;
        }
    }
    for r in &results {
        if r.deleted > 0 || r.stopped_by.starts_with("NOT") {
            failures.push(format!(
                "{}: {} ({} Nodes deleted)",
                r.version, r.stopped_by, r.deleted
            ));
        }
    }
    let mut figures: Vec<(&'static str, String)> = results
        .iter()
        .map(|r| {
            (
                r.version,
                format!("{}; {} Nodes deleted", r.stopped_by, r.deleted),
            )
        })
        .collect();
    figures.push((
        "run time",
        format!("{:.0} s", started.elapsed().as_secs_f64()),
    ));
    Row {
        scenario: "faulty versions hot-swapped in (6 Nodes, 3 NotReady with existing instances)",
        figures,
        failures,
    }
}
