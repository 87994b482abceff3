//! `wasm-ccm-playground` as a user runs it: the real binary, then kubectl against the
//! kubeconfig it writes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;
use wasm_ccm_tests::{TempDir, built_bin, guest};

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// Reads the playground's output until it is up; everything it printed.
async fn started(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> String {
    let mut output = String::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !output.contains("watching the cluster") {
        assert!(
            Instant::now() < deadline,
            "playground did not start:\n{output}"
        );
        match tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                output.push_str(&line);
                output.push('\n');
            }
            other => panic!("playground output ended: {other:?}\n{output}"),
        }
    }
    output
}

/// `wasm-ccm-playground --cloud CLOUD --provider GUEST ARGS` in `dir` (kubeconfig at
/// `dir/kubeconfig`), once it is up: the child and everything it printed.
async fn playground(
    cloud: &str,
    provider: &str,
    args: &[&str],
    dir: &TempDir,
) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(built_bin("wasm-ccm-playground"))
        .args(["--cloud", cloud])
        .args(args)
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .arg("--provider")
        .arg(guest(provider))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let output = started(&mut lines).await;
    // Keep reading: the playground prints every change, and a closed pipe would stop it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, output)
}

/// Runs the first printed command line containing `marker` with `sh -c`: its output.
async fn run_printed(output: &str, marker: &str) -> String {
    let line = output
        .lines()
        .map(str::trim)
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no command with {marker} printed:\n{output}"));
    let out = tokio::process::Command::new("sh")
        .args(["-c", line])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `kubectl --kubeconfig KUBECONFIG ARGS` until its output satisfies `done`
/// (within 90 s); the output.
async fn kubectl_until(
    kubeconfig: &std::path::Path,
    args: &[&str],
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    // Several provider calls on a loaded machine (the OpenStack policy's call is 60 s,
    // a slow call ends in retry-after and the next resumes it): minutes, not seconds.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let out = tokio::process::Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if done(&stdout) {
            return stdout;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {stdout:?} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn playground_runs_the_aws_provider_against_moto() {
    let dir = TempDir::new("playground-aws");
    let kubeconfig = dir.path().join("kubeconfig");
    let args = ["--nodes", "2", "--node-monitor-grace-period", "1s"];
    let (mut child, output) = playground("aws", "aws_provider", &args, &dir).await;
    assert!(
        output.contains("AWS emulator (moto):      http://127.0.0.1:"),
        "{output}"
    );
    assert!(output.contains("provider: aws loaded"), "{output}");
    assert!(
        output.contains(".ec2.internal) -> aws:///us-east-1"),
        "{output}"
    );
    // The Service gets an NLB in moto: its DNS name in the status.
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].hostname}",
        ],
        "the load balancer's hostname",
        |hostname| hostname.ends_with(".elb.amazonaws.com"),
    )
    .await;
    // The printed boto3 command stops an instance: its Node's simulated kubelet stops
    // (NotReady after the grace period) and the lifecycle controller taints it.
    run_printed(&output, ".stop_instances(").await;
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={.items[*].spec.taints[*].key}",
        ],
        "the stopped instance's Node tainted shut down",
        |taints| taints.contains("node.cloudprovider.kubernetes.io/shutdown"),
    )
    .await;
    child.kill().await.unwrap();
}

#[tokio::test]
async fn playground_serves_a_cluster_kubectl_can_use() {
    let dir = TempDir::new("playground");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = tokio::process::Command::new(built_bin("wasm-ccm-playground"))
        .args(["--nodes", "4", "--node-monitor-grace-period", "1s"])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .arg("--provider")
        .arg(guest("reference_provider"))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let output = started(&mut lines).await;
    assert!(
        output.contains(&kubeconfig.display().to_string()),
        "{output}"
    );
    assert!(output.contains("provider: simcloud loaded"), "{output}");
    assert!(
        output.contains("instance-metadata(node-1) -> simcloud://"),
        "{output}"
    );
    assert!(
        output.contains("controllers: cloud-node, cloud-node-lifecycle, service and route running"),
        "{output}"
    );

    // The controllers initialize every node: provider IDs set, taints gone.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = tokio::process::Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "get",
                "nodes",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.spec.providerID} {.spec.taints}{\"\\n\"}{end}",
            ])
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let done = text
            .lines()
            .filter(|l| l.contains("simcloud://") && !l.contains("uninitialized"))
            .count();
        if done == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "nodes not initialized:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A change made with kubectl shows up in the playground's log.
    let out = tokio::process::Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["label", "node", "node-2", "seen=yes"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let line = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(Some(line)) = lines.next_line().await
                && line.contains("Node node-2")
                && line.contains("seen=yes")
            {
                return line;
            }
        }
    })
    .await
    .unwrap();
    assert!(line.contains("+seen=yes"), "{line}");

    // Stopping an instance stops its simulated kubelet: the node turns NotReady after
    // the grace period, and the lifecycle controller taints it shut down.
    let cloud = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("simulated cloud:"))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the simulated cloud's URL")
        .to_owned();
    wasm_ccm_tests::moto::ensure_crypto_provider();
    let stopped = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .patch(format!("{cloud}/admin/instances/i-00000001"))
        .header("content-type", "application/json")
        .body(r#"{"state": "stopped"}"#)
        .send()
        .await
        .unwrap();
    assert!(stopped.status().is_success(), "{stopped:?}");
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "node",
            "node-1",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.spec.taints[*].key}",
        ],
        "node-1 NotReady and shut down",
        |text| {
            text.starts_with("Unknown ")
                && text.contains("node.cloudprovider.kubernetes.io/shutdown")
        },
    )
    .await;

    // SIGTERM stops it cleanly, as Ctrl-C does.
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the playground stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut rest = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push_str(&line);
            rest.push('\n');
        }
        rest
    })
    .await
    .unwrap();
    assert!(rest.contains("stopped"), "{rest}");
}

