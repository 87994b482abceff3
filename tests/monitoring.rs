//! `deploy/monitoring/`: the alerting rules pass `promtool check rules` and their unit
//! tests (`promtool test rules`, Debian's `prometheus` package), the dashboard is valid
//! JSON, every metric the rules and the dashboard read is one a running `wasm-ccm`
//! exports, the kustomization renders, and `leader_election_master_status` tells the
//! leader from the standby.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use wasm_ccm_tests::{Stack, free_port, initialized, kustomize, metrics, wait_until};

const TIMEOUT: Duration = Duration::from_secs(60);

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

fn promtool(args: &[&str]) -> String {
    let promtool = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let out = std::process::Command::new(&promtool)
        .args(args)
        .current_dir(monitoring())
        .output()
        .unwrap_or_else(|e| {
            panic!("running {promtool}: {e} (Debian's prometheus package; .ci/run installs it)")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerting_rules_pass_promtool_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", "alerts.yaml"]);
    assert!(checked.contains("SUCCESS: 10 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts_test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The metric names a PromQL expression reads (`wasm_ccm_*`, client-go's
/// `leader_election_*`), without the histogram and counter sample suffixes.
fn metric_names(expr: &str, names: &mut BTreeSet<String>) {
    let mut word = String::new();
    for c in expr.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if word.starts_with("wasm_ccm_") || word.starts_with("leader_election_") {
            let base = ["_bucket", "_total", "_count", "_sum"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(&word);
            names.insert(base.to_owned());
        }
        word.clear();
    }
}

/// Every expression of the rules and the dashboard.
fn expressions() -> Vec<String> {
    let rules: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(monitoring().join("alerts.yaml")).unwrap())
            .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring().join("dashboard.json")).unwrap(),
    )
    .expect("dashboard.json is JSON");
    let mut exprs: Vec<String> = rules["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    exprs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_the_dashboard_read_is_exported() {
    let mut names = BTreeSet::new();
    for expr in expressions() {
        metric_names(&expr, &mut names);
    }
    assert!(names.len() >= 15, "{names:?}");

    // A Node joining makes the controllers reconcile and the provider reach its
    // cloud, so the series of ordinary work exist too.
    let stack = Stack::start().await;
    let nodes = stack.joining_node("n1").await;
    let port = free_port();
    let _cm = stack.controller_manager(port, &[]);
    wait_until(TIMEOUT, "n1 initialized", || initialized(&nodes, "n1")).await;
    let missing = |exported: &str| -> Vec<String> {
        names
            .iter()
            .filter(|name| !exported.contains(&format!("# TYPE {name} ")))
            .cloned()
            .collect()
    };
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let exported = metrics(port).await;
        let left = missing(&exported);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not exported: {left:?}\n{exported}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn the_kustomization_renders_the_rules_and_the_labelled_dashboard() {
    let docs = kustomize(&monitoring());
    let alerts = wasm_ccm_tests::config_map(&docs, "wasm-ccm-alerts");
    assert_eq!(alerts["metadata"]["namespace"], "kube-system");
    assert!(
        alerts["data"]["alerts.yaml"]
            .as_str()
            .unwrap()
            .contains("WasmCcmNoLeader")
    );
    let dashboard = wasm_ccm_tests::config_map(&docs, "wasm-ccm-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value =
        serde_json::from_str(dashboard["data"]["dashboard.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["uid"], "wasm-ccm");
}

/// `leader_election_master_status` (client-go's name): 1 on the replica holding the
/// Lease, 0 on the standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_gauge_tells_the_leader_from_the_standby() {
    let stack = Stack::start().await;
    let election = ["--leader-elect-retry-period", "200ms"];
    let ((_first, p1), (_second, p2)) = stack.two_replicas(&election).await;
    let gauge = r#"leader_election_master_status{name="cloud-controller-manager"}"#;
    let (leader, standby) = (metrics(p1).await, metrics(p2).await);
    assert!(leader.contains(&format!("{gauge} 1\n")), "{leader}");
    assert!(standby.contains(&format!("{gauge} 0\n")), "{standby}");
}
