//! The OpenStack provider (`guests/openstack`) through the real controllers and the
//! API server double, against the real Keystone and the OpenStack API double
//! (tests/openstack-double), which validates every token with Keystone: the host logs
//! in with the application credential of the documented policy, the provider never
//! holds a secret.

mod cloud_config;
mod cluster_name;
mod deploy;
mod floating_ips;
mod migration;
mod octavia;
mod routes;
mod security_groups;
mod settings;
mod shared;
mod slow_cloud;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use keystone_peer::Keystone;
use kube::Api;
use kube::api::PostParams;
use openstack_double::OpenStackDouble;
use openstack_double::state::NewServer;
use serde_json::json;
use wasm_ccm_tests::openstack::OpenStackWorld;
use wasm_ccm_tests::{
    TempDir, controller_manager_command, guest, initialized, listening_port, node_addresses,
    set_ready, taint_keys, wait_until,
};

/// How long a condition may take: several provider calls on a loaded machine (the
/// documented policy's call is 60 s; one that runs out of time answers retry-after and
/// the next resumes).
const TIMEOUT: Duration = Duration::from_secs(240);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// Keystone, the OpenStack double, the API server double and a provider directory.
struct OpenStackStack {
    keystone: Arc<Keystone>,
    cloud: OpenStackDouble,
    api: kube_double::ApiServer,
    dir: TempDir,
    kubeconfig: PathBuf,
    cloud_config: PathBuf,
    secret: String,
}

impl OpenStackStack {
    /// Everything up, with `extra` appended to the cloud config (given the double, for
    /// its IDs).
    async fn start(extra: impl FnOnce(&OpenStackDouble) -> String) -> Self {
        // keystonemiddleware's token cache as clouds run it (300 s); tests/keystone.rs
        // covers a revoked token.
        let world = OpenStackWorld::start(openstack_double::Settings {
            token_cache: Duration::from_secs(300),
        })
        .await;
        let api = kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("API server double");
        let dir = TempDir::new("openstack");
        std::fs::copy(
            guest("openstack_provider"),
            dir.path().join("openstack.wasm"),
        )
        .unwrap();
        // The policy deploy/openstack gives users, for this Keystone and credential.
        world.install_documented_policy(dir.path());
        let OpenStackWorld {
            keystone,
            cloud,
            secret,
            ..
        } = world;
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();
        let cloud_config = dir.path().join("cloud.conf");
        std::fs::write(
            &cloud_config,
            format!(
                "[Global]\nauth-url = {}/v3\nregion = RegionOne\n{}",
                keystone.url(),
                extra(&cloud)
            ),
        )
        .unwrap();
        Self {
            keystone,
            cloud,
            api,
            dir,
            kubeconfig,
            cloud_config,
            secret,
        }
    }

    fn client(&self) -> kube::Client {
        {
            wasm_ccm_host::tls::install_crypto_provider();
            kube::Client::try_from(kube::Config::new(self.api.url().parse().unwrap())).unwrap()
        }
    }

    /// Starts `wasm-ccm` and collects its log.
    fn controller_manager(
        &self,
        port: u16,
    ) -> (tokio::process::Child, Arc<std::sync::Mutex<String>>) {
        self.controller_manager_with(port, &[])
    }

    /// [`Self::controller_manager`] with `extra` flags (`--cluster-name=prod`).
    fn controller_manager_with(
        &self,
        port: u16,
        extra: &[&str],
    ) -> (tokio::process::Child, Arc<std::sync::Mutex<String>>) {
        let mut args = vec!["--leader-elect=false"];
        args.extend_from_slice(extra);
        let mut command = controller_manager_command(
            "openstack",
            self.dir.path(),
            &self.cloud_config,
            &self.kubeconfig,
            port,
            &args,
        );
        command.env("RUST_LOG", "info");
        wasm_ccm_tests::spawn_logged(command)
    }

