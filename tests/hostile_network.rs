//! Hostile guests against the network rules: metadata and host-local addresses in every
//! spelling, loopback reached without a pattern naming it, proxies from the
//! environment, `TRACE`/`CONNECT`, a connection that lands on a forbidden address, and
//! a name that does not resolve.
//!
//! These tests aim at addresses off this machine, so they run only inside a private
//! network namespace (`unshare -rn`: nothing but loopback, and `169.254.169.254`,
//! `192.0.2.10` and `192.0.2.11` bound on it, standing for a cloud's hosts):
//! even if the code under test were wrong, no packet could leave. The one
//! ordinary test, [`network_rules_hold_in_a_private_network_namespace`], re-runs this
//! binary's `netns_` tests there; run any other way they refuse to start.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasm_ccm_host::capabilities::http_egress::EgressSettings;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::ProviderLoader;
use wasm_ccm_tests::{RawBehavior, RawServer, act, hostile, other_message};

/// Set for the tests re-run inside the namespace.
const NETNS: &str = "WASM_CCM_TEST_NETNS";
/// The proxy the environment of the re-run names (nothing else listens in the namespace).
const PROXY_PORT: u16 = 38_123;
const DENIED: &str = "request denied by the host's egress policy";

#[test]
fn network_rules_hold_in_a_private_network_namespace() {
    let exe = std::env::current_exe().expect("test executable");
    let proxy = format!("http://127.0.0.1:{PROXY_PORT}");
    let out = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--net",
            "sh",
            "-c",
            "ip link set lo up && ip addr add 169.254.169.254/32 dev lo \
             && ip addr add 192.0.2.10/32 dev lo && ip addr add 192.0.2.11/32 dev lo \
             && exec \"$@\"",
            "sh",
        ])
        .arg(&exe)
        .args(["--ignored", "--test-threads=1", "netns_"])
        .env(NETNS, "1")
        .env("HTTP_PROXY", &proxy)
        .env("HTTPS_PROXY", &proxy)
        .env("ALL_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .output()
        .expect("running unshare (util-linux) and ip (iproute2)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tests in the network namespace failed:\n{stdout}\n{stderr}"
    );
    let expected = 8;
    assert!(
        stdout.contains(&format!("test result: ok. {expected} passed")),
        "expected {expected} tests to pass in the namespace:\n{stdout}\n{stderr}"
    );
}

/// Refuses to run outside the namespace, and proves the namespace has no way out.
fn inside_the_namespace() {
    assert!(
        std::env::var_os(NETNS).is_some(),
        "run through network_rules_hold_in_a_private_network_namespace"
    );
    let out = std::net::TcpStream::connect_timeout(
        &"192.0.2.1:80".parse().unwrap(),
        Duration::from_secs(1),
    );
    assert!(
        out.is_err(),
        "the namespace must have no route off this machine"
    );
}

fn loader_with(overrides: &[(&str, &str)]) -> ProviderLoader {
    ProviderLoader::with_options(
        &EngineSettings::default(),
        &EgressSettings {
            dns_overrides: overrides
                .iter()
                .map(|(name, ip)| (name.to_string(), ip.parse().unwrap()))
                .collect(),
            ..EgressSettings::default()
        },
        Metrics::new(),
    )
    .unwrap()
}

fn denied(metrics: &str, reason: &str) -> f64 {
    wasm_ccm_tests::metric(
        metrics,
        &format!(
            r#"wasm_ccm_egress_denied_total{{provider="hostile",host="",reason="{reason}"}} "#
        ),
    )
}

/// A name the resolver cannot resolve is the transport's `DnsError` (the SDK's
/// `unreachable`), not a refused connection. (In the namespace no DNS server can be
/// reached, so the lookup fails without a packet leaving.)
#[tokio::test]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_a_name_that_does_not_resolve_is_a_dns_error() {
    inside_the_namespace();
    let loader = loader_with(&[]);
    let (_h, bad) = hostile(
        &loader,
        "allowedOutboundHosts: ['http://nothing.example.invalid']\n",
    )
    .await;
    let err = act(
        &bad,
        &[
            ("hostile/action", "fetch"),
            ("hostile/url", "http://nothing.example.invalid/"),
        ],
    )
    .await
    .unwrap_err();
    let message = other_message(&err);
    assert!(message.contains("DnsError"), "{message}");
}

