//! `wasm-ccm` on a real control plane at scale: kube-apiserver and etcd, kwok keeping
//! `NODES` fake Nodes alive as kubelets keep real ones (a Lease of `LEASE_SECS`, 40,
//! renewed every quarter of it, and kwok's status heartbeat every 10 minutes, where
//! kubelet's default is 5), and
//! kube-controller-manager (its grace period five renewals, upstream's 50 s at 40) running its own node
//! lifecycle and IPAM controllers, as in a cluster; `wasm-ccm` with the reference
//! provider against the simulated cloud, installed from deploy/ and running with its
//! ServiceAccount's token. Each process has its own identity, so API Priority and
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
//! server's APF rejections, the cloud requests (the simulated cloud's count by route),
//! and each process's resident set and CPU seconds per minute. Then, with `SERVICES`
//! (0) above zero, that many `LoadBalancer` Services and the resident set they add.
//!
//! `source scripts/ensure-scale-peers.sh && source scripts/ensure-kubectl.sh && scripts/build-guests.sh && cargo build --release --bin wasm-ccm && WASM_CCM_BIN=target/release/wasm-ccm cargo bench -p wasm-ccm-tests --bench scale`
//! (`NODES`, `WINDOW_SECS`, `CHURN`, `LEASE_SECS`, `SERVICES`; `EXTRA_FLAGS` adds flags
//! to wasm-ccm, e.g. `--kube-api-qps=200 --kube-api-burst=400`). Without kwok or
//! kube-controller-manager built it says how to build them and stops.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_apiserver_peer::{KubeApiServer, Settings};
use serde_json::json;
use sim_cloud::model::NewInstance;
use wasm_ccm_tests::kube_apiserver::{install_deploy, kubectl_admin};
use wasm_ccm_tests::{ProcessUsage, Stack, http_get, listening_port, metric, process_usage};

/// The identity deploy/ gives wasm-ccm.
const WASM_CCM_USER: &str = "system:serviceaccount:kube-system:wasm-ccm";
const KCM_USER: &str = "system:kube-controller-manager";
const KWOK_USER: &str = "kwok";
/// The label kwok manages Nodes by (a label, not an annotation: the API server's watch
/// then tells kwok when a Node loses it, and kwok lets it go).
const KWOK_LABEL: &str = "kwok.x-k8s.io/node";
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

/// The last 40 lines of a log.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

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
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                             "value": "true", "effect": "NoSchedule"}]}
    }))
    .expect("a Node")
}

/// A process the bench started and reports on; killed when dropped.
struct Peer {
    child: tokio::process::Child,
}

impl Peer {
    fn spawn(name: &'static str, command: &mut tokio::process::Command, log: &Path) -> Self {
        let log = std::fs::File::create(log).expect("a log file");
        // Killed with the bench, however it ends (a timeout's signal included).
        // SAFETY: prctl(2) only, between fork and exec: async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Peer { child }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("a running process")
    }
}