    /// Server `node-a` (10.0.0.11) and its Node as kubelet registers it: occm makes no
    /// load balancer in a cluster without Nodes (`checkService`), nor does the provider.
    async fn add_node_a(&self) {
        self.cloud.with_state(|s| {
            s.add_server(NewServer::named("node-a", "10.0.0.11"));
        });
        Api::<Node>::all(self.client())
            .create(&PostParams::default(), &kubelet_node("node-a"))
            .await
            .unwrap();
    }
}

/// A Node as kubelet registers it with `--cloud-provider=external`: named by its
/// server's name.
fn kubelet_node(name: &str) -> Node {
    kubelet_node_with_cidr(name, None)
}

/// [`kubelet_node`] with a pod CIDR.
fn kubelet_node_with_cidr(name: &str, pod_cidr: Option<&str>) -> Node {
    let cidrs: Vec<&str> = pod_cidr.into_iter().collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
                 "podCIDR": pod_cidr, "podCIDRs": cidrs},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// `[LoadBalancer]` with the double's private subnet for VIPs and its public network
/// for floating IPs.
fn lb_cloud_config(cloud: &OpenStackDouble) -> String {
    cloud.with_state(|s| {
        let private = s.network_id("private").unwrap();
        let subnet = s.subnet_of(&private).unwrap().id.clone();
        let public = s.network_id("public").unwrap();
        format!("[LoadBalancer]\nsubnet-id = {subnet}\nfloating-network-id = {public}\n")
    })
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_initialized_and_their_lifecycle_follows_nova() {
    let stack = OpenStackStack::start(|_| String::new()).await;
    let (a, b, c) = stack.cloud.with_state(|s| {
        let a = s.add_server(NewServer::named("node-a", "10.0.0.11"));
        let mut b = NewServer::named("node-b", "10.0.0.12");
        b.zone = "az-2".into();
        b.flavor = "m1.large".into();
        let b = s.add_server(b);
        let c = s.add_server(NewServer::named("node-c", "10.0.0.13"));
        (a, b, c)
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in ["node-a", "node-b", "node-c"] {
        nodes
            .create(&PostParams::default(), &kubelet_node(name))
            .await
            .unwrap();
    }
    let port = listening_port();
    let (_ccm, log) = stack.controller_manager(port);
    for name in ["node-a", "node-b", "node-c"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
    }
    // As upstream's cloud-node controller, the addresses are written after the taint
    // is removed: waited for, not read at once.
    wait_until(TIMEOUT, "node-b's addresses", || async {
        !node_addresses(&nodes, "node-b").await.is_empty()
    })
    .await;
    let node_b = nodes.get("node-b").await.unwrap();
    assert_eq!(
        node_b.spec.as_ref().unwrap().provider_id.as_deref(),
        Some(format!("openstack:///{}", b.id).as_str())
    );
    assert_eq!(
        label(&node_b, "node.kubernetes.io/instance-type"),
        Some("m1.large")
    );
    assert_eq!(label(&node_b, "topology.kubernetes.io/zone"), Some("az-2"));
    assert_eq!(
        label(&node_b, "topology.kubernetes.io/region"),
        Some("RegionOne")
    );
    assert_eq!(
        node_addresses(&nodes, "node-b").await,
        [("InternalIP".to_string(), "10.0.0.12".to_string())]
    );

    // node-a shuts off while NotReady: the shutdown taint; node-c's server is deleted:
    // the Node goes; node-b's is soft-deleted (restorable) while NotReady: it exists, as
    // occm says, and its Node stays.
    stack.cloud.with_state(|s| {
        s.servers.get_mut(&a.id).unwrap().status = "SHUTOFF".into();
        s.servers.get_mut(&b.id).unwrap().status = "SOFT_DELETED".into();
        s.delete_server(&c.id);
    });
    set_ready(&nodes, "node-a", "False").await;
    set_ready(&nodes, "node-b", "False").await;
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

    // The lifecycle checks of two NotReady Nodes read their two servers by ID: the
    // project is not listed for them.
    let before = stack.cloud.with_state(|s| s.requests.len());
    let by_id = format!("GET /compute/v2.1/servers/{}", a.id);
    wait_until(TIMEOUT, "node-a's server read by ID", || async {
        stack
            .cloud
            .with_state(|s| s.requests[before..].iter().any(|r| r.starts_with(&by_id)))
    })
    .await;
    let since: Vec<String> = stack.cloud.with_state(|s| s.requests[before..].to_vec());
    assert!(
        !since.iter().any(|r| r.contains("/servers/detail")),
        "{since:?}"
    );

    // Every request carried a token Keystone accepted (the double refuses others), and
    // neither the secret nor a token is in the log.
    let requests = stack.cloud.with_state(|s| s.requests.clone());
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /compute/v2.1/servers")),
        "{requests:?}"
    );
    let log = log.lock().unwrap().clone();
    assert!(!log.contains(&stack.secret), "{log}");
    assert!(!log.contains("gAAAAA"), "a fernet token in the log: {log}");
    assert!(stack.keystone.port > 0);
}

/// occm's names on Nodes: an availability zone and a flavor name that are not label
/// values are made ones as occm makes them (`util.SanitizeLabel`; the flavor's ID for
/// a flavor name), and a Node keeps the provider ID form it has, occm's regional
/// `openstack://<region>/<id>` included, while new Nodes get the regional form with
/// `regional-provider-ids` (occm's `OS_CCM_REGIONAL=true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn occm_zone_flavor_and_provider_id_forms_are_served() {
    let stack = OpenStackStack::start(|_| "regional-provider-ids = true\n".into()).await;
    let (legacy_flavor, plain, regional, fresh) = stack.cloud.with_state(|s| {
        let mut plain = NewServer::named("node-plain", "10.0.0.21");
        plain.zone = "nova zone".into();
        plain.flavor = "m1 large (legacy)".into();
        let plain = s.add_server(plain);
        let regional = s.add_server(NewServer::named("node-regional", "10.0.0.22"));
        let fresh = s.add_server(NewServer::named("node-fresh", "10.0.0.23"));
        (s.flavor_id("m1 large (legacy)"), plain, regional, fresh)
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for (name, provider_id) in [
        ("node-plain", Some(format!("openstack:///{}", plain.id))),
        (
            "node-regional",
            Some(format!("openstack://RegionOne/{}", regional.id)),
        ),
        ("node-fresh", None),
    ] {
        let mut node = kubelet_node(name);
        node.spec.as_mut().unwrap().provider_id = provider_id;
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    for name in ["node-plain", "node-regional", "node-fresh"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
    }
    let get = |name: &'static str| {
        let nodes = nodes.clone();
        async move { nodes.get(name).await.unwrap() }
    };
    let provider_id = |node: &Node| node.spec.as_ref().unwrap().provider_id.clone().unwrap();
    let addresses = |node: &Node| -> Vec<String> {
        node.status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|a| a.address)
            .collect()
    };
    let node = get("node-plain").await;
    assert_eq!(
        label(&node, "topology.kubernetes.io/zone"),
        Some("nova-zone")
    );
    assert_eq!(
        label(&node, "failure-domain.beta.kubernetes.io/zone"),
        Some("nova-zone")
    );
    assert_eq!(
        label(&node, "node.kubernetes.io/instance-type"),
        Some(legacy_flavor.as_str())
    );
    assert_eq!(provider_id(&node), format!("openstack:///{}", plain.id));
    let node = get("node-regional").await;
    assert_eq!(
        provider_id(&node),
        format!("openstack://RegionOne/{}", regional.id)
    );
    assert_eq!(addresses(&node), ["10.0.0.22"]);
    let node = get("node-fresh").await;
    assert_eq!(
        provider_id(&node),
        format!("openstack://RegionOne/{}", fresh.id)
    );
    assert_eq!(addresses(&node), ["10.0.0.23"]);
}

/// A server whose port is a trunk's parent: occm's `nodeAddresses` adds its subports'
/// addresses (the ports named in the parent's `trunk_details`) under their networks'
/// names. With `internal-network-name` naming a subport's network, that subport's
/// address is the Node's InternalIP (the parent port's, on another network, is left
/// out), one on a `public-network-name` network is an ExternalIP, one on neither is left
/// out, in occm's order (networks by name); the route to the Node goes to the subport's
/// address, and the subport allows the pod CIDR (occm's `getPortByIP` finds it by
/// address) until the Node leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trunk_subport_addresses_are_read_as_occm() {
    let stack = OpenStackStack::start(|cloud| {
        format!(
            "[Networking]\ninternal-network-name = subnet-net\n\
             public-network-name = storage-net\n[Route]\nrouter-id = {}\n",
            cloud.with_state(|s| s.router_id())
        )
    })
    .await;
    let (subport, plain) = stack.cloud.with_state(|s| {
        let subnet_net = s.network("subnet-net", false);
        s.subnet(&subnet_net, "10.20.0.0/24");
        let storage_net = s.network("storage-net", false);
        s.subnet(&storage_net, "10.30.0.0/24");
        let trunked = s.add_server(NewServer::named("node-trunk", "10.0.0.31"));
        let subport = s.add_subport(&trunked.id, "subnet-net", "10.20.0.31");
        s.add_subport(&trunked.id, "storage-net", "10.30.0.31");
        s.add_subport(&trunked.id, "other-net", "192.168.0.31");
        // A server on the internal network without a trunk, beside it.
        let mut plain = NewServer::named("node-plain", "10.20.0.32");
        plain.interfaces = vec![("subnet-net".into(), "10.20.0.32".into())];
        (subport, s.add_server(plain))
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for (name, cidr) in [
        ("node-trunk", "10.244.7.0/24"),
        ("node-plain", "10.244.8.0/24"),
    ] {
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node_with_cidr(name, Some(cidr)),
            )
            .await
            .unwrap();
    }
    let (_ccm, _log) = stack.controller_manager(listening_port());
    for name in ["node-trunk", "node-plain"] {
        wait_until(TIMEOUT, &format!("{name}'s addresses"), || async {
            !node_addresses(&nodes, name).await.is_empty()
        })
        .await;
    }
    let address = |t: &str, a: &str| (t.to_string(), a.to_string());
    assert_eq!(
        node_addresses(&nodes, "node-trunk").await,
        [
            address("ExternalIP", "10.30.0.31"),
            address("InternalIP", "10.20.0.31"),
        ]
    );
    assert_eq!(
        node_addresses(&nodes, "node-plain").await,
        [address("InternalIP", "10.20.0.32")]
    );

    let routes = || {
        stack.cloud.with_state(|s| {
            let mut routes = s.routers.values().next().unwrap().routes.clone();
            routes.sort();
            routes
        })
    };
    let pairs = |port: &str| {
        stack.cloud.with_state(|s| {
            s.ports[port]
                .allowed_address_pairs
                .iter()
                .map(|(ip, _)| ip.clone())
                .collect::<Vec<_>>()
        })
    };
    wait_until(TIMEOUT, "the routes to the internal addresses", || async {
        routes()
            == [
                address("10.244.7.0/24", "10.20.0.31"),
                address("10.244.8.0/24", "10.20.0.32"),
            ]
    })
    .await;
    wait_until(TIMEOUT, "the subport's pair", || async {
        pairs(&subport.id) == ["10.244.7.0/24"]
    })
    .await;
    let plain_port = stack.cloud.with_state(|s| {
        s.ports
            .values()
            .find(|p| p.device_id == plain.id)
            .unwrap()
            .id
            .clone()
    });
    wait_until(TIMEOUT, "node-plain's pair", || async {
        pairs(&plain_port) == ["10.244.8.0/24"]
    })
    .await;

    // node-trunk leaves the cluster: its route and the subport's pair go.
    nodes
        .delete("node-trunk", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-trunk's route removed", || async {
        routes() == [address("10.244.8.0/24", "10.20.0.32")]
    })
    .await;
    wait_until(TIMEOUT, "the subport's pair removed", || async {
        pairs(&subport.id).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_service_gets_an_octavia_load_balancer_and_a_floating_ip() {
    use k8s_openapi::api::core::v1::Service;
    let stack =
        OpenStackStack::start(|cloud| format!("{}create-monitor = true\n", lb_cloud_config(cloud)))
            .await;
    stack.cloud.with_state(|s| {
        s.add_server(NewServer::named("node-a", "10.0.0.11"));
        s.add_server(NewServer::named("node-b", "10.0.0.12"));
        s.add_server(NewServer::named("node-c", "10.0.0.13"));
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in ["node-a", "node-b"] {
        nodes
            .create(&PostParams::default(), &kubelet_node(name))
            .await
            .unwrap();
    }
    let port = listening_port();
    let (_ccm, log) = stack.controller_manager(port);
    for name in ["node-a", "node-b"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            initialized(&nodes, name)
        })
        .await;
    }

    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default",
                     "annotations": {"loadbalancer.openstack.org/timeout-client-data": "60000"}},
        "spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["203.0.113.0/24"],
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    }))
    .unwrap();
    let created = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let node_port = created.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
        .node_port
        .unwrap();
    let ingress_ip = || async {
        services
            .get("web")
            .await
            .ok()
            .and_then(|s| wasm_ccm_tests::ingress_ip(&s))
    };
    wait_until(TIMEOUT, "the Service's floating IP", || async {
        ingress_ip().await.is_some()
    })
    .await;
    let address = ingress_ip().await.unwrap();
    let members = |s: &openstack_double::State| {
        let mut m: Vec<(String, u16)> = s
            .members
            .values()
            .map(|m| (m.address.clone(), m.protocol_port))
            .collect();
        m.sort();
        m
    };
    stack.cloud.with_state(|s| {
        assert_eq!(s.load_balancers.len(), 1);
        let lb = s.load_balancers.values().next().unwrap();
        assert_eq!(lb.name, "kube_service_kubernetes_default_web");
        assert_eq!(lb.tags, ["kube_service_kubernetes_default_web"]);
        let listener = s.listeners.values().next().unwrap();
        assert_eq!(listener.protocol_port, 80);
        assert_eq!(
            listener.name,
            "listener_0_kube_service_kubernetes_default_web"
        );
        assert_eq!(listener.allowed_cidrs, ["203.0.113.0/24"]);
        assert_eq!(listener.settings.get("timeout_client_data"), Some(&60000));
        assert_eq!(s.pools.len(), 1);
        assert_eq!(s.monitors.len(), 1);
        let fip = s.floating_ips.values().next().unwrap();
        assert_eq!(fip.floating_ip_address, address);
        assert_eq!(fip.port_id.as_deref(), Some(lb.vip_port_id.as_str()));
        let port = node_port as u16;
        assert_eq!(
            members(s),
            [
                ("10.0.0.11".to_string(), port),
                ("10.0.0.12".to_string(), port)
            ]
        );
    });

    // A third node joins, registered as kubelet --node-ip does (without an address a
    // joining Node stays out of the load balancers until the next full resync, as
    // upstream's service controller syncs when the provider ID is set): the pool's
    // members follow.
    nodes
        .create(
            &PostParams::default(),
            &wasm_ccm_tests::kubelet_node_with_node_ip("node-c", None, "10.0.0.13"),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-c a member", || async {
        stack.cloud.with_state(|s| members(s).len() == 3)
    })
    .await;

    // Deleted: the load balancer (cascade), its floating IP, then the finalizer.
    services
        .delete("web", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the Service gone", || async {
        services.get_opt("web").await.is_ok_and(|s| s.is_none())
    })
    .await;
    stack.cloud.with_state(|s| {
        assert_eq!(s.load_balancer_resources(), 0, "{:?}", s.load_balancers);
        assert!(s.floating_ips.is_empty());
    });
    let log = log.lock().unwrap().clone();
    assert!(!log.contains(&stack.secret));
}
