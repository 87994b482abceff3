//! Upstream's service controller tests (`controller_test.go`) ported in process: one
//! reconcile of a Service as the API server double holds it, against the recording
//! cloud, asserting on the calls recorded and on what the Service and its events are
//! left with, as `TestSyncLoadBalancerIfNeeded` and `TestProcessServiceDeletion` do.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::FINALIZER;
use super::state::{NodeSet, State};
use super::sync::{error_policy, reconcile};
use crate::cloud::Cloud;
use crate::cloud::fake::{INGRESS_IP, Recording};
use crate::controllers::test_cluster::TestCluster;

/// One row of `TestSyncLoadBalancerIfNeeded`.
struct Case {
    name: &'static str,
    /// The Service's `spec.type`, and its protocol.
    type_: &'static str,
    protocol: &'static str,
    /// `spec.loadBalancerClass`.
    class: Option<&'static str>,
    /// It carries the cleanup finalizer.
    finalizer: bool,
    /// It is being deleted (kept by the finalizer).
    deleting: bool,
    /// The cloud has its load balancer.
    exists: bool,
    /// The calls the reconcile makes.
    calls: &'static [&'static str],
    /// The Service keeps (or gets) the finalizer; `None`: it is gone.
    finalizer_after: Option<bool>,
    /// It has the cloud's ingress afterwards.
    ingress_after: bool,
    /// The events recorded about it, in any order.
    events: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "service doesn't want LB",
        type_: "ClusterIP",
        protocol: "TCP",
        class: None,
        finalizer: false,
        deleting: false,
        exists: false,
        calls: &[],
        finalizer_after: Some(false),
        ingress_after: false,
        events: &[],
    },
    Case {
        name: "service no longer wants LB",
        type_: "ClusterIP",
        protocol: "TCP",
        class: None,
        finalizer: true,
        deleting: false,
        exists: true,
        calls: &["get", "delete"],
        finalizer_after: Some(false),
        ingress_after: false,
        events: &["DeletingLoadBalancer", "DeletedLoadBalancer"],
    },
    Case {
        name: "udp service that wants LB",
        type_: "LoadBalancer",
        protocol: "UDP",
        class: None,
        finalizer: false,
        deleting: false,
        exists: false,
        calls: &["ensure"],
        finalizer_after: Some(true),
        ingress_after: true,
        events: &["EnsuringLoadBalancer", "EnsuredLoadBalancer"],
    },
    Case {
        name: "tcp service that wants LB",
        type_: "LoadBalancer",
        protocol: "TCP",
        class: None,
        finalizer: false,
        deleting: false,
        exists: false,
        calls: &["ensure"],
        finalizer_after: Some(true),
        ingress_after: true,
        events: &["EnsuringLoadBalancer", "EnsuredLoadBalancer"],
    },
    Case {
        name: "sctp service that wants LB",
        type_: "LoadBalancer",
        protocol: "SCTP",
        class: None,
        finalizer: false,
        deleting: false,
        exists: false,
        calls: &["ensure"],
        finalizer_after: Some(true),
        ingress_after: true,
        events: &["EnsuringLoadBalancer", "EnsuredLoadBalancer"],
    },
    Case {
        name: "service specifies loadBalancerClass",
        type_: "LoadBalancer",
        protocol: "TCP",
        class: Some("custom-loadbalancer"),
        finalizer: false,
        deleting: false,
        exists: false,
        calls: &[],
        finalizer_after: Some(false),
        ingress_after: false,
        events: &[],
    },
    Case {
        name: "service that needs cleanup because being deleted",
        type_: "LoadBalancer",
        protocol: "TCP",
        class: None,
        finalizer: true,
        deleting: true,
        exists: true,
        calls: &["get", "delete"],
        finalizer_after: None,
        ingress_after: false,
        events: &["DeletingLoadBalancer", "DeletedLoadBalancer"],
    },
    Case {
        name: "service with finalizer that wants LB",
        type_: "LoadBalancer",
        protocol: "TCP",
        class: None,
        finalizer: true,
        deleting: false,
        exists: false,
        calls: &["ensure"],
        finalizer_after: Some(true),
        ingress_after: true,
        events: &["EnsuringLoadBalancer", "EnsuredLoadBalancer"],
    },
    Case {
        name: "service that needs cleanup but LB does not exist",
        type_: "ClusterIP",
        protocol: "TCP",
        class: None,
        finalizer: true,
        deleting: false,
        exists: false,
        calls: &["get"],
        finalizer_after: Some(false),
        ingress_after: false,
        events: &["DeletedLoadBalancer"],
    },
];

