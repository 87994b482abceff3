//! The cluster name (`--cluster-name`) in occm's names, `kube_service_<cluster>_<ns>_<name>`:
//! a load balancer occm made under `prod` is served by wasm-ccm run with
//! `--cluster-name=prod` (and goes with its floating IP when its Service does); run
//! with another cluster name, wasm-ccm refuses it by name (both names and the flag to
//! set) and makes, changes and deletes nothing, its Service's deletion included; when
//! the Service asks for it (`wasm-ccm.io/rename-from-cluster-name`), it is renamed as
//! occm's `renameLoadBalancer` renames it. And `import-occm-config --occm-deployment`
//! reads occm's `--cluster-name` from its DaemonSet into what deploy/openstack runs with.

use std::path::Path;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use openstack_double::state::NewServer;
use serde_json::json;
use wasm_ccm_tests::openstack::{OccmLeft, occm_left};
use wasm_ccm_tests::{TempDir, events, guest, ingress_ip, listening_port, wait_until};

use super::migration::load_balancer_service;
use super::{OpenStackStack, TIMEOUT, lb_cloud_config};

const ID: &str = "loadbalancer.openstack.org/load-balancer-id";
const RENAME_FROM: &str = "wasm-ccm.io/rename-from-cluster-name";

/// The cloud config: the double's networks, and health monitors (so occm's is kept).
fn with_monitors(cloud: &openstack_double::OpenStackDouble) -> String {
    format!("{}create-monitor = true\n", lb_cloud_config(cloud))
}

/// The writes to Octavia and to floating IPs the double recorded (`METHOD path`).
fn load_balancer_writes(s: &openstack_double::State) -> Vec<String> {
    s.requests
        .iter()
        .filter(|r| !r.starts_with("GET "))
        .filter(|r| r.contains("/lbaas/") || r.contains("/floatingips"))
        .cloned()
        .collect()
}

/// Whether a load balancer was asked for (a second one for the Service).
fn made_a_load_balancer(s: &openstack_double::State) -> bool {
    s.requests
        .iter()
        .any(|r| r.starts_with("POST ") && r.ends_with("/lbaas/loadbalancers"))
}

/// Starts the stack with node-a, what occm left under `cluster` for `default/web`
/// (the harness's [`occm_left`]: its load balancer, a TCP listener on port 80, its pool
/// without members, its health monitor and a floating IP), and Service `web` naming
/// occm's load balancer (with `extra` annotations).
async fn occm_made(
    cluster: &str,
    extra: serde_json::Value,
) -> (OpenStackStack, OccmLeft, Api<Service>) {
    let stack = OpenStackStack::start(with_monitors).await;
    // node-a as kubelet registers it with `--node-ip`: its InternalIP from the start.
    // (Without one, a Node's first address comes just after its provider ID, and a node
    // sync that the provider ID starts may find none, as upstream's would.)
    stack
        .cloud
        .with_state(|s| s.add_server(NewServer::named("node-a", "10.0.0.11")));
    Api::<Node>::all(stack.client())
        .create(
            &PostParams::default(),
            &wasm_ccm_tests::kubelet_node_with_node_ip("node-a", None, "10.0.0.11"),
        )
        .await
        .unwrap();
    let left = stack
        .cloud
        .with_state(|s| occm_left(s, cluster, "web", &[]));
    let mut annotations = json!({ ID: left.lb });
    annotations
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    services
        .create(
            &PostParams::default(),
            &load_balancer_service("web", annotations),
        )
        .await
        .unwrap();
    (stack, left, services)
}

/// Waits until `web` is served at occm's floating IP.
async fn wait_served_at(services: &Api<Service>, address: &str) {
    wait_until(TIMEOUT, "web served at occm's floating IP", || async {
        services
            .get("web")
            .await
            .ok()
            .and_then(|s| ingress_ip(&s))
            .as_deref()
            == Some(address)
    })
    .await;
}

/// Deletes `web` and waits until it is gone: its load balancer and occm's floating IP
/// went with it.
async fn delete_and_check_nothing_left(stack: &OpenStackStack, services: &Api<Service>) {
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "web gone", || async {
        services.get_opt("web").await.is_ok_and(|s| s.is_none())
    })
    .await;
    stack.cloud.with_state(|s| {
        assert_eq!(s.load_balancer_resources(), 0, "{:?}", s.load_balancers);
        assert!(s.floating_ips.is_empty(), "{:?}", s.floating_ips);
    });
}

