//! The processes the bench starts, what it measures of them between two moments, and
//! the tables it prints.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use kube_apiserver_peer::KubeApiServer;
use wasm_ccm_tests::{ProcessUsage, process_usage};

/// kube-controller-manager's identity.
pub const KCM_USER: &str = "system:kube-controller-manager";
/// kwok's identity (a member of `system:nodes`).
pub const KWOK_USER: &str = "kwok";

/// A process the bench started and reports on; killed when dropped, and when the
/// bench ends however it ends.
pub struct Peer {
    child: tokio::process::Child,
}

impl Peer {
    pub fn spawn(name: &str, command: &mut tokio::process::Command, log: &Path) -> Self {
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

    pub fn pid(&self) -> u32 {
        self.child.id().expect("a running process")
    }

    /// How it ended, when it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills it and waits until it is gone.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The last 40 lines of a log.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The cloud controller manager measured: its name in the tables and its API identity.
#[derive(Clone, Copy)]
pub struct Ccm {
    pub name: &'static str,
    pub user: &'static str,
}

/// One moment: the audit log's length, each process's usage, APF's rejections, the
/// events recorded so far by component and reason.
pub struct Snapshot {
    pub at: Instant,
    audited: usize,
    usage: Vec<(&'static str, ProcessUsage)>,
    rejected: f64,
    events: BTreeMap<(String, String), u64>,
}

pub async fn snapshot(
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
        events: events(admin).await,
    }
}

/// Every Event's occurrences (`count`, else 1) by reporting component and reason.
async fn events(admin: &kube::Client) -> BTreeMap<(String, String), u64> {
    let api: kube::Api<k8s_openapi::api::core::v1::Event> = kube::Api::all(admin.clone());
    let mut counts = BTreeMap::new();
    let Ok(list) = api.list(&Default::default()).await else {
        return counts;
    };
    for event in list.items {
        let component = event
            .reporting_component
            .filter(|c| !c.is_empty())
            .or_else(|| event.source.and_then(|s| s.component))
            .unwrap_or_default();
        let occurrences = event
            .series
            .and_then(|s| s.count)
            .or(event.count)
            .unwrap_or(1)
            .max(1) as u64;
        *counts
            .entry((component, event.reason.unwrap_or_default()))
            .or_default() += occurrences;
    }
    counts
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

/// What the measured controller manager cost in one phase, for the comparison.
#[derive(Clone, Default)]
pub struct PhaseCost {
    pub minutes: f64,
    pub api_requests: u64,
    pub throttled: u64,
    pub cloud_requests: u64,
    pub rss_mib: f64,
    pub cpu_secs: f64,
}

/// Prints what happened between `from` and `to` (the first process of the snapshots
/// is `ccm`); what it cost `ccm`.
pub fn report(
    phase: &str,
    ccm: Ccm,
    server: &KubeApiServer,
    (from, to): (&Snapshot, &Snapshot),
    cloud: &BTreeMap<String, u64>,
    nodes: usize,
) -> PhaseCost {
    let minutes = (to.at - from.at).as_secs_f64() / 60.0;
    let audited = server.audit();
    let window = &audited[from.audited.min(audited.len())..to.audited.min(audited.len())];
    println!(
        "\n### {}: {phase} ({minutes:.1} min, {nodes} Nodes)\n",
        ccm.name
    );
    let mut by_user: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut ours: BTreeMap<(String, String), u64> = BTreeMap::new();
    for a in window {
        let user = match a.user.as_str() {
            user if user == ccm.user => ccm.name,
            KCM_USER => "kube-controller-manager",
            KWOK_USER => "kwok (without Leases)",
            _ => "others (the bench, the API server's own)",
        };
        let entry = by_user.entry(user).or_default();
        entry.0 += 1;
        entry.1 += u64::from(a.code == 429);
        if a.user == ccm.user {
            *ours
                .entry((a.verb.clone(), a.resource.clone()))
                .or_default() += 1;
        }
    }
    println!(
        "| {}'s API requests | count | per minute |\n| --- | ---: | ---: |",
        ccm.name
    );
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
    let recorded: Vec<String> = to
        .events
        .iter()
        .filter_map(|((component, reason), n)| {
            let before = from
                .events
                .get(&(component.clone(), reason.clone()))
                .copied();
            let new = n.saturating_sub(before.unwrap_or(0));
            (new > 0).then(|| format!("{component} {reason}: {new}"))
        })
        .collect();
    println!("\nevents recorded: {}", recorded.join(", "));
    let cloud_requests = cloud.values().sum::<u64>();
    println!(
        "\nAPF rejections (every flow): {}; cloud requests: {cloud_requests} ({})\n",
        to.rejected - from.rejected,
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
    let (before, after) = (&from.usage[0].1, &to.usage[0].1);
    PhaseCost {
        minutes,
        api_requests: total,
        throttled: by_user.get(ccm.name).map_or(0, |(_, t)| *t),
        cloud_requests,
        rss_mib: after.rss_kib as f64 / 1024.0,
        cpu_secs: after.cpu_secs - before.cpu_secs,
    }
}

/// The side-by-side table of every controller manager measured on the same Nodes.
pub fn comparison(sides: &[(Ccm, Vec<(String, PhaseCost)>)], nodes: usize) {
    if sides.len() < 2 {
        return;
    }
    println!("\n## Side by side on the same control plane, cloud and {nodes} Nodes\n");
    print!("| phase: measure |");
    for (ccm, _) in sides {
        print!(" {} |", ccm.name);
    }
    println!();
    println!("| --- |{}", " ---: |".repeat(sides.len()));
    let phases: Vec<&String> = sides[0].1.iter().map(|(p, _)| p).collect();
    type Measure = (&'static str, fn(&PhaseCost, usize) -> String);
    let measures: [Measure; 6] = [
        ("minutes", |c, _| format!("{:.1}", c.minutes)),
        ("API requests (a minute)", |c, _| {
            format!(
                "{} ({:.1})",
                c.api_requests,
                c.api_requests as f64 / c.minutes
            )
        }),
        ("429s received", |c, _| c.throttled.to_string()),
        ("cloud requests (a node an hour)", |c, n| {
            format!(
                "{} ({:.3})",
                c.cloud_requests,
                c.cloud_requests as f64 * 60.0 / c.minutes / n as f64
            )
        }),
        ("RSS MiB at its end", |c, _| format!("{:.1}", c.rss_mib)),
        ("CPU s a minute", |c, _| {
            format!("{:.2}", c.cpu_secs / c.minutes)
        }),
    ];
    for phase in phases {
        for (label, value) in &measures {
            print!("| {phase}: {label} |");
            for (_, costs) in sides {
                let cost = costs.iter().find(|(p, _)| p == phase).map(|(_, c)| c);
                print!(" {} |", cost.map_or("—".into(), |c| value(c, nodes)));
            }
            println!();
        }
    }
}