fn service(case: &Case) -> Service {
    let mut svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "svc", "namespace": "default"},
        "spec": {
            "type": case.type_,
            "ports": [{"port": 80, "protocol": case.protocol, "nodePort": 30080}],
        },
    }))
    .expect("a Service");
    let spec = svc.spec.as_mut().expect("a spec");
    spec.load_balancer_class = case.class.map(String::from);
    if case.type_ != "LoadBalancer" {
        spec.ports.as_mut().expect("ports")[0].node_port = None;
    }
    if case.finalizer {
        svc.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    svc
}

fn ingress(svc: &Service) -> Option<String> {
    svc.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

#[tokio::test]
async fn sync_load_balancer_if_needed() {
    for case in CASES {
        let exists = case.exists;
        let cluster = TestCluster::start(|calls| {
            let cloud = Recording::new(1, calls);
            Arc::new(if exists {
                cloud
            } else {
                cloud.without_load_balancer()
            }) as Arc<dyn Cloud>
        })
        .await;
        cluster.ready_node("node0").await;
        let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
        services
            .create(&PostParams::default(), &service(case))
            .await
            .expect("the Service is created");
        if case.finalizer {
            // A Service that was synced before has the status it got then (upstream's
            // rows start from 8.8.8.8): a cleanup must clear it, an ensure replace it.
            services
                .patch_status(
                    "svc",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"status": {"loadBalancer": {"ingress": [{"ip": "8.8.8.8"}]}}}),
                    ),
                )
                .await
                .expect("the Service's status is set");
        }
        if case.deleting {
            services
                .delete("svc", &DeleteParams::default())
                .await
                .expect("the Service is marked deleted");
        }
        let stored = services.get("svc").await.expect("the Service is there");
        let (state, _writer, _queued) = State::in_context(cluster.context());
        reconcile(Arc::new(stored), Arc::new(state))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));

        let calls: Vec<&str> = cluster.taken().into_iter().map(|(_, c)| c).collect();
        assert_eq!(calls, case.calls, "{}: calls", case.name);
        let after = services
            .get_opt("svc")
            .await
            .expect("the Service can be read");
        match (case.finalizer_after, &after) {
            (None, None) => {}
            (Some(want), Some(svc)) => {
                let has = svc
                    .metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
                assert_eq!(has, want, "{}: finalizer", case.name);
                assert_eq!(
                    ingress(svc).as_deref(),
                    case.ingress_after.then_some(INGRESS_IP),
                    "{}: status",
                    case.name
                );
            }
            (want, got) => panic!("{}: wanted {want:?}, the Service is {got:?}", case.name),
        }
        let mut reasons = cluster.reasons("svc").await;
        reasons.sort();
        let mut want: Vec<&str> = case.events.to_vec();
        want.sort();
        assert_eq!(reasons, want, "{}: events", case.name);
    }
}

/// The error policy as upstream's rate-limited queue with `api.RetryError`: a failed
/// sync is retried after 5 s, doubling to 300 s; a provider's Retry-After is the
/// delay, and does not grow the back-off; a success starts it again. No waiting: the
/// policy's answer is the delay the controller requeues with, and each next attempt is
/// made as if that delay had passed.
#[tokio::test]
async fn error_policy_backs_off_and_keeps_to_retry_after() {
    let secs = |s: &[u64]| -> Vec<Action> {
        s.iter()
            .map(|s| Action::requeue(Duration::from_secs(*s)))
            .collect()
    };
    let cluster = TestCluster::start(|calls| {
        Arc::new(Recording::new(1, calls).failing("ensure")) as Arc<dyn Cloud>
    })
    .await;
    let (svc, state, _store) = one_balanced_service(&cluster).await;
    assert_eq!(
        failed_attempts(&svc, &state, 8).await,
        secs(&[5, 10, 20, 40, 80, 160, 300, 300])
    );
    // A success forgets the failures: the next one waits 5 s again.
    cluster
        .cloud
        .set(Arc::new(Recording::new(2, &cluster.calls)));
    state.set_retry_at("default/svc", tokio::time::Instant::now());
    reconcile(svc.clone(), state.clone())
        .await
        .expect("the ensure succeeds");
    cluster.cloud.set(Arc::new(
        Recording::new(3, &cluster.calls).failing("ensure"),
    ));
    let changed = {
        let mut changed = (*svc).clone();
        changed
            .spec
            .as_mut()
            .expect("a spec")
            .ports
            .as_mut()
            .expect("ports")[0]
            .port = 81;
        Arc::new(changed)
    };
    assert_eq!(failed_attempts(&changed, &state, 1).await, secs(&[5]));

    // Throttled: the provider's delay each time, and the back-off does not grow.
    let throttling = TestCluster::start(|calls| {
        Arc::new(Recording::new(1, calls).throttled("ensure", Duration::from_secs(7)))
            as Arc<dyn Cloud>
    })
    .await;
    let (svc, state, _store) = one_balanced_service(&throttling).await;
    assert_eq!(failed_attempts(&svc, &state, 3).await, secs(&[7, 7, 7]));
    // Asked to come back later is not a failure: a Normal event says when.
    let reasons = throttling.reasons("svc").await;
    assert!(
        reasons.iter().any(|r| r == "SyncLoadBalancerPending")
            && !reasons.iter().any(|r| r == "SyncLoadBalancerFailed"),
        "{reasons:?}"
    );
}

