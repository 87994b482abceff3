//! Upstream as the oracle for OpenStack: the same scenarios (occm's annotations) through
//! occm (v1.36.0, built from its Go module by `scripts/ensure-upstream-ccm.sh`) with its
//! `cloud.conf`, and through wasm-ccm with the OpenStack provider and what
//! `import-occm-config` makes of that file, each against a fresh real kube-apiserver,
//! Keystone and OpenStack double. After each phase converges, what each left (every
//! load balancer, listener, pool, member, health monitor, floating IP, route and
//! allowed-address pair as the double holds them; each Service's status, annotations
//! and finalizers, the events' reasons; each Node's provider ID, addresses, labels and
//! taints) is compared with the IDs and addresses that differ between two runs replaced
//! by what they stand for. The test prints a table and fails on a difference that
//! guests/openstack/README.md does not list.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use openstack_double::state::{NewServer, State};
use serde_json::{Value, json};
use wasm_ccm_tests::kube_apiserver::KubeApiServer;
use wasm_ccm_tests::openstack::{OpenStackWorld, import_occm_config};
use wasm_ccm_tests::oracle::{self, Comparison, Flat, Names, Running, group_of, listed, steady};
use wasm_ccm_tests::{
    TempDir, initialized, kubelet_node_with_node_ip, set_ready, spawn_logged, upstream, wait_until,
};

/// Both controller managers converge within this.
const TIMEOUT: Duration = Duration::from_secs(180);
/// How long the cloud and the cluster must stay unchanged to count as converged.
const STEADY: Duration = Duration::from_secs(5);
const PHASES: [&str; 3] = ["created", "changed", "removed"];
/// occm's prefix of its load balancers' names (cluster `kubernetes`, namespace
/// `default`).
const LB_PREFIX: &str = "kube_service_kubernetes_default_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Occm,
    WasmCcm,
}

/// A scenario: a Service named for it with `loadbalancer.openstack.org/<suffix>`
/// annotations (keys with a `/` are used as they are) and spec fields beyond one TCP
/// port.
struct Scenario {
    name: &'static str,
    annotations: Value,
    spec: Value,
}

