//! The controller manager, the real `wasm-ccm` binary, against the API server double,
//! the simulated cloud and the reference provider: each upstream rule of the four
//! controllers, failure paths included, one module per controller and one for what
//! only the process shows. The controllers' decisions are also tested in process
//! against a recording fake cloud (`runtime/manager/src/controllers/`).

mod lifecycle;
mod node;
mod process;
mod route;
mod service;
mod service_failures;
mod service_hosts;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sim_cloud::model::{Address, Fault, InstancePatch, InstanceState, NewInstance};
use wasm_ccm_tests::events::{self, notes, occurrences, reasons, reasons_in_order};
use wasm_ccm_tests::{
    Stack, default_load_balancer_name, http_get, ingress_ip, initialized, kubelet_node,
    listening_port, load_balancer_service, metric, metrics, node_addresses, provider_calls,
    reconciles, set_ready, taint_keys, wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(60);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// Creates cloud instances and matching initialized, Ready Nodes.
async fn ready_nodes(stack: &Stack, names: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for name in names {
        ids.push(ready_node(stack, name, &[]).await);
    }
    ids
}

/// Creates a cloud instance and its initialized, Ready Node with `pod_cidrs` (none:
/// no pod CIDR); returns the instance's ID.
async fn ready_node(stack: &Stack, name: &str, pod_cidrs: &[&str]) -> String {
    let instance = stack
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named(name)));
    let mut node = kubelet_node(name, "True");
    let spec = node.spec.as_mut().unwrap();
    spec.taints = None;
    spec.provider_id = Some(format!("simcloud://{}", instance.id));
    if !pod_cidrs.is_empty() {
        spec.pod_cidrs = Some(pod_cidrs.iter().map(|c| c.to_string()).collect());
    }
    let nodes: Api<Node> = Api::all(stack.client());
    nodes.create(&PostParams::default(), &node).await.unwrap();
    instance.id
}

/// The destination CIDRs of the simulated cloud's routes, sorted.
fn route_cidrs(stack: &Stack) -> Vec<String> {
    let mut cidrs: Vec<String> = stack.cloud.with_state(|s| {
        s.routes
            .values()
            .map(|r| r.destination_cidr.clone())
            .collect()
    });
    cidrs.sort();
    cidrs
}

/// The simulated cloud answers the next `count` load balancer requests of `method`
/// (`PUT` ensures, `DELETE` deletes) with `status`, saying Retry-After
/// `retry_after_seconds` when given.
fn fail_load_balancer_requests(
    stack: &Stack,
    method: &str,
    status: u16,
    retry_after_seconds: Option<u64>,
    count: u64,
) {
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some(method.into()),
            status: Some(status),
            retry_after_seconds,
            count: Some(count),
            ..Fault::default()
        })
    });
}

type Service = k8s_openapi::api::core::v1::Service;

/// The simulated cloud's load balancer names.
fn load_balancer_names(stack: &Stack) -> Vec<String> {
    stack
        .cloud
        .with_state(|s| s.load_balancers.keys().cloned().collect())
}

/// Creates a LoadBalancer Service and waits for its ingress; returns the Service.
async fn ensured(services: &Api<Service>, name: &str) -> Service {
    services
        .create(&PostParams::default(), &load_balancer_service(name, None))
        .await
        .unwrap();
    wait_until(TIMEOUT, "the load balancer ensured", || async {
        services.get(name).await.is_ok_and(|s| {
            ingress_ip(&s).is_some()
                && s.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| !f.is_empty())
        })
    })
    .await;
    services.get(name).await.unwrap()
}

/// Switches a Service to ClusterIP.
async fn to_cluster_ip(services: &Api<Service>, name: &str) {
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
        )
        .await
        .unwrap();
}

/// Waits until a Service has neither the finalizer nor an ingress.
async fn wait_released(services: &Api<Service>, name: &str) {
    wait_until(TIMEOUT, "finalizer and status gone", || async {
        services.get(name).await.is_ok_and(|s| {
            ingress_ip(&s).is_none() && s.metadata.finalizers.unwrap_or_default().is_empty()
        })
    })
    .await;
}

async fn remove_finalizers(services: &Api<Service>, name: &str) {
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
}

/// The NetworkUnavailable condition of a Node.
async fn network_unavailable(nodes: &Api<Node>, name: &str) -> Option<(String, String)> {
    let node = nodes.get(name).await.ok()?;
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "NetworkUnavailable")
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

/// Waits until `reason` was recorded for Service `service`.
async fn wait_for_reason(stack: &Stack, service: &str, reason: &str) {
    events::wait_for_reason(&stack.client(), service, reason, TIMEOUT).await;
}
