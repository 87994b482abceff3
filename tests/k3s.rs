//! The K3s provider (`guests/k3s`) on the real kube-apiserver: Nodes registered and
//! annotated as the K3s agent annotates them (`k3s.io/internal-ip`, `external-ip`,
//! `internal-dns`, `external-dns`, `hostname`, and the labels K3s falls back to) get
//! the fields K3s's embedded cloud provider gives them; a Node annotated late is
//! initialized once annotated; a Node K3s's own cloud controller initialized before
//! keeps its provider ID and stays (it always exists). The provider reaches nothing:
//! its policy allows no host. (K3s's agent annotates its Node only while K3s's cloud
//! controller is on, which is why deploy/k3s keeps it on with its Node controllers
//! off.)

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::kube_apiserver::KubeApiServer;
use wasm_ccm_tests::{
    TempDir, controller_manager_command, guest, initialized, listening_port, node_addresses,
    wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(120);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A Node as the K3s agent registers it (kubelet with `--cloud-provider=external`),
/// with `annotations` and `labels`.
fn agent_node(name: &str, annotations: serde_json::Value, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations, "labels": labels},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap()
}

fn label(node: &Node, key: &str) -> Option<String> {
    node.metadata.labels.as_ref()?.get(key).cloned()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_k3s_s_fields_from_the_agent_s_annotations() {
    let server = KubeApiServer::start().await;
    let dir = TempDir::new("k3s");
    std::fs::copy(guest("k3s_provider"), dir.path().join("k3s.wasm")).unwrap();
    // The provider reaches nothing: no host, no credential.
    std::fs::write(dir.path().join("k3s.yaml"), "allowedOutboundHosts: []\n").unwrap();
    let cloud_config = dir.path().join("cloud.conf");
    std::fs::write(&cloud_config, "").unwrap();
    let nodes: Api<Node> = Api::all(server.client().await);
    let created = [
        // Dual stack, an external address and the agent's hostname; topology and type
        // labels the operator set.
        agent_node(
            "agent-a",
            json!({"k3s.io/internal-ip": "10.0.0.5,fd00::5", "k3s.io/external-ip": "203.0.113.5",
                   "k3s.io/hostname": "agent-a.local"}),
            json!({"topology.kubernetes.io/region": "dc-1", "topology.kubernetes.io/zone": "rack-2",
                   "node.kubernetes.io/instance-type": "m5.large"}),
        ),
        // The labels K3s falls back to, and no type: the program's name.
        agent_node(
            "agent-b",
            json!({}),
            json!({"k3s.io/internal-ip": "10.0.0.6", "k3s.io/hostname": "agent-b"}),
        ),
        // DNS names.
        agent_node(
            "agent-c",
            json!({"k3s.io/internal-ip": "10.0.0.7", "k3s.io/internal-dns": "c.internal",
                   "k3s.io/external-dns": "c.example.com,c2.example.com"}),
            json!({}),
        ),
        // Not annotated yet.
        agent_node("agent-late", json!({}), json!({})),
    ];
    // Initialized by K3s's own cloud controller before wasm-ccm took over, and NotReady.
    let before: Node = serde_json::from_value(json!({
        "metadata": {"name": "agent-before", "annotations": {"k3s.io/internal-ip": "10.0.0.8"}},
        "spec": {"providerID": "k3s://agent-before"},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &before).await.unwrap();
    for node in &created {
        nodes.create(&PostParams::default(), node).await.unwrap();
    }
    let port = listening_port();
    let mut command = controller_manager_command(
        "k3s",
        dir.path(),
        &cloud_config,
        &server.kubeconfig(),
        port,
        // As deploy/k3s runs it: K3s's provider tags nothing with a cluster ID.
        &[
            "--leader-elect=false",
            "--configure-cloud-routes=false",
            "--allow-untagged-cloud",
        ],
    );
    command.env("RUST_LOG", "info");
    let (_ccm, log) = wasm_ccm_tests::spawn_logged(command);
    for name in ["agent-a", "agent-b", "agent-c"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
        wait_until(TIMEOUT, &format!("{name}'s addresses"), || async {
            !node_addresses(&nodes, name).await.is_empty()
        })
        .await;
    }
    let a = nodes.get("agent-a").await.unwrap();
    assert_eq!(
        a.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("k3s://agent-a")
    );
    assert_eq!(
        label(&a, "node.kubernetes.io/instance-type").as_deref(),
        Some("m5.large")
    );
    assert_eq!(
        label(&a, "topology.kubernetes.io/region").as_deref(),
        Some("dc-1")
    );
    assert_eq!(
        label(&a, "topology.kubernetes.io/zone").as_deref(),
        Some("rack-2")
    );
    assert_eq!(
        node_addresses(&nodes, "agent-a").await,
        pairs(&[
            ("InternalIP", "10.0.0.5"),
            ("InternalIP", "fd00::5"),
            ("ExternalIP", "203.0.113.5"),
            ("Hostname", "agent-a.local"),
        ])
    );
    let b = nodes.get("agent-b").await.unwrap();
    assert_eq!(
        label(&b, "node.kubernetes.io/instance-type").as_deref(),
        Some("k3s")
    );
    assert_eq!(
        node_addresses(&nodes, "agent-b").await,
        pairs(&[("InternalIP", "10.0.0.6"), ("Hostname", "agent-b")])
    );
    assert_eq!(
        node_addresses(&nodes, "agent-c").await,
        pairs(&[
            ("InternalIP", "10.0.0.7"),
            ("InternalDNS", "c.internal"),
            ("ExternalDNS", "c.example.com"),
            ("ExternalDNS", "c2.example.com"),
        ])
    );
    // agent-late waits for its annotations, then is initialized.
    let late = nodes.get("agent-late").await.unwrap();
    assert!(
        late.spec.as_ref().unwrap().provider_id.is_none(),
        "{late:?}"
    );
    nodes
        .patch(
            "agent-late",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"k3s.io/internal-ip": "10.0.0.9"}}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "agent-late initialized once annotated", || {
        initialized(&nodes, "agent-late")
    })
    .await;
    wait_until(TIMEOUT, "agent-late's address", || async {
        node_addresses(&nodes, "agent-late").await == pairs(&[("InternalIP", "10.0.0.9")])
    })
    .await;
    // The Node K3s initialized keeps its provider ID and is not deleted: its instance
    // always exists, whatever its readiness.
    let before = nodes.get("agent-before").await.unwrap();
    assert_eq!(
        before.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("k3s://agent-before")
    );
    let log = log.lock().unwrap().clone();
    assert!(log.contains("address annotations not yet set"), "{log}");
}

/// `kubectl kustomize deploy/k3s/` renders, and the provider loads with its policy (no
/// host) and cloud config; the Deployment runs it as K3s runs its cloud controller.
#[tokio::test]
async fn the_deploy_k3s_example_renders_and_loads() {
    let wasm_ccm_tests::RenderedExample {
        policy,
        cloud_conf,
        deployment,
    } = wasm_ccm_tests::rendered_example("k3s", "k3s");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    for flag in ["--allow-untagged-cloud", "--configure-cloud-routes=false"] {
        assert!(args.contains(flag), "{flag}: {args}");
    }
    let dir = TempDir::new("deploy-k3s");
    std::fs::copy(guest("k3s_provider"), dir.path().join("k3s.wasm")).unwrap();
    std::fs::write(dir.path().join("k3s.yaml"), &policy).unwrap();
    let provider = wasm_ccm_tests::loader()
        .load(&dir.path().join("k3s.wasm"), cloud_conf.into_bytes())
        .await
        .unwrap_or_else(|e| panic!("loading the K3s provider with deploy/k3s's files: {e}"));
    assert_eq!(provider.name(), "k3s");
}