#[tokio::test]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_metadata_in_every_spelling_and_by_name_is_denied() {
    inside_the_namespace();
    let loader = loader_with(&[
        ("metadata.cloud.internal", "169.254.169.254"),
        ("wire.cloud.internal", "168.63.129.16"),
        ("v6.cloud.internal", "fd00:ec2::254"),
        ("mapped.cloud.internal", "::ffff:169.254.169.254"),
    ]);
    let (_h, bad) = hostile(
        &loader,
        "allowedOutboundHosts: ['http://*.cloud.internal:*', 'http://*.example.com:*']\n",
    )
    .await;
    let literals = [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://2852039166/latest/meta-data/",
        "http://0xA9FEA9FE/latest/meta-data/",
        "http://0xa9.0xfe.0xa9.0xfe/latest/meta-data/",
        "http://0251.0376.0251.0376/latest/meta-data/",
        "http://169.254.43518/latest/meta-data/",
        "http://169.16689662/latest/meta-data/",
        "http://169.254.169.254./latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://168.63.129.16/machine?comp=goalstate",
        "http://100.100.100.200/latest/meta-data/",
        "http://0.0.0.0:10250/pods",
    ];
    let names = [
        "http://metadata.cloud.internal/latest/meta-data/",
        "http://METADATA.Cloud.internal./latest/meta-data/",
        "http://wire.cloud.internal/machine",
        "http://v6.cloud.internal/latest/meta-data/",
        "http://mapped.cloud.internal/latest/meta-data/",
    ];
    // Through the SDK's buffered client and over wasi:http's resources alike.
    for transport in ["buffered", "wasi-http"] {
        for url in literals.iter().chain(&names) {
            let err = act(
                &bad,
                &[
                    ("hostile/action", "fetch"),
                    ("hostile/url", url),
                    ("hostile/transport", transport),
                ],
            )
            .await
            .unwrap_err();
            assert_eq!(other_message(&err), DENIED, "{transport}: {url}");
        }
    }
    let metrics = loader.metrics().encode();
    // Every request was refused by the address rules, not by the allowlist.
    assert_eq!(
        denied(&metrics, "link_local")
            + denied(&metrics, "metadata")
            + denied(&metrics, "unspecified"),
        2.0 * (literals.len() + names.len()) as f64,
        "{metrics}"
    );
    assert_eq!(denied(&metrics, "not_allowed"), 0.0, "{metrics}");
}

#[tokio::test]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_loopback_is_reached_only_through_a_pattern_naming_it() {
    inside_the_namespace();
    let node_service = RawServer::start(RawBehavior::Fixed("{}")).await;
    let port = node_service.addr.port();
    let loader = loader_with(&[
        ("rebind.example.com", "127.0.0.1"),
        ("v6.example.com", "::1"),
    ]);
    let (_h, bad) = hostile(
        &loader,
        &format!("allowedOutboundHosts: ['http://*.example.com:*', 'http://localhost:{port}']\n"),
    )
    .await;
    for url in [
        format!("http://rebind.example.com:{port}/pods"),
        format!("http://v6.example.com:{port}/pods"),
        format!("http://127.0.0.1:{port}/pods"),
        format!("http://2130706433:{port}/pods"),
        format!("http://0.0.0.0:{port}/pods"),
    ] {
        for transport in ["buffered", "wasi-http"] {
            let err = act(
                &bad,
                &[
                    ("hostile/action", "fetch"),
                    ("hostile/url", &url),
                    ("hostile/transport", transport),
                ],
            )
            .await
            .unwrap_err();
            assert_eq!(other_message(&err), DENIED, "{transport}: {url}");
        }
    }
    assert_eq!(
        node_service.connections.load(Ordering::SeqCst),
        0,
        "nothing reached the loopback service"
    );
    let metrics = loader.metrics().encode();
    assert_eq!(denied(&metrics, "loopback"), 4.0, "{metrics}");
    // The pattern that names it reaches it.
    let url = format!("http://localhost:{port}/healthz");
    let info = act(&bad, &[("hostile/action", "fetch"), ("hostile/url", &url)])
        .await
        .unwrap();
    assert!(
        info.additional_labels
            .iter()
            .any(|(k, v)| k == "status" && v == "200"),
        "{info:?}"
    );
    assert_eq!(node_service.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_proxies_from_the_environment_are_ignored() {
    inside_the_namespace();
    assert_eq!(
        std::env::var("HTTP_PROXY").ok(),
        Some(format!("http://127.0.0.1:{PROXY_PORT}")),
        "the wrapper sets the proxy variables"
    );
    let proxy = tokio::net::TcpListener::bind(("127.0.0.1", PROXY_PORT))
        .await
        .unwrap();
    let proxied = Arc::new(AtomicU64::new(0));
    let counter = proxied.clone();
    let proxy_task = tokio::spawn(async move {
        while let Ok((_socket, _)) = proxy.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let cloud = RawServer::start(RawBehavior::Fixed("{}")).await;
    let loader = loader_with(&[]);
    let (_h, provider) = hostile(
        &loader,
        &format!("allowedOutboundHosts: ['{}']\n", cloud.url()),
    )
    .await;
    let url = format!("{}/v1/instances", cloud.url());
    act(
        &provider,
        &[("hostile/action", "fetch"), ("hostile/url", &url)],
    )
    .await
    .unwrap();
    assert_eq!(cloud.connections.load(Ordering::SeqCst), 1);
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "no request went to the proxy"
    );
    proxy_task.abort();
}

#[tokio::test]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_trace_and_connect_are_refused() {
    inside_the_namespace();
    let cloud = RawServer::start(RawBehavior::Fixed("{}")).await;
    let loader = loader_with(&[]);
    let (_h, bad) = hostile(
        &loader,
        &format!("allowedOutboundHosts: ['{}']\n", cloud.url()),
    )
    .await;
    let url = format!("{}/", cloud.url());
    for method in ["TRACE", "CONNECT"] {
        let result = act(
            &bad,
            &[
                ("hostile/action", "fetch"),
                ("hostile/url", &url),
                ("hostile/method", method),
            ],
        )
        .await;
        assert!(result.is_err(), "{method}: {result:?}");
    }
    assert_eq!(cloud.connections.load(Ordering::SeqCst), 0);
    assert!(denied(&loader.metrics().encode(), "method") >= 1.0);
}

/// What a [`byte_counter`] saw: connections, bytes received, connections closed.
#[derive(Clone, Default)]
struct Seen {
    connections: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    closed: Arc<AtomicU64>,
}

/// A TCP listener on `addr` recording the connections, the bytes they sent and when
/// they closed.
async fn byte_counter(addr: SocketAddr) -> Seen {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let seen = Seen::default();
    let recorder = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            recorder.connections.fetch_add(1, Ordering::SeqCst);
            let recorder = recorder.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    recorder.bytes.fetch_add(n as u64, Ordering::SeqCst);
                }
                recorder.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    seen
}

