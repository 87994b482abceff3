//! What only the process shows: leader election, signals, the API client's limits,
//! logs and flags.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_hands_over_to_the_second_replica() {
    let stack = Stack::start().await;
    stack.cloud.with_state(|s| {
        s.create_instance(NewInstance::named("n1"));
        s.create_instance(NewInstance::named("n2"));
    });
    let fast = [
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-renew-deadline",
        "1500ms",
        "--leader-elect-retry-period",
        "200ms",
    ];
    let ((mut first, p1), (_second, p2)) = stack.two_replicas(&fast).await;
    assert_eq!(http_get(p1, "/healthz").await.unwrap(), (200, "ok".into()));
    let (status, verbose) = http_get(p1, "/healthz?verbose").await.unwrap();
    assert_eq!(status, 200, "{verbose}");
    for check in [
        "[+]leaderElection ok",
        "[+]controller/cloud-node ok",
        "[+]controller/cloud-node-lifecycle ok",
        "[+]controller/service ok",
        "[+]controller/route ok",
        "healthz check passed",
    ] {
        assert!(verbose.contains(check), "{check} in {verbose}");
    }
    assert_eq!(
        http_get(p1, "/healthz/controller/service").await.unwrap(),
        (200, "ok".into())
    );
    assert_eq!(
        http_get(p1, "/healthz/controller/nope").await.unwrap().0,
        404
    );
    // The standby runs no controllers yet: only leader election is checked.
    let (_, standby) = http_get(p2, "/healthz?verbose").await.unwrap();
    assert!(!standby.contains("controller/"), "{standby}");

    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("n1", "True"))
        .await
        .unwrap();
    wait_until(TIMEOUT, "n1 initialized by the leader", || {
        initialized(&nodes, "n1")
    })
    .await;

    first.kill().await.unwrap();
    wait_until(TIMEOUT, "second replica takes over", || async {
        http_get(p2, "/readyz")
            .await
            .is_ok_and(|(_, b)| b.contains("controllers running"))
    })
    .await;
    nodes
        .create(&PostParams::default(), &kubelet_node("n2", "True"))
        .await
        .unwrap();
    wait_until(TIMEOUT, "n2 initialized by the new leader", || {
        initialized(&nodes, "n2")
    })
    .await;
}

/// A leader stopped by SIGTERM stops its controllers, then releases the Lease: the
/// standby takes over at its next retry, long before the 30 s lease would expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_by_sigterm_hands_the_lease_over_at_once() {
    let stack = Stack::start().await;
    let election = [
        "--leader-elect-lease-duration",
        "30s",
        "--leader-elect-renew-deadline",
        "20s",
        "--leader-elect-retry-period",
        "200ms",
    ];
    let ((mut first, _), (_second, p2)) = stack.two_replicas(&election).await;

    let pid = first.id().expect("running").to_string();
    let signalled = std::time::Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(20), first.wait())
        .await
        .expect("the leader stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    // Well inside the lease duration: only a released Lease is taken this soon.
    wait_until(
        Duration::from_secs(15),
        "the standby takes over",
        || async {
            http_get(p2, "/readyz")
                .await
                .is_ok_and(|(_, b)| b.contains("controllers running"))
        },
    )
    .await;
    println!(
        "SIGTERM to the standby running the controllers: {:?} (lease duration 30 s, retry period 200 ms)",
        signalled.elapsed()
    );
}