/// What one phase cost, measured between two [`Snapshot`]s.
struct Snapshot {
    at: Instant,
    audited: usize,
    usage: Vec<(&'static str, ProcessUsage)>,
    rejected: f64,
}

async fn snapshot(
    server: &KubeApiServer,
    admin: &kube::Client,
    peers: &[(&'static str, u32)],
) -> Snapshot {
    Snapshot {
        at: Instant::now(),
        audited: server.audit().len(),
        usage: peers
            .iter()
            .map(|(name, pid)| (*name, process_usage(*pid).unwrap_or_default()))
            .collect(),
        rejected: apf_rejected(admin).await,
    }
}

/// The API server's `apiserver_flowcontrol_rejected_requests_total`, summed.
async fn apf_rejected(admin: &kube::Client) -> f64 {
    let text = admin
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .expect("a request"),
        )
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_rejected_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Prints what happened between `from` and `to`.
fn report(
    phase: &str,
    server: &KubeApiServer,
    from: &Snapshot,
    to: &Snapshot,
    cloud: &BTreeMap<String, u64>,
    nodes: usize,
) {
    let minutes = (to.at - from.at).as_secs_f64() / 60.0;
    let audited = server.audit();
    let window = &audited[from.audited.min(audited.len())..to.audited.min(audited.len())];
    println!("\n### {phase} ({:.1} min, {nodes} Nodes)\n", minutes);
    let mut by_user: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut ours: BTreeMap<(String, String), u64> = BTreeMap::new();
    for a in window {
        let user = match a.user.as_str() {
            WASM_CCM_USER => "wasm-ccm",
            KCM_USER => "kube-controller-manager",
            KWOK_USER => "kwok (without Leases)",
            _ => "others (the bench, the API server's own)",
        };
        let entry = by_user.entry(user).or_default();
        entry.0 += 1;
        entry.1 += u64::from(a.code == 429);
        if a.user == WASM_CCM_USER {
            *ours
                .entry((a.verb.clone(), a.resource.clone()))
                .or_default() += 1;
        }
    }
    println!("| wasm-ccm's API requests | count | per minute |\n| --- | ---: | ---: |");
    for ((verb, resource), n) in &ours {
        println!("| {verb} {resource} | {n} | {:.1} |", *n as f64 / minutes);
    }
    let total = ours.values().sum::<u64>();
    println!("| total | {total} | {:.1} |\n", total as f64 / minutes);
    println!("| user | API requests | per minute | 429s |\n| --- | ---: | ---: | ---: |");
    for (user, (n, throttled)) in &by_user {
        println!(
            "| {user} | {n} | {:.1} | {throttled} |",
            *n as f64 / minutes
        );
    }
    println!(
        "\nAPF rejections (every flow): {}; cloud requests: {} ({})\n",
        to.rejected - from.rejected,
        cloud.values().sum::<u64>(),
        cloud
            .iter()
            .map(|(r, n)| format!("{r}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| process | RSS MiB (peak since it started) | CPU s per minute |\n| --- | ---: | ---: |"
    );
    for ((name, before), (_, after)) in from.usage.iter().zip(&to.usage) {
        println!(
            "| {name} | {:.1} ({:.1}) | {:.2} |",
            after.rss_kib as f64 / 1024.0,
            after.peak_rss_kib as f64 / 1024.0,
            (after.cpu_secs - before.cpu_secs) / minutes
        );
    }
}

/// Requests the simulated cloud served, by route, and forgets them.
fn take_cloud_requests(stack: &Stack) -> BTreeMap<String, u64> {
    stack
        .cloud
        .with_state(|s| std::mem::take(&mut s.requests).into_iter().collect())
}

/// How many Nodes wasm-ccm (metrics on `port`) has initialized since it started.
async fn initialized(port: u16) -> usize {
    let text = http_get(port, "/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    metric(
        &text,
        "wasm_ccm_node_controller_initial_node_sync_delay_seconds_count",
    ) as usize
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

/// Creates instance and Node `name` (the instance's ID kept in `ids`).
async fn join(
    stack: &Stack,
    nodes: &Api<Node>,
    ids: &mut HashMap<String, String>,
    names: Vec<String>,
) {
    for name in &names {
        let instance = stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        ids.insert(name.clone(), instance.id);
    }
    stream::iter(names)
        .for_each_concurrent(32, |name| async move {
            nodes
                .create(&PostParams::default(), &kwok_node(&name))
                .await
                .unwrap_or_else(|e| panic!("create Node {name}: {e}"));
        })
        .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasm_ccm_tests::print_bench_heading("scale");
    let (Some(kwok), Some(kcm), Some(stages)) = (
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
    let window = Duration::from_secs(env_number("WINDOW_SECS", 300));
    let churn = env_number("CHURN", 1) as usize;
    let lease = env_number("LEASE_SECS", 40);
    let services = env_number("SERVICES", 0) as usize;
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
    // do anything, as their deployments' roles let them.
    for user in [KCM_USER, KWOK_USER] {
        kubectl_admin(
            &server,
            &[
                "create",
                "clusterrolebinding",
                &format!("scale-{}", user.replace(':', "-")),
                "--clusterrole=cluster-admin",
                &format!("--user={user}"),
            ],
        );
    }
    let mut stack = Stack::start().await;
    let dir = stack.dir.dir.path().to_owned();
    // Valid for longer than the longest run (a 5,000-Node run with Services).
    let token = server.token_for("kube-system", "wasm-ccm", 4 * 3600).await;
    let kubeconfig = dir.join("wasm-ccm.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, Some(&token))
        .expect("a kubeconfig");
    stack.kubeconfig = kubeconfig;
    let (kcm_config, kwok_config) = (dir.join("kcm.kubeconfig"), dir.join("kwok.kubeconfig"));
    server
        .write_user_kubeconfig(&kcm_config, KCM_USER, &[])
        .expect("a kubeconfig");
    server
        .write_user_kubeconfig(&kwok_config, KWOK_USER, &["system:nodes"])
        .expect("a kubeconfig");

    let nodes: Api<Node> = Api::all(admin.clone());
    let mut ids = HashMap::new();
    let made = Instant::now();
    join(
        &stack,
        &nodes,
        &mut ids,
        (0..count).map(|i| format!("node-{i:05}")).collect(),
    )
    .await;
    println!(
        "{count} Nodes and instances made in {:.1} s",
        made.elapsed().as_secs_f64()
    );

    let kwok_port = loopback_port::reserve().expect("a port for kwok");
    let kwok = Peer::spawn(
        "kwok",
        tokio::process::Command::new(kwok)
            .arg("--kubeconfig")
            .arg(&kwok_config)
            .arg("--config")
            .arg(&stages)
            .arg(format!(
                "--manage-nodes-with-label-selector={KWOK_LABEL}=fake"
            ))
            .arg(format!("--node-lease-duration-seconds={lease}"))
            .arg(format!("--server-address=127.0.0.1:{kwok_port}")),
        &dir.join("kwok.log"),
    );
    let kcm = Peer::spawn(
        "kube-controller-manager",
        tokio::process::Command::new(kcm)
            .arg("--kubeconfig")
            .arg(&kcm_config)
            .args([
                "--controllers=node-lifecycle-controller,node-ipam-controller",
                "--allocate-node-cidrs=true",
                "--cluster-cidr=10.0.0.0/8",
                "--node-cidr-mask-size=24",
                "--cloud-provider=external",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--secure-port=0",
            ])
            // Upstream's 50 s for kubelet's 40 s lease (renewed every 10 s): five
            // renewals, kept for a longer `LEASE_SECS`.
            .arg(format!(
                "--node-monitor-grace-period={}s",
                (lease * 5 / 4).max(50)
            )),
        &dir.join("kube-controller-manager.log"),
    );
    // Every Node Ready (kwok's first stage) and given its pod CIDR (the controller
    // manager's IPAM, at its own client limit) before wasm-ccm starts, as in a cluster
    // whose kubelets and controller manager were up before the cloud controller
    // manager: its routes are then all made while the Nodes join.
    let ready_secs = env_number("READY_SECS", READY_SECS);
    let ready = eventually(Duration::from_secs(ready_secs), || async {
        nodes.list(&Default::default()).await.is_ok_and(|l| {
            l.items.iter().all(|n| {
                let ready = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                ready && n.spec.as_ref().is_some_and(|s| s.pod_cidr.is_some())
            })
        })
    })
    .await;
    assert!(
        ready,
        "not every Node Ready with a pod CIDR in {} s; kwok's log ends:\n{}",
        ready_secs,
        log_tail(&dir.join("kwok.log"))
    );

    let port = listening_port();
    let mut command = tokio::process::Command::new(wasm_ccm_tests::bench_wasm_ccm_bin());
    wasm_ccm_tests::serve_on(&mut command, port)
        .args(["--cloud-provider", &stack.provider])
        .args(["--cluster-cidr", "10.0.0.0/8"])
        .arg("--serve-plain-http=true")
        .arg("--providers-dir")
        .arg(&dir)
        .arg("--credentials-dir")
        .arg(&dir)
        .arg("--cloud-config")
        .arg(&stack.cloud_config)
        .arg("--kubeconfig")
        .arg(&stack.kubeconfig)
        .args(&extra)
        .env("POD_NAME", "wasm-ccm-0")
        .env("POD_NAMESPACE", "kube-system")
        .env("RUST_LOG", "warn");
    take_cloud_requests(&stack);
    let (server_pid, etcd_pid) = server.pids();
    let pids = |ccm: &Peer| {
        vec![
            ("wasm-ccm", ccm.pid()),
            ("kube-apiserver", server_pid),
            ("etcd", etcd_pid),
            ("kube-controller-manager", kcm.pid()),
            ("kwok", kwok.pid()),
        ]
    };
    let ccm = Peer::spawn("wasm-ccm", &mut command, &dir.join("wasm-ccm.log"));
    let processes = pids(&ccm);
    let start = snapshot(&server, &admin, &processes).await;
    let joined = eventually(Duration::from_secs(3600), || async {
        initialized(port).await >= count
    })
    .await;
    assert!(
        joined,
        "not every Node initialized in an hour; wasm-ccm's log ends:\n{}",
        log_tail(&dir.join("wasm-ccm.log"))
    );
    let joined_in = start.at.elapsed();
    let after_join = snapshot(&server, &admin, &processes).await;
    println!(
        "\nwasm-ccm {}: all {count} Nodes initialized {:.1} s after it started",
        extra.join(" "),
        joined_in.as_secs_f64()
    );
    report(
        "joining",
        &server,
        &start,
        &after_join,
        &take_cloud_requests(&stack),
        count,
    );

    tokio::time::sleep(window).await;
    let after_steady = snapshot(&server, &admin, &processes).await;
    report(
        "steady state",
        &server,
        &after_join,
        &after_steady,
        &take_cloud_requests(&stack),
        count,
    );

    println!("\nwasm-ccm's resident memory by kind after the steady state:\n");
    println!("| kind | MiB |\n| --- | ---: |");
    for (kind, kib) in wasm_ccm_tests::rss_breakdown(ccm.pid()) {
        println!("| {kind} | {:.1} |", kib as f64 / 1024.0);
    }

    // Churn: each minute, `churn` % of the Nodes go (instance terminated, heartbeats
    // stopped) and as many join.
    let per_minute = (count * churn / 100).max(1);
    let (mut gone, mut joining, mut next) = (Vec::new(), Vec::new(), 0usize);
    let started = Instant::now();
    while started.elapsed() < window {
        let minute = Instant::now();
        for _ in 0..per_minute {
            let name = format!("node-{next:05}");
            next += 1;
            if let Some(id) = ids.remove(&name) {
                stack.cloud.with_state(|s| s.delete_instance(&id));
            }
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
        let names: Vec<String> = (0..per_minute)
            .map(|i| format!("churn-{:05}", joining.len() + i))
            .collect();
        joining.extend(names.iter().cloned());
        join(&stack, &nodes, &mut ids, names).await;
        let rest = Duration::from_secs(60).saturating_sub(minute.elapsed());
        tokio::time::sleep(rest.min(window.saturating_sub(started.elapsed()))).await;
    }
    let after_churn = snapshot(&server, &admin, &processes).await;
    report(
        &format!(
            "churn of {per_minute} Nodes a minute ({churn} %): {} went and {} joined",
            gone.len(),
            joining.len()
        ),
        &server,
        &after_steady,
        &after_churn,
        &take_cloud_requests(&stack),
        count,
    );
    let settled = Instant::now();
    let done = eventually(Duration::from_secs(600), || async {
        let Ok(list) = nodes.list(&Default::default()).await else {
            return false;
        };
        let present: std::collections::HashSet<&str> = list
            .items
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        gone.iter().all(|n| !present.contains(n.as_str()))
            && initialized(port).await >= count + joining.len()
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

    if services > 0 {
        let before = process_usage(ccm.pid()).unwrap_or_default();
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
                l.items
                    .iter()
                    .filter(|s| {
                        s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
                    })
                    .all(|s| {
                        s.status
                            .as_ref()
                            .and_then(|s| s.load_balancer.as_ref())
                            .and_then(|l| l.ingress.as_ref())
                            .is_some_and(|i| !i.is_empty())
                    })
            })
        })
        .await;
        let after = process_usage(ccm.pid()).unwrap_or_default();
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
    drop(ccm);
    drop(kcm);
    drop(kwok);
}
