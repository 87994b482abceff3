//! What the controllers cost the cloud: `wasm-ccm` (the real binary, every controller,
//! upstream's default periods) with the reference provider against the simulated
//! cloud, which counts the requests it serves by route.
//!
//! 1. **Joining**: `NODES` instances and their Nodes, tainted as kubelet registers them
//!    with `--cloud-provider=external`, all there when the controller manager starts:
//!    the requests (and the time) until every Node is initialized, first with each
//!    Node asked about on its own (upstream's path, `--instances-batch-size 1`), then
//!    batched (the defaults), each on a new cluster.
//! 2. **Steady state**: the same cluster, initialized and Ready, for `WINDOW_SECS`
//!    (default 330 s: one node status pass, every 5 min, and 33 route passes, every
//!    10 s): requests per node per hour, by route.
//!
//! `scripts/build-guests.sh && cargo build --bin wasm-ccm && WASM_CCM_BIN=target/debug/wasm-ccm cargo bench -p wasm-ccm-tests --bench cloud_requests`
//! (`NODES=…`, `WINDOW_SECS=…`; request counts do not depend on the build profile;
//! `EXTRA_FLAGS="--kube-api-qps=200 --feature-gates=…"` adds flags to every controller
//! manager it starts).
//!
//! `CLOUD=aws` runs the AWS provider against moto instead (`source scripts/ensure-moto.sh`
//! first; default 200 instances, named by private DNS name as on EC2, request
//! authentication on with the provider's declared IAM policy). moto does not count
//! requests, so the host's egress counter (`wasm_ccm_egress_requests_total`) does.
//! Upstream's arithmetic for the same cluster is ~12.4 requests per node per hour (12
//! address refreshes per node, 360 route listings).
//!
//! `CLOUD=openstack` runs the OpenStack provider against the real Keystone and the
//! OpenStack double (`source scripts/ensure-keystone.sh` first; default 200 servers,
//! deploy/openstack's policy, a router for routes), counting the requests the double
//! served by path and the host's Keystone logins. Both phases run in a project holding
//! the cluster's servers only, then in one 10 times the cluster (9 servers outside the
//! cluster for each Node; `PROJECTS=1,10` sets the multiples), and a summary prints each
//! project's batched join and steady state. The goals, at `NODES=1000` in either
//! project: at most 50 requests for the Nodes joining (batched), at most 0.5 requests
//! per node per hour steady:
//! `source scripts/ensure-keystone.sh && scripts/build-guests.sh && cargo build --bin wasm-ccm && CLOUD=openstack NODES=1000 WASM_CCM_BIN=target/debug/wasm-ccm cargo bench -p wasm-ccm-tests --bench cloud_requests`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube_double::resources;
use serde_json::json;
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::{Stack, http_get, listening_port, metric};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Requests the simulated cloud served, by route, and forgets them.
fn take_requests(stack: &Stack) -> BTreeMap<String, u64> {
    stack
        .cloud
        .with_state(|s| std::mem::take(&mut s.requests).into_iter().collect())
}

fn print_table(
    title: &str,
    counts: &BTreeMap<String, u64>,
    scale: impl Fn(u64) -> f64,
    unit: &str,
) {
    println!("{title}");
    println!("| cloud request | {unit} |\n| --- | ---: |");
    for (route, n) in counts {
        println!("| {route} | {:.3} |", scale(*n));
    }
    println!("| total | {:.3} |", scale(counts.values().sum()));
}

