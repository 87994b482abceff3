//! The Huawei Cloud provider (`guests/huaweicloud`) through the real controllers and
//! the API server double, against tests/huaweicloud-double, which verifies every
//! request's `SDK-HMAC-SHA256` signature: the host signs with the access key of
//! deploy/huaweicloud's policy, the provider never holds it. Huawei's official Python
//! SDK judges what the host signs ([`signing`]) and drives the double itself
//! ([`sdk_clients`]).

mod deploy;
mod load_balancers;
mod sdk_clients;
mod signing;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use huaweicloud_double::state::NewServer;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use wasm_ccm_tests::huaweicloud::{HuaweiWorld, PROJECT, REGION, SERVICES, sdk_judge};
use wasm_ccm_tests::{
    TempDir, controller_manager_command, guest, initialized, listening_port, node_addresses,
    set_ready, taint_keys, wait_until,
};

/// How long a condition may take: several provider calls on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(240);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// The double, the API server double and a provider directory holding the provider,
/// deploy/huaweicloud's policy for the double and the key files.
struct HuaweiStack {
    world: HuaweiWorld,
    api: kube_double::ApiServer,
    dir: TempDir,
    /// The key files' directory (the credentials Secret's mount), inside `dir`.
    credentials: PathBuf,
    kubeconfig: PathBuf,
    cloud_config: PathBuf,
}

impl HuaweiStack {
    /// Everything up, with `extra` (given the double, for its IDs) appended to the
    /// cloud config.
    async fn start(extra: impl FnOnce(&HuaweiWorld) -> String) -> Self {
        let world = HuaweiWorld::start().await;
        let api = kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("API server double");
        let dir = TempDir::new("huaweicloud");
        std::fs::copy(
            guest("huaweicloud_provider"),
            dir.path().join("huaweicloud.wasm"),
        )
        .unwrap();
        let credentials = world.install_documented_policy(dir.path());
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();
        let cloud_config = dir.path().join("cloud.conf");
        std::fs::write(&cloud_config, world.cloud_conf(&extra(&world))).unwrap();
        Self {
            world,
            api,
            dir,
            credentials,
            kubeconfig,
            cloud_config,
        }
    }

    fn client(&self) -> kube::Client {
        {
            wasm_ccm_host::tls::install_crypto_provider();
            kube::Client::try_from(kube::Config::new(self.api.url().parse().unwrap())).unwrap()
        }
    }

    /// Starts `wasm-ccm` with `extra` flags and collects its log.
    fn controller_manager(
        &self,
        port: u16,
        extra: &[&str],
    ) -> (tokio::process::Child, Arc<std::sync::Mutex<String>>) {
        let mut args = vec!["--leader-elect=false"];
        args.extend_from_slice(extra);
        let mut command = controller_manager_command(
            "huaweicloud",
            self.dir.path(),
            &self.cloud_config,
            &self.kubeconfig,
            port,
            &args,
        );
        // The host's trace too: what it logs of the requests it signs is checked for keys.
        command.env("RUST_LOG", "info,wasm_ccm_host=trace");
        wasm_ccm_tests::spawn_logged(command)
    }
}

/// A Node as kubelet registers it with `--cloud-provider=external`, named `name`, with
/// `provider_id` when kubelet was given one (`--provider-id`).
fn kubelet_node(name: &str, provider_id: Option<&str>) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
                 "providerID": provider_id},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// A kubelet Node with its InternalIP (kubelet's `--node-ip`).
