//! The move from occm, made by occm itself: the upstream openstack-cloud-controller-manager
//! (scripts/ensure-upstream-ccm.sh builds it from its Go module) runs against the real
//! kube-apiserver, the real Keystone and the OpenStack double, and leaves a cluster as it
//! leaves one: Nodes with plain and regional provider IDs, load balancers (one shared by
//! two Services, an internal one, a legacy `a<uid>` one it adopted) with listeners,
//! pools, members and monitors named and tagged by it, floating IPs with its
//! description beside a foreign one, routes with allowed-address pairs, and its
//! annotations and finalizer on the Services.
//!
//! occm stops, `wasm-ccm import-occm-config` converts its `cloud.conf` as the README
//! says, and wasm-ccm takes over with those files: no load balancer or floating IP is
//! made or deleted, every Service's status and annotations stay, nothing is refused, and
//! when a server is deleted its Node goes and the members and routes follow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use openstack_double::state::{NewServer, State};
use serde_json::json;
use wasm_ccm_tests::kube_apiserver::KubeApiServer;
use wasm_ccm_tests::openstack::OpenStackWorld;
use wasm_ccm_tests::{
    TempDir, controller_manager_command, initialized, kubelet_node_with_node_ip, listening_port,
    set_ready, spawn_logged, wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(120);
/// occm waits for each Octavia change with a 1 s back-off growing 1.2 times, one Service
/// after the other: a few minutes on a loaded 2-core machine.
const OCCM_TIMEOUT: Duration = Duration::from_secs(400);
const LB_ID: &str = "loadbalancer.openstack.org/load-balancer-id";

/// What the cloud holds, as compared before and after the move.
#[derive(Debug, PartialEq, Eq)]
struct Cloud {
    /// Load balancers: ID to name.
    load_balancers: BTreeMap<String, String>,
    /// Listeners, pools and health monitors: ID to every setting the double keeps.
    listeners: BTreeMap<String, String>,
    pools: BTreeMap<String, String>,
    monitors: BTreeMap<String, String>,
    /// `(pool, address, port)`.
    members: BTreeSet<(String, String, u16)>,
    /// Floating IPs: ID to `(address, port, description)`.
    floating_ips: BTreeMap<String, (String, Option<String>, String)>,
    /// The router's routes.
    routes: BTreeSet<(String, String)>,
    /// Ports' allowed-address pairs: port to addresses.
    pairs: BTreeMap<String, BTreeSet<String>>,
}

fn cloud(s: &State) -> Cloud {
    Cloud {
        load_balancers: s
            .load_balancers
            .values()
            .map(|lb| (lb.id.clone(), lb.name.clone()))
            .collect(),
        listeners: s
            .listeners
            .iter()
            .map(|(id, l)| (id.clone(), format!("{l:?}")))
            .collect(),
        pools: s
            .pools
            .iter()
            .map(|(id, p)| (id.clone(), format!("{p:?}")))
            .collect(),
        monitors: s
            .monitors
            .iter()
            .map(|(id, m)| (id.clone(), format!("{m:?}")))
            .collect(),
        members: s
            .members
            .values()
            .map(|m| (m.pool_id.clone(), m.address.clone(), m.protocol_port))
            .collect(),
        floating_ips: s
            .floating_ips
            .values()
            .map(|f| {
                let seen = (
                    f.floating_ip_address.clone(),
                    f.port_id.clone(),
                    f.description.clone(),
                );
                (f.id.clone(), seen)
            })
            .collect(),
        routes: s
            .routers
            .values()
            .flat_map(|r| r.routes.iter().cloned())
            .collect(),
        pairs: s
            .ports
            .values()
            .filter(|p| !p.allowed_address_pairs.is_empty())
            .map(|p| {
                let pairs = p.allowed_address_pairs.iter().map(|(ip, _)| ip.clone());
                (p.id.clone(), pairs.collect())
            })
            .collect(),
    }
}

/// What the cluster shows of each Service: its status, occm's annotations, finalizers.
async fn services(api: &Api<Service>) -> BTreeMap<String, serde_json::Value> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
        .map(|s| {
            let annotations: BTreeMap<String, String> = s
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k.starts_with("loadbalancer.openstack.org/"))
                .collect();
            let seen = json!({
                "status": s.status.as_ref().and_then(|s| s.load_balancer.clone()),
                "annotations": annotations,
                "finalizers": s.metadata.finalizers,
            });
            (s.metadata.name.unwrap_or_default(), seen)
        })
        .collect()
}

fn service(name: &str, port: i32, annotations: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"name": "p", "port": port, "targetPort": 8080}]},
    }))
    .unwrap()
}

