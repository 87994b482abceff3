//! `deploy/monitoring/`: the alerting rules pass `promtool check rules` and their unit
//! tests (`promtool test rules`, Debian's `prometheus` package), the dashboard is valid
//! JSON, every metric the rules and the dashboard read is one a running `wasm-ccm`
//! exports, the kustomization renders, `leader_election_master_status` tells the
//! leader from the standby, and Debian's Prometheus scrapes the secure port with the
//! documented scrape job and RBAC.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use wasm_ccm_tests::{Stack, initialized, kustomize, listening_port, metrics, wait_until};

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
    assert!(checked.contains("SUCCESS: 11 rules found"), "{checked}");
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
    let port = listening_port();
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

/// `application/x-www-form-urlencoded`-style percent-encoding of a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The users `deploy/monitoring`'s ClusterRoleBindings of `wasm-ccm:metrics-reader`
/// name, each granted the role's non-resource rules in the API server double; the
/// first user's name.
fn grant_metrics_reader(stack: &Stack) -> String {
    let docs = kustomize(&monitoring());
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "wasm-ccm:metrics-reader")
        .expect("ClusterRole wasm-ccm:metrics-reader");
    let binding = docs
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == "wasm-ccm:metrics-reader"
        })
        .expect("a ClusterRoleBinding of wasm-ccm:metrics-reader");
    let mut users = Vec::new();
    for subject in binding["subjects"].as_array().unwrap() {
        assert_eq!(subject["kind"], "ServiceAccount");
        let user = format!(
            "system:serviceaccount:{}:{}",
            subject["namespace"].as_str().unwrap(),
            subject["name"].as_str().unwrap()
        );
        for rule in role["rules"].as_array().unwrap() {
            for url in rule["nonResourceURLs"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    stack.api.allow_non_resource(
                        &user,
                        verb.as_str().unwrap(),
                        url.as_str().unwrap(),
                    );
                }
            }
        }
        users.push(user);
    }
    users.remove(0)
}

/// Debian's Prometheus scrapes the secure port with `deploy/monitoring`'s scrape job
/// (its discovery replaced by the test's target): with the token of the
/// ServiceAccount `metrics-reader.yaml` binds the target is up and its metrics are
/// ingested; a token of another ServiceAccount gets 403; health needs no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_secure_port_with_a_granted_service_account_token() {
    let stack = Stack::start().await;
    let scraper = grant_metrics_reader(&stack);
    let groups = ["system:serviceaccounts", "system:authenticated"];
    stack.api.add_user("t-prometheus", &scraper, &groups);
    stack.api.add_user(
        "t-default",
        "system:serviceaccount:monitoring:default",
        &groups,
    );
    let port = listening_port();
    let _ccm = stack
        .secure_controller_manager_command(port, &["--leader-elect=false"])
        .spawn()
        .unwrap();

    let dir = wasm_ccm_tests::TempDir::new("prometheus");
    let example: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(monitoring().join("prometheus-scrape.yaml")).unwrap(),
    )
    .unwrap();
    let job = &example["scrape_configs"][0];
    assert_eq!(job["job_name"], "wasm-ccm");
    let mut jobs = Vec::new();
    for (name, token) in [
        ("wasm-ccm", "t-prometheus"),
        ("wasm-ccm-default-sa", "t-default"),
    ] {
        let token_file = dir.path().join(format!("{name}.token"));
        std::fs::write(&token_file, token).unwrap();
        let mut job = job.clone();
        let fields = job.as_object_mut().unwrap();
        assert!(fields.remove("kubernetes_sd_configs").is_some());
        assert!(fields.remove("relabel_configs").is_some());
        fields.insert("job_name".into(), name.into());
        fields.insert(
            "static_configs".into(),
            serde_json::json!([{"targets": [format!("127.0.0.1:{port}")]}]),
        );
        job["authorization"]["credentials_file"] = token_file.to_str().unwrap().into();
        jobs.push(job);
    }
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        serde_json::json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": jobs,
        })
        .to_string(),
    )
    .unwrap();
    let web = loopback_port::reserve().expect("a port for Prometheus");
    let prometheus = std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let mut command = tokio::process::Command::new(&prometheus);
    command
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
        .kill_on_drop(true);
    wasm_ccm_tests::die_with_parent(&mut command);
    let _prometheus = command
        .spawn()
        .unwrap_or_else(|e| panic!("running {prometheus}: {e} (Debian's prometheus package)"));

    let targets = || async {
        let (_, body) = wasm_ccm_tests::http_get(web, "/api/v1/targets")
            .await
            .unwrap_or_default();
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let mut health = std::collections::BTreeMap::new();
        for target in parsed["data"]["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
        {
            health.insert(
                target["labels"]["job"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                (
                    target["health"].as_str().unwrap_or_default().to_owned(),
                    target["lastError"].as_str().unwrap_or_default().to_owned(),
                ),
            );
        }
        health
    };
    wait_until(TIMEOUT, "the granted job up, the other refused", || async {
        let health = targets().await;
        health.get("wasm-ccm").is_some_and(|(h, _)| h == "up")
            && health
                .get("wasm-ccm-default-sa")
                .is_some_and(|(h, e)| h == "down" && e.contains("403"))
    })
    .await;
    let query = |q: &'static str| async move {
        let (_, body) =
            wasm_ccm_tests::http_get(web, &format!("/api/v1/query?query={}", encode(q)))
                .await
                .unwrap_or_default();
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        parsed["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
    };
    wait_until(TIMEOUT, "wasm-ccm's metrics ingested", || async {
        query(r#"count({job="wasm-ccm",__name__=~"wasm_ccm_.+"})"#)
            .await
            .is_some_and(|n| n > 10.0)
    })
    .await;
    assert_eq!(query(r#"up{job="wasm-ccm-default-sa"}"#).await, Some(0.0));
    // Probes need no credentials.
    let answer = wasm_ccm_tests::https::https_get(
        port,
        "/healthz",
        &wasm_ccm_tests::https::Credentials::default(),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200);
}