fn scenarios() -> Vec<Scenario> {
    let s = |name, annotations: Value, spec: Value| Scenario {
        name,
        annotations,
        spec,
    };
    let plain = || json!({});
    vec![
        s("os-default", json!({}), plain()),
        s(
            "os-internal",
            json!({"service.beta.kubernetes.io/openstack-internal-load-balancer": "true"}),
            plain(),
        ),
        s("os-proxy", json!({"proxy-protocol": "true"}), plain()),
        s("os-xff", json!({"x-forwarded-for": "true"}), plain()),
        s(
            "os-timeouts",
            json!({"timeout-client-data": "60000", "timeout-member-connect": "6000",
                   "timeout-member-data": "70000", "timeout-tcp-inspect": "100",
                   "connection-limit": "1000"}),
            plain(),
        ),
        s(
            "os-ranges",
            json!({}),
            json!({"loadBalancerSourceRanges": ["192.0.2.0/24", "198.51.100.0/24"]}),
        ),
        s("os-method", json!({"lb-method": "SOURCE_IP"}), plain()),
        s(
            "os-affinity",
            json!({}),
            json!({"sessionAffinity": "ClientIP"}),
        ),
        s(
            "os-local",
            json!({}),
            json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32100}),
        ),
        s(
            "os-no-monitor",
            json!({"enable-health-monitor": "false"}),
            plain(),
        ),
        s(
            "os-monitor",
            json!({"health-monitor-delay": "10", "health-monitor-timeout": "5",
                   "health-monitor-max-retries": "2", "health-monitor-max-retries-down": "4"}),
            plain(),
        ),
        s(
            "os-udp",
            json!({}),
            json!({"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}),
        ),
        s(
            "os-two-ports",
            json!({}),
            json!({"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}),
        ),
        s("os-keep-fip", json!({"keep-floatingip": "true"}), plain()),
        // occm's getBoolFromServiceAnnotation takes only "true" and "false": any other
        // spelling is the default (external, no X-Forwarded-For, a monitor).
        s(
            "os-bool-loose",
            json!({"service.beta.kubernetes.io/openstack-internal-load-balancer": "True",
                   "x-forwarded-for": "1", "enable-health-monitor": "no"}),
            plain(),
        ),
        // ... so `yes` keeps no floating IP when the Service goes.
        s(
            "os-keep-fip-yes",
            json!({"keep-floatingip": "yes"}),
            plain(),
        ),
        // Its load balancer is put in ERROR in the second phase: kept as it is, its
        // sync failing, as occm's ensureOctaviaLoadBalancer.
        s("os-error", json!({}), plain()),
    ]
}

/// Scenario `index`'s Service, with fixed node ports (`30000 + 10 * index` on).
fn service(index: usize, scenario: &Scenario) -> Service {
    let annotations: serde_json::Map<String, Value> = scenario
        .annotations
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let key = if k.contains('/') {
                k.clone()
            } else {
                format!("loadbalancer.openstack.org/{k}")
            };
            (key, v.clone())
        })
        .collect();
    let mut spec = json!({
        "type": "LoadBalancer",
        "selector": {"app": scenario.name},
        "ports": [{"name": "http", "port": 80}],
    });
    for (k, v) in scenario.spec.as_object().unwrap() {
        spec[k] = v.clone();
    }
    for (i, port) in spec["ports"].as_array_mut().unwrap().iter_mut().enumerate() {
        if port["protocol"].is_null() {
            port["protocol"] = "TCP".into();
        }
        port["targetPort"] = 8080.into();
        port["nodePort"] = (30000 + 10 * index + i).into();
    }
    serde_json::from_value(json!({
        "metadata": {"name": scenario.name, "namespace": "default", "annotations": annotations},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn occm_and_wasm_ccm_leave_the_same_cloud() {
    let theirs = run(Side::Occm).await;
    let ours = run(Side::WasmCcm).await;
    let groups: Vec<String> = scenarios()
        .iter()
        .map(|s| s.name.to_owned())
        .chain(["nodes", "routes", "floating IPs"].map(String::from))
        .collect();
    let readme = include_str!("../guests/openstack/README.md");
    Comparison::new(
        &PHASES,
        &theirs,
        &ours,
        &groups,
        scenario_of,
        &listed(readme),
    )
    .check("guests/openstack/README.md");
}

/// The scenario a key belongs to: the Service its load balancer's name (or a child's)
/// or its object names, else `nodes`, `routes` or `floating IPs`.
fn scenario_of(key: &str) -> String {
    let named = |at: usize| {
        key[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect::<String>()
    };
    if let Some(at) = key.find(LB_PREFIX) {
        return named(at + LB_PREFIX.len());
    }
    for prefix in ["svc/", "events/service/", "fip/default/"] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return named(key.len() - rest.len());
        }
    }
    let groups = [
        ("node/", "nodes"),
        ("events/node/", "nodes"),
        ("routes", "routes"),
        ("pairs/", "routes"),
        ("fip/", "floating IPs"),
    ];
    group_of(key, &groups)
}

/// Runs one side through every phase; a snapshot after each.
async fn run(side: Side) -> Vec<Flat> {
    let server = KubeApiServer::start().await;
    let client = server.client().await;
    // keystonemiddleware's token cache as clouds run it (300 s).
    let world = OpenStackWorld::start(openstack_double::Settings {
        token_cache: Duration::from_secs(300),
    })
    .await;
    let dir = TempDir::new("openstack-oracle");
    world.cloud.with_state(|s| {
        s.provisioning_time = Duration::ZERO;
        // An Octavia whose default provider is OVN: occm asks for amphora when the
        // cloud.conf names no lb-provider.
        s.default_provider = "ovn".into();
        for (name, ip) in [
            ("node-a", "10.0.0.11"),
            ("node-b", "10.0.0.12"),
            ("node-c", "10.0.0.13"),
        ] {
            let server = s.add_server(NewServer::named(name, ip));
            // A trunk subport: occm's nodeAddresses reads its address too.
            if name == "node-b" {
                s.add_subport(&server.id, "vlan-net", "192.168.0.12");
            }
        }
    });
    // occm's cloud.conf; wasm-ccm gets what import-occm-config makes of it.
    let conf = dir.path().join("cloud.conf");
    std::fs::write(&conf, world.occm_cloud_conf("")).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, cidr, ip) in [
        ("node-a", "10.244.1.0/24", "10.0.0.11"),
        ("node-b", "10.244.2.0/24", "10.0.0.12"),
    ] {
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node_with_node_ip(name, Some(cidr), ip),
            )
            .await
            .unwrap();
    }
    let spawned = match side {
        Side::Occm => {
            let command =
                upstream::command(&upstream::occm(), "openstack", &conf, &server.kubeconfig());
            spawn_logged(command)
        }
        Side::WasmCcm => {
            let (providers, cloud_config) =
                import_occm_config(&conf, &dir.path().join("openstack")).await;
            let command = upstream::wasm_ccm_command(
                "openstack",
                &providers,
                &cloud_config,
                &server.kubeconfig(),
            );
            spawn_logged(command)
        }
    };
    let ccm = Running::new(side, spawned);
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let mut snapshots = Vec::new();

    // 1. Created: the nodes initialized, then every Service has its address.
    for name in ["node-a", "node-b"] {
        wait_until(
            TIMEOUT,
            &format!("{side:?}: {name} initialized"),
            || async {
                ccm.alive();
                initialized(&nodes, name).await
            },
        )
        .await;
    }
    let all = scenarios();
    for (index, scenario) in all.iter().enumerate() {
        services
            .create(&PostParams::default(), &service(index, scenario))
            .await
            .unwrap();
    }
    for scenario in &all {
        wait_until(
            TIMEOUT,
            &format!("{side:?}: {} has an address", scenario.name),
            || async {
                ccm.alive();
                services.get(scenario.name).await.is_ok_and(|s| {
                    s.status
                        .and_then(|s| s.load_balancer)
                        .and_then(|l| l.ingress)
                        .is_some_and(|i| !i.is_empty())
                })
            },
        )
        .await;
    }
    snapshots.push(steady(&ccm, TIMEOUT, STEADY, async || take(&world, &client).await).await);

    // 2. Changed: a node joined, then a port changed and a port removed. The node's
    // load balancer updates settle first: a Service's own sync racing the node sync of
    // the same load balancer can find it busy (Octavia's PENDING_UPDATE), which occm
    // records as UpdateLoadBalancerFailed and retries, so the events depended on timing.
    nodes
        .create(
            &PostParams::default(),
            &kubelet_node_with_node_ip("node-c", Some("10.244.3.0/24"), "10.0.0.13"),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        &format!("{side:?}: node-c initialized"),
        || async {
            ccm.alive();
            initialized(&nodes, "node-c").await
        },
    )
    .await;
    steady(&ccm, TIMEOUT, STEADY, async || take(&world, &client).await).await;
    // `os-error`'s load balancer goes to ERROR; then its port changes.
    world.cloud.with_state(|s| {
        let lb = s
            .load_balancers
            .values_mut()
            .find(|lb| lb.name == format!("{LB_PREFIX}os-error"))
            .unwrap();
        lb.provisioning_status = "ERROR".into();
    });
    let error = all.iter().position(|s| s.name == "os-error").unwrap();
    services
        .patch(
            "os-error",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 8081,
                "targetPort": 8080, "nodePort": 30000 + 10 * error, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        &format!("{side:?}: os-error's sync failed"),
        || async {
            ccm.alive();
            wasm_ccm_tests::events::reasons(&client, "os-error")
                .await
                .iter()
                .any(|reason| reason == "SyncLoadBalancerFailed")
        },
    )
    .await;
    services
        .patch(
            "os-default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 8080,
                "targetPort": 8080, "nodePort": 30000, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    let two = all.iter().position(|s| s.name == "os-two-ports").unwrap();
    services
        .patch(
            "os-two-ports",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 80,
                "targetPort": 8080, "nodePort": 30000 + 10 * two, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    snapshots.push(steady(&ccm, TIMEOUT, STEADY, async || take(&world, &client).await).await);

    // 3. Removed: a server deleted (its Node goes), two Services deleted.
    let gone = world.cloud.with_state(|s| {
        s.servers
            .values()
            .find(|v| v.name == "node-a")
            .unwrap()
            .id
            .clone()
    });
    world.cloud.with_state(|s| s.delete_server(&gone));
    set_ready(&nodes, "node-a", "Unknown").await;
    for name in ["os-proxy", "os-keep-fip", "os-keep-fip-yes"] {
        services
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_until(TIMEOUT, &format!("{side:?}: node-a deleted"), || async {
        ccm.alive();
        nodes.get_opt("node-a").await.unwrap().is_none()
    })
    .await;
    for name in ["os-proxy", "os-keep-fip", "os-keep-fip-yes"] {
        wait_until(TIMEOUT, &format!("{side:?}: {name} gone"), || async {
            ccm.alive();
            services.get_opt(name).await.unwrap().is_none()
        })
        .await;
    }
    snapshots.push(steady(&ccm, TIMEOUT, STEADY, async || take(&world, &client).await).await);
    // `ORACLE_LOG=1` prints each side's log (with `--nocapture`).
    if std::env::var_os("ORACLE_LOG").is_some() {
        eprintln!("{side:?}'s log:\n{}", ccm.log());
    }
    snapshots
}

async fn take(world: &OpenStackWorld, client: &kube::Client) -> Flat {
    let (mut flat, names) = world.cloud.with_state(|s| cloud(s));
    flat.extend(oracle::cluster(client, &names).await);
    flat
}

/// What the double holds, keyed by names, with every ID and every address the double
/// hands out in turn (VIPs, floating IPs) replaced by what it stands for.
fn cloud(s: &State) -> (Flat, Names) {
    let mut names = Names::new();
    for server in s.servers.values() {
        names.add(server.id.clone(), format!("<server:{}>", server.name));
    }
    for network in s.networks.values() {
        names.add(network.id.clone(), format!("<network:{}>", network.name));
    }
    for subnet in s.subnets.values() {
        names.add(subnet.id.clone(), format!("<subnet:{}>", subnet.cidr));
    }
    for router in s.routers.values() {
        names.add(router.id.clone(), format!("<router:{}>", router.name));
    }
    for lb in s.load_balancers.values() {
        names.add(lb.id.clone(), format!("<lb:{}>", lb.name));
        names.add(lb.vip_port_id.clone(), format!("<vip port of {}>", lb.name));
        names.add(lb.vip_address.clone(), format!("<vip of {}>", lb.name));
    }
    for l in s.listeners.values() {
        names.add(l.id.clone(), format!("<listener:{}>", l.name));
    }
    for p in s.pools.values() {
        names.add(p.id.clone(), format!("<pool:{}>", p.name));
    }
    for m in s.monitors.values() {
        names.add(m.id.clone(), format!("<monitor:{}>", m.name));
    }
    for m in s.members.values() {
        names.add(
            m.id.clone(),
            format!("<member:{}:{}>", m.address, m.protocol_port),
        );
    }
    for port in s.ports.values() {
        let owner = s
            .servers
            .get(&port.device_id)
            .map(|v| format!("<port of {}>", v.name));
        if let Some(owner) = owner {
            names.add(port.id.clone(), owner);
        }
    }
    for f in s.floating_ips.values() {
        let owner = s
            .load_balancers
            .values()
            .find(|lb| f.port_id.as_deref() == Some(lb.vip_port_id.as_str()))
            .map_or_else(|| f.description.clone(), |lb| lb.name.clone());
        names.add(f.id.clone(), format!("<fip:{owner}>"));
        names.add(
            f.floating_ip_address.clone(),
            format!("<fip address of {owner}>"),
        );
    }
    let mut flat = Flat::new();
    let mut put = |key: String, value: String| {
        flat.insert(key, value);
    };
    for lb in s.load_balancers.values() {
        // Not `busy_until`: when it settles is the double's clock.
        put(
            format!("lb/{}", lb.name),
            format!(
                "description={:?} vip={} port={} subnet={} network={} vip_port_given={} \
                 tags={:?} provider={} status={}",
                lb.description,
                lb.vip_address,
                lb.vip_port_id,
                lb.vip_subnet_id,
                lb.vip_network_id,
                lb.vip_port_given,
                lb.tags,
                lb.provider,
                lb.provisioning_status
            ),
        );
    }
    for l in s.listeners.values() {
        // Octavia keeps `allowed_cidrs` as a set (occm sends them in a map's order).
        let mut l = l.clone();
        l.allowed_cidrs.sort();
        put(format!("listener/{}", l.name), format!("{l:?}"));
    }
    for p in s.pools.values() {
        put(format!("pool/{}", p.name), format!("{p:?}"));
    }
    for m in s.monitors.values() {
        put(format!("monitor/{}", m.name), format!("{m:?}"));
    }
    for m in s.members.values() {
        let pool = s.pools.get(&m.pool_id).map_or("?", |p| p.name.as_str());
        put(
            format!("member/{pool}/{}:{}", m.address, m.protocol_port),
            format!("{m:?}"),
        );
    }
    for f in s.floating_ips.values() {
        // By the Service its description names, else the load balancer it is on.
        let owner = f
            .description
            .strip_prefix("Floating IP for Kubernetes external service ")
            .and_then(|d| d.split(' ').next())
            .map(str::to_owned)
            .unwrap_or_else(|| names.apply(&f.id));
        put(format!("fip/{owner}"), format!("{f:?}"));
    }
    let mut routes: Vec<String> = s
        .routers
        .values()
        .flat_map(|r| {
            r.routes
                .iter()
                .map(|(cidr, hop)| format!("{cidr} via {hop}"))
        })
        .collect();
    routes.sort();
    put("routes".into(), routes.join(", "));
    for port in s
        .ports
        .values()
        .filter(|p| !p.allowed_address_pairs.is_empty())
    {
        put(
            format!("pairs/{}", port.id),
            format!("{:?}", port.allowed_address_pairs),
        );
    }
    let flat = flat
        .into_iter()
        .map(|(k, v)| (names.apply(&k), names.apply(&v)))
        .collect();
    (flat, names)
}
