//! `wasm-ccm call` as a provider author runs it: the real binary, the reference
//! provider under its policy, the simulated cloud on 127.0.0.1; results and the
//! contract's error cases as JSON. Credential files are read only inside
//! `--credentials-dir`, and a vendor's policy sends no file of the operator's.

use std::path::Path;

use serde_json::{Value, json};
use sim_cloud::SimCloud;
use sim_cloud::model::{Fault, NewInstance};
use wasm_ccm_tests::vendor::{Named, VendorHome};
use wasm_ccm_tests::{
    ProviderDir, RawBehavior, RawServer, TOKEN, TempDir, cloud_config, policy_reading, wasm_ccm_bin,
};

struct Author {
    cloud: SimCloud,
    dir: ProviderDir,
    config: std::path::PathBuf,
    /// The credentials directory (`--credentials-dir`): the token alone, apart from
    /// the component and its policy, as the controller manager's mounted Secret.
    credentials: TempDir,
}

async fn author() -> Author {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    let credentials = TempDir::new("call-credentials");
    let token = credentials.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let policy = policy_reading(&cloud, token.to_str().unwrap());
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy, TOKEN);
    let config = dir.dir.path().join("cloud-config.json");
    std::fs::write(&config, cloud_config(&cloud)).unwrap();
    Author {
        cloud,
        dir,
        config,
        credentials,
    }
}

/// Runs `wasm-ccm call` with the author's credentials directory; (exit code, stdout as
/// JSON or Null, stderr).
async fn call(a: &Author, args: &[&str]) -> (i32, Value, String) {
    call_reading(a, Some(a.credentials.path()), args).await
}

