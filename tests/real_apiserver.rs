//! The real Kubernetes API server (kube-apiserver and etcd, built by
//! `scripts/ensure-kube-apiserver.sh`): `deploy/` installed as its README says, the
//! controller manager run with the token of the ServiceAccount it creates (a
//! `TokenRequest`), and the four controllers' main scenarios. Every request the
//! controller manager makes must be allowed by deploy/'s RBAC: the server's audit log
//! shows any it refused, and the test fails naming their verbs and resources.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sim_cloud::model::{InstancePatch, InstanceState, NewInstance};
use wasm_ccm_tests::kube_apiserver::KubeApiServer;
use wasm_ccm_tests::{Stack, free_port, wait_until};

const TIMEOUT: Duration = Duration::from_secs(90);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The identity deploy/ gives the controller manager.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:wasm-ccm";

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// Runs `kubectl` with the server's admin kubeconfig; its output, or a panic naming
/// the command and what it printed.
fn kubectl_admin(server: &KubeApiServer, args: &[&str]) -> String {
    let out = std::process::Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e} (set KUBECTL)", kubectl()));
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubelet_node(name: &str, pod_cidr: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn taints(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_serves_the_four_controllers_on_a_real_api_server() {
    let server = KubeApiServer::start().await;
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    assert!(
        deploy.join("providers/simcloud.wasm").exists(),
        "deploy/providers/simcloud.wasm is missing: run scripts/build-guests.sh"
    );
    // deploy/README.md's install command.
    kubectl_admin(
        &server,
        &[
            "apply",
            "--server-side",
            "-k",
            &deploy.display().to_string(),
        ],
    );

    // The simulated cloud and the reference provider, the controller manager with the
    // ServiceAccount's token.
    let mut stack = Stack::start().await;
    let token = server.token("kube-system", "wasm-ccm").await;
    let kubeconfig = stack.dir.dir.path().join("wasm-ccm.kubeconfig");
    server.write_kubeconfig(&kubeconfig, Some(&token));
    stack.kubeconfig = kubeconfig;
    let client = server.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    for (name, cidr) in [("real-a", "10.244.1.0/24"), ("real-b", "10.244.2.0/24")] {
        stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        nodes
            .create(&PostParams::default(), &kubelet_node(name, cidr))
            .await
            .unwrap();
    }
    let port = free_port();
    let (_ccm, log) = wasm_ccm_tests::spawn_logged({
        let mut command = stack.secure_controller_manager_command(port, &[]);
        command
            .env("POD_NAME", "wasm-ccm-0")
            .env("POD_NAMESPACE", "kube-system");
        command
    });

    // Leader election on a real Lease.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    wait_until(TIMEOUT, "the leader's Lease", || async {
        leases.list(&Default::default()).await.is_ok_and(|l| {
            l.items.iter().any(|l| {
                l.spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_ref())
                    .is_some()
            })
        })
    })
    .await;

    // Node initialization: provider ID, addresses, labels; routes for both.
    for name in ["real-a", "real-b"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || async {
            nodes
                .get(name)
                .await
                .is_ok_and(|n| !taints(&n).contains(&UNINITIALIZED.to_string()))
        })
        .await;
    }
    let a = nodes.get("real-a").await.unwrap();
    assert!(
        a.spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|p| p.starts_with("simcloud://")),
        "{:?}",
        a.spec
    );
    assert!(
        a.status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP"))
    );
    let labels = a.metadata.labels.clone().unwrap_or_default();
    assert!(
        labels.contains_key("node.kubernetes.io/instance-type"),
        "{labels:?}"
    );
    wait_until(TIMEOUT, "routes for both nodes", || async {
        stack.cloud.with_state(|s| s.list_routes(None).len()) == 2
    })
    .await;
    wait_until(TIMEOUT, "real-a's network available", || async {
        nodes.get("real-a").await.is_ok_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
        })
    })
    .await;

    // A load balancer Service: status, finalizer, and cleanup on deletion.
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    wait_until(TIMEOUT, "web's ingress and finalizer", || async {
        services.get("web").await.is_ok_and(|s| {
            let finalized = s.metadata.finalizers.as_ref().is_some_and(|f| {
                f.iter()
                    .any(|f| f == "service.kubernetes.io/load-balancer-cleanup")
            });
            let ingress = s
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .is_some_and(|i| !i.is_empty());
            finalized && ingress
        })
    })
    .await;
    assert_eq!(stack.cloud.with_state(|s| s.load_balancers.len()), 1);
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "web gone after cleanup", || async {
        services.get_opt("web").await.is_ok_and(|s| s.is_none())
    })
    .await;
    assert_eq!(stack.cloud.with_state(|s| s.load_balancers.len()), 0);

    // Lifecycle: real-b's instance stops and the Node is not Ready: tainted; the
    // instance is gone: the Node is deleted.
    let b = stack
        .cloud
        .with_state(|s| s.list_instances(Some("real-b"))[0].id.clone());
    stack.cloud.with_state(|s| {
        s.patch_instance(
            &b,
            InstancePatch {
                state: Some(InstanceState::Stopped),
                ..Default::default()
            },
        )
    });
    nodes
        .patch_status(
            "real-b",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            ),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "real-b tainted as shut down", || async {
        nodes.get("real-b").await.is_ok_and(|n| {
            taints(&n).contains(&"node.cloudprovider.kubernetes.io/shutdown".to_string())
        })
    })
    .await;
    stack.cloud.with_state(|s| s.delete_instance(&b));
    wait_until(TIMEOUT, "real-b deleted", || async {
        nodes.get_opt("real-b").await.is_ok_and(|n| n.is_none())
    })
    .await;

    // Every request of the controller manager was allowed.
    let audited: Vec<_> = server
        .audit()
        .into_iter()
        .filter(|a| a.user == SERVICE_ACCOUNT)
        .collect();
    assert!(
        !audited.is_empty(),
        "no request of {SERVICE_ACCOUNT} audited"
    );
    let refused: Vec<String> = audited
        .iter()
        .filter(|a| a.code == 403)
        .map(|a| format!("{} {}/{} in `{}`", a.verb, a.group, a.resource, a.namespace))
        .collect();
    assert!(
        refused.is_empty(),
        "deploy/'s RBAC refused requests of the controller manager: {refused:#?}\nits log:\n{}",
        log.lock().unwrap()
    );
}