/// The sum of `wasm_ccm_egress_requests_total` on the controller manager at `port`.
async fn egress_requests(port: u16) -> f64 {
    let text = http_get(port, "/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("wasm_ccm_egress_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `nodes` Nodes were initialized by the controller manager at `port`.
async fn wait_initialized(port: u16, nodes: usize, started: Instant) {
    let synced = "wasm_ccm_node_controller_initial_node_sync_delay_seconds_count";
    loop {
        let text = http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        if metric(&text, synced) as usize >= nodes {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "not every node initialized in 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `EXTRA_FLAGS`, split on spaces: flags given to every controller manager the bench
/// starts (`--kube-api-qps=200`, `--feature-gates=...`).
fn extra_flags() -> Vec<String> {
    std::env::var("EXTRA_FLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// `wasm-ccm` (`WASM_CCM_BIN`, else this build's) for `provider` in `dir` (also the
/// credentials directory), every controller at upstream's default periods.
fn spawn_ccm(
    provider: &str,
    dir: &std::path::Path,
    cloud_config: &std::path::Path,
    kubeconfig: &std::path::Path,
    port: u16,
    extra: &[&str],
) -> tokio::process::Child {
    let bin = wasm_ccm_tests::bench_wasm_ccm_bin();
    let mut command = tokio::process::Command::new(bin);
    wasm_ccm_tests::serve_on(&mut command, port)
        .args(["--cloud-provider", provider, "--leader-elect=false"])
        .args(["--cluster-cidr", "10.0.0.0/8"])
        .arg("--serve-plain-http=true")
        .arg("--providers-dir")
        .arg(dir)
        .arg("--credentials-dir")
        .arg(dir)
        .arg("--cloud-config")
        .arg(cloud_config)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(extra)
        .args(extra_flags())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("start wasm-ccm")
}

/// The two ways of initializing joining Nodes compared: each Node asked about on its
/// own (upstream's path, `--instances-batch-size 1`), then batched (the defaults).
const JOIN_MODES: [(&str, &[&str]); 2] = [
    (
        "per node (--instances-batch-size 1)",
        &["--instances-batch-size", "1"],
    ),
    ("batched (defaults)", &[]),
];

fn print_join_header(what: &str, nodes: usize) {
    println!("{what}, {nodes} nodes joining at once");
    println!("| initialization | cloud requests | all initialized after |\n| --- | ---: | ---: |");
}

fn tainted_node(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                             "value": "true", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// The same phases for the AWS provider against moto, counted at the host.
async fn aws(nodes: usize, window: Duration) {
    use wasm_ccm_tests::moto::{Moto, World};
    let mut moto = Moto::start().await;
    let world = World::create(&mut moto, "bench").await;
    let dir = wasm_ccm_tests::TempDir::new("bench-aws");
    std::fs::copy(
        wasm_ccm_tests::guest("aws_provider"),
        dir.path().join("aws.wasm"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("aws")).unwrap();
    std::fs::write(dir.path().join("aws/id"), &world.provider.id).unwrap();
    std::fs::write(dir.path().join("aws/secret"), &world.provider.secret).unwrap();
    std::fs::write(
        dir.path().join("aws.yaml"),
        World::policy(
            &moto,
            "accessKeyIdFile: aws/id, secretAccessKeyFile: aws/secret",
        ),
    )
    .unwrap();
    let cloud_config = dir.path().join("cloud.conf");
    std::fs::write(&cloud_config, world.cloud_config(&moto)).unwrap();
    let mut names = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let instance = world.launch(&moto, i % world.subnets.len()).await;
        names.push(instance.private_dns_name);
    }
    moto.enable_auth(0).await;
    let node_resource = resources::find("", "v1", "nodes").unwrap();
    print_join_header("aws provider against moto", nodes);
    let mut serving = None;
    for (mode, extra) in JOIN_MODES {
        // The previous mode's controller manager stops first (killed on drop): its
        // periodic passes must not count in this mode's requests.
        drop(serving.take());
        // A new cluster (API server double) with the same instances each time.
        let api = kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("API server double");
        for name in &names {
            api.store()
                .create(node_resource, "", tainted_node(name))
                .unwrap();
        }
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();
        let port = listening_port();
        let started = Instant::now();
        let ccm = spawn_ccm("aws", dir.path(), &cloud_config, &kubeconfig, port, extra);
        wait_initialized(port, nodes, started).await;
        let joined_in = started.elapsed();
        let joining = egress_requests(port).await;
        println!(
            "| {mode} | {joining:.0} | {:.1} s |",
            joined_in.as_secs_f64()
        );
        serving = Some((api, ccm, port, joining));
    }
    let (_api, _ccm, port, joining) = serving.expect("two join modes");
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed().as_secs_f64();
    let steady = egress_requests(port).await - joining;
    println!(
        "\nsteady state, {elapsed:.0} s window, default periods: {steady:.0} AWS requests, \
         {:.3} per node per hour",
        steady * 3600.0 / elapsed / nodes as f64
    );
}

/// Requests the OpenStack double served, by method and path with IDs folded, and
/// forgets them.
fn take_openstack_requests(cloud: &openstack_double::OpenStackDouble) -> BTreeMap<String, u64> {
    let lines = cloud.with_state(|s| std::mem::take(&mut s.requests));
    let mut counts = BTreeMap::new();
    for line in lines {
        let folded: Vec<&str> = line
            .split('/')
            .map(|part| {
                if part.starts_with("0a5e") {
                    "{id}"
                } else {
                    part
                }
            })
            .collect();
        *counts.entry(folded.join("/")).or_insert(0) += 1;
    }
    counts
}

/// The project sizes the OpenStack phases run in, as multiples of the cluster
/// (`PROJECTS`, default `1,10`), smallest first (servers are only added): 1 is a
/// project holding the cluster's servers only, 10 one holding 9 more servers outside
/// the cluster for each of the cluster's.
fn project_multiples() -> Vec<usize> {
    let text = std::env::var("PROJECTS").unwrap_or_else(|_| "1,10".into());
    let mut multiples: Vec<usize> = text
        .split(',')
        .filter_map(|m| m.trim().parse().ok())
        .filter(|m| *m >= 1)
        .collect();
    assert!(
        !multiples.is_empty(),
        "PROJECTS lists no multiple: `{text}`"
    );
    multiples.sort_unstable();
    multiples.dedup();
    multiples
}

/// What one project's phases cost, for the summary.
struct ProjectCost {
    /// Servers in the project.
    servers: usize,
    /// Requests until every Node joining at once was initialized, batched.
    joining: u64,
    /// Steady state requests per node per hour.
    steady: f64,
}

/// The same phases for the OpenStack provider against the real Keystone and the
/// OpenStack double (deploy/openstack's policy: an application credential), counted at
/// the double; Keystone logins from `wasm_ccm_credential_logins_total`. They run once
/// per project size ([`project_multiples`]): the cluster's servers alone, then beside
/// servers outside the cluster (`other-…`, on a network of their own), all made at
/// least a day before (a steady project: none changed lately), and a summary compares
/// them.
async fn openstack(nodes: usize, window: Duration) {
    use openstack_double::state::NewServer;
    // Services cache token validations (keystonemiddleware: 5 min).
    let world = wasm_ccm_tests::openstack::OpenStackWorld::start(openstack_double::Settings {
        token_cache: Duration::from_secs(300),
    })
    .await;
    let (keystone, cloud) = (&world.keystone, &world.cloud);
    let router = cloud.with_state(|s| {
        for i in 0..nodes {
            s.add_server(NewServer::named(
                &format!("node-{i:04}"),
                &format!("10.0.{}.{}", i / 250, i % 250 + 2),
            ));
        }
        s.router_id()
    });
    let dir = wasm_ccm_tests::TempDir::new("bench-openstack");
    std::fs::copy(
        wasm_ccm_tests::guest("openstack_provider"),
        dir.path().join("openstack.wasm"),
    )
    .unwrap();
    world.install_documented_policy(dir.path());
    let cloud_config = dir.path().join("cloud.conf");
    std::fs::write(
        &cloud_config,
        format!(
            "[Global]\nauth-url = {}/v3\nregion = RegionOne\n[Route]\nrouter-id = {router}\n",
            keystone.url()
        ),
    )
    .unwrap();
    let mut costs = Vec::new();
    let mut others = 0;
    for multiple in project_multiples() {
        let servers = cloud.with_state(|s| {
            for j in others..nodes * (multiple - 1) {
                let mut other = NewServer::named(
                    &format!("other-{j:05}"),
                    &format!("172.16.{}.{}", j / 250 % 256, j % 250 + 2),
                );
                other.interfaces[0].0 = "project".into();
                s.add_server(other);
            }
            s.age_servers(Duration::from_secs(86_400));
            s.servers.len()
        });
        others = others.max(nodes * (multiple - 1));
        let project = format!("a project of {servers} servers ({multiple}x the cluster)");
        let cost =
            openstack_project(&world, dir.path(), &cloud_config, nodes, window, &project).await;
        costs.push(cost);
        println!();
    }
    print_project_costs(nodes, &costs);
}

/// The summary of [`openstack`]: each project's batched join and steady state.
fn print_project_costs(nodes: usize, costs: &[ProjectCost]) {
    println!(
        "openstack provider, {nodes} nodes, by project size (goals at 1,000 nodes: at most \
         50 requests for the nodes joining, at most 0.5 per node per hour steady)"
    );
    println!(
        "| servers in the project | joining, batched: cloud requests | \
         steady state: requests per node per hour |\n| ---: | ---: | ---: |"
    );
    for cost in costs {
        println!(
            "| {} | {} | {:.3} |",
            cost.servers, cost.joining, cost.steady
        );
    }
}

/// Both join modes then the steady state, in the project `world` holds now.
async fn openstack_project(
    world: &wasm_ccm_tests::openstack::OpenStackWorld,
    dir: &std::path::Path,
    cloud_config: &std::path::Path,
    nodes: usize,
    window: Duration,
    project: &str,
) -> ProjectCost {
    let cloud = &world.cloud;
    let servers = cloud.with_state(|s| s.servers.len());
    let node_resource = resources::find("", "v1", "nodes").unwrap();
    let logins = |text: &str| {
        metric(
            text,
            r#"wasm_ccm_credential_logins_total{provider="openstack",kind="keystone",result="success"}"#,
        )
    };
    print_join_header(
        &format!("openstack provider against Keystone and the OpenStack double, {project}"),
        nodes,
    );
    let mut serving = None;
    let mut last_total = 0;
    for (mode, extra) in JOIN_MODES {
        // The previous mode's controller manager stops first (killed on drop): its
        // periodic passes must not count in this mode's requests.
        drop(serving.take());
        let api = kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("API server double");
        for i in 0..nodes {
            api.store()
                .create(node_resource, "", tainted_node(&format!("node-{i:04}")))
                .unwrap();
        }
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();
        take_openstack_requests(cloud);
        let port = listening_port();
        let started = Instant::now();
        let ccm = spawn_ccm("openstack", dir, cloud_config, &kubeconfig, port, extra);
        wait_initialized(port, nodes, started).await;
        let joined_in = started.elapsed();
        let joining = take_openstack_requests(cloud);
        let text = http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        let total = joining.values().sum::<u64>();
        last_total = total;
        println!(
            "| {mode} | {total} ({}; Keystone logins: {}) | {:.1} s |",
            joining
                .iter()
                .map(|(r, n)| format!("{r}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            logins(&text),
            joined_in.as_secs_f64()
        );
        serving = Some((api, ccm, port));
    }
    let (_api, _ccm, port) = serving.expect("two join modes");
    let before = logins(
        &http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default(),
    );
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed().as_secs_f64();
    let steady = take_openstack_requests(cloud);
    let after = logins(
        &http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default(),
    );
    println!();
    let per_node_hour = |n: u64| n as f64 * 3600.0 / elapsed / nodes as f64;
    print_table(
        &format!(
            "steady state, {nodes} initialized Ready nodes, {project}, {elapsed:.0} s window, \
             default periods (Keystone logins in the window: {}; tokens live 1 h)",
            after - before
        ),
        &steady,
        per_node_hour,
        "per node per hour",
    );
    ProjectCost {
        servers,
        // The last join mode is the batched one (the defaults).
        joining: last_total,
        steady: per_node_hour(steady.values().sum()),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasm_ccm_tests::print_bench_heading("cloud_requests");
    if std::env::var("CLOUD").as_deref() == Ok("openstack") {
        let nodes = env_number("NODES", 200) as usize;
        let window = Duration::from_secs(env_number("WINDOW_SECS", 330));
        return openstack(nodes, window).await;
    }
    if std::env::var("CLOUD").as_deref() == Ok("aws") {
        let nodes = env_number("NODES", 200) as usize;
        let window = Duration::from_secs(env_number("WINDOW_SECS", 330));
        return aws(nodes, window).await;
    }
    let nodes = env_number("NODES", 1000) as usize;
    let window = Duration::from_secs(env_number("WINDOW_SECS", 330));
    let node_resource = resources::find("", "v1", "nodes").unwrap();
    print_join_header("reference provider against the simulated cloud", nodes);
    let mut serving = None;
    for (mode, extra) in JOIN_MODES {
        // The previous mode's controller manager stops first (killed on drop): its
        // periodic passes must not count in this mode's requests.
        drop(serving.take());
        let stack = Stack::start().await;
        for i in 0..nodes {
            let name = format!("join-{i:04}");
            stack
                .cloud
                .with_state(|s| s.create_instance(NewInstance::named(&name)));
            stack
                .api
                .store()
                .create(node_resource, "", tainted_node(&name))
                .unwrap();
        }
        take_requests(&stack);
        let port = listening_port();
        let started = Instant::now();
        let ccm = spawn_ccm(
            &stack.provider,
            stack.dir.dir.path(),
            &stack.cloud_config,
            &stack.kubeconfig,
            port,
            extra,
        );
        wait_initialized(port, nodes, started).await;
        let joined_in = started.elapsed();
        let joining = take_requests(&stack);
        println!(
            "| {mode} | {} ({}) | {:.1} s |",
            joining.values().sum::<u64>(),
            joining
                .iter()
                .map(|(route, n)| format!("{route}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            joined_in.as_secs_f64()
        );
        serving = Some((stack, ccm));
    }
    let (stack, _ccm) = serving.expect("two join modes");

    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed().as_secs_f64();
    let steady = take_requests(&stack);
    println!();
    print_table(
        &format!(
            "steady state, {nodes} initialized Ready nodes, {elapsed:.0} s window, default periods"
        ),
        &steady,
        |n| n as f64 * 3600.0 / elapsed / nodes as f64,
        "per node per hour",
    );
}
