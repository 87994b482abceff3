//! kubectl as the client: create, get, label, taint, the patch types and the status
//! subresource, deletion with a finalizer, `get -w`, and the server-side columns of
//! `kubectl get`.

use super::*;

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
