//! The real Kubernetes API server (kube-apiserver and etcd, built by
//! `scripts/ensure-kube-apiserver.sh`): `deploy/` installed as its README says, the
//! controller manager run with the token of the ServiceAccount it creates (a
//! `TokenRequest`), and the four controllers' main scenarios. Every request the
//! controller manager makes must be allowed by deploy/'s RBAC: the server's audit log
//! shows any it refused, and the test fails naming their verbs and resources. The Helm
//! chart (deploy/helm/wasm-ccm) is installed and run the same way.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::https::Credentials;
use wasm_ccm_tests::kube_apiserver::{KubeApiServer, install_deploy, kubectl_admin};
use wasm_ccm_tests::{
    Stack, initialized, kubelet_node_with_pod_cidr, listening_port, network_available,
    node_addresses, taint_keys, wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(90);
/// The identity deploy/ gives the controller manager.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:wasm-ccm";

/// What the scenario observed, compared between the two servers.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// The initialized Node's provider ID scheme, address types and label keys.
    provider_id_scheme: String,
    address_types: BTreeSet<String>,
    label_keys: BTreeSet<String>,
    /// Its cloud-provider taints after initialization.
    taints: Vec<String>,
    /// The Service's finalizers while it had a load balancer, and its events' reasons.
    finalizers: Vec<String>,
    event_reasons: BTreeSet<String>,
}

/// The four controllers' main scenario, given an admin client of the API server and
/// the stack (the simulated cloud, the reference provider, the controller manager's
/// kubeconfig): node initialization, routes, a load balancer Service created, updated
/// and deleted, a Node shut down then gone.
async fn scenario(client: kube::Client, stack: &Stack) -> Outcome {
    let nodes: Api<Node> = Api::all(client.clone());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    for (name, cidr) in [("node-a", "10.244.1.0/24"), ("node-b", "10.244.2.0/24")] {
        stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node_with_pod_cidr(name, cidr),
            )
            .await
            .unwrap();
    }
    let port = listening_port();
    let (_ccm, log) = wasm_ccm_tests::spawn_logged({
        let mut command = stack.secure_controller_manager_command(port, &[]);
        command
            .env("POD_NAME", "wasm-ccm-0")
            .env("POD_NAMESPACE", "kube-system");
        command
    });
    // Leader election: the Lease.
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
    for name in ["node-a", "node-b"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
    }
    // As upstream's syncNode, the taint goes with the Node's update, the addresses
    // follow in a status patch.
    wait_until(TIMEOUT, "node-a's addresses", || async {
        node_addresses(&nodes, "node-a")
            .await
            .iter()
            .any(|(kind, _)| kind == "InternalIP")
    })
    .await;
    let a = nodes.get("node-a").await.unwrap();
    // The taints the cloud controllers own (the real server's admission adds
    // `node.kubernetes.io/not-ready`, which the double does not: its README lists it).
    let initialized_taints: Vec<String> = taint_keys(&a)
        .into_iter()
        .filter(|t| t.starts_with("node.cloudprovider.kubernetes.io/"))
        .collect();
    assert!(
        a.spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|p| p.starts_with("simcloud://")),
        "{:?}",
        a.spec
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
    wait_until(TIMEOUT, "node-a's network available", || {
        network_available(&nodes, "node-a")
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
    // An update: the port changes, and the load balancer follows.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"port": 8080, "targetPort": 8080}]}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "web's load balancer on port 8080", || async {
        stack.cloud.with_state(|s| {
            s.load_balancers
                .values()
                .all(|lb| lb.ports.iter().map(|p| p.port).collect::<Vec<_>>() == [8080])
        })
    })
    .await;
    let finalizers = services
        .get("web")
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap_or_default();
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "web gone after cleanup", || async {
        services.get_opt("web").await.is_ok_and(|s| s.is_none())
    })
    .await;
    assert_eq!(stack.cloud.with_state(|s| s.load_balancers.len()), 0);
    // Events as the server stores them, recorded as they happen, the last one after
    // the finalizer is gone.
    wasm_ccm_tests::events::wait_for_reasons(
        &client,
        "web",
        &[
            "EnsuringLoadBalancer",
            "EnsuredLoadBalancer",
            "DeletingLoadBalancer",
            "DeletedLoadBalancer",
        ],
        TIMEOUT,
    )
    .await;
    let event_reasons: BTreeSet<String> = wasm_ccm_tests::events::reasons(&client, "web")
        .await
        .into_iter()
        .collect();

    // Lifecycle: node-b's instance stops and the Node is not Ready: tainted; the
    // instance is gone: the Node is deleted.
    stack.shut_down_then_gone(&nodes, "node-b", TIMEOUT).await;

    drop(log);
    Outcome {
        provider_id_scheme: a
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|p| p.split_once("://"))
            .map(|(scheme, _)| scheme.to_owned())
            .unwrap_or_default(),
        address_types: a
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .map(|a| a.iter().map(|a| a.type_.clone()).collect())
            .unwrap_or_default(),
        label_keys: labels.keys().cloned().collect(),
        taints: initialized_taints,
        finalizers,
        event_reasons,
    }
}