/// `--kube-api-qps` and `--kube-api-burst` pace every request of the client (client-go's
/// token bucket): with 10 per second and a burst of 1, the N requests the API server
/// got from wasm-ccm before 12 joining Nodes were initialized cannot have come in less
/// than (N - 1) / 10 seconds. A slow machine only makes it take longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_keeps_to_kube_api_qps_and_burst() {
    let stack = Stack::start().await;
    let names: Vec<String> = (0..12).map(|i| format!("paced-{i}")).collect();
    stack.cloud.with_state(|s| {
        for name in &names {
            s.create_instance(NewInstance::named(name));
        }
    });
    let nodes: Api<Node> = Api::all(stack.client());
    for name in &names {
        nodes
            .create(&PostParams::default(), &kubelet_node(name, "True"))
            .await
            .unwrap();
    }
    let from_wasm_ccm = || -> u64 {
        stack
            .api
            .request_counts()
            .into_iter()
            .filter(|(access, _)| access.user_agent.starts_with("wasm-ccm/"))
            .map(|(_, n)| n)
            .sum()
    };
    let started = std::time::Instant::now();
    let _cm = stack.controller_manager(
        listening_port(),
        &["--kube-api-qps", "10", "--kube-api-burst", "1"],
    );
    for name in &names {
        wait_until(TIMEOUT, "every Node initialized", || {
            initialized(&nodes, name)
        })
        .await;
    }
    let requests = from_wasm_ccm();
    let elapsed = started.elapsed().as_secs_f64();
    println!("{requests} requests from wasm-ccm in {elapsed:.2} s at --kube-api-qps 10");
    assert!(requests >= 24, "{requests} requests: too few to tell");
    assert!(
        requests as f64 <= 1.0 + 10.0 * elapsed,
        "{requests} requests in {elapsed:.2} s: faster than 10 per second"
    );

    // Protobuf, upstream's default content type, is refused with the reason.
    let out = stack
        .controller_manager_command(
            listening_port(),
            &[
                "--kube-api-content-type",
                "application/vnd.kubernetes.protobuf",
            ],
        )
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--kube-api-content-type") && stderr.contains("application/json"),
        "{stderr}"
    );
}

/// `--log-format json` (docs/controllers.md, the log fields): one JSON object per line with `timestamp`,
/// `level`, `target` and `fields.message`, the record's own fields under `fields`, and
/// a fatal error as an `ERROR` record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_with_the_documented_fields() {
    let stack = Stack::start().await;
    let nodes = stack.joining_node("n1").await;
    let mut command = stack.controller_manager_command(listening_port(), &["--log-format", "json"]);
    command.env("RUST_LOG", "info");
    let (_cm, log) = wasm_ccm_tests::spawn_logged(command);
    wait_until(TIMEOUT, "n1 initialized", || initialized(&nodes, "n1")).await;
    wait_until(TIMEOUT, "the initialization logged", || async {
        log.lock()
            .unwrap()
            .contains("successfully initialized node")
    })
    .await;
    let text = log.lock().unwrap().clone();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    for record in &records {
        for field in ["timestamp", "level", "target"] {
            assert!(record[field].is_string(), "{field} in {record}");
        }
        assert!(record["fields"]["message"].is_string(), "{record}");
    }
    let initialized = records
        .iter()
        .find(|r| {
            r["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("successfully initialized node"))
        })
        .unwrap();
    assert_eq!(initialized["level"], "INFO");
    assert_eq!(initialized["fields"]["node"], "n1");
    assert_eq!(initialized["target"], "wasm_ccm::controllers::node");

    let out = stack
        .controller_manager_command(
            listening_port(),
            &[
                "--log-format",
                "json",
                "--kube-api-content-type",
                "application/vnd.kubernetes.protobuf",
            ],
        )
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("--kube-api-content-type")),
        "{last}"
    );
}

#[tokio::test]
async fn bad_flags_fail_fast_with_a_clear_message() {
    let stack = Stack::start().await;
    // A flag given twice takes its last value, as upstream's: `nosuch` is the one used.
    let out = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin())
        .args([
            "--cloud-provider",
            "simcloud",
            "--cloud-provider",
            "nosuch",
            "--secure-port",
            "0",
            "--configure-cloud-routes=false",
            "--providers-dir",
        ])
        .arg(stack.dir.dir.path())
        .arg("--kubeconfig")
        .arg(&stack.kubeconfig)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no provider named \"nosuch\""), "{err}");
    assert!(err.contains("simcloud"), "it lists what it found: {err}");

    let out = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin())
        .args([
            "--cloud-provider",
            "simcloud",
            "--controllers",
            "cloud-node,nodes",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown controller \"nodes\""));
}