#[tokio::test]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_a_connection_landing_on_a_forbidden_address_sends_nothing() {
    inside_the_namespace();
    // The namespace binds 169.254.169.254 on its loopback: a stand-in metadata service
    // that only exists here.
    let seen = byte_counter("169.254.169.254:8080".parse().unwrap()).await;
    let loader = loader_with(&[]);
    // The broker's client itself, below every other check: the connector must drop the
    // connection before a byte of the request is written.
    let client = loader.broker().client().clone();
    let err = client
        .get("http://169.254.169.254:8080/latest/meta-data/")
        .header("authorization", "Bearer would-leak")
        .send()
        .await
        .unwrap_err();
    let chain = wasm_ccm::error_chain(&err);
    assert!(chain.contains("which providers may never reach"), "{chain}");
    // The connection was made (the address is only checked once connected) and closed
    // by the connector: wait for the close, then count what it carried.
    wasm_ccm_tests::eventually(
        Duration::from_secs(10),
        "the refused connection to close",
        || seen.closed.load(Ordering::SeqCst) == 1,
    )
    .await;
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.bytes.load(Ordering::SeqCst),
        0,
        "no request byte was sent"
    );
}

/// AWS signing for a foreign service's host: under a wildcard AWS destination, the
/// provider names `ec2` (`x-wasm-ccm-aws-service`) on a request to an API Gateway
/// stage it controls (`attacker.execute-api.us-east-1.amazonaws.com`, which would echo
/// the signed request and its session token back). The host signs only for the
/// service the host name implies: that request never leaves, while one to EC2's own
/// host is signed and sent.
#[tokio::test]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_aws_keys_never_sign_for_a_foreign_service_s_host() {
    inside_the_namespace();
    let attacker = byte_counter("192.0.2.10:443".parse().unwrap()).await;
    let ec2 = byte_counter("192.0.2.11:443".parse().unwrap()).await;
    let loader = loader_with(&[
        ("attacker.execute-api.us-east-1.amazonaws.com", "192.0.2.10"),
        ("ec2.us-east-1.amazonaws.com", "192.0.2.11"),
    ]);
    let policy = "allowedOutboundHosts: ['https://*.us-east-1.amazonaws.com']\ncredentials:\n  - destination: 'https://*.us-east-1.amazonaws.com'\n    aws: {services: [ec2], accessKeyIdFile: aws-id, secretAccessKeyFile: aws-secret}\n";
    let dir = wasm_ccm_tests::ProviderDir::new(
        "fixture_hostile",
        "hostile",
        policy,
        wasm_ccm_tests::TOKEN,
    );
    std::fs::write(dir.dir.path().join("aws-id"), "AKIDEXAMPLE").unwrap();
    std::fs::write(dir.dir.path().join("aws-secret"), "secret-example").unwrap();
    let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
    let send = |url: &'static str, header: Option<&'static str>| {
        let provider = provider.clone();
        async move {
            let mut annotations = vec![
                ("hostile/action", "fetch"),
                ("hostile/url", url),
                ("hostile/method", "POST"),
                (
                    "hostile/form",
                    "Action=DescribeInstances&Version=2016-11-15",
                ),
            ];
            annotations.extend(header.map(|h| ("hostile/header", h)));
            act(&provider, &annotations).await
        }
    };
    for header in [Some("x-wasm-ccm-aws-service: ec2"), None] {
        let refused = send(
            "https://attacker.execute-api.us-east-1.amazonaws.com/",
            header,
        )
        .await
        .unwrap_err();
        assert!(
            other_message(&refused).contains(DENIED),
            "{header:?}: {refused}"
        );
    }
    assert_eq!(
        attacker.connections.load(Ordering::SeqCst),
        0,
        "nothing reached the stage"
    );
    assert_eq!(
        denied(&loader.metrics().encode(), "credential_unavailable"),
        2.0
    );
    // EC2's own host: signed and sent (the stand-in speaks no TLS, so the request
    // fails after its first bytes arrived).
    let _ = send("https://ec2.us-east-1.amazonaws.com/", None).await;
    wasm_ccm_tests::eventually(Duration::from_secs(10), "bytes at the EC2 stand-in", || {
        ec2.bytes.load(Ordering::SeqCst) > 0
    })
    .await;
}