/// The Service store's writer and the resync queue, kept while a test uses its state.
type StoreEnds = (
    kube::runtime::reflector::store::Writer<Service>,
    tokio::sync::mpsc::UnboundedReceiver<Arc<Service>>,
);

/// A Ready Node and the LoadBalancer Service `svc` in `cluster`, and a service
/// controller state there.
async fn one_balanced_service(cluster: &TestCluster) -> (Arc<Service>, Arc<State>, StoreEnds) {
    cluster.ready_node("node0").await;
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
    let svc = stored(&services, "svc", "LoadBalancer").await;
    let (state, writer, queued) = State::in_context(cluster.context());
    (svc, Arc::new(state), (writer, queued))
}

/// Load balancers synced on their own (the full sync) given the same Nodes hold one
/// node set, not a copy each (half a MiB a Service at 5,000 Nodes); once a Node
/// changes, the next sync holds a new set and the others keep theirs.
#[tokio::test]
async fn load_balancers_given_the_same_nodes_share_their_node_set() {
    let cluster =
        TestCluster::start(|calls| Arc::new(Recording::new(1, calls)) as Arc<dyn Cloud>).await;
    for node in ["node0", "node1"] {
        cluster.ready_node(node).await;
    }
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
    let (state, _writer, _queued) = State::in_context(cluster.context());
    let state = Arc::new(state);
    for name in ["s0", "s1"] {
        let svc = stored(&services, name, "LoadBalancer").await;
        reconcile(svc, state.clone()).await.expect("synced");
    }
    let set = |key: &str| {
        let stored = state
            .set_nodes(key, Default::default())
            .expect("a node set");
        state.set_nodes(key, stored.clone());
        stored
    };
    let (first, second) = (set("default/s0"), set("default/s1"));
    assert_eq!(first.len(), 2);
    assert!(Arc::ptr_eq(&first, &second), "copies: {first:?} {second:?}");

    cluster.ready_node("node2").await;
    let svc = stored(&services, "s2", "LoadBalancer").await;
    reconcile(svc, state.clone()).await.expect("synced");
    let third = set("default/s2");
    assert_eq!(third.len(), 3);
    assert_eq!(set("default/s0").len(), 2, "another Service's set changed");
}

/// `attempts` syncs of `svc` that fail, each made as if the delay before it had passed:
/// the delays the error policy answers.
async fn failed_attempts(svc: &Arc<Service>, state: &Arc<State>, attempts: usize) -> Vec<Action> {
    let mut delays = Vec::new();
    for _ in 0..attempts {
        state.set_retry_at("default/svc", tokio::time::Instant::now());
        let err = reconcile(svc.clone(), state.clone())
            .await
            .expect_err("the sync fails");
        delays.push(error_policy(svc.clone(), &err, state.clone()));
    }
    delays
}

/// A Service of `type_` named `name`, as the API server double stores it.
pub(super) async fn stored(services: &Api<Service>, name: &str, type_: &str) -> Arc<Service> {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": type_, "ports": [{"port": 80}]},
    }))
    .expect("a Service");
    Arc::new(
        services
            .create(&PostParams::default(), &svc)
            .await
            .expect("the Service is created"),
    )
}