/// Waits until every Service named has an ingress address.
async fn wait_ingress(api: &Api<Service>, names: &[&str], who: &str) {
    for name in names {
        wait_until(
            OCCM_TIMEOUT,
            &format!("{who}: {name} has an address"),
            || async {
                api.get(name)
                    .await
                    .is_ok_and(|s| wasm_ccm_tests::ingress_ip(&s).is_some())
            },
        )
        .await;
    }
}

/// Starts occm against the cluster and the cloud (the four controllers of a cloud
/// controller manager, one after the other as occm's manifests run it); `regional`
/// sets `OS_CCM_REGIONAL=true`. Its log goes to `log` (appended).
fn start_occm(
    occm: &Path,
    conf: &Path,
    kubeconfig: &Path,
    log: &Path,
    regional: bool,
) -> tokio::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = wasm_ccm_tests::upstream::command(occm, "openstack", conf, kubeconfig);
    command.stderr(log);
    if regional {
        command.env("OS_CCM_REGIONAL", "true");
    }
    command.spawn().expect("start occm")
}

/// Stops occm as a Deployment's rollout does (SIGTERM) and waits for it.
async fn stop(occm: &mut tokio::process::Child) {
    // SAFETY: signalling our own child by its PID.
    unsafe {
        libc::kill(occm.id().unwrap() as libc::pid_t, libc::SIGTERM);
    }
    tokio::time::timeout(Duration::from_secs(30), occm.wait())
        .await
        .expect("occm stops on SIGTERM")
        .unwrap();
}

