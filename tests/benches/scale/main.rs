//! `wasm-ccm` on a real control plane at scale: kube-apiserver and etcd, kwok keeping
//! `NODES` fake Nodes alive as kubelets keep real ones (a Lease of `LEASE_SECS`, 40,
//! renewed every quarter of it, and kwok's status heartbeat every 10 minutes, where
//! kubelet's default is 5), and
//! kube-controller-manager (its grace period five renewals, upstream's 50 s at 40) running its own node
//! lifecycle and IPAM controllers, as in a cluster; `wasm-ccm` with the reference
//! provider against the simulated cloud, installed from deploy/ and running with its
//! ServiceAccount's token. With `CLOUD=aws` the instances are moto's and wasm-ccm runs
//! the AWS provider (its declared IAM policy, request authentication on); then
//! cloud-provider-aws (`scripts/ensure-upstream-ccm.sh aws-ccm`, `$AWS_CCM`) runs the
//! same phases on the same control plane and instances, as its own kube-system
//! ServiceAccount, after wasm-ccm is stopped, every Node made again (as kubelets
//! register them) and the routes removed, and a last table puts the two side by side
//! (`UPSTREAM=0` leaves it out). Each process has its own identity, so API Priority and
//! Fairness classifies it as in a cluster (none is `system:masters`, which is exempt
//! and would never see a 429): wasm-ccm a kube-system ServiceAccount, the controller
//! manager `system:kube-controller-manager`, kwok a member of `system:nodes`.
//!
//! Three phases, each with a table:
//! 1. **Joining**: the `NODES` Nodes exist, tainted as kubelet registers them with
//!    `--cloud-provider=external`, Ready and with their pod CIDRs, when wasm-ccm
//!    starts: the time until every Node is initialized (its routes are made meanwhile).
//! 2. **Steady state** for `WINDOW_SECS` (300).
//! 3. **Churn** of `CHURN` percent of the Nodes a minute (1) for `WINDOW_SECS`: each
//!    minute that many instances are terminated and their Nodes' heartbeats stop (kwok
//!    lets them go; kube-controller-manager marks them `Unknown`, wasm-ccm deletes
//!    them), and as many instances and Nodes join.
//!
//! For each phase: API requests per minute by verb and resource and the 429s wasm-ccm
//! received (from the server's audit log), every user's request count, the API
//! server's APF rejections, the cloud requests (the simulated cloud's count by route,
//! moto's by action),
//! and each process's resident set and CPU seconds per minute. Then, with `SERVICES`
//! (0) above zero, that many `LoadBalancer` Services and the resident set they add
//! (when wasm-ccm is the only controller manager measured).
//!
//! `source scripts/ensure-scale-peers.sh && source scripts/ensure-kubectl.sh && scripts/build-guests.sh && cargo build --release --bin wasm-ccm && WASM_CCM_BIN=target/release/wasm-ccm cargo bench -p wasm-ccm-tests --bench scale`
//! (`NODES`, `WINDOW_SECS`, `CHURN`, `LEASE_SECS`, `SERVICES`, `CLOUD`, `UPSTREAM`;
//! `EXTRA_FLAGS` adds flags to each controller manager measured, e.g.
//! `--kube-api-qps=200 --kube-api-burst=400`). Without kwok or
//! kube-controller-manager built it says how to build them and stops.

mod cloud;
mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_apiserver_peer::{KubeApiServer, Settings};
use serde_json::json;
use wasm_ccm_tests::kube_apiserver::{install_deploy, kubectl_admin};
use wasm_ccm_tests::{listening_port, process_usage};

use cloud::{CLUSTER, Cloud};
use report::{Ccm, KCM_USER, KWOK_USER, Peer, PhaseCost, log_tail, report, snapshot};