/// (a) Run with occm's `--cluster-name=prod`: occm's load balancer is the Service's own,
/// served as it is (no second one, no rename, its floating IP), and deleted with its
/// floating IP when the Service goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn occms_load_balancer_is_served_with_occms_cluster_name() {
    let (stack, left, services) = occm_made("prod", json!({})).await;
    let (_ccm, _log) = stack.controller_manager_with(listening_port(), &["--cluster-name=prod"]);
    wait_served_at(&services, &left.address).await;
    // The status may be occm's still: served once node-a is the pool's member.
    wait_until(TIMEOUT, "node-a a member", || async {
        stack.cloud.with_state(|s| s.members.len() == 1)
    })
    .await;
    stack.cloud.with_state(|s| {
        assert!(!made_a_load_balancer(s), "{:?}", s.requests);
        assert_eq!(s.load_balancers.keys().collect::<Vec<_>>(), [&left.lb]);
        let lb = &s.load_balancers[&left.lb];
        assert_eq!(lb.name, "kube_service_prod_default_web");
        assert_eq!(lb.tags, ["kube_service_prod_default_web"]);
        assert_eq!(s.listeners.keys().collect::<Vec<_>>(), [&left.listener]);
        assert_eq!(
            s.listeners[&left.listener].name,
            "listener_0_kube_service_prod_default_web"
        );
        assert_eq!(
            s.pools[&left.pool].name,
            "pool_0_kube_service_prod_default_web"
        );
        // Served: node-a is the pool's member.
        assert_eq!(s.members.len(), 1, "{:?}", s.members);
        assert_eq!(
            s.floating_ips[&left.fip].port_id.as_deref(),
            Some(lb.vip_port_id.as_str())
        );
    });
    let client = stack.client();
    let reasons = events::reasons(&client, "web").await;
    assert!(
        !reasons.iter().any(|r| r == "LoadBalancerRename"),
        "{reasons:?}"
    );
    let failures = events::notes(&client, "web", "SyncLoadBalancerFailed").await;
    assert!(
        !failures.iter().any(|n| n.contains("cluster name")),
        "{failures:?}"
    );
    delete_and_check_nothing_left(&stack, &services).await;
}

/// (b) Run with the default `kubernetes`: occm's load balancer made under `prod` is
/// refused by name (`SyncLoadBalancerFailed` naming both names and the flag to set), at
/// every sync; nothing is made, changed, unbound or deleted (no second load balancer,
/// no listener of the Service's on it); the Service's deletion is refused the same way
/// and leaves everything as it is (the Service waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_of_another_cluster_name_is_refused_by_name() {
    let (stack, left, services) = occm_made("prod", json!({})).await;
    let (_ccm, _log) = stack.controller_manager(listening_port());
    let client = stack.client();
    let refused_by_name = |notes: Vec<String>| {
        notes.iter().any(|n| {
            n.contains(&left.lb)
                && n.contains("cluster name \"prod\"")
                && n.contains("\"kubernetes\"")
                && n.contains("--cluster-name=prod")
                && n.contains(RENAME_FROM)
        })
    };
    wait_until(TIMEOUT, "web refused by name", || async {
        refused_by_name(events::notes(&client, "web", "SyncLoadBalancerFailed").await)
    })
    .await;
    // And again at the next sync.
    let seen = events::occurrences(&client, "web", "SyncLoadBalancerFailed").await;
    wait_until(TIMEOUT, "web refused again", || async {
        events::occurrences(&client, "web", "SyncLoadBalancerFailed").await > seen
    })
    .await;
    let unchanged = |s: &openstack_double::State| {
        assert_eq!(load_balancer_writes(s), Vec::<String>::new());
        assert_eq!(s.load_balancers.keys().collect::<Vec<_>>(), [&left.lb]);
        let lb = &s.load_balancers[&left.lb];
        assert_eq!(lb.name, "kube_service_prod_default_web");
        assert_eq!(lb.tags, ["kube_service_prod_default_web"]);
        assert_eq!(s.listeners.len(), 1, "{:?}", s.listeners);
        assert_eq!(
            s.listeners[&left.listener].name,
            "listener_0_kube_service_prod_default_web"
        );
        assert_eq!(
            s.monitors[&left.monitor].name,
            "monitor_0_kube_service_prod_default_web"
        );
        assert_eq!(
            s.floating_ips[&left.fip].port_id.as_deref(),
            Some(lb.vip_port_id.as_str())
        );
    };
    stack.cloud.with_state(|s| unchanged(s));
    let reasons = events::reasons(&client, "web").await;
    assert!(
        !reasons
            .iter()
            .any(|r| r == "EnsuredLoadBalancer" || r == "LoadBalancerRename"),
        "{reasons:?}"
    );
    let service = services.get("web").await.unwrap();
    assert_eq!(ingress_ip(&service), None);

    // Deleting the Service: refused by name too; the load balancer and its floating IP
    // stay (neither deleted nor left unowned), and so does the Service.
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "web's deletion refused by name", || async {
        events::notes(&client, "web", "SyncLoadBalancerFailed")
            .await
            .iter()
            .any(|n| n.contains("to leave the load balancer") && n.contains("--cluster-name=prod"))
    })
    .await;
    stack.cloud.with_state(|s| unchanged(s));
    assert!(services.get_opt("web").await.unwrap().is_some());
}

