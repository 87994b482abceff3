//! Hostile clients of the secure port, as deployed (HTTPS on the node's network): an
//! attacker with no credentials who floods it with connections that never start TLS,
//! or with TLS connections that send their request headers a byte at a time, from
//! many addresses, must not keep the kubelet's liveness probe from answering (deploy/:
//! HTTPS `/healthz`, 5 s timeout, restarted after 3 failures).
//!
//! Attackers connect from 127.0.0.10 and up (each address a client of its own, as the
//! server counts them); the probe from 127.0.0.1.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasm_ccm_tests::https::{Credentials, TestCa, connect_from, https_get, tcp_from};
use wasm_ccm_tests::{Stack, TempDir, kubelet_publish, listening_port, metric, wait_until};

const TIMEOUT: Duration = Duration::from_secs(60);
/// deploy/'s liveness probe `timeoutSeconds`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The server's header read timeout (upstream's 32 s).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// The longest an attack runs.
const ATTACK: Duration = Duration::from_secs(120);

/// `wasm-ccm` with the secure port as deployed (self-signed certificate; `/metrics`
/// open too, for the test to read what the port counted), once `/healthz` answers: its
/// port and process.
async fn secure_manager(stack: &Stack) -> (u16, tokio::process::Child) {
    let port = listening_port();
    let child = stack
        .secure_controller_manager_command(
            port,
            &[
                "--leader-elect=false",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            ],
        )
        .spawn()
        .unwrap();
    wait_until(TIMEOUT, "/healthz over HTTPS", || async {
        probe(port).await == Some(200)
    })
    .await;
    (port, child)
}

/// One liveness probe from 127.0.0.1: its status, if it answered within the probe's
/// timeout.
async fn probe(port: u16) -> Option<u16> {
    tokio::time::timeout(
        PROBE_TIMEOUT,
        https_get(port, "/healthz", &Credentials::default()),
    )
    .await
    .ok()?
    .ok()
    .map(|answer| answer.status)
}

/// `wasm_ccm_secure_port_connections_closed_total{reason}`.
async fn closed(port: u16, reason: &str) -> f64 {
    let credentials = Credentials::default();
    let text = https_get(port, "/metrics", &credentials)
        .await
        .map(|a| a.body)
        .unwrap_or_default();
    metric(
        &text,
        &format!("wasm_ccm_secure_port_connections_closed_total{{reason=\"{reason}\"}}"),
    )
}

/// The `n`-th attacker address: 127.0.0.10 and up.
fn attacker(n: usize) -> IpAddr {
    IpAddr::from([127, 0, 0, 10 + n as u8])
}