/// wasm-ccm as deploy/ runs it.
const WASM_CCM: Ccm = Ccm {
    name: "wasm-ccm",
    user: "system:serviceaccount:kube-system:wasm-ccm",
};
/// cloud-provider-aws as its chart runs it: its own kube-system ServiceAccount.
const AWS_CCM: Ccm = Ccm {
    name: "cloud-provider-aws",
    user: "system:serviceaccount:kube-system:cloud-controller-manager",
};
/// The label kwok manages Nodes by (a label, not an annotation: the API server's watch
/// then tells kwok when a Node loses it, and kwok lets it go).
const KWOK_LABEL: &str = "kwok.x-k8s.io/node";
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Every request's metadata but kwok's Lease renewals (at 5,000 Nodes and a 40 s lease
/// that is 500 a second, which no phase reports).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  users: [kwok]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
";

/// How long kwok and the controller manager may take to make every Node Ready with a
/// pod CIDR.
const READY_SECS: u64 = 900;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `$VARIABLE`, when it names an existing file.
fn peer(variable: &str) -> Option<PathBuf> {
    std::env::var_os(variable)
        .map(PathBuf::from)
        .filter(|p| p.exists())
}

/// A Node as kubelet registers it with `--cloud-provider=external`, managed by kwok.
fn kwok_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name,
                     "labels": {"kubernetes.io/hostname": name, KWOK_LABEL: "fake"}},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]}
    }))
    .expect("a Node")
}

/// Registers a Node for each of `names`.
async fn register(nodes: &Api<Node>, names: &[String]) {
    stream::iter(names)
        .for_each_concurrent(32, |name| async move {
            nodes
                .create(&PostParams::default(), &kwok_node(name))
                .await
                .unwrap_or_else(|e| panic!("create Node {name}: {e}"));
        })
        .await;
}

/// The Nodes by name, and how many of them are initialized (no longer tainted).
async fn node_names(nodes: &Api<Node>) -> Option<(Vec<String>, usize)> {
    let list = nodes.list(&Default::default()).await.ok()?;
    let initialized = list
        .items
        .iter()
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED))
        })
        .count();
    let names = list
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    Some((names, initialized))
}