/// The scenario on a real server where `install` installed wasm-ccm, run with the
/// token of the ServiceAccount it made: what it observed. Every request the controller
/// manager made must have been allowed by the installed RBAC: its audit log shows any
/// it refused, and the test fails naming them.
async fn on_a_real_server(how: &str, install: impl FnOnce(&KubeApiServer)) -> Outcome {
    let server = KubeApiServer::start().await;
    install(&server);
    let mut stack = Stack::start().await;
    let token = server.token("kube-system", "wasm-ccm").await;
    let kubeconfig = stack.dir.dir.path().join("wasm-ccm.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, Some(&token))
        .expect("a kubeconfig");
    stack.kubeconfig = kubeconfig;
    let outcome = scenario(server.client().await, &stack).await;

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
        "the RBAC {how} installs refused requests of the controller manager: {refused:#?}"
    );
    outcome
}

/// One scenario, run unchanged against the API server double and the real server
/// (where deploy/ is installed as its README says and the controller manager runs with
/// the token of the ServiceAccount deploy/ creates): the same outcomes, every request
/// allowed by deploy/'s RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_controllers_on_the_double_and_the_real_api_server() {
    let on_double = {
        let stack = Stack::start().await;
        scenario(stack.client(), &stack).await
    };
    // deploy/README.md's install command.
    let on_real = on_a_real_server("deploy/", install_deploy).await;
    assert_eq!(on_double, on_real);
}

/// The Helm chart installed as deploy/helm/wasm-ccm/values.yaml says (`helm template`
/// applied server-side, the objects `helm install` creates): the same outcomes as on
/// the double, every request allowed by the chart's RBAC, under its ServiceAccount's
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_controllers_installed_by_the_helm_chart() {
    let on_double = {
        let stack = Stack::start().await;
        scenario(stack.client(), &stack).await
    };
    let on_real = on_a_real_server("the Helm chart", |server| {
        let manifest = wasm_ccm_tests::helm::template(&["--set", "monitoring.enabled=true"]);
        let file = server.kubeconfig().with_file_name("wasm-ccm-chart.yaml");
        std::fs::write(&file, manifest).expect("the rendered chart");
        kubectl_admin(
            server,
            &["apply", "--server-side", "-f", &file.display().to_string()],
        );
    })
    .await;
    assert_eq!(on_double, on_real);
}

/// `/readyz` of the replica serving on `port` (empty while it does not answer).
async fn readyz(port: u16) -> String {
    wasm_ccm_tests::https::https_get(port, "/readyz", &Credentials::default())
        .await
        .map(|a| a.body)
        .unwrap_or_default()
}

/// Two replicas as deploy/ runs them (leader election on a real Lease, the secure
/// port's authentication and authorization delegated to the real server): the standby
/// takes over when the leader stops (the time printed), deploy/monitoring's
/// ServiceAccount reads /metrics, another ServiceAccount gets 403, a bad token 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_and_the_secure_port_on_a_real_api_server() {
    let server = KubeApiServer::start().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in ["deploy", "deploy/monitoring"] {
        kubectl_admin(
            &server,
            &[
                "apply",
                "--server-side",
                "-k",
                &root.join(dir).display().to_string(),
            ],
        );
    }
    kubectl_admin(&server, &["create", "namespace", "monitoring"]);
    let mut stack = Stack::start().await;
    let token = server.token("kube-system", "wasm-ccm").await;
    let kubeconfig = stack.dir.dir.path().join("wasm-ccm.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, Some(&token))
        .expect("a kubeconfig");
    stack.kubeconfig = kubeconfig;

    let start = |port: u16, name: &str| {
        let mut command = stack.secure_controller_manager_command(port, &["--leader-elect"]);
        command
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", "kube-system");
        wasm_ccm_tests::spawn_logged(command)
    };
    let (p1, p2) = (listening_port(), listening_port());
    let (mut first, _first_log) = start(p1, "wasm-ccm-0");
    wait_until(TIMEOUT, "the first replica leads", || async {
        readyz(p1).await.contains("controllers running")
    })
    .await;
    let (_second, _second_log) = start(p2, "wasm-ccm-1");
    wait_until(TIMEOUT, "the second replica on standby", || async {
        readyz(p2).await.contains("standby")
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(server.client().await, "kube-system");
    let holder = || async {
        leases
            .get("cloud-controller-manager")
            .await
            .ok()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default()
    };
    let leader = holder().await;
    assert!(!leader.is_empty());

    // The secure port, as deploy/monitoring grants it.
    let scraper = server.token("monitoring", "prometheus").await;
    let other = server.token("default", "someone-else").await;
    let get = |token: String| async move {
        wasm_ccm_tests::https::https_get(p1, "/metrics", &Credentials::token(&token))
            .await
            .map(|a| a.status)
            .unwrap_or(0)
    };
    assert_eq!(get(scraper).await, 200);
    assert_eq!(get(other).await, 403);
    assert_eq!(get("not-a-token".into()).await, 401);

    // The leader stops (SIGTERM, as kubelet stops a Pod): the standby takes over.
    let stopped = std::time::Instant::now();
    // SAFETY: signalling our own child by its PID.
    unsafe {
        libc::kill(first.id().unwrap() as libc::pid_t, libc::SIGTERM);
    }
    wait_until(TIMEOUT, "the second replica leads", || async {
        readyz(p2).await.contains("controllers running")
    })
    .await;
    let failover = stopped.elapsed();
    let new_leader = holder().await;
    assert!(
        !new_leader.is_empty() && new_leader != leader,
        "{new_leader}"
    );
    println!("failover on a real Lease after SIGTERM: {failover:.1?}");
    let _ = first.wait().await;
}
