//! Fidelity of the Kubernetes API server double, driven by real clients: the
//! `kubectl` binary and kube-rs (Api, watcher, reflector).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Service};
use k8s_openapi::api::events::v1::Event as EventsV1;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config};
use kube_double::{ApiServer, Settings};
use serde_json::{Value, json};
use wasm_ccm_tests::TempDir;

struct Cluster {
    api: ApiServer,
    dir: TempDir,
}

impl Cluster {
    async fn start() -> Self {
        Self::with(Settings::default()).await
    }

    async fn with(settings: Settings) -> Self {
        let api = ApiServer::start(settings).await.unwrap();
        let dir = TempDir::new("api-double");
        api.write_kubeconfig(&dir.path().join("kubeconfig"))
            .unwrap();
        Self { api, dir }
    }

    fn kubeconfig(&self) -> std::path::PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Runs kubectl; returns stdout, panicking with stderr on failure.
    async fn kubectl(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl_result(args).await;
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }

    async fn kubectl_result(&self, args: &[&str]) -> (bool, String, String) {
        let kubeconfig = self.kubeconfig();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let out = Command::new(kubectl())
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(&args)
                .output()
                .expect("run kubectl");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .await
        .unwrap()
    }

    async fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all).await).unwrap()
    }

    fn client(&self) -> Client {
        let config = Config::new(self.api.url().parse().unwrap());
        Client::try_from(config).unwrap()
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }
}

/// The real kubectl: `$KUBECTL` (scripts/test.sh installs one when none is on PATH),
/// else `kubectl` on PATH.
fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

const NODE_YAML: &str = "apiVersion: v1\nkind: Node\nmetadata:\n  name: worker-1\n  labels: {role: worker}\nspec:\n  taints:\n  - {key: node.cloudprovider.kubernetes.io/uninitialized, value: \"true\", effect: NoSchedule}\nstatus:\n  conditions:\n  - {type: Ready, status: \"True\"}\n  addresses:\n  - {type: Hostname, address: worker-1}\n";