/// Any provider: `--cloud none` with the author's `--provider`, `--policy` (relative
/// file paths read relative to it), `--credentials-dir` (where they must lie) and
/// `--cloud-config`, against the author's own cloud (here a simulated cloud this test
/// starts). A policy with an unknown field is refused at start, naming the file and the
/// field, and so is a credentials directory holding the policy.
#[tokio::test]
async fn playground_runs_any_provider_with_its_policy_and_cloud_config() {
    let token = "author-token";
    let cloud = sim_cloud::SimCloud::start("127.0.0.1:0", token)
        .await
        .unwrap();
    for name in ["node-1", "node-2"] {
        cloud.with_state(|s| s.create_instance(sim_cloud::model::NewInstance::named(name)));
    }
    let dir = TempDir::new("playground-any");
    let author = dir.path().join("author");
    let credentials = author.join("credentials");
    std::fs::create_dir_all(&credentials).unwrap();
    std::fs::write(credentials.join("token"), token).unwrap();
    let policy = author.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "allowedOutboundHosts: ['{u}']\ncredentials: [{{destination: '{u}', bearerTokenFile: credentials/token}}]\n",
            u = cloud.url()
        ),
    )
    .unwrap();
    let config = author.join("cloud.json");
    std::fs::write(&config, format!(r#"{{"endpoint": "{}"}}"#, cloud.url())).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let run_reading = |policy: &std::path::Path, credentials: &std::path::Path| {
        tokio::process::Command::new(built_bin("wasm-ccm-playground"))
            .args(["--cloud", "none", "--nodes", "2"])
            .arg("--provider")
            .arg(guest("reference_provider"))
            .arg("--policy")
            .arg(policy)
            .arg("--credentials-dir")
            .arg(credentials)
            .arg("--cloud-config")
            .arg(&config)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .arg("--work-dir")
            .arg(dir.path().join("work"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let run = |policy: &std::path::Path| run_reading(policy, &credentials);
    let mut child = run(&policy);
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let output = started(&mut lines).await;
    // Keep reading both pipes: a full one would stop the playground.
    let mut errors = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    tokio::spawn(async move { while let Ok(Some(_)) = errors.next_line().await {} });
    assert!(output.contains("provider: simcloud loaded"), "{output}");
    assert!(
        output.contains("instance-metadata(node-1) -> simcloud://"),
        "{output}"
    );
    kubectl_until(
        &kubeconfig,
        &["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"],
        "both nodes initialized",
        |text| text.matches("simcloud://").count() == 2,
    )
    .await;
    child.kill().await.unwrap();

    let bad = author.join("bad.yaml");
    std::fs::write(&bad, "allowedOutboundHost: []\n").unwrap();
    let out = run(&bad).wait_with_output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("a bad policy stops the playground")
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&bad.display().to_string()) && stderr.contains("allowedOutboundHost"),
        "{stderr}"
    );

    // The author's directory, holding the policy, is no credentials directory.
    let out = run_reading(&policy, &author).wait_with_output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("a credentials directory holding the policy stops the playground")
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--credentials-dir {}", author.display()))
            && stderr.contains("holds the provider's policy"),
        "{stderr}"
    );
}

