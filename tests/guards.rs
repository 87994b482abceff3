//! The host's guards against wrong answers, with the real `wasm-ccm` binary, the API
//! server double, the simulated cloud and the reference provider.
//!
//! Node deletion guard: a network partition makes Nodes NotReady while the cloud
//! wrongly answers "not found" for their instances (the simulated cloud's hidden
//! instances); with default flags at most two are deleted, the rest are held with a
//! Warning event and kept, and Nodes whose instances are truly gone are deleted later.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use wasm_ccm_tests::{
    Stack, events, initialized, kubelet_node, listening_port, metric, metrics, set_ready,
    wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(90);

/// Starts a stack with `count` instances and their Nodes, all initialized by a
/// `wasm-ccm` run with `flags`; returns the instance IDs in Node order.
async fn cluster(
    stack: &Stack,
    count: usize,
    port: u16,
    flags: &[&str],
) -> (Vec<String>, tokio::process::Child) {
    let ids: Vec<String> = stack.cloud.with_state(|s| {
        (0..count)
            .map(|i| {
                s.create_instance(sim_cloud::model::NewInstance::named(&format!("n{i}")))
                    .id
            })
            .collect()
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for i in 0..count {
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node(&format!("n{i}"), "True"),
            )
            .await
            .unwrap();
    }
    let mut args = vec![
        "--leader-elect=false",
        "--controllers=cloud-node,cloud-node-lifecycle",
    ];
    args.extend_from_slice(flags);
    let ccm = stack.controller_manager(port, &args);
    for i in 0..count {
        let name = format!("n{i}");
        wait_until(TIMEOUT, "initialized", || initialized(&nodes, &name)).await;
    }
    (ids, ccm)
}

async fn node_names(nodes: &Api<Node>) -> Vec<String> {
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

fn answers(text: &str, answer: &str) -> f64 {
    metric(
        text,
        &format!("wasm_ccm_node_deletion_guard_answers_total{{answer=\"{answer}\"}}"),
    )
}

/// The partition of the issue, as an operator would try it: 12 Nodes, 10 of them
/// NotReady, the cloud answering "not found" for those 10 instances although they
/// exist. Upstream's rule (`--node-deletion-confirmations=1` and no limit) deletes all
/// 10; the default guard deletes two and holds eight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_found_storm_deletes_at_most_the_limit() {
    for (flags, deleted) in [
        (
            &[
                "--node-deletion-confirmations=1",
                "--node-deletion-limit=1000",
            ][..],
            10,
        ),
        (&[][..], 2),
    ] {
        let stack = Stack::start().await;
        let port = listening_port();
        let (ids, mut ccm) = cluster(&stack, 12, port, flags).await;
        let nodes: Api<Node> = Api::all(stack.client());
        stack
            .cloud
            .with_state(|s| s.hidden_instances = ids[..10].iter().cloned().collect());
        for i in 0..10 {
            set_ready(&nodes, &format!("n{i}"), "Unknown").await;
        }
        // The storm lasts until the guard has made up its mind about every Node:
        // each deleted or held (and for a while longer: more passes change nothing).
        wait_until(
            TIMEOUT,
            "every partitioned Node deleted or held",
            || async {
                let held = metric(
                    &metrics(port).await,
                    "wasm_ccm_node_deletion_guard_held_nodes",
                );
                12 - node_names(&nodes).await.len() + held as usize == 10
            },
        )
        .await;
        // Five more passes over the held Nodes change nothing.
        let confirmed = answers(&metrics(port).await, "confirmed");
        wait_until(TIMEOUT, "five more passes", || async {
            answers(&metrics(port).await, "confirmed") >= confirmed + 5.0 * (10 - deleted) as f64
        })
        .await;
        let left = node_names(&nodes).await;
        assert_eq!(left.len(), 12 - deleted, "{flags:?}: left {left:?}");
        assert!(left.contains(&"n10".into()) && left.contains(&"n11".into()));
        let held = events::with_reason(&stack.client(), "NodeDeletionHeld").await;
        assert_eq!(
            held.len(),
            10 - deleted,
            "{flags:?}: one event per held Node"
        );
        if deleted == 2 {
            let note = held[0].message.as_deref().unwrap_or("");
            assert!(
                note.contains("--node-deletion-limit=2") && note.contains("does not exist"),
                "{note}"
            );
            // The storm ends: the held Nodes are kept and nothing more is deleted.
            stack.cloud.with_state(|s| s.hidden_instances.clear());
            wait_until(TIMEOUT, "the guard holding nothing", || async {
                metric(
                    &metrics(port).await,
                    "wasm_ccm_node_deletion_guard_held_nodes",
                ) == 0.0
            })
            .await;
            assert_eq!(node_names(&nodes).await.len(), 10);
        }
        ccm.kill().await.unwrap();
    }
}

/// Instances truly gone are deleted as the window allows; NotReady Nodes whose
/// instances exist are kept; a Node needs two "does not exist" answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truly_gone_nodes_are_deleted_as_the_window_allows() {
    let stack = Stack::start().await;
    let port = listening_port();
    let (ids, mut ccm) = cluster(&stack, 8, port, &["--node-deletion-window=4s"]).await;
    let nodes: Api<Node> = Api::all(stack.client());
    stack.cloud.with_state(|s| {
        for id in &ids[..3] {
            s.delete_instance(id);
        }
    });
    for i in 0..5 {
        set_ready(&nodes, &format!("n{i}"), "False").await;
    }
    wait_until(TIMEOUT, "the three gone Nodes deleted", || async {
        node_names(&nodes).await.len() == 5
    })
    .await;
    assert_eq!(node_names(&nodes).await, ["n3", "n4", "n5", "n6", "n7"]);
    let text = metrics(port).await;
    assert!(
        answers(&text, "counted") >= 3.0,
        "each Node counted once before confirmed"
    );
    assert_eq!(
        events::with_reason(&stack.client(), "DeletingNode")
            .await
            .len(),
        3
    );
    let held = events::with_reason(&stack.client(), "NodeDeletionHeld").await;
    assert_eq!(held.len(), 1, "the third waited for the window");
    // The NotReady Nodes whose instances exist stay.
    let confirmed = answers(&text, "confirmed");
    let passes = metric(
        &text,
        "wasm_ccm_controller_reconciles_total{controller=\"cloud-node-lifecycle\",result=\"success\"}",
    );
    wait_until(TIMEOUT, "more passes", || async {
        metric(&metrics(port).await, "wasm_ccm_controller_reconciles_total{controller=\"cloud-node-lifecycle\",result=\"success\"}") >= passes + 20.0
    })
    .await;
    assert_eq!(answers(&metrics(port).await, "confirmed"), confirmed);
    assert_eq!(node_names(&nodes).await.len(), 5);
    ccm.kill().await.unwrap();
}