/// Eleven probes, ten seconds apart as the kubelet sends them, compressed to one a
/// second: every one must answer 200 within the probe's timeout.
async fn probes_keep_answering(port: u16) {
    let mut failed = Vec::new();
    for i in 0..11 {
        let started = Instant::now();
        match probe(port).await {
            Some(200) => {}
            other => failed.push(format!(
                "probe {i}: {other:?} after {:?}",
                started.elapsed()
            )),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(failed.is_empty(), "probes failed: {failed:?}");
}

/// An attacker opening TCP connections that never start TLS, from many addresses,
/// re-opening each one the server closes: the handshake slots go to the clients holding
/// fewest, so the probe (one handshake) always gets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tcp_connections_that_never_start_tls_cannot_starve_the_liveness_probe() {
    let stack = Stack::start().await;
    let (port, _ccm) = secure_manager(&stack).await;

    // 20 addresses x 12 connections: far more than the port's 64 handshake slots.
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for n in 0..20 {
        for _ in 0..12 {
            let (stop, opened) = (stop.clone(), opened.clone());
            attackers.push(tokio::spawn(async move {
                // Bounded: at most 2,000 connections each, for at most 2 minutes.
                let started = Instant::now();
                for _ in 0..2000 {
                    if stop.load(Ordering::Relaxed) || started.elapsed() > ATTACK {
                        break;
                    }
                    let Ok(mut tcp) = tcp_from(attacker(n), port).await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    // Never sends a byte; waits for the server to close it.
                    let mut byte = [0u8; 1];
                    let _ =
                        tokio::time::timeout(Duration::from_secs(15), tcp.read(&mut byte)).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }
    }
    wait_until(TIMEOUT, "the attack holds the handshake slots", || async {
        opened.load(Ordering::Relaxed) >= 240
    })
    .await;

    probes_keep_answering(port).await;

    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.abort();
    }
    // The port defended itself: connections over a client's share were refused and
    // handshakes of the heaviest clients given to the probes.
    assert!(closed(port, "client-handshakes").await > 0.0);
    assert!(closed(port, "evicted-handshake").await > 0.0);
}

/// An attacker holding TLS connections open by sending its request headers one byte
/// a second, from many addresses (more connections than the port holds): slots go to
/// the clients holding fewest, and a connection whose headers take longer than the
/// header read timeout is closed however steadily its bytes come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_sent_a_byte_at_a_time_cannot_starve_the_liveness_probe() {
    let stack = Stack::start().await;
    let (port, _ccm) = secure_manager(&stack).await;

    // 20 addresses x 16 TLS connections: more than the port's 256 connection slots.
    let stop = Arc::new(AtomicBool::new(false));
    let established = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for n in 0..20 {
        for _ in 0..16 {
            let (stop, established) = (stop.clone(), established.clone());
            attackers.push(tokio::spawn(async move {
                let started = Instant::now();
                for _ in 0..200 {
                    if stop.load(Ordering::Relaxed) || started.elapsed() > ATTACK {
                        break;
                    }
                    let Ok(mut tls) =
                        connect_from(attacker(n), port, &Credentials::default()).await
                    else {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    };
                    established.fetch_add(1, Ordering::Relaxed);
                    // Headers that never end, a byte a second, for at most 120 s.
                    for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: "
                        .iter()
                        .chain([b'a'; 120].iter())
                    {
                        if stop.load(Ordering::Relaxed) || tls.write_all(&[*byte]).await.is_err() {
                            break;
                        }
                        let _ = tls.flush().await;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }));
        }
    }
    wait_until(TIMEOUT, "the attack holds the connection slots", || async {
        established.load(Ordering::Relaxed) >= 256
    })
    .await;

    probes_keep_answering(port).await;

    // One slow client alone: closed by the header read timeout, not by eviction.
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.abort();
    }
    let mut slow = connect_from(attacker(30), port, &Credentials::default())
        .await
        .unwrap();
    let started = Instant::now();
    let mut closed_by_server = false;
    for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: "
        .iter()
        .chain([b'a'; 120].iter())
    {
        if slow.write_all(&[*byte]).await.is_err() {
            closed_by_server = true;
            break;
        }
        let mut buf = [0u8; 64];
        if let Ok(read) = tokio::time::timeout(Duration::from_secs(1), slow.read(&mut buf)).await
            && !matches!(read, Ok(n) if n > 0)
        {
            closed_by_server = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    assert!(
        closed_by_server,
        "the slow connection was kept for {elapsed:?}"
    );
    assert!(
        elapsed >= HEADER_READ_TIMEOUT - Duration::from_secs(2) && elapsed < TIMEOUT,
        "closed after {elapsed:?}"
    );
    assert!(closed(port, "header-timeout").await > 0.0);
    assert!(closed(port, "evicted-connection").await > 0.0);
}

/// A client certificate with two Common Names: Go (and so every Kubernetes component)
/// takes the last as the user; taking the first would authenticate the holder as
/// someone else than the API server's authorizer and audit logs say. The user is the
/// last, which the API server double's `SubjectAccessReview` grants `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_with_two_common_names_is_its_last() {
    let stack = Stack::start().await;
    let tmp = TempDir::new("two-cns");
    let dir = tmp.path().join("ca");
    std::fs::create_dir(&dir).unwrap();
    let ca = TestCa::new();
    kubelet_publish(&dir, &[("ca.crt", ca.pem().as_bytes())]);
    stack
        .api
        .allow_non_resource("metrics-scraper", "get", "/metrics");
    let port = listening_port();
    let _ccm = stack
        .secure_controller_manager_command(
            port,
            &[
                "--leader-elect=false",
                &format!("--client-ca-file={}", dir.join("ca.crt").display()),
            ],
        )
        .spawn()
        .unwrap();
    wait_until(TIMEOUT, "/healthz over HTTPS", || async {
        probe(port).await == Some(200)
    })
    .await;
    let status = |names: &'static [&'static str]| {
        let credentials = Credentials {
            client: Some(ca.client_named(names)),
            ..Credentials::default()
        };
        async move {
            https_get(port, "/metrics", &credentials)
                .await
                .map(|a| a.status)
                .unwrap_or(0)
        }
    };
    assert_eq!(status(&["nobody", "metrics-scraper"]).await, 200);
    assert_eq!(status(&["metrics-scraper", "nobody"]).await, 403);
}