/// occm sends the Keystone token to every endpoint of the catalog, plain `http://` ones
/// included; the host does only when the keystone rule says `allowPlaintext: true`.
/// Without it, a request to such an endpoint (Nova at `nova.cloud.example`, 192.0.2.10
/// here, behind a Keystone the rule reaches) is refused by name before anything is
/// sent; with it, the endpoint gets a token Keystone accepts.
#[tokio::test(flavor = "current_thread")]
#[ignore = "run inside a private network namespace by network_rules_hold_in_a_private_network_namespace"]
async fn netns_a_plain_http_catalog_endpoint_gets_the_token_only_when_the_rule_says_so() {
    use wasm_ccm_tests::keystone::{PASSWORD, PROJECT, Service, USER, get};
    inside_the_namespace();
    let (logs, _guard) = wasm_ccm_tests::CapturedLogs::install_at(tracing::Level::DEBUG);
    let keystone = Arc::new(keystone_peer::Keystone::start().await);
    let project = keystone.create_project(PROJECT).await;
    keystone.create_user(USER, PASSWORD, &project).await;
    let nova = Service::start_on(keystone.clone(), "192.0.2.10:0").await;
    let port = nova.url.rsplit(':').next().unwrap().to_owned();
    let endpoint = format!("http://nova.cloud.example:{port}/compute/v2.1");
    keystone
        .register_endpoint("compute", "nova", "public", &endpoint)
        .await;
    let servers = format!("{endpoint}/servers");
    for allow in [false, true] {
        let policy = format!(
            "credentials:\n  - destination: {url}\n{plaintext}    keystone:\n      \
             authUrl: {url}/v3\n      region: RegionOne\n      userName: {USER}\n      \
             userDomainName: Default\n      passwordFile: secret\n      \
             projectName: {PROJECT}\n      projectDomainId: default\n",
            url = keystone.url(),
            plaintext = if allow {
                "    allowPlaintext: true\n"
            } else {
                ""
            },
        );
        let dir = wasm_ccm_tests::ProviderDir::new(
            "fixture_hostile",
            "hostile",
            &policy,
            wasm_ccm_tests::TOKEN,
        );
        std::fs::write(dir.dir.path().join("secret"), PASSWORD).unwrap();
        let loader = loader_with(&[("nova.cloud.example", "192.0.2.10")]);
        let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
        let answer = get(&provider, &servers).await;
        if allow {
            let answer = answer.unwrap();
            assert_eq!(
                wasm_ccm_tests::label(&answer, "status"),
                "200",
                "{answer:?}"
            );
            assert_eq!(nova.accepted().len(), 1, "one token, accepted by Keystone");
        } else {
            let refused = answer.unwrap_err();
            assert!(refused.contains(DENIED), "{refused}");
            assert_eq!(
                denied(&loader.metrics().encode(), "keystone_plaintext"),
                1.0
            );
            assert!(nova.received().is_empty(), "nothing reached Nova");
            let text = logs.text();
            assert!(
                text.contains(&format!(
                    "{endpoint} is a plain http:// endpoint of the Keystone catalog: the host \
                     sends it the token only when the keystone rule says `allowPlaintext: true`"
                )),
                "{text}"
            );
        }
    }
}