/// Runs `wasm-ccm call` with `--credentials-dir credentials` (none: no flag).
async fn call_reading(
    a: &Author,
    credentials: Option<&Path>,
    args: &[&str],
) -> (i32, Value, String) {
    let mut command = tokio::process::Command::new(wasm_ccm_bin());
    command
        .arg("call")
        .arg(&a.dir.wasm)
        .arg("--cloud-config")
        .arg(&a.config);
    if let Some(dir) = credentials {
        command.arg("--credentials-dir").arg(dir);
    }
    let out = command.args(args).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_runs_one_export_and_prints_json() {
    let a = author().await;
    let instance = a
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("node-1")));

    let (code, out, err) = call(&a, &["instances-v2.instance-metadata", "node-1"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out["ok"]["providerID"],
        format!("simcloud://{}", instance.id)
    );
    assert!(
        out["ok"]["nodeAddresses"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{out}"
    );

    let (_, out, _) = call(&a, &["identity.provider-name"]).await;
    assert_eq!(out, json!({"ok": "simcloud"}));

    let service = json!({"metadata": {"name": "web", "namespace": "default", "uid": "1234"},
                         "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080}]}});
    let (code, out, err) = call(
        &a,
        &[
            "load-balancer.get-load-balancer",
            "kubernetes",
            &service.to_string(),
        ],
    )
    .await;
    assert_eq!((code, out), (0, json!({"ok": null})), "{err}");
    let (_, out, _) = call(&a, &["routes.list-routes", "kubernetes"]).await;
    assert_eq!(out, json!({"ok": []}));

    // The cloud throttles: the contract's retry-after case, with the cloud's delay.
    a.cloud.with_state(|s| {
        s.faults.push(Fault {
            status: Some(429),
            retry_after_seconds: Some(3),
            count: Some(1),
            ..Fault::default()
        })
    });
    let (code, out, err) = call(&a, &["instances-v2.instance-exists", "node-1"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["error"]["retry-after"]["delayMs"], 3000, "{out}");

    // Usage errors name what is wrong.
    let (code, _, err) = call(&a, &["instances-v2.nonsense", "node-1"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("unknown function") && err.contains("instances-v2.instance-metadata(node)"),
        "{err}"
    );
    let (code, _, err) = call(&a, &["instances-v2.instance-exists"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("takes 1 argument(s), 0 given"), "{err}");
}

/// A transport failure keeps its kind through the SDK (`wasm_ccm_guest::http::ErrorKind`)
/// into the contract's error: nothing listening is "connection refused", a cloud that
/// never answers "timed out" (the policy's request timeout), a destination outside the
/// policy "denied" (nothing leaves). All on 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_errors_keep_their_kind() {
    let silent = RawServer::start(RawBehavior::Silent).await;
    let reserve = || loopback_port::reserve().expect("a port nothing listens on");
    let closed = format!("http://127.0.0.1:{}", reserve());
    let outside = format!("http://127.0.0.1:{}", reserve());
    let policy = format!(
        "allowedOutboundHosts: ['{closed}', '{}']\nlimits: {{requestTimeout: 500ms, callTimeout: 10s}}\n",
        silent.url()
    );
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy, TOKEN);
    for (endpoint, kind) in [
        (closed.as_str(), "connection refused"),
        (silent.url().as_str(), "timed out"),
        (
            outside.as_str(),
            "request denied by the host's egress policy",
        ),
    ] {
        let config = dir.dir.path().join("cloud-config.json");
        std::fs::write(&config, format!(r#"{{"endpoint": "{endpoint}"}}"#)).unwrap();
        let out = tokio::process::Command::new(wasm_ccm_bin())
            .arg("call")
            .arg(&dir.wasm)
            .arg("--cloud-config")
            .arg(&config)
            .args(["instances-v2.instance-exists", "node-1"])
            .output()
            .await
            .unwrap();
        let json: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let message = json["error"]["other"].as_str().unwrap_or_default();
        assert!(
            message.contains(kind),
            "{endpoint}: {kind:?} not in {json} ({})",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A request that could outlive its call is not sent: the provider answers
/// `retry-after` (the SDK's conversion) within the call's deadline instead of being cut
/// there. Every request of the cloud takes 1 s; the policy gives a request 1.3 s and a
/// call 2.5 s (0.25 s of it kept for the answer), so `ensure-load-balancer`'s listing
/// is sent and its `PUT`, 1.5 s before the deadline, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_could_outlive_its_call_is_not_sent() {
    let a = author().await;
    let token = a.credentials.path().join("token");
    let policy = policy_reading(&a.cloud, token.to_str().unwrap()).replace(
        "callTimeout: 10s",
        "callTimeout: 2500ms\n  requestTimeout: 1300ms",
    );
    std::fs::write(a.dir.dir.path().join("simcloud.yaml"), policy).unwrap();
    a.cloud.with_state(|s| {
        s.create_instance(NewInstance::named("node-1"));
        s.faults.push(Fault {
            latency_ms: 1000,
            ..Fault::default()
        });
    });
    let service = json!({"metadata": {"name": "web", "namespace": "default", "uid": "1234"},
                         "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080}]}});
    let nodes = json!([{"metadata": {"name": "node-1"}}]);
    let (code, out, err) = call(
        &a,
        &[
            "load-balancer.ensure-load-balancer",
            "kubernetes",
            &service.to_string(),
            &nodes.to_string(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let retry = &out["error"]["retry-after"];
    assert_eq!(retry["delayMs"], 1000, "{out}");
    assert!(
        retry["message"]
            .as_str()
            .is_some_and(|m| m.contains("not sent before the call's deadline")
                && m.contains("requestTimeout (1.3s)")),
        "{out}"
    );
    assert!(!err.contains("timed out"), "the call was cut: {err}");
    let sent: Vec<String> = a
        .cloud
        .with_state(|s| s.recent.iter().map(|(_, route)| route.clone()).collect());
    assert!(
        sent.iter().any(|r| r.starts_with("GET /v1/instances")),
        "{sent:?}"
    );
    assert!(
        !sent.iter().any(|r| r.starts_with("PUT")),
        "a request that did not fit was sent: {sent:?}"
    );
}

/// `wasm-ccm conformance` on the reference provider against the simulated cloud:
/// every check passes, prints its table, and leaves no load balancer or route behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_passes_for_the_reference_provider() {
    let a = author().await;
    for name in ["node-1", "node-2"] {
        a.cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
    }
    let service = a.dir.dir.path().join("service.json");
    std::fs::write(
        &service,
        json!({"metadata": {"name": "conformance", "namespace": "default"},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}})
        .to_string(),
    )
    .unwrap();
    let elsewhere = a.dir.dir.path().join("elsewhere.json");
    std::fs::write(
        &elsewhere,
        json!({"metadata": {"name": "elsewhere", "namespace": "default",
               "annotations": {"simcloud.example/load-balancer-implementation": "external"}},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30081, "protocol": "TCP"}]}})
        .to_string(),
    )
    .unwrap();
    let stdout = wasm_ccm_tests::conformance(
        &a.dir.wasm,
        [
            "--cloud-config".as_ref(),
            a.config.as_os_str(),
            "--credentials-dir".as_ref(),
            a.credentials.path().as_os_str(),
            "--node".as_ref(),
            "node-1".as_ref(),
            "--node".as_ref(),
            "node-2".as_ref(),
            "--service".as_ref(),
            service.as_os_str(),
            "--elsewhere-service".as_ref(),
            elsewhere.as_os_str(),
            "--route-cidr".as_ref(),
            std::ffi::OsStr::new("10.244.200.0/24"),
        ],
    )
    .await;
    for check in [
        "| initialize refuses a bad cloud config | pass |",
        "| instance-exists(node-2) is true | pass |",
        "| instance-metadata(node-1) has a provider ID simcloud://... | pass |",
        "| a node that does not exist is false or instance-not-found | pass |",
        "| ensure-load-balancer twice gives the same status | pass |",
        "| update-load-balancer without a load balancer creates none | pass |",
        "| instance-exists(node-1) by its provider ID is true | pass |",
        "| instance-metadata of a node that does not exist is an error | pass |",
        "| update-load-balancer to 1 of 2 nodes works | pass |",
        "| update-load-balancer to all 2 nodes works | pass |",
        "| get-load-balancer after the updates gives the same status | pass |",
        "| get-load-balancer then says none (ensure made one load balancer) | pass |",
        "| list-routes has it | pass |",
        "| delete-route succeeds again | pass |",
        "| a 429 with Retry-After: 7 s is retry-after, no sooner | pass |",
        "| ensure-load-balancer for a Service served elsewhere is implemented-elsewhere | pass |",
        "| nothing is created for a Service served elsewhere | pass |",
    ] {
        assert!(stdout.contains(check), "{check}:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with(" 0 failed"), "{stdout}");
    a.cloud.with_state(|s| {
        assert!(s.load_balancers.is_empty() && s.routes.is_empty());
    });

    // A rule broken: a node whose instance does not exist fails its check, and the
    // command exits non-zero.
    let out = tokio::process::Command::new(wasm_ccm_bin())
        .arg("conformance")
        .arg(&a.dir.wasm)
        .arg("--cloud-config")
        .arg(&a.config)
        .arg("--credentials-dir")
        .arg(a.credentials.path())
        .args(["--node", "no-such-node"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("| instance-exists(no-such-node) is true | FAIL |"),
        "{stdout}"
    );
}

/// `wasm-ccm call` confines credential files as the controller manager does with
/// `--credentials-dir`: a policy whose token file lies elsewhere is refused here as it
/// would be in the cluster, and accepted with the directory that holds it. Without
/// `--credentials-dir` no file is read: the request goes without the token (the cloud
/// answers 401) and the command says why. A directory holding the component is no
/// credentials directory: refused, naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_files_are_confined_as_the_daemon_confines_them() {
    let a = author().await;
    a.cloud
        .with_state(|s| s.create_instance(NewInstance::named("node-1")));
    let elsewhere = TempDir::new("elsewhere");
    let token = elsewhere.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let policy = a.dir.dir.path().join("outside.yaml");
    std::fs::write(&policy, policy_reading(&a.cloud, token.to_str().unwrap())).unwrap();
    let policy = policy.to_str().unwrap();
    let exists = ["--policy", policy, "instances-v2.instance-exists", "node-1"];

    let (code, _, err) = call(&a, &exists).await;
    assert_ne!(code, 0);
    assert!(err.contains("outside the credentials directory"), "{err}");

    let (code, out, err) = call_reading(&a, Some(elsewhere.path()), &exists).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["ok"], true);

    let (code, out, err) = call_reading(&a, None, &exists).await;
    assert_eq!(code, 0, "{err}");
    let message = out["error"]["other"].as_str().unwrap_or_default();
    assert!(message.contains("401"), "{out}");
    assert!(
        err.contains("no --credentials-dir") && err.contains(&token.display().to_string()),
        "{err}"
    );
    assert_eq!(a.cloud.with_state(|s| s.unauthorized), 1);

    let (code, _, err) = call_reading(&a, Some(a.dir.dir.path()), &exists).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("--credentials-dir") && err.contains("holds the provider's component"),
        "{err}"
    );
}

/// Run from the operator's home, `call` and `conformance` run a vendor's component
/// under its policy, which names a file of the operator's (by its absolute path, or
/// `.kube/config` relative to the home): by default nothing of it reaches the vendor's
/// host; with `--credentials-dir` holding only that file it is used; the home as the
/// credentials directory (it holds the component and the policy) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_and_conformance_send_no_file_of_the_operator_s_by_default() {
    for named in [Named::Absolute, Named::Relative] {
        let vendor = VendorHome::start(named).await;
        let (stdout, stderr) = vendor
            .assert_confined(&[
                "call",
                "vendor.wasm",
                "--cloud-config",
                "cloud.conf",
                "identity.provider-name",
            ])
            .await;
        assert_eq!(
            serde_json::from_str::<Value>(&stdout).ok(),
            Some(json!({"ok": "hostile"})),
            "{named:?}: {stderr}"
        );
        assert!(
            stderr.contains("no --credentials-dir") && stderr.contains("credentials[0]"),
            "{named:?}: {stderr}"
        );
        vendor
            .assert_confined(&["conformance", "vendor.wasm", "--cloud-config", "cloud.conf"])
            .await;
    }
}