fn kubelet_node_with_ip(name: &str, ip: &str) -> Node {
    let mut node = kubelet_node(name, None);
    node.status.as_mut().unwrap().addresses = Some(vec![k8s_openapi::api::core::v1::NodeAddress {
        type_: "InternalIP".into(),
        address: ip.into(),
    }]);
    node
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// Nodes named as their servers, with the bare ID the seed's kubelet flag gives
/// (`--provider-id=${INSTANCE_ID}`), with `huaweicloud://<id>`, and found by their
/// InternalIP when the name says nothing, are initialized from ECS; a SHUTOFF server's
/// NotReady Node is tainted, a deleted server's Node goes; the lifecycle checks read the
/// cluster's servers by ID, never the whole project. Every request carried the host's
/// signature (the double refuses others), and the key is in no log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_initialized_and_their_lifecycle_follows_ecs() {
    let stack = HuaweiStack::start(|_| String::new()).await;
    let (a, b, c, d) = stack.world.cloud.with_state(|s| {
        let a = s.add_server(NewServer::named("node-a", "192.168.0.11"));
        let mut b = NewServer::named("node-b", "192.168.0.12");
        b.zone = "ap-southeast-1b".into();
        b.flavor = "s6.large.2".into();
        let b = s.add_server(b);
        let c = s.add_server(NewServer::named("node-c", "192.168.0.13"));
        let d = s.add_server(NewServer::named("ecs-7f3a", "192.168.0.14"));
        // Servers of the project that are not the cluster's.
        for i in 0..30 {
            s.add_server(NewServer::named(
                &format!("other-{i}"),
                &format!("192.168.1.{}", 10 + i),
            ));
        }
        (a, b, c, d)
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for node in [
        kubelet_node("node-a", None),
        kubelet_node("node-b", Some(&b.id)),
        kubelet_node("node-c", Some(&format!("huaweicloud://{}", c.id))),
        kubelet_node_with_ip("worker-d", "192.168.0.14"),
    ] {
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let port = listening_port();
    let (_ccm, log) = stack.controller_manager(port, &[]);
    for name in ["node-a", "node-b", "node-c", "worker-d"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
    }
    wait_until(TIMEOUT, "node-b's addresses", || async {
        !node_addresses(&nodes, "node-b").await.is_empty()
    })
    .await;
    let get = |name: &'static str| {
        let nodes = nodes.clone();
        async move { nodes.get(name).await.unwrap() }
    };
    let provider_id = |node: &Node| node.spec.as_ref().unwrap().provider_id.clone();
    assert_eq!(
        provider_id(&get("node-a").await),
        Some(format!("huaweicloud://{}", a.id))
    );
    // A Node keeps the provider ID kubelet gave it, bare or not.
    assert_eq!(provider_id(&get("node-b").await), Some(b.id.clone()));
    assert_eq!(
        provider_id(&get("node-c").await),
        Some(format!("huaweicloud://{}", c.id))
    );
    assert_eq!(
        provider_id(&get("worker-d").await),
        Some(format!("huaweicloud://{}", d.id))
    );
    let node_b = get("node-b").await;
    assert_eq!(
        label(&node_b, "node.kubernetes.io/instance-type"),
        Some("s6.large.2")
    );
    assert_eq!(
        label(&node_b, "topology.kubernetes.io/zone"),
        Some("ap-southeast-1b")
    );
    assert_eq!(
        label(&node_b, "topology.kubernetes.io/region"),
        Some(REGION)
    );
    assert_eq!(
        node_addresses(&nodes, "node-b").await,
        [("InternalIP".to_string(), "192.168.0.12".to_string())]
    );

    // node-a shuts off while NotReady: the shutdown taint; node-c's server is deleted:
    // its Node goes.
    stack.world.cloud.with_state(|s| {
        s.server_mut(&a.id).unwrap().status = "SHUTOFF".into();
        s.delete_server(&c.id);
    });
    let before = stack.world.cloud.journal().len();
    set_ready(&nodes, "node-a", "False").await;
    set_ready(&nodes, "node-c", "False").await;
    wait_until(TIMEOUT, "node-a tainted as shut down", || async {
        nodes
            .get("node-a")
            .await
            .is_ok_and(|n| taint_keys(&n).contains(&SHUTDOWN.to_string()))
    })
    .await;
    wait_until(TIMEOUT, "node-c deleted", || async {
        nodes.get_opt("node-c").await.is_ok_and(|n| n.is_none())
    })
    .await;
    assert!(nodes.get_opt("node-b").await.unwrap().is_some());

    // Since then, the servers were read by their IDs: no listing of the project
    // without a filter of the cluster's.
    let since = stack.world.cloud.journal()[before..].to_vec();
    let listings: Vec<&str> = since
        .iter()
        .filter(|r| r.target.contains("/cloudservers/detail"))
        .map(|r| r.target.as_str())
        .collect();
    assert!(!listings.is_empty(), "the lifecycle read ECS");
    assert!(
        listings.iter().all(|t| t.contains("server_id=")),
        "{listings:?}"
    );

    // Every request the double received was signed as it accepts.
    let journal = stack.world.cloud.journal();
    let refused: Vec<_> = journal.iter().filter(|r| r.refused.is_some()).collect();
    assert!(refused.is_empty(), "{refused:?}");
    let log = log.lock().unwrap().clone();
    assert!(!log.contains(&stack.world.key.secret_access_key), "{log}");
    assert!(!log.contains("SDK-HMAC-SHA256 Access"), "{log}");
}

/// A host whose clock is off by more than API Gateway's 15 minutes: every request is
/// refused as expired, the host's log says by how much the clocks differ, and no Node
/// is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_refused_as_expired_is_logged_with_the_clock_skew() {
    let stack = HuaweiStack::start(|_| String::new()).await;
    stack.world.cloud.with_state(|s| {
        s.add_server(NewServer::named("node-a", "192.168.0.11"));
    });
    // The cloud's clock is 20 minutes ahead of the host's.
    stack.world.cloud.set_clock_offset(1200);
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("node-a", None))
        .await
        .unwrap();
    let (_ccm, log) = stack.controller_manager(listening_port(), &[]);
    wait_until(TIMEOUT, "the clock skew in the log", || async {
        log.lock()
            .unwrap()
            .contains("refused the signature as expired")
    })
    .await;
    let text = log.lock().unwrap().clone();
    let line = text
        .lines()
        .find(|l| l.contains("refused the signature as expired"))
        .unwrap();
    assert!(line.contains("behind"), "{line}");
    let skew: i64 = line
        .split("clock_skew_seconds=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit() && c != '-').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no clock_skew_seconds in {line}"));
    assert!((1190..=1210).contains(&skew), "{line}");
    // The Node stays uninitialized: nothing was learned.
    assert!(taint_keys(&nodes.get("node-a").await.unwrap()).contains(&UNINITIALIZED.to_string()));
}

