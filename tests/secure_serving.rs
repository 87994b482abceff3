//! The secure port as deployed: HTTPS (a self-signed certificate, or certificate files
//! re-read when they change), health paths open to anyone, `/metrics` only for users
//! the API server double's `TokenReview` and `SubjectAccessReview` vouch for (bearer
//! tokens, or client certificates of the CA the API server publishes), answers cached;
//! plain HTTP only with `--serve-plain-http`, and never together with TLS flags.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use wasm_ccm_tests::https::{Credentials, TestCa, https_get};
use wasm_ccm_tests::{
    Stack, TempDir, hand_down, http_get, kubelet_publish, listening_port, metric, wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(60);
const SCRAPER: &str = "system:serviceaccount:monitoring:prometheus";

/// The status of `GET path` with `credentials` (0 when no answer came).
async fn status(port: u16, path: &str, credentials: &Credentials) -> u16 {
    https_get(port, path, credentials)
        .await
        .map(|a| a.status)
        .unwrap_or(0)
}

/// `wasm_ccm_secure_port_tls_reloads_total` of `material` with `result`, as `/metrics`
/// answers `credentials` (0 while it does not).
async fn tls_reloads(port: u16, credentials: &Credentials, material: &str, result: &str) -> f64 {
    let text = https_get(port, "/metrics", credentials)
        .await
        .map(|a| a.body)
        .unwrap_or_default();
    metric(
        &text,
        &format!(
            "wasm_ccm_secure_port_tls_reloads_total{{material=\"{material}\",result=\"{result}\"}}"
        ),
    )
}

/// `wasm-ccm` with the secure port as deployed plus `flags`, once `/readyz` answers
/// 200 over HTTPS to `ready_with`: its port and process.
async fn secure_manager(
    stack: &Stack,
    flags: &[&str],
    ready_with: &Credentials,
) -> (u16, tokio::process::Child) {
    let port = listening_port();
    let child = stack
        .secure_controller_manager_command(port, flags)
        .spawn()
        .unwrap();
    wait_until(TIMEOUT, "/readyz over HTTPS", || async {
        status(port, "/readyz", ready_with).await == 200
    })
    .await;
    (port, child)
}

/// How many `kind` reviews (`tokenreviews`, `subjectaccessreviews`) the double served.
fn reviews(stack: &Stack, kind: &str) -> u64 {
    stack
        .api
        .request_counts()
        .iter()
        .filter(|(a, _)| a.resource == kind && a.verb == "create")
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_open_and_metrics_need_a_user_the_api_server_allows() {
    let stack = Stack::start().await;
    let groups = ["system:serviceaccounts", "system:authenticated"];
    stack.api.add_user("t-scraper", SCRAPER, &groups);
    stack
        .api
        .add_user("t-other", "system:serviceaccount:default:default", &groups);
    stack.api.allow_non_resource(SCRAPER, "get", "/metrics");
    // The API server vouching for a token without naming a user: not a user.
    stack.api.add_user("t-nameless", "", &groups);
    let anonymous = Credentials::default();
    let (port, _ccm) = secure_manager(&stack, &["--leader-elect=false"], &anonymous).await;

    // Health paths answer anyone; the self-signed certificate names localhost.
    for path in ["/healthz", "/livez", "/readyz"] {
        let answer = https_get(port, path, &anonymous).await.unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    let answer = https_get(port, "/healthz", &anonymous).await.unwrap();
    let names = wasm_ccm_tests::https::subject_alt_names(&answer.server_certificate);
    for name in ["localhost", "127.0.0.1"] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    // Plain HTTP gets no answer from the TLS port.
    assert_ne!(
        http_get(port, "/healthz")
            .await
            .map(|(s, _)| s)
            .unwrap_or(0),
        200
    );

    // /metrics: anonymous and a user without the grant are forbidden, a token the API
    // server does not know is unauthorized, the granted ServiceAccount reads it.
    let answer = https_get(port, "/metrics", &anonymous).await.unwrap();
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(
        answer
            .body
            .contains(r#"User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{}",
        answer.body
    );
    assert_eq!(
        status(port, "/metrics", &Credentials::token("t-other")).await,
        403
    );
    let answer = https_get(port, "/metrics", &Credentials::token("t-forged"))
        .await
        .unwrap();
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert!(
        answer.body.contains(r#""reason":"Unauthorized""#),
        "{}",
        answer.body
    );
    assert_eq!(
        status(port, "/metrics", &Credentials::token("t-nameless")).await,
        401
    );
    let scraper = Credentials::token("t-scraper");
    let answer = https_get(port, "/metrics", &scraper).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.body.contains("wasm_ccm_provider_calls_total"),
        "{}",
        answer.body
    );
    // Only the exact always-allowed paths skip authorization, as upstream.
    assert_eq!(
        status(port, "/healthz/leaderElection", &anonymous).await,
        403
    );
    assert_eq!(status(port, "/healthz/leaderElection", &scraper).await, 403);

    // Answers are cached (10 s): more scrapes cost the API server no more reviews.
    let (tokens, accesses) = (
        reviews(&stack, "tokenreviews"),
        reviews(&stack, "subjectaccessreviews"),
    );
    for _ in 0..5 {
        assert_eq!(status(port, "/metrics", &scraper).await, 200);
    }
    assert_eq!(reviews(&stack, "tokenreviews"), tokens);
    assert_eq!(reviews(&stack, "subjectaccessreviews"), accesses);
    let text = https_get(port, "/metrics", &scraper).await.unwrap().body;
    assert_eq!(
        metric(
            &text,
            r#"apiserver_delegated_authn_request_total{code="201"}"#
        ),
        tokens as f64
    );
    assert_eq!(
        metric(
            &text,
            r#"apiserver_delegated_authz_request_total{code="201"}"#
        ),
        accesses as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_files_are_served_and_a_renewed_pair_is_picked_up() {
    let stack = Stack::start().await;
    let tmp = TempDir::new("serving-certs");
    let tls = tmp.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    let ca = TestCa::new();
    let first = ca.server(&["localhost", "127.0.0.1"]);
    kubelet_publish(
        &tls,
        &[
            ("tls.crt", first.cert_pem.as_bytes()),
            ("tls.key", first.key_pem.as_bytes()),
        ],
    );
    let (cert, key) = (tls.join("tls.crt"), tls.join("tls.key"));
    let flags = |cert: &std::path::Path, key: &std::path::Path| {
        vec![
            "--leader-elect=false".to_owned(),
            format!("--tls-cert-file={}", cert.display()),
            format!("--tls-private-key-file={}", key.display()),
            // Everything open: the certificate is what this test is about.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".to_owned(),
        ]
    };
    let args = flags(&cert, &key);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Ready over HTTPS verified with the CA that signed the files' certificate.
    let trusting = Credentials {
        trust: Some(ca.der()),
        ..Credentials::default()
    };
    let (port, _ccm) = secure_manager(&stack, &args, &trusting).await;
    assert_eq!(status(port, "/metrics", &trusting).await, 200);
    let served = |answer: wasm_ccm_tests::https::Answer| answer.server_certificate;
    let first_der = served(https_get(port, "/healthz", &trusting).await.unwrap());

    // Renewed (kubelet swaps the Secret's files): new connections get the new pair.
    let second = ca.server(&["localhost", "127.0.0.1"]);
    kubelet_publish(
        &tls,
        &[
            ("tls.crt", second.cert_pem.as_bytes()),
            ("tls.key", second.key_pem.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the renewed certificate served", || async {
        https_get(port, "/healthz", &trusting)
            .await
            .is_ok_and(|a| a.server_certificate != first_der)
    })
    .await;
    let second_der = served(https_get(port, "/healthz", &trusting).await.unwrap());

    // A broken update (a key of another certificate) is refused: the renewed pair
    // keeps serving.
    let other = ca.server(&["localhost"]);
    kubelet_publish(
        &tls,
        &[
            ("tls.crt", second.cert_pem.as_bytes()),
            ("tls.key", other.key_pem.as_bytes()),
        ],
    );
    wait_until(TIMEOUT, "the broken update refused", || async {
        tls_reloads(port, &trusting, "serving-certificate", "error").await == 1.0
    })
    .await;
    let answer = https_get(port, "/healthz", &trusting).await.unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.server_certificate, second_der);
    assert_eq!(
        tls_reloads(port, &trusting, "serving-certificate", "success").await,
        1.0
    );

    // Bad files at start: the process exits naming them.
    let garbage = tmp.path().join("garbage.crt");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let args = flags(&garbage, &key);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stderr =
        refused(&mut stack.secure_controller_manager_command(listening_port(), &args)).await;
    assert!(
        stderr.contains(&format!("{}: no CERTIFICATE block", garbage.display())),
        "{stderr}"
    );
    let stderr = refused(&mut stack.secure_controller_manager_command(
        listening_port(),
        &[&format!("--tls-cert-file={}", cert.display())],
    ))
    .await;
    assert!(
        stderr.contains("--tls-cert-file needs --tls-private-key-file"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_of_the_published_client_ca_authenticate() {
    let stack = Stack::start().await;
    let clients = TestCa::new();
    let configmap: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
        "data": {"client-ca-file": clients.pem()}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(stack.client(), "kube-system")
        .create(&PostParams::default(), &configmap)
        .await
        .unwrap();
    stack
        .api
        .allow_non_resource("system:monitoring", "get", "/metrics");
    let (port, _ccm) =
        secure_manager(&stack, &["--leader-elect=false"], &Credentials::default()).await;

    // Common Name: the user; Organization: its groups. No TokenReview is needed.
    let granted = Credentials {
        client: Some(clients.client("metrics-scraper", &["system:monitoring"])),
        ..Credentials::default()
    };
    let answer = https_get(port, "/metrics", &granted).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(reviews(&stack, "tokenreviews"), 0);
    let other = Credentials {
        client: Some(clients.client("someone", &["system:nobody"])),
        ..Credentials::default()
    };
    let answer = https_get(port, "/metrics", &other).await.unwrap();
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(
        answer.body.contains(r#"User \"someone\""#),
        "{}",
        answer.body
    );
    // A certificate of another CA does not get through the handshake.
    let stranger = Credentials {
        client: Some(TestCa::new().client("metrics-scraper", &["system:monitoring"])),
        ..Credentials::default()
    };
    assert!(https_get(port, "/metrics", &stranger).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_only_with_the_explicit_flag() {
    let stack = Stack::start().await;
    // The harness' default command passes --serve-plain-http: /metrics for anyone.
    let port = listening_port();
    let _plain = stack.controller_manager(port, &["--leader-elect=false"]);
    wait_until(TIMEOUT, "/readyz over plain HTTP", || async {
        http_get(port, "/readyz").await.is_ok_and(|(s, _)| s == 200)
    })
    .await;
    assert_eq!(http_get(port, "/metrics").await.unwrap().0, 200);
    assert!(
        https_get(port, "/healthz", &Credentials::default())
            .await
            .is_err()
    );

    let stderr = refused(&mut stack.controller_manager_command(
        listening_port(),
        &[
            "--tls-cert-file=/nonexistent/tls.crt",
            "--tls-private-key-file=/nonexistent/tls.key",
        ],
    ))
    .await;
    assert!(
        stderr.contains("--serve-plain-http serves no TLS"),
        "{stderr}"
    );
}

/// A listening socket handed down (`LISTEN_FDS`, docs/controllers.md) is served where
/// the flags say, while this test process still holds it (the controller manager binding
/// the port itself would fail: it is taken); a socket elsewhere than
/// `--bind-address:--secure-port`, or with `--secure-port=0`, stops the process naming
/// both; one handed down for another process (`LISTEN_PID`) is a warning and not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_handed_down_is_served_only_where_the_flags_say() {
    let stack = Stack::start().await;
    let port = listening_port();
    let mut command = stack.controller_manager_command(port, &["--leader-elect=false"]);
    command.env("RUST_LOG", "warn,wasm_ccm::serving=info");
    let (_served, log) = wasm_ccm_tests::spawn_logged(command);
    wait_until(TIMEOUT, "/readyz on the socket handed down", || async {
        http_get(port, "/readyz").await.is_ok_and(|(s, _)| s == 200)
    })
    .await;
    let said = log.lock().unwrap().clone();
    assert!(
        said.contains("serving on the listening socket handed down (LISTEN_FDS)")
            && said.contains(&format!("127.0.0.1:{port}")),
        "{said}"
    );

    // Handed a socket on one port, told another.
    let socket = listening_port();
    let told = loopback_port::reserve().unwrap();
    let mut command = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin());
    command
        .args(["--cloud-provider", &stack.provider, "--leader-elect=false"])
        .args([
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            &told.to_string(),
        ])
        .arg("--providers-dir")
        .arg(stack.dir.dir.path())
        .arg("--cloud-config")
        .arg(&stack.cloud_config)
        .arg("--kubeconfig")
        .arg(&stack.kubeconfig)
        .kill_on_drop(true);
    let stderr = refused(hand_down(&mut command, socket)).await;
    assert!(
        stderr.contains(&format!(
            "the listening socket handed down (LISTEN_FDS) listens on 127.0.0.1:{socket}, but \
             --bind-address and --secure-port say 127.0.0.1:{told}"
        )),
        "{stderr}"
    );
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", told))
            .await
            .is_err(),
        "nothing serves the port the flags named"
    );

    // Handed a socket, told to serve nothing.
    let mut command = stack.controller_manager_command(0, &["--leader-elect=false"]);
    let stderr = refused(hand_down(&mut command, socket)).await;
    assert!(
        stderr.contains(&format!(
            "listens on 127.0.0.1:{socket}, but --secure-port=0 serves nothing"
        )),
        "{stderr}"
    );

    // Handed down for another process: a warning, and the port bound as without it
    // (here it fails: this test holds it).
    let mut command = stack.controller_manager_command(socket, &["--leader-elect=false"]);
    command.env("LISTEN_PID", "1").env("RUST_LOG", "warn");
    let stderr = refused(&mut command).await;
    assert!(
        stderr.contains("LISTEN_PID=1 is not this process")
            && stderr.contains(&format!("cannot listen on 127.0.0.1:{socket}")),
        "{stderr}"
    );
}

/// Runs `command` to its end: its standard error, once it stopped (within [`TIMEOUT`])
/// and failed.
async fn refused(command: &mut tokio::process::Command) -> String {
    let stops = tokio::time::timeout(TIMEOUT, command.output());
    let out = stops.await.expect("the process stops").unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One HTTP/1.1 exchange on an open (kept-alive) connection: the status.
async fn exchange<S>(stream: &mut S, path: &str) -> u16
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
            return 0;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A connection opened with a client certificate of the CA then in force keeps
/// working only while that CA is: after `--client-ca-file` changes, its next request
/// is unauthorized (the certificate is verified on every request, as upstream does,
/// not once at the handshake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_verified_again_on_every_request() {
    let stack = Stack::start().await;
    let tmp = TempDir::new("client-ca");
    let dir = tmp.path().join("ca");
    std::fs::create_dir(&dir).unwrap();
    let (first, second) = (TestCa::new(), TestCa::new());
    kubelet_publish(&dir, &[("ca.crt", first.pem().as_bytes())]);
    let flags = [
        "--leader-elect=false".to_owned(),
        format!("--client-ca-file={}", dir.join("ca.crt").display()),
        // Authentication is what this test is about: every path authorized.
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".to_owned(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (port, _ccm) = secure_manager(&stack, &flags, &Credentials::default()).await;

    // A kept-alive connection with a certificate of the first CA.
    let certified = Credentials {
        client: Some(first.client("metrics-scraper", &["system:monitoring"])),
        ..Credentials::default()
    };
    let mut tls = wasm_ccm_tests::https::connect(port, &certified)
        .await
        .unwrap();
    assert_eq!(exchange(&mut tls, "/metrics").await, 200);

    // The CA rotated (a Secret update): the same connection's next request is 401.
    kubelet_publish(&dir, &[("ca.crt", second.pem().as_bytes())]);
    wait_until(TIMEOUT, "the new client CA loaded", || async {
        tls_reloads(port, &Credentials::default(), "client-ca", "success").await == 1.0
    })
    .await;
    assert_eq!(exchange(&mut tls, "/metrics").await, 401);
}