/// `--without-ccm` prints the `wasm-ccm` command to run against the playground's
/// cluster and cloud; run as printed, it initializes the nodes.
#[tokio::test]
async fn the_printed_wasm_ccm_command_works_as_printed() {
    let dir = TempDir::new("playground-without-ccm");
    let kubeconfig = dir.path().join("kubeconfig");
    let (mut child, output) = playground(
        "simcloud",
        "reference_provider",
        &["--without-ccm", "--nodes", "2"],
        &dir,
    )
    .await;
    let printed = output
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("wasm-ccm --"))
        .unwrap_or_else(|| panic!("no wasm-ccm command printed:\n{output}"));
    let mut words = printed.split_whitespace().skip(1);
    let port = wasm_ccm_tests::listening_port();
    let mut command = tokio::process::Command::new(built_bin("wasm-ccm"));
    command.args(words.by_ref());
    let mut ccm = wasm_ccm_tests::serve_on(&mut command, port)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = tokio::process::Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"])
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.matches("simcloud://").count() == 2 {
            break;
        }
        if let Ok(Some(status)) = ccm.try_wait() {
            panic!("{printed}\nexited: {status:?}");
        }
        assert!(Instant::now() < deadline, "nodes not initialized: {text:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ccm.kill().await.unwrap();
    child.kill().await.unwrap();
}

#[tokio::test]
async fn playground_runs_the_openstack_provider_against_keystone_and_the_double() {
    let dir = TempDir::new("playground-openstack");
    let kubeconfig = dir.path().join("kubeconfig");
    let (_child, output) =
        playground("openstack", "openstack_provider", &["--nodes", "2"], &dir).await;
    assert!(
        output.contains("Keystone:                 http://127.0.0.1:"),
        "{output}"
    );
    assert!(output.contains("provider: openstack loaded"), "{output}");
    // The Service gets an Octavia load balancer's floating IP (the public network's).
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ],
        "the load balancer's floating IP",
        |ip| ip.starts_with("203.0.113."),
    )
    .await;
    // The printed openstacksdk command, a real client, sees the servers and the load
    // balancer through the application credential.
    let printed = run_printed(&output, "import openstack").await;
    assert!(printed.contains("('node-1', 'ACTIVE')"), "{printed}");
    assert!(
        printed.contains("kube_service_kubernetes_default_web"),
        "{printed}"
    );
}

/// `--cloud huaweicloud`: the Huawei Cloud double, deploy/huaweicloud's policy made for
/// it, the shared ELB's EIP as the Service's address, and the printed command (Huawei's
/// own Python SDK, signing with the key) sees the servers and the load balancer.
#[tokio::test]
async fn playground_runs_the_huaweicloud_provider_against_the_double() {
    let dir = TempDir::new("playground-huaweicloud");
    let kubeconfig = dir.path().join("kubeconfig");
    let (_child, output) = playground(
        "huaweicloud",
        "huaweicloud_provider",
        &["--nodes", "2"],
        &dir,
    )
    .await;
    assert!(output.contains("Huawei Cloud double:"), "{output}");
    assert!(output.contains("provider: huaweicloud loaded"), "{output}");
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ],
        "the shared ELB's EIP",
        |ip| ip.starts_with("203.0.113."),
    )
    .await;
    let printed = run_printed(&output, "huaweicloudsdkecs").await;
    assert!(printed.contains("('node-1', 'ACTIVE')"), "{printed}");
    assert!(
        printed.contains("('k8s_service_kubernetes_default_web', 'ACTIVE')"),
        "{printed}"
    );
}

/// `--cloud k3s`: no cloud, Nodes annotated as the K3s agent annotates them; the K3s
/// provider, run with deploy/k3s's policy, cloud config and flags, initializes them from
/// the annotations (`k3s://` provider IDs, the agent's address) and gives the Service an
/// address from the documented pool.
#[tokio::test]
async fn playground_runs_the_k3s_provider_on_annotated_nodes() {
    let dir = TempDir::new("playground-k3s");
    let kubeconfig = dir.path().join("kubeconfig");
    let (_child, output) = playground("k3s", "k3s_provider", &["--nodes", "2"], &dir).await;
    assert!(output.contains("provider: k3s loaded"), "{output}");
    assert!(
        output.contains("instance-metadata(node-1) -> k3s://node-1"),
        "{output}"
    );
    kubectl_until(
        &kubeconfig,
        &["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"],
        "both Nodes initialized",
        |ids| {
            ids.split_whitespace()
                .filter(|i| i.starts_with("k3s://"))
                .count()
                == 2
        },
    )
    .await;
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "node",
            "node-1",
            "-o",
            "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
        ],
        "node-1's InternalIP from its annotation",
        |ip| ip == "10.0.0.11",
    )
    .await;
    // The Service gets the first address of deploy/k3s's pool, recorded where kube-vip
    // reads it.
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip} {.metadata.annotations.kube-vip\\.io/loadbalancerIPs}",
        ],
        "the Service's address from the pool",
        |out| out == "192.0.2.10 192.0.2.10",
    )
    .await;
}