/// Waits until `condition` holds, for at most `limit`; whether it did.
async fn eventually<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until every Node is Ready (kwok's first stage) and has its pod CIDR (the
/// controller manager's IPAM, at its own client limit): as in a cluster whose kubelets
/// and controller manager were up before the cloud controller manager, whose routes
/// are then all made while the Nodes join.
async fn wait_ready(nodes: &Api<Node>, count: usize, dir: &Path) {
    let ready_secs = env_number("READY_SECS", READY_SECS);
    let ready = eventually(Duration::from_secs(ready_secs), || async {
        nodes.list(&Default::default()).await.is_ok_and(|l| {
            l.items.len() == count
                && l.items.iter().all(|n| {
                    let ready = n
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                    ready && n.spec.as_ref().is_some_and(|s| s.pod_cidr.is_some())
                })
        })
    })
    .await;
    assert!(
        ready,
        "not every Node Ready with a pod CIDR in {ready_secs} s; kwok's log ends:\n{}",
        log_tail(&dir.join("kwok.log"))
    );
}

/// Deletes every Node and its Lease, and the leader Lease (the controller manager
/// measured and kwok are stopped), removes the routes to pod CIDRs, and registers the Nodes of `names` again,
/// as kubelets re-registering: the next controller manager starts where the first did.
async fn register_again(
    nodes: &Api<Node>,
    admin: &kube::Client,
    names: &[String],
    cloud: &mut Cloud,
) {
    let (present, _) = node_names(nodes).await.expect("the Nodes");
    stream::iter(&present)
        .for_each_concurrent(32, |name| async move {
            let _ = nodes.delete(name, &DeleteParams::default()).await;
        })
        .await;
    let gone = eventually(Duration::from_secs(600), || async {
        node_names(nodes).await.is_some_and(|(n, _)| n.is_empty())
    })
    .await;
    assert!(gone, "the Nodes were not deleted in 10 minutes");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    leases
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .expect("the Nodes' Leases deleted");
    // The leader Lease the stopped controller manager held: the next one would wait a
    // lease duration for it, which its joining would count.
    let leader: Api<Lease> = Api::namespaced(admin.clone(), "kube-system");
    match leader
        .delete("cloud-controller-manager", &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("delete the leader Lease: {e}"),
    }
    cloud.clear_routes().await;
    register(nodes, names).await;
}

/// kwok keeping the Nodes labelled [`KWOK_LABEL`] alive with a Lease of `lease` seconds.
fn spawn_kwok(kwok: &Path, config: &Path, stages: &Path, lease: u64, dir: &Path) -> Peer {
    let port = loopback_port::reserve().expect("a port for kwok");
    Peer::spawn(
        "kwok",
        tokio::process::Command::new(kwok)
            .arg("--kubeconfig")
            .arg(config)
            .arg("--config")
            .arg(stages)
            .arg(format!(
                "--manage-nodes-with-label-selector={KWOK_LABEL}=fake"
            ))
            .arg(format!("--node-lease-duration-seconds={lease}"))
            .arg(format!("--server-address=127.0.0.1:{port}")),
        &dir.join("kwok.log"),
    )
}

/// A kubeconfig with kube-system ServiceAccount `account`'s token, valid for longer
/// than the longest run (a 5,000-Node run with Services).
async fn service_account_kubeconfig(server: &KubeApiServer, dir: &Path, account: &str) -> PathBuf {
    let path = dir.join(format!("{account}.kubeconfig"));
    let token = server.token_for("kube-system", account, 4 * 3600).await;
    server
        .write_kubeconfig(&path, Some(&token))
        .expect("a kubeconfig");
    path
}

/// What the bench runs each controller manager with.
struct Run<'a> {
    server: &'a KubeApiServer,
    admin: &'a kube::Client,
    nodes: &'a Api<Node>,
    dir: &'a Path,
    /// The other processes whose usage each phase reports.
    others: Vec<(&'static str, u32)>,
    window: Duration,
    churn: usize,
    services: usize,
    extra: &'a [String],
}

/// Starts `ccm` and runs the phases; what each phase cost it.
async fn phases(
    run: &Run<'_>,
    ccm: Ccm,
    command: &mut tokio::process::Command,
    cloud: &mut Cloud,
    names: &mut Vec<String>,
    churned: &mut usize,
) -> Vec<(String, PhaseCost)> {
    let (server, admin, nodes, dir) = (run.server, run.admin, run.nodes, run.dir);
    let count = names.len();
    let log = dir.join(format!("{}.log", ccm.name));
    cloud.take_requests().await;
    let mut process = Peer::spawn(ccm.name, command, &log);
    let processes: Vec<(&'static str, u32)> = std::iter::once((ccm.name, process.pid()))
        .chain(run.others.iter().copied())
        .collect();
    let mut costs = Vec::new();
    let start = snapshot(server, admin, &processes).await;
    while node_names(nodes).await.is_none_or(|(_, done)| done < count) {
        if let Some(status) = process.exited() {
            panic!(
                "{} exited ({status}); its log ends:\n{}",
                ccm.name,
                log_tail(&log)
            );
        }
        assert!(
            start.at.elapsed() < Duration::from_secs(3600),
            "not every Node initialized in an hour; {}'s log ends:\n{}",
            ccm.name,
            log_tail(&log)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let joined_in = start.at.elapsed();
    let after_join = snapshot(server, admin, &processes).await;
    println!(
        "\n{} {}: all {count} Nodes initialized {:.1} s after it started",
        ccm.name,
        run.extra.join(" "),
        joined_in.as_secs_f64()
    );
    let requests = cloud.take_requests().await;
    let phase = (&start, &after_join);
    let cost = report("joining", ccm, server, phase, &requests, count);
    costs.push(("joining".to_owned(), cost));

    tokio::time::sleep(run.window).await;
    let after_steady = snapshot(server, admin, &processes).await;
    let requests = cloud.take_requests().await;
    let phase = (&after_join, &after_steady);
    let cost = report("steady state", ccm, server, phase, &requests, count);
    costs.push(("steady state".to_owned(), cost));

    // By wasm-ccm's kinds (its binary, the compiled provider, guest memories): not
    // another process's.
    if ccm.user == WASM_CCM.user {
        println!("\nwasm-ccm's resident memory by kind after the steady state:\n");
        println!("| kind | MiB |\n| --- | ---: |");
        for (kind, kib) in wasm_ccm_tests::rss_breakdown(process.pid()) {
            println!("| {kind} | {:.1} |", kib as f64 / 1024.0);
        }
    }

    // Churn: each minute, `churn` % of the Nodes go (instance terminated, heartbeats
    // stopped) and as many join.
    let per_minute = (count * run.churn / 100).max(1);
    let (mut gone, mut joining) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while started.elapsed() < run.window {
        let minute = Instant::now();
        for _ in 0..per_minute {
            let name = names.remove(0);
            cloud.terminate(&name).await;
            nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {KWOK_LABEL: null}}})),
                )
                .await
                .unwrap_or_else(|e| panic!("stop {name}'s heartbeats: {e}"));
            gone.push(name);
        }
        let new = cloud.launch("churn", *churned, per_minute).await;
        *churned += per_minute;
        register(nodes, &new).await;
        joining.extend(new.iter().cloned());
        names.extend(new);
        let rest = Duration::from_secs(60).saturating_sub(minute.elapsed());
        tokio::time::sleep(rest.min(run.window.saturating_sub(started.elapsed()))).await;
    }
    let after_churn = snapshot(server, admin, &processes).await;
    let requests = cloud.take_requests().await;
    let churn_phase = format!(
        "churn of {per_minute} Nodes a minute ({} %): {} went and {} joined",
        run.churn,
        gone.len(),
        joining.len()
    );
    let phase = (&after_steady, &after_churn);
    let cost = report(&churn_phase, ccm, server, phase, &requests, count);
    costs.push(("churn".to_owned(), cost));
    let settled = Instant::now();
    let done = eventually(Duration::from_secs(600), || async {
        node_names(nodes)
            .await
            .is_some_and(|(present, initialized)| {
                let present: std::collections::HashSet<&str> =
                    present.iter().map(String::as_str).collect();
                gone.iter().all(|n| !present.contains(n.as_str()))
                    && present.len() == names.len()
                    && initialized == names.len()
            })
    })
    .await;
    println!(
        "after the churn: {} Nodes gone {} and {} joined {} ({:.1} s after its last minute)",
        gone.len(),
        if done { "deleted" } else { "NOT all deleted" },
        joining.len(),
        if done {
            "initialized"
        } else {
            "or not initialized"
        },
        settled.elapsed().as_secs_f64()
    );

    if run.services > 0 {
        load_balancers(admin, run.services, process.pid()).await;
    }
    process.stop().await;
    costs
}