/// Upstream's `TestUpdateNodesInExternalLoadBalancer`: a node sync updates the load
/// balancer of every synced Service that has one, with the eligible Nodes, and no
/// other Service.
#[tokio::test]
async fn update_nodes_in_external_load_balancer() {
    // (description, Service types): one update per LoadBalancer.
    let rows: &[(&str, &[&str])] = &[
        ("no services present: no calls", &[]),
        (
            "services without external load balancers: no calls",
            &["ClusterIP", "NodePort"],
        ),
        (
            "one service with an external load balancer: one call",
            &["LoadBalancer"],
        ),
        (
            "three services with an external load balancer: three calls",
            &["LoadBalancer", "LoadBalancer", "LoadBalancer"],
        ),
        (
            "two services with an external load balancer and two without: two calls",
            &["ClusterIP", "LoadBalancer", "NodePort", "LoadBalancer"],
        ),
    ];
    for (description, types) in rows {
        let cluster =
            TestCluster::start(|calls| Arc::new(Recording::new(1, calls)) as Arc<dyn Cloud>).await;
        for node in ["node0", "node1", "node73"] {
            cluster.ready_node(node).await;
        }
        let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
        let (state, mut writer, _queued) = State::in_context(cluster.context());
        for (i, type_) in types.iter().enumerate() {
            let svc = stored(&services, &format!("s{i}"), type_).await;
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply((*svc).clone()));
            state.synced_ok(svc);
        }
        let state = Arc::new(state);
        super::hosts::sync_nodes(&state).await;
        // Upstream's `cloud.UpdateCalls`: each Service with a load balancer, once, with
        // the three Nodes.
        let mut updates: Vec<(String, Vec<String>)> = cluster
            .calls
            .of("update")
            .into_iter()
            .map(|call| {
                let mut nodes = call.nodes;
                nodes.sort();
                (call.subject, nodes)
            })
            .collect();
        updates.sort();
        let want: Vec<(String, Vec<String>)> = types
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == "LoadBalancer")
            .map(|(i, _)| {
                let nodes = ["node0", "node1", "node73"].map(String::from).to_vec();
                (format!("default/s{i}"), nodes)
            })
            .collect();
        assert_eq!(updates, want, "{description}");
        assert_eq!(
            cluster.taken().len(),
            want.len(),
            "{description}: only updates: {:?}",
            cluster.taken()
        );
        // Each updated with the three Nodes: their set is what the sync stored, one set
        // shared by every load balancer (not a copy each).
        let mut sets: Vec<NodeSet> = Vec::new();
        for (i, type_) in types.iter().enumerate() {
            if *type_ == "LoadBalancer" {
                let stored = state.set_nodes(&format!("default/s{i}"), Default::default());
                let stored = stored.unwrap_or_default();
                let names: Vec<&String> = stored.keys().collect();
                assert_eq!(names, ["node0", "node1", "node73"], "{description}");
                sets.push(stored);
            }
        }
        assert!(
            sets.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])),
            "{description}: the load balancers' node sets are copies"
        );
    }
}

/// Upstream's `TestProcessServiceDeletion`: a Service gone from the API server has the
/// load balancer of its last synced state deleted (`DeletingLoadBalancer`,
/// `DeletedLoadBalancer`) and is forgotten; one never synced costs nothing; a cloud
/// that fails leaves it remembered for the retry, with `DeleteLoadBalancerFailed`.
#[tokio::test]
async fn process_service_deletion() {
    /// (description, synced before, the delete fails): calls, remembered, events.
    type Row<'a> = (&'a str, bool, bool, &'a [&'a str], bool, &'a [&'a str]);
    let rows: &[Row] = &[
        (
            "a service that was never synced is deleted",
            false,
            false,
            &[],
            false,
            &[],
        ),
        (
            "the cloud fails to delete the load balancer",
            true,
            true,
            &["delete"],
            true,
            &["DeleteLoadBalancerFailed", "DeletingLoadBalancer"],
        ),
        (
            "the delete succeeds",
            true,
            false,
            &["delete"],
            false,
            &["DeletedLoadBalancer", "DeletingLoadBalancer"],
        ),
    ];
    for (description, synced, fails, calls, remembered, events) in rows {
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let stop = Arc::new(stop);
        let stopper = stop.clone();
        let fails = *fails;
        let cluster = TestCluster::start(move |calls| {
            let cloud = Recording::new(1, calls);
            Arc::new(if fails {
                // The retry would come after the back-off: stop right after the failure.
                cloud.failing("delete").after("delete", move || {
                    let _ = stopper.send(true);
                })
            } else {
                cloud
            }) as Arc<dyn Cloud>
        })
        .await;
        cluster.ready_node("node0").await;
        let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
        let svc = stored(&services, "gone", "LoadBalancer").await;
        let (state, _writer, _queued) = State::in_context(cluster.context());
        if *synced {
            state.synced_ok(svc.clone());
        }
        let state = Arc::new(state);
        tokio::time::timeout(
            crate::controllers::test_cluster::TIMEOUT,
            super::sync::clean_up_gone(state.clone(), svc, stopping),
        )
        .await
        .expect("the cleanup ends");
        let taken: Vec<&str> = cluster.taken().into_iter().map(|(_, c)| c).collect();
        assert_eq!(taken, *calls, "{description}: calls");
        assert_eq!(
            state.is_synced("default/gone"),
            *remembered,
            "{description}"
        );
        let mut reasons = cluster.reasons("gone").await;
        reasons.sort();
        assert_eq!(reasons, *events, "{description}: events");
        drop(stop);
    }
}