/// `--apiserver real`: the playground runs kube-apiserver and etcd (as
/// scripts/ensure-kube-apiserver.sh builds them) instead of the double; kubectl and
/// the controllers talk to the real server, the simulated kubelets post status to it,
/// and SIGTERM stops the servers and removes their data.
#[tokio::test]
async fn playground_runs_on_the_real_api_server() {
    let dir = TempDir::new("playground-real");
    let kubeconfig = dir.path().join("kubeconfig");
    let args = [
        "--apiserver",
        "real",
        "--nodes",
        "2",
        "--node-monitor-grace-period",
        "1s",
    ];
    let (mut child, output) = playground("simcloud", "reference_provider", &args, &dir).await;
    assert!(output.contains("(kube-apiserver)"), "{output}");
    assert!(
        output.contains("instance-metadata(node-1) -> simcloud://"),
        "{output}"
    );
    // The real server answers (its version is the pinned release's).
    let version = kubectl_until(
        &kubeconfig,
        &["version", "-o", "json"],
        "the server's version",
        |out| out.contains("serverVersion"),
    )
    .await;
    assert!(version.contains("\"gitVersion\": \"v1.37."), "{version}");
    kubectl_until(
        &kubeconfig,
        &["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"],
        "both Nodes initialized",
        |ids| ids.split_whitespace().count() == 2 && ids.contains("simcloud://"),
    )
    .await;
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ],
        "the load balancer's address",
        |ip| !ip.is_empty(),
    )
    .await;
    // The printed command stops an instance: its kubelet stops posting, and the
    // lifecycle controller taints the Node on the real server.
    run_printed(&output, "\"stopped\"").await;
    kubectl_until(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={.items[*].spec.taints[*].key}",
        ],
        "the stopped instance's Node tainted shut down",
        |taints| taints.contains("node.cloudprovider.kubernetes.io/shutdown"),
    )
    .await;
    // SIGTERM: the playground stops its servers and removes their data directory.
    let data = dir.path().join("work/kube-apiserver");
    assert!(data.join("audit.log").exists(), "{}", data.display());
    // SAFETY: signalling our own child by its PID.
    unsafe {
        libc::kill(child.id().unwrap() as libc::pid_t, libc::SIGTERM);
    }
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the playground stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(!data.exists(), "{} left behind", data.display());
}

#[tokio::test]
async fn playground_takes_a_signed_provider_from_an_oci_registry() {
    use wasm_ccm_tests::oci_registry::{PASSWORD, Registry};
    let registry = Registry::start().await;
    let dir = TempDir::new("playground-oci");
    let credentials = dir.path().join("registry.json");
    std::fs::write(&credentials, registry.docker_config(PASSWORD)).unwrap();
    let pushed = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin())
        .arg("push")
        .arg(guest("reference_provider"))
        .arg(format!("oci://{}/providers/simcloud:v1", registry.host))
        .arg("--registry-credentials")
        .arg(&credentials)
        .arg("--registry-ca")
        .arg(&registry.ca_file)
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&pushed.stdout).into_owned();
    assert!(
        pushed.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let pinned = printed
        .lines()
        .find_map(|l| l.strip_prefix("reference: "))
        .unwrap_or_else(|| panic!("{printed}"))
        .to_owned();
    let (key, public) = registry.key_pair("release");
    registry.sign(&key, pinned.trim_start_matches("oci://"));
    let public_file = dir.path().join("release.pub");
    std::fs::write(&public_file, public).unwrap();

    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = tokio::process::Command::new(built_bin("wasm-ccm-playground"))
        .args(["--cloud", "simcloud", "--nodes", "2"])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .arg("--provider")
        .arg(&pinned)
        .arg("--key")
        .arg(&public_file)
        .arg("--registry-credentials")
        .arg(&credentials)
        .arg("--registry-ca")
        .arg(&registry.ca_file)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let output = started(&mut lines).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    assert!(
        output.contains(&format!("provider:                 {pinned}")),
        "{output}"
    );
    assert!(
        output.contains("cosign signature verified, signed by"),
        "{output}"
    );
    assert!(output.contains("provider: simcloud loaded"), "{output}");
    // The controllers pull it themselves: the source is installed, not the component.
    let providers = dir.path().join("work/providers");
    assert!(providers.join("simcloud.source.yaml").is_file());
    assert!(!providers.join("simcloud.wasm").exists());
    kubectl_until(
        &kubeconfig,
        &["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"],
        "both Nodes initialized by the pulled provider",
        |ids| ids.matches("simcloud://").count() == 2,
    )
    .await;
    child.kill().await.unwrap();
}