/// Answers the cluster must not get are refused at the seam: a Node whose instance
/// reports an address that is not one, or a label the API server would reject, stays
/// uninitialized with a Warning event `InvalidCloudAnswer` and a metric, instead of
/// being written with garbage; once the cloud answers well, it is initialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_provider_answers_are_refused_with_an_event() {
    use sim_cloud::model::{Address, InstancePatch, NewInstance};
    let stack = Stack::start().await;
    let bad_address = stack.cloud.with_state(|s| {
        s.create_instance(NewInstance {
            addresses: Some(vec![Address::new("InternalIP", "10.0.0.300")]),
            ..NewInstance::named("bad-address")
        })
        .id
    });
    stack.cloud.with_state(|s| {
        s.create_instance(NewInstance {
            labels: [("example.com/rack".to_string(), "not a value!".to_string())].into(),
            ..NewInstance::named("bad-label")
        });
        s.create_instance(NewInstance::named("good"));
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in ["bad-address", "bad-label", "good"] {
        nodes
            .create(&PostParams::default(), &kubelet_node(name, "True"))
            .await
            .unwrap();
    }
    let port = listening_port();
    let mut ccm =
        stack.controller_manager(port, &["--leader-elect=false", "--controllers=cloud-node"]);
    wait_until(TIMEOUT, "the good Node initialized", || {
        initialized(&nodes, "good")
    })
    .await;
    wait_until(
        TIMEOUT,
        "an InvalidCloudAnswer event on each bad Node",
        || async {
            let events = events::with_reason(&stack.client(), "InvalidCloudAnswer").await;
            ["bad-address", "bad-label"].iter().all(|name| {
                events
                    .iter()
                    .any(|e| e.involved_object.name.as_deref() == Some(name))
            })
        },
    )
    .await;
    let text = metrics(port).await;
    for field in ["addresses", "additional-labels"] {
        assert!(
            metric(
                &text,
                &format!(
                    "wasm_ccm_provider_answers_refused_total{{controller=\"cloud-node\",field=\"{field}\"}}"
                )
            ) >= 1.0,
            "{field}: {text}"
        );
    }
    for name in ["bad-address", "bad-label"] {
        let node = nodes.get(name).await.unwrap();
        assert!(!initialized(&nodes, name).await, "{name} stays tainted");
        assert!(
            node.spec.unwrap().provider_id.is_none(),
            "{name}: nothing written"
        );
    }
    let note = events::with_reason(&stack.client(), "InvalidCloudAnswer").await[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(note.contains("is not a valid"), "{note}");
    // The cloud answers well again: the Node is initialized.
    stack.cloud.with_state(|s| {
        s.patch_instance(
            &bad_address,
            InstancePatch {
                addresses: Some(vec![Address::new("InternalIP", "10.0.0.30")]),
                ..InstancePatch::default()
            },
        )
    });
    wait_until(TIMEOUT, "the fixed Node initialized", || {
        initialized(&nodes, "bad-address")
    })
    .await;
    ccm.kill().await.unwrap();
}

/// A controller manager killed (SIGKILL) while the cloud is deleting a Service's load
/// balancer, or creating one, leaves nothing behind: the Service kept its finalizer,
/// so the next start deletes the load balancer and lets the Service go; the
/// interrupted create is completed once, not duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_delete_or_mid_create_leaves_nothing_behind() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::DeleteParams;
    use sim_cloud::model::{Fault, NewInstance};
    let stack = Stack::start().await;
    stack.cloud.with_state(|s| {
        s.create_instance(NewInstance::named("n0"));
    });
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("n0", "True"))
        .await
        .unwrap();
    let flags = ["--leader-elect=false", "--controllers=cloud-node,service"];
    let port = listening_port();
    let mut ccm = stack.controller_manager(port, &flags);
    wait_until(TIMEOUT, "n0 initialized", || initialized(&nodes, "n0")).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let load_balancers = || stack.cloud.with_state(|s| s.load_balancers.len());
    let requests = |route: &str| {
        stack
            .cloud
            .with_state(|s| s.requests.get(route).copied().unwrap_or(0))
    };

    // Mid-delete.
    services
        .create(
            &PostParams::default(),
            &wasm_ccm_tests::load_balancer_service("web", None),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "web's load balancer", || async {
        load_balancers() == 1
    })
    .await;
    wait_until(TIMEOUT, "web's finalizer", || async {
        services
            .get("web")
            .await
            .is_ok_and(|s| s.metadata.finalizers.is_some_and(|f| !f.is_empty()))
    })
    .await;
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("DELETE".into()),
            latency_ms: 60_000,
            count: Some(1),
            ..Fault::default()
        })
    });
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the delete reaching the cloud", || async {
        requests("DELETE /v1/load-balancers/{name}") == 1
    })
    .await;
    ccm.kill().await.unwrap();
    assert_eq!(load_balancers(), 1, "the interrupted delete did not happen");
    assert!(
        services.get("web").await.is_ok(),
        "the finalizer keeps the Service"
    );
    let mut ccm = stack.controller_manager(port, &flags);
    wait_until(
        TIMEOUT,
        "the Service gone and its load balancer deleted",
        || async { services.get("web").await.is_err() && load_balancers() == 0 },
    )
    .await;

    // Mid-create.
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("PUT".into()),
            latency_ms: 60_000,
            count: Some(1),
            ..Fault::default()
        })
    });
    services
        .create(
            &PostParams::default(),
            &wasm_ccm_tests::load_balancer_service("api", None),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the create reaching the cloud", || async {
        requests("PUT /v1/load-balancers/{name}") == 1
    })
    .await;
    ccm.kill().await.unwrap();
    let mut ccm = stack.controller_manager(port, &flags);
    wait_until(TIMEOUT, "api's status", || async {
        services.get("api").await.is_ok_and(|s| {
            s.status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .is_some_and(|i| !i.is_empty())
        })
    })
    .await;
    assert_eq!(load_balancers(), 1, "one load balancer for api");
    services
        .delete("api", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "api gone, nothing left", || async {
        services.get("api").await.is_err() && load_balancers() == 0
    })
    .await;
    ccm.kill().await.unwrap();
}