/// kubectl as the client: create, get, label, taint. The double encodes objects as the
/// Go types do (no upstream test: apimachinery's JSON encoding of `omitempty` fields):
/// after the last taint is removed `.spec.taints` is absent, as on a real server.
#[tokio::test]
async fn kubectl_create_get_label_taint() {
    let c = Cluster::start().await;
    let file = c.file("node.yaml", NODE_YAML);
    c.kubectl(&["create", "-f", &file]).await;
    let node = c.get_json(&["node", "worker-1"]).await;
    assert!(!node["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(
        node["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert_eq!(
        node["status"]["addresses"][0]["address"], "worker-1",
        "a Node keeps its status on create"
    );
    let rv1: u64 = node["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    c.kubectl(&["label", "node", "worker-1", "tier=gold"]).await;
    c.kubectl(&["taint", "node", "worker-1", "dedicated=ccm:NoExecute"])
        .await;
    let node = c.get_json(&["node", "worker-1"]).await;
    assert_eq!(node["metadata"]["labels"]["tier"], "gold");
    assert_eq!(node["spec"]["taints"].as_array().unwrap().len(), 2);
    let rv2: u64 = node["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);

    c.kubectl(&[
        "taint",
        "node",
        "worker-1",
        "node.cloudprovider.kubernetes.io/uninitialized-",
    ])
    .await;
    let node = c.get_json(&["node", "worker-1"]).await;
    assert_eq!(
        node["spec"]["taints"],
        json!([{"key": "dedicated", "value": "ccm", "effect": "NoExecute"}])
    );
    // The last taint removed: the field is gone, as Go's omitempty encodes it on a
    // real server (`kubectl get -o jsonpath={.spec.taints}` prints nothing).
    c.kubectl(&["taint", "node", "worker-1", "dedicated-"])
        .await;
    let taints = c
        .kubectl(&["get", "node", "worker-1", "-o", "jsonpath={.spec.taints}"])
        .await;
    assert_eq!(taints, "");
    let node = c.get_json(&["node", "worker-1"]).await;
    assert!(node["spec"].get("taints").is_none(), "{node}");
    c.kubectl(&["label", "node", "worker-1", "tier-"]).await;
    c.kubectl(&["label", "node", "worker-1", "role-"]).await;
    let node = c.get_json(&["node", "worker-1"]).await;
    assert!(node["metadata"].get("labels").is_none(), "{node}");
    assert!(node["spec"].is_object(), "structs stay, even empty: {node}");

    // Duplicate create and unknown fields are rejected like the real server does.
    let (ok, _, err) = c.kubectl_result(&["create", "-f", &file]).await;
    assert!(!ok && err.contains("AlreadyExists"), "{err}");
    let bad = c.file(
        "bad.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: w2}\nspec: {providerId: x}\n",
    );
    let (ok, _, err) = c.kubectl_result(&["create", "-f", &bad]).await;
    assert!(
        !ok && err.contains("unknown field \"spec.providerId\""),
        "{err}"
    );
    let (ok, _, err) = c.kubectl_result(&["get", "node", "ghost"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
}

#[tokio::test]
async fn kubectl_patch_types_and_status_subresource() {
    let c = Cluster::start().await;
    let file = c.file("node.yaml", NODE_YAML);
    c.kubectl(&["create", "-f", &file]).await;
    c.kubectl(&[
        "patch",
        "node",
        "worker-1",
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"a":"1"}}}"#,
    ])
    .await;
    c.kubectl(&[
        "patch",
        "node",
        "worker-1",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/providerID","value":"simcloud://i-1"}]"#,
    ])
    .await;
    c.kubectl(&[
        "patch",
        "node",
        "worker-1",
        "--type=strategic",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/a"]}}"#,
    ])
    .await;
    c.kubectl(&[
        "patch",
        "node",
        "worker-1",
        "--type=strategic",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/b"]}}"#,
    ])
    .await;
    // Strategic merge on the status subresource: conditions merge by type.
    c.kubectl(&[
        "patch", "node", "worker-1", "--subresource=status", "--type=strategic", "-p",
        r#"{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","reason":"RouteCreated"}]}}"#,
    ])
    .await;
    // A status change through the main resource is ignored.
    c.kubectl(&[
        "patch",
        "node",
        "worker-1",
        "--type=merge",
        "-p",
        r#"{"status":{"addresses":[]}}"#,
    ])
    .await;
    let node = c.get_json(&["node", "worker-1"]).await;
    assert_eq!(node["metadata"]["annotations"]["a"], "1");
    assert_eq!(node["spec"]["providerID"], "simcloud://i-1");
    assert_eq!(
        node["metadata"]["finalizers"],
        json!(["example.com/a", "example.com/b"])
    );
    let types: Vec<&str> = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "NetworkUnavailable"]);
    assert_eq!(node["status"]["addresses"].as_array().unwrap().len(), 1);
    // A failing JSON patch test op is Invalid.
    let (ok, _, err) = c
        .kubectl_result(&[
            "patch",
            "node",
            "worker-1",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/spec/providerID","value":"other"}]"#,
        ])
        .await;
    assert!(!ok && err.contains("testing value"), "{err}");
}

#[tokio::test]
async fn kubectl_delete_with_finalizer() {
    let c = Cluster::start().await;
    let file = c.file(
        "svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, finalizers: [service.kubernetes.io/load-balancer-cleanup]}\nspec: {type: LoadBalancer, ports: [{port: 80}]}\n",
    );
    c.kubectl(&["create", "-f", &file]).await;
    c.kubectl(&["delete", "service", "web", "--wait=false"])
        .await;
    let svc = c.get_json(&["service", "web"]).await;
    assert!(
        svc["metadata"]["deletionTimestamp"].is_string(),
        "marked, not deleted: {svc}"
    );
    // New finalizers cannot be added while deleting.
    let (ok, _, err) = c
        .kubectl_result(&[
            "patch",
            "service",
            "web",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["a","b"]}}"#,
        ])
        .await;
    assert!(!ok && err.contains("no new finalizers"), "{err}");
    c.kubectl(&[
        "patch",
        "service",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    let (ok, _, err) = c.kubectl_result(&["get", "service", "web"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
}

#[tokio::test]
async fn kubectl_watch_sees_changes() {
    let c = Cluster::start().await;
    let file = c.file("node.yaml", NODE_YAML);
    c.kubectl(&["create", "-f", &file]).await;
    let mut child = tokio::process::Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .args([
            "get",
            "nodes",
            "-w",
            "-o",
            "jsonpath={.metadata.name}={.metadata.labels.watched}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    // The initial state arrives first; then change the node until the watch shows it.
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.as_deref(), Some("worker-1="));
    c.kubectl(&["label", "node", "worker-1", "watched=yes"])
        .await;
    let seen = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.as_deref(), Some("worker-1=yes"));
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "spec": {},
        "status": {"addresses": [{"type": "Hostname", "address": name}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn kube_rs_conflict_exactly_one_writer_wins() {
    let c = Cluster::start().await;
    let nodes: Api<Node> = Api::all(c.client());
    let created = nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let writers = (0..2).map(|i| {
        let nodes = nodes.clone();
        let mut copy = created.clone();
        tokio::spawn(async move {
            copy.metadata
                .labels
                .get_or_insert_default()
                .insert("writer".into(), i.to_string());
            nodes.replace("n1", &PostParams::default(), &copy).await
        })
    });
    let mut wins = 0;
    let mut conflicts = 0;
    for w in writers {
        match w.await.unwrap() {
            Ok(_) => wins += 1,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                assert_eq!(status.reason, "Conflict");
                conflicts += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!((wins, conflicts), (1, 1));
}

#[tokio::test]
async fn kube_rs_status_subresource_and_selectors() {
    let c = Cluster::start().await;
    let nodes: Api<Node> = Api::all(c.client());
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let mut other = node("n2");
    other.metadata.labels = Some([("pool".to_string(), "b".to_string())].into());
    nodes.create(&PostParams::default(), &other).await.unwrap();

    let patched = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}, "spec": {"providerID": "ignored"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.status.unwrap().addresses.unwrap()[0].address,
        "10.0.0.1"
    );
    assert_eq!(
        patched.spec.unwrap().provider_id,
        None,
        "status writes ignore spec"
    );

    let by_label = nodes
        .list(&ListParams::default().labels("pool=b"))
        .await
        .unwrap();
    assert_eq!(by_label.items.len(), 1);
    let by_field = nodes
        .list(&ListParams::default().fields("metadata.name=n1"))
        .await
        .unwrap();
    assert_eq!(by_field.items[0].metadata.name.as_deref(), Some("n1"));
    let err = nodes
        .list(&ListParams::default().fields("spec.providerID=x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err}"
    );

    // Pagination: limit + continue.
    let page = nodes.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let token = page.metadata.continue_.clone().unwrap();
    let rest = nodes
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items[0].metadata.name.as_deref(), Some("n2"));

    let deleted = nodes.delete("n2", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_right(), "deleted at once: a Status comes back");
}

#[tokio::test]
async fn kube_rs_watch_bookmarks_and_gone() {
    let c = Cluster::with(Settings {
        bookmark_interval: Duration::from_millis(100),
        history: 5,
        ..Settings::default()
    })
    .await;
    let nodes: Api<Node> = Api::all(c.client());
    let list = nodes.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut stream = nodes
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    nodes
        .create(&PostParams::default(), &node("w1"))
        .await
        .unwrap();
    let mut added = false;
    let mut bookmark = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(added && bookmark) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(WatchEvent::Added(n)))) => added |= n.metadata.name.as_deref() == Some("w1"),
            Ok(Some(Ok(WatchEvent::Bookmark(_)))) => bookmark = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(added && bookmark);

    // Past the retained history: the watch answers with a 410 ERROR event.
    for i in 0..10 {
        nodes
            .create(&PostParams::default(), &node(&format!("x{i}")))
            .await
            .unwrap();
    }
    let mut old = nodes
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), old.next())
        .await
        .unwrap()
    {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_rs_reflector_survives_reconnects_and_forced_410() {
    let c = Cluster::start().await;
    let nodes: Api<Node> = Api::all(c.client());
    for i in 0..3 {
        nodes
            .create(&PostParams::default(), &node(&format!("r{i}")))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store::<Node>();
    let stream = reflector(writer, watcher(nodes.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        futures_util::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    let names = |reader: &reflector::Store<Node>| {
        let mut v: Vec<String> = reader
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        v.sort();
        v
    };
    wait_for(|| names(&reader) == ["r0", "r1", "r2"], "initial list").await;

    // Connections drop: the watcher resumes from its last resourceVersion.
    c.api.disconnect_watches();
    nodes
        .create(&PostParams::default(), &node("r3"))
        .await
        .unwrap();
    wait_for(
        || names(&reader).len() == 4,
        "a change made while reconnecting",
    )
    .await;

    // History compacted while disconnected: resuming gets 410, the watcher relists.
    c.api.store().compact();
    c.api.disconnect_watches();
    nodes.delete("r0", &DeleteParams::default()).await.unwrap();
    nodes
        .create(&PostParams::default(), &node("r4"))
        .await
        .unwrap();
    wait_for(
        || names(&reader) == ["r1", "r2", "r3", "r4"],
        "relist after 410",
    )
    .await;
    task.abort();
}

#[tokio::test]
async fn events_api_and_core_events_are_one_store() {
    let c = Cluster::start().await;
    let events: Api<EventsV1> = Api::namespaced(c.client(), "default");
    let event: EventsV1 = serde_json::from_value(json!({
        "metadata": {"generateName": "worker-1."},
        "eventTime": "2026-11-22T00:00:00.000000Z",
        "reason": "Synced", "note": "Node synced successfully", "type": "Normal", "action": "Sync",
        "reportingController": "cloud-node-controller", "reportingInstance": "wasm-ccm-1",
        "regarding": {"kind": "Node", "name": "worker-1", "apiVersion": "v1"}
    }))
    .unwrap();
    let created = events.create(&PostParams::default(), &event).await.unwrap();
    let name = created.metadata.name.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(c.client(), "default");
    let seen = core.get(&name).await.unwrap();
    assert_eq!(seen.message.as_deref(), Some("Node synced successfully"));
    assert_eq!(seen.involved_object.name.as_deref(), Some("worker-1"));
    let found = core
        .list(&ListParams::default().fields("involvedObject.name=worker-1,reason=Synced"))
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1);
    let out = c
        .kubectl(&["get", "events", "-o", "jsonpath={.items[0].reason}"])
        .await;
    assert_eq!(out, "Synced");
    // Services in a namespace that does not exist are NotFound.
    let svc: Api<Service> = Api::namespaced(c.client(), "nope");
    let err = svc.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err}"
    );
}

async fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `kubectl get` asks for the server-side Table format: the double answers it for
/// Nodes, Services and Events with the real server's columns, so kubectl prints
/// STATUS/ROLES/VERSION (wide: INTERNAL-IP), TYPE/CLUSTER-IP/EXTERNAL-IP/PORT(S), and
/// LAST SEEN/TYPE/REASON/OBJECT/MESSAGE.
#[tokio::test]
async fn kubectl_get_prints_the_server_side_columns() {
    let c = Cluster::start().await;
    let store = c.api.store();
    let find = |plural: &str| kube_double::resources::find("", "v1", plural).unwrap();
    store
        .create(
            find("nodes"),
            "",
            json!({
                "metadata": {"name": "cp-1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                    "nodeInfo": {"kubeletVersion": "v1.31.0", "osImage": "Debian", "kernelVersion": "6.1",
                                 "containerRuntimeVersion": "containerd://1.7", "machineID": "", "systemUUID": "",
                                 "bootID": "", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
                }
            }),
        )
        .unwrap();
    store
        .create(
            find("services"),
            "default",
            json!({"metadata": {"name": "web"}, "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                   "ports": [{"port": 80, "targetPort": 8080}]}}),
        )
        .unwrap();
    store
        .create(
            find("events"),
            "default",
            json!({"metadata": {"name": "cp-1.1"}, "type": "Normal", "reason": "Synced",
                   "message": "Node synced successfully",
                   "involvedObject": {"kind": "Node", "name": "cp-1"},
                   "source": {"component": "cloud-node-controller"}}),
        )
        .unwrap();
    let header = |out: &str| -> Vec<String> {
        out.lines()
            .next()
            .unwrap_or_default()
            .split("  ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };

    let nodes = c.kubectl(&["get", "nodes"]).await;
    assert_eq!(
        header(&nodes),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{nodes}"
    );
    let row: Vec<&str> = nodes.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..3], ["cp-1", "Ready", "control-plane"], "{nodes}");
    assert_eq!(row[4], "v1.31.0", "{nodes}");
    let wide = c.kubectl(&["get", "node", "cp-1", "-o", "wide"]).await;
    assert!(header(&wide).contains(&"INTERNAL-IP".to_string()), "{wide}");
    assert!(
        wide.contains("10.0.0.5") && wide.contains("containerd://1.7"),
        "{wide}"
    );

    let services = c.kubectl(&["get", "services"]).await;
    assert_eq!(
        header(&services),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ],
        "{services}"
    );
    let row: Vec<&str> = services
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[..2], ["web", "LoadBalancer"], "{services}");
    assert_eq!(row[3], "<pending>", "{services}");
    assert!(
        row[4].starts_with("80:") && row[4].ends_with("/TCP"),
        "{services}"
    );

    let events = c.kubectl(&["get", "events"]).await;
    assert_eq!(
        header(&events),
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{events}"
    );
    assert!(
        events.contains("node/cp-1") && events.contains("Node synced successfully"),
        "{events}"
    );
}

/// Delegated authentication and authorization as a server on the API server uses them:
/// `TokenReview` says who a bearer token is, `SubjectAccessReview` whether that user
/// may `get` a non-resource path, both created with kube's typed client.
#[tokio::test]
async fn token_and_subject_access_reviews_answer_from_users_and_grants() {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    use k8s_openapi::api::authorization::v1::{
        NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let cluster = Cluster::start().await;
    let scraper = "system:serviceaccount:monitoring:prometheus";
    cluster
        .api
        .add_user("t-scraper", scraper, &["system:serviceaccounts"]);
    cluster.api.add_user("t-other", "someone", &[]);
    cluster.api.allow_non_resource(scraper, "get", "/metrics");
    let client = Client::try_from(Config::new(cluster.api.url().parse().unwrap())).unwrap();

    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: token.into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let known = reviews
        .create(&PostParams::default(), &review("t-scraper"))
        .await
        .unwrap();
    let status = known.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(status.user.unwrap().username.as_deref(), Some(scraper));
    let unknown = reviews
        .create(&PostParams::default(), &review("forged"))
        .await
        .unwrap();
    assert_eq!(unknown.status.unwrap().authenticated, Some(false));

    let access: Api<SubjectAccessReview> = Api::all(client);
    let may = |user: &str, verb: &str, path: &str| {
        let access = access.clone();
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.into()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.into()),
                    verb: Some(verb.into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        async move {
            access
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap()
                .allowed
        }
    };
    assert!(may(scraper, "get", "/metrics").await);
    assert!(!may(scraper, "get", "/debug/pprof").await);
    assert!(!may("someone", "get", "/metrics").await);
    // Counted like any request, for the RBAC checks.
    assert!(
        cluster
            .api
            .accesses()
            .iter()
            .any(|a| a.group == "authorization.k8s.io"
                && a.resource == "subjectaccessreviews"
                && a.verb == "create")
    );
}