/// (c) occm's rename, asked for by the Service (`wasm-ccm.io/rename-from-cluster-name:
/// prod`) with wasm-ccm run under `kubernetes`: occm's `renameLoadBalancer` (the
/// monitor, the pool, the listener and its tag, then the load balancer's name and tag),
/// occm's Warning `LoadBalancerRename`, nothing made again; then the Service is served
/// at occm's floating IP, and its deletion deletes the load balancer and the floating IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn occms_rename_is_served_when_the_service_asks_for_it() {
    let (stack, left, services) = occm_made("prod", json!({ RENAME_FROM: "prod" })).await;
    let (_ccm, _log) = stack.controller_manager(listening_port());
    wait_served_at(&services, &left.address).await;
    let renamed = "kube_service_kubernetes_default_web";
    stack.cloud.with_state(|s| {
        assert!(!made_a_load_balancer(s), "{:?}", s.requests);
        let made: Vec<&String> = s
            .requests
            .iter()
            .filter(|r| r.starts_with("POST "))
            .collect();
        assert!(
            !made.iter().any(|r| r.contains("/lbaas/listeners")
                || r.contains("/lbaas/pools")
                || r.contains("/lbaas/healthmonitors")
                || r.contains("/floatingips")),
            "{made:?}"
        );
        assert_eq!(s.load_balancers.keys().collect::<Vec<_>>(), [&left.lb]);
        let lb = &s.load_balancers[&left.lb];
        assert_eq!(lb.name, renamed);
        assert_eq!(lb.tags, [renamed]);
        let listener = &s.listeners[&left.listener];
        assert_eq!(listener.name, format!("listener_0_{renamed}"));
        assert_eq!(listener.tags, [renamed]);
        assert_eq!(s.pools[&left.pool].name, format!("pool_0_{renamed}"));
        assert_eq!(
            s.monitors[&left.monitor].name,
            format!("monitor_0_{renamed}")
        );
        assert_eq!(
            s.floating_ips[&left.fip].port_id.as_deref(),
            Some(lb.vip_port_id.as_str())
        );
    });
    let notes = events::notes(&stack.client(), "web", "LoadBalancerRename").await;
    assert!(
        notes.iter().any(|n| n
            == &format!(
                "Loadbalancer {} has a name of kube_service_prod_default_web with incorrect \
                 cluster-name component. Renaming it to {renamed}.",
                left.lb
            )),
        "{notes:?}"
    );
    delete_and_check_nothing_left(&stack, &services).await;
}

/// Copies directory `from` to `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The README's move, run as given: `import-occm-config --occm-deployment` on occm's
/// DaemonSet (occm's own manifest, `CLUSTER_NAME` `prod`: the fixture the importer's
/// unit tests read, guests/openstack/occm-import/fixtures/), the documented `cp` into
/// deploy/openstack: the rendered Deployment runs `--cluster-name=$(CLUSTER_NAME)` with
/// `CLUSTER_NAME` `prod`. Without the DaemonSet, occm's default `kubernetes`, noted.
#[test]
fn the_imported_cluster_name_is_what_deploy_openstack_runs_with() {
    let dir = TempDir::new("cluster-name-import");
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    copy_dir(&deploy.join("base"), &dir.path().join("deploy/base"));
    copy_dir(
        &deploy.join("openstack"),
        &dir.path().join("deploy/openstack"),
    );
    std::fs::copy(
        guest("openstack_provider"),
        dir.path().join("deploy/openstack/providers/openstack.wasm"),
    )
    .unwrap();
    let conf = dir.path().join("occm-cloud.conf");
    std::fs::write(
        &conf,
        "[Global]\nauth-url = https://keystone.example.com:5000/v3\nregion = RegionOne\n\
         application-credential-id = a1\napplication-credential-secret = s1\n",
    )
    .unwrap();
    let daemonset = dir.path().join("occm.yaml");
    std::fs::write(
        &daemonset,
        include_str!("../../guests/openstack/occm-import/fixtures/occm-daemonset.yaml"),
    )
    .unwrap();
    let import = |extra: &[&str]| {
        let out = std::process::Command::new(wasm_ccm_tests::wasm_ccm_bin())
            .current_dir(dir.path())
            .arg("import-occm-config")
            .arg(&conf)
            .args(["--out", "./openstack"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "import-occm-config: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let rendered_cluster_name = || {
        // The README's copy into deploy/openstack, as written there.
        let readme = include_str!("../../guests/openstack/README.md");
        let copy = readme
            .lines()
            .find(|l| l.starts_with("cp -r ./openstack/"))
            .expect("the README's copy into deploy/openstack");
        let status = std::process::Command::new("sh")
            .args(["-c", copy])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "{copy}");
        let docs = wasm_ccm_tests::kustomize(&dir.path().join("deploy/openstack"));
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert!(
            container["args"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == "--cluster-name=$(CLUSTER_NAME)"),
            "{container}"
        );
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "CLUSTER_NAME")
            .map(|e| e["value"].clone())
    };

    let daemonset = daemonset.display().to_string();
    let (stdout, _) = import(&["--occm-deployment", daemonset.as_str()]);
    assert!(stdout.contains("cluster name \"prod\""), "{stdout}");
    assert_eq!(rendered_cluster_name(), Some(json!("prod")));

    let (_, stderr) = import(&[]);
    assert!(
        stderr.contains("note:") && stderr.contains("--occm-deployment"),
        "{stderr}"
    );
    assert_eq!(rendered_cluster_name(), Some(json!("kubernetes")));
}