/// Temporary keys (with their security token, `securityTokenFile`) rotated in the
/// Secret while the controller manager runs, the old one revoked at the cloud: the next
/// Node is initialized with the new key and token, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_temporary_key_is_used_without_a_restart() {
    let stack = HuaweiStack::start(|_| String::new()).await;
    let temporary = |n: u32| {
        huaweicloud_double::Key::temporary(
            format!("HPUATEMPORARY000000{n}"),
            format!("sk-temporary-Qw8eR4tY6uI2oP0a-{n}"),
            format!("security-token-Zx9cV7bN5mM3-{n}"),
        )
    };
    let (first, second) = (temporary(1), temporary(2));
    // The documented policy with the optional security token file.
    let policy_path = stack.dir.path().join("huaweicloud.yaml");
    let mut policy: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&policy_path).unwrap()).unwrap();
    let token_file = stack.credentials.join("security-token");
    for rule in policy["credentials"].as_array_mut().unwrap() {
        rule["huaweicloud"]["securityTokenFile"] = json!(token_file.display().to_string());
    }
    std::fs::write(&policy_path, policy.to_string()).unwrap();
    let install = |key: &huaweicloud_double::Key| {
        stack.world.write_keys(&stack.credentials, key);
        std::fs::write(&token_file, key.security_token.as_deref().unwrap()).unwrap();
    };
    stack.world.cloud.add_key(first.clone());
    stack.world.cloud.remove_key(&stack.world.key.access_key_id);
    install(&first);
    let nodes: Api<Node> = Api::all(stack.client());
    stack.world.cloud.with_state(|s| {
        s.add_server(NewServer::named("node-a", "192.168.0.11"));
        s.add_server(NewServer::named("node-b", "192.168.0.12"));
    });
    nodes
        .create(&PostParams::default(), &kubelet_node("node-a", None))
        .await
        .unwrap();
    let (_ccm, log) = stack.controller_manager(listening_port(), &[]);
    wait_until(TIMEOUT, "node-a initialized", || {
        initialized(&nodes, "node-a")
    })
    .await;

    // Rotation: the second key replaces the first, which the cloud revokes.
    stack.world.cloud.add_key(second.clone());
    stack.world.cloud.remove_key(&first.access_key_id);
    install(&second);
    let rotated = stack.world.cloud.journal().len();
    nodes
        .create(&PostParams::default(), &kubelet_node("node-b", None))
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-b initialized with the new key", || {
        initialized(&nodes, "node-b")
    })
    .await;
    let journal = stack.world.cloud.journal();
    let accepted: Vec<_> = journal[rotated..]
        .iter()
        .filter(|r| r.refused.is_none())
        .collect();
    assert!(!accepted.is_empty());
    for request in accepted.iter().rev().take(3) {
        assert!(
            request
                .header("authorization")
                .is_some_and(|a| a.contains(&format!("Access={},", second.access_key_id))),
            "{request:?}"
        );
        assert_eq!(
            request.header("x-security-token"),
            second.security_token.as_deref()
        );
    }
    let log = log.lock().unwrap().clone();
    for key in [&first, &second] {
        assert!(!log.contains(&key.secret_access_key), "{log}");
        assert!(
            !log.contains(key.security_token.as_deref().unwrap()),
            "{log}"
        );
    }
}