/// Creates `services` `LoadBalancer` Services; prints the time until all are served
/// and the resident set they add to the process `pid`.
async fn load_balancers(admin: &kube::Client, services: usize, pid: u32) {
    let before = process_usage(pid).unwrap_or_default();
    let api: Api<Service> = Api::namespaced(admin.clone(), "default");
    stream::iter(0..services)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("lb-{i:05}")},
                    "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
                }))
                .expect("a Service");
                api.create(&PostParams::default(), &svc)
                    .await
                    .unwrap_or_else(|e| panic!("create Service lb-{i:05}: {e}"));
            }
        })
        .await;
    let made = Instant::now();
    let served = eventually(Duration::from_secs(3600), || async {
        api.list(&Default::default()).await.is_ok_and(|l| {
            let balanced = |s: &&Service| {
                s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
            };
            l.items.iter().filter(balanced).all(|s| {
                s.status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty())
            })
        })
    })
    .await;
    let after = process_usage(pid).unwrap_or_default();
    println!(
        "\n{services} LoadBalancer Services {} in {:.1} s; wasm-ccm's RSS {:.1} -> {:.1} MiB \
         ({:.1} KiB a Service)",
        if served { "served" } else { "NOT all served" },
        made.elapsed().as_secs_f64(),
        before.rss_kib as f64 / 1024.0,
        after.rss_kib as f64 / 1024.0,
        (after.rss_kib as f64 - before.rss_kib as f64) / services as f64
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasm_ccm_tests::print_bench_heading("scale");
    let (Some(kwok_bin), Some(kcm), Some(stages)) = (
        peer("KWOK"),
        peer("KUBE_CONTROLLER_MANAGER"),
        peer("KWOK_STAGES"),
    ) else {
        println!(
            "skipped: kwok and kube-controller-manager are not built \
             (`source scripts/ensure-scale-peers.sh` builds them and sets $KWOK, \
             $KWOK_STAGES and $KUBE_CONTROLLER_MANAGER)"
        );
        return;
    };
    let count = env_number("NODES", 1000) as usize;
    let lease = env_number("LEASE_SECS", 40);
    let kind = std::env::var("CLOUD").unwrap_or_else(|_| "sim".into());
    let upstream = kind == "aws" && std::env::var("UPSTREAM").as_deref() != Ok("0");
    let extra: Vec<String> = std::env::var("EXTRA_FLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();

    let server = KubeApiServer::start_with(Settings {
        audit_policy: Some(AUDIT_POLICY.into()),
        ..Settings::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let admin = server.client().await;
    install_deploy(&server);
    // kube-controller-manager runs every controller with its own identity here
    // (`--use-service-account-credentials=false`), and kwok writes any Node: both may
    // do anything, as their deployments' roles let them; so may cloud-provider-aws's
    // ServiceAccount.
    kubectl_admin(
        &server,
        &[
            "create",
            "serviceaccount",
            "cloud-controller-manager",
            "-n",
            "kube-system",
        ],
    );
    for (name, subject) in [
        ("kcm", format!("--user={KCM_USER}")),
        ("kwok", format!("--user={KWOK_USER}")),
        (
            "aws-ccm",
            "--serviceaccount=kube-system:cloud-controller-manager".to_owned(),
        ),
    ] {
        kubectl_admin(
            &server,
            &[
                "create",
                "clusterrolebinding",
                &format!("scale-{name}"),
                "--clusterrole=cluster-admin",
                &subject,
            ],
        );
    }
    let mut cloud = Cloud::start(&kind).await;
    let work = wasm_ccm_tests::TempDir::new("scale");
    let dir = work.path();
    let wasm_ccm_config = service_account_kubeconfig(&server, dir, "wasm-ccm").await;
    let aws_ccm_config = service_account_kubeconfig(&server, dir, "cloud-controller-manager").await;
    let (kcm_config, kwok_config) = (dir.join("kcm.kubeconfig"), dir.join("kwok.kubeconfig"));
    server
        .write_user_kubeconfig(&kcm_config, KCM_USER, &[])
        .expect("a kubeconfig");
    server
        .write_user_kubeconfig(&kwok_config, KWOK_USER, &["system:nodes"])
        .expect("a kubeconfig");

    let nodes: Api<Node> = Api::all(admin.clone());
    let made = Instant::now();
    let mut names = cloud.launch("node", 0, count).await;
    cloud.lock().await;
    register(&nodes, &names).await;
    println!(
        "{count} Nodes and instances made in {:.1} s",
        made.elapsed().as_secs_f64()
    );

    let mut kwok = spawn_kwok(&kwok_bin, &kwok_config, &stages, lease, dir);
    let kcm = Peer::spawn(
        "kube-controller-manager",
        tokio::process::Command::new(kcm)
            .arg("--kubeconfig")
            .arg(&kcm_config)
            .args([
                "--controllers=node-lifecycle-controller,node-ipam-controller",
                "--allocate-node-cidrs=true",
                "--node-cidr-mask-size=24",
                "--cloud-provider=external",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--secure-port=0",
            ])
            .arg(format!("--cluster-cidr={}", cloud.cluster_cidr()))
            // Upstream's 50 s for kubelet's 40 s lease (renewed every 10 s): five
            // renewals, kept for a longer `LEASE_SECS`.
            .arg(format!(
                "--node-monitor-grace-period={}s",
                (lease * 5 / 4).max(50)
            )),
        &dir.join("kube-controller-manager.log"),
    );
    wait_ready(&nodes, count, dir).await;

    let (server_pid, etcd_pid) = server.pids();
    let mut run = Run {
        server: &server,
        admin: &admin,
        nodes: &nodes,
        dir,
        others: vec![
            ("kube-apiserver", server_pid),
            ("etcd", etcd_pid),
            ("kube-controller-manager", kcm.pid()),
            ("kwok", kwok.pid()),
        ],
        window: Duration::from_secs(env_number("WINDOW_SECS", 300)),
        churn: env_number("CHURN", 1) as usize,
        // After the only controller manager measured: the next would find them.
        services: if upstream {
            0
        } else {
            env_number("SERVICES", 0) as usize
        },
        extra: &extra,
    };
    let mut churned = 0;
    let port = listening_port();
    let mut command = tokio::process::Command::new(wasm_ccm_tests::bench_wasm_ccm_bin());
    wasm_ccm_tests::serve_on(&mut command, port)
        .args(["--cloud-provider", cloud.provider()])
        .args(["--cluster-cidr", cloud.cluster_cidr()])
        .arg(format!("--cluster-name={CLUSTER}"))
        .arg("--serve-plain-http=true")
        .arg("--providers-dir")
        .arg(cloud.providers_dir())
        .arg("--credentials-dir")
        .arg(cloud.providers_dir())
        .arg("--cloud-config")
        .arg(cloud.cloud_config())
        .arg("--kubeconfig")
        .arg(&wasm_ccm_config)
        .args(&extra)
        .env("POD_NAME", "wasm-ccm-0")
        .env("POD_NAMESPACE", "kube-system")
        .env("RUST_LOG", "warn");
    let ours = phases(
        &run,
        WASM_CCM,
        &mut command,
        &mut cloud,
        &mut names,
        &mut churned,
    )
    .await;
    let mut sides = vec![(WASM_CCM, ours)];

    if upstream {
        // kwok forgets the Nodes it kept (their Leases go with them) and starts afresh.
        kwok.stop().await;
        register_again(&nodes, &admin, &names, &mut cloud).await;
        kwok = spawn_kwok(&kwok_bin, &kwok_config, &stages, lease, dir);
        run.others[3] = ("kwok", kwok.pid());
        wait_ready(&nodes, names.len(), dir).await;
        let mut command = tokio::process::Command::new(wasm_ccm_tests::upstream::aws_ccm());
        command
            .args([
                "--cloud-provider=aws",
                "--controllers=cloud-node,cloud-node-lifecycle,service,route",
                "--configure-cloud-routes=true",
                "--leader-elect=true",
                "--use-service-account-credentials=false",
                "--secure-port=0",
            ])
            .arg(format!("--cluster-cidr={}", cloud.cluster_cidr()))
            .arg(format!("--cluster-name={CLUSTER}"))
            .arg(format!("--kubeconfig={}", aws_ccm_config.display()))
            .args(&extra);
        cloud.upstream_aws(&mut command);
        let theirs = phases(
            &run,
            AWS_CCM,
            &mut command,
            &mut cloud,
            &mut names,
            &mut churned,
        )
        .await;
        sides.push((AWS_CCM, theirs));
    }
    report::comparison(&sides, count);
    drop(kcm);
    drop(kwok);
}