/// Waits until the cloud satisfies `done`; the cloud as last seen when it does not.
async fn wait_cloud(world: &OpenStackWorld, log: &Path, what: &str, done: impl Fn(&Cloud) -> bool) {
    let deadline = std::time::Instant::now() + OCCM_TIMEOUT;
    loop {
        let now = world.cloud.with_state(|s| cloud(s));
        if done(&now) {
            return;
        }
        if std::time::Instant::now() >= deadline {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!("{what}: {now:#?}\noccm's log ends:\n{}", tail.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_occm_ran_moves_to_wasm_ccm_with_nothing_made_or_lost() {
    let occm_bin = wasm_ccm_tests::upstream::occm();
    // Where the time goes, printed with the test's output.
    let started = std::time::Instant::now();
    let stage = |what: &str| eprintln!("{:>6.1}s {what}", started.elapsed().as_secs_f64());
    let server = KubeApiServer::start().await;
    // keystonemiddleware's token cache as clouds run it (300 s): occm and wasm-ccm
    // each log in once, and Keystone is not asked about every request.
    let world = OpenStackWorld::start(openstack_double::Settings {
        token_cache: Duration::from_secs(300),
    })
    .await;
    let dir = TempDir::new("occm-migration");
    let client = server.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let services_api: Api<Service> = Api::namespaced(client.clone(), "default");

    let (servers, router, foreign) = world.cloud.with_state(|s| {
        let servers: Vec<String> = [("node-a", "10.0.0.11"), ("node-b", "10.0.0.12")]
            .into_iter()
            .chain([("node-c", "10.0.0.13")])
            .map(|(name, ip)| s.add_server(NewServer::named(name, ip)).id)
            .collect();
        // A floating IP made by hand, on a port of its own: not occm's, never touched.
        let port = s.add_port("private");
        let foreign = s.add_floating_ip(&port.id, "the operator's own").id;
        (servers, s.router_id(), foreign)
    });

    // occm's cloud.conf, its login in [Global] as occm reads it.
    let conf = dir.path().join("cloud.conf");
    std::fs::write(&conf, world.occm_cloud_conf("max-shared-lb = 3\n")).unwrap();

    // The Nodes as kubelet registers them (node-c joins later).
    for (i, name) in ["node-a", "node-b"].iter().enumerate() {
        let node = kubelet_node_with_node_ip(
            name,
            Some(&format!("10.244.{}.0/24", i + 1)),
            &format!("10.0.0.1{}", i + 1),
        );
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let post = PostParams::default();
    services_api
        .create(&post, &service("web", 80, json!({})))
        .await
        .unwrap();
    let internal = json!({"service.beta.kubernetes.io/openstack-internal-load-balancer": "true"});
    services_api
        .create(&post, &service("internal", 80, internal))
        .await
        .unwrap();
    services_api
        .create(&post, &service("shared-a", 8080, json!({})))
        .await
        .unwrap();
    // The legacy name (the in-tree provider's and old occm's): `a` and the UID without
    // dashes, cut to 32 characters, made before occm runs; occm finds it and completes
    // it.
    let legacy = services_api
        .create(&post, &service("legacy", 80, json!({})))
        .await
        .unwrap();
    let legacy_name: String = format!(
        "a{}",
        legacy.metadata.uid.as_deref().unwrap().replace('-', "")
    )
    .chars()
    .take(32)
    .collect();
    // With the floating IP the in-tree provider gave it (occm attaches one only to a
    // load balancer it owns by name or tag).
    let legacy_lb = world.cloud.with_state(|s| {
        let lb = s.add_load_balancer(&legacy_name);
        let port = s.load_balancers[&lb].vip_port_id.clone();
        s.add_floating_ip(
            &port,
            "Floating IP for Kubernetes external service default/legacy from cluster kubernetes",
        );
        lb
    });

    stage("the cluster and the cloud set up");
    // occm runs until everything is made; Octavia answers at once (occm waits 1 s
    // before it looks again).
    world
        .cloud
        .with_state(|s| s.provisioning_time = Duration::ZERO);
    let occm_log = dir.path().join("occm.log");
    let mut occm = start_occm(&occm_bin, &conf, &server.kubeconfig(), &occm_log, false);
    let occm_said = || std::fs::read_to_string(&occm_log).unwrap_or_default();
    wait_ingress(
        &services_api,
        &["web", "internal", "shared-a", "legacy"],
        "occm",
    )
    .await;
    stage("occm: four Services have addresses");
    // The second Service of the shared load balancer names the first's, as occm's users do.
    let shared_id = services_api
        .get("shared-a")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()[LB_ID]
        .clone();
    services_api
        .create(&post, &service("shared-b", 8081, json!({LB_ID: shared_id})))
        .await
        .unwrap();
    wait_ingress(&services_api, &["shared-b"], "occm").await;
    for name in ["node-a", "node-b"] {
        wait_until(OCCM_TIMEOUT, &format!("occm initializes {name}"), || {
            initialized(&nodes, name)
        })
        .await;
    }
    wait_cloud(&world, &occm_log, "occm's routes and members", |c| {
        c.routes.len() == 2 && c.pairs.len() == 2 && c.members.len() == 5 * 2
    })
    .await;
    stage("occm: routes and members");
    // The cluster switched to regional provider IDs (occm's `OS_CCM_REGIONAL=true`)
    // before node-c joined: the older Nodes keep the plain form.
    stop(&mut occm).await;
    let node = kubelet_node_with_node_ip("node-c", Some("10.244.3.0/24"), "10.0.0.13");
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let mut occm = start_occm(&occm_bin, &conf, &server.kubeconfig(), &occm_log, true);
    wait_until(OCCM_TIMEOUT, "occm initializes node-c", || {
        initialized(&nodes, "node-c")
    })
    .await;
    wait_cloud(
        &world,
        &occm_log,
        "occm's routes and members with node-c",
        |c| c.routes.len() == 3 && c.pairs.len() == 3 && c.members.len() == 5 * 3,
    )
    .await;
    stage("occm (regional): node-c in");
    // occm's last Service writes land before it stops.
    wait_until(
        OCCM_TIMEOUT,
        "occm's annotations on every Service",
        || async {
            services(&services_api).await.values().all(|s| {
                s["annotations"][LB_ID].is_string()
                    && s["annotations"]["loadbalancer.openstack.org/load-balancer-address"]
                        .is_string()
            })
        },
    )
    .await;
    stop(&mut occm).await;

    stage("occm stopped");
    // What occm left.
    let before = world.cloud.with_state(|s| cloud(s));
    let before_services = services(&services_api).await;
    let log = occm_said();
    assert_eq!(
        before.load_balancers.len(),
        4,
        "web, internal, shared, legacy: {before:?}\n{log}"
    );
    assert!(before.load_balancers.contains_key(&legacy_lb), "{before:?}");
    assert_eq!(
        before_services["shared-a"]["status"], before_services["shared-b"]["status"],
        "{before_services:?}"
    );
    let occm_ips: Vec<&String> = before
        .floating_ips
        .iter()
        .filter(|(id, _)| **id != foreign)
        .map(|(_, (_, _, description))| description)
        .collect();
    assert_eq!(occm_ips.len(), 3, "web, shared, legacy: {before:?}");
    assert!(
        occm_ips
            .iter()
            .all(|d| d.starts_with("Floating IP for Kubernetes external service")),
        "{occm_ips:?}"
    );
    let provider_ids: BTreeSet<String> = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.spec.and_then(|s| s.provider_id))
        .collect();
    assert_eq!(
        provider_ids,
        BTreeSet::from([
            format!("openstack:///{}", servers[0]),
            format!("openstack:///{}", servers[1]),
            format!("openstack://RegionOne/{}", servers[2]),
        ])
    );

    // The move: import-occm-config as the README gives it, the credentials as the
    // Secret would hold them, wasm-ccm started with those files.
    let (providers, cloud_config) =
        wasm_ccm_tests::openstack::import_occm_config(&conf, &dir.path().join("openstack")).await;
    // Events from here on are wasm-ccm's.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let boundary = world.cloud.with_state(|s| s.requests.len());
    let mut command = controller_manager_command(
        "openstack",
        &providers,
        &cloud_config,
        &server.kubeconfig(),
        listening_port(),
        &["--leader-elect=false"],
    );
    command.env("RUST_LOG", "info");
    let (_ccm, ccm_log) = spawn_logged(command);
    let said = || ccm_log.lock().unwrap().clone();

    stage("wasm-ccm started");
    // wasm-ccm ensures each Service once, and looks at the routes.
    let names = ["web", "internal", "shared-a", "shared-b", "legacy"];
    wait_until(TIMEOUT, "wasm-ccm ensured every Service", || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        names.iter().all(|name| {
            list.iter().any(|e| {
                e.reason.as_deref() == Some("EnsuredLoadBalancer")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
        })
    })
    .await;
    wait_until(TIMEOUT, "wasm-ccm read the router twice", || async {
        world.cloud.with_state(|s| {
            s.requests[boundary..]
                .iter()
                .filter(|r| r.ends_with(&format!("/routers/{router}")))
                .count()
                >= 2
        })
    })
    .await;
    let after = world.cloud.with_state(|s| cloud(s));
    assert_eq!(after, before, "wasm-ccm changed what occm made\n{}", said());
    assert_eq!(services(&services_api).await, before_services);

    stage("wasm-ccm: every Service ensured, the router read");
    // Taking over wrote nothing: every request so far only read.
    let writes: Vec<String> = world.cloud.with_state(|s| {
        s.requests[boundary..]
            .iter()
            .filter(|r| !r.starts_with("GET "))
            .cloned()
            .collect()
    });
    assert!(
        writes.is_empty(),
        "wasm-ccm wrote on taking over: {writes:?}"
    );
    // A server deleted: its Node goes (not Ready, server gone), and the members of every
    // pool and the routes follow.
    world.cloud.with_state(|s| s.delete_server(&servers[1]));
    set_ready(&nodes, "node-b", "Unknown").await;
    wait_until(TIMEOUT, "node-b deleted", || async {
        nodes.get_opt("node-b").await.unwrap().is_none()
    })
    .await;
    wait_until(TIMEOUT, "members and routes without node-b", || async {
        world.cloud.with_state(|s| {
            let c = cloud(s);
            c.members.iter().all(|(_, ip, _)| ip != "10.0.0.12")
                && c.members.len() == 5 * 2
                && !c.routes.iter().any(|(cidr, _)| cidr == "10.244.2.0/24")
                && c.routes.len() == 2
        })
    })
    .await;
    stage("wasm-ccm: node-b gone, members and routes follow");
    let end = world.cloud.with_state(|s| cloud(s));
    assert_eq!(end.load_balancers, before.load_balancers);
    assert_eq!(end.floating_ips, before.floating_ips);
    assert_eq!(end.listeners, before.listeners);
    assert_eq!(end.pools, before.pools);
    assert_eq!(end.monitors, before.monitors);
    // Nothing made or deleted on the way: no load balancer or floating IP request.
    let requests = world.cloud.with_state(|s| s.requests[boundary..].to_vec());
    let made_or_deleted: Vec<&String> = requests
        .iter()
        .filter(|r| {
            (r.starts_with("POST ") && r.ends_with("/lbaas/loadbalancers"))
                || (r.starts_with("DELETE ") && r.contains("/lbaas/loadbalancers/"))
                || (r.starts_with("POST ") && r.ends_with("/floatingips"))
                || (r.starts_with("DELETE ") && r.contains("/floatingips/"))
        })
        .collect();
    assert!(made_or_deleted.is_empty(), "{made_or_deleted:?}");
    let after_services = services(&services_api).await;
    assert_eq!(after_services, before_services);
    // Nothing refused: no Warning from wasm-ccm, no refusal in its log.
    let warnings: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| format!("{:?}: {:?}", e.reason, e.note))
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    let log = said();
    assert!(
        !log.contains("refused") && !log.contains("Unsupported"),
        "{log}"
    );
}
