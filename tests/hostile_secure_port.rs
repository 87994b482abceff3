//! Hostile clients of the secure port, as deployed (HTTPS on the node's network): an
//! attacker with no credentials who holds connections that never start TLS, or TLS
//! connections sending their request headers slowly, from one address, from hundreds,
//! or from the probe's own, must not keep the kubelet's liveness probe from answering
//! (deploy/: HTTPS `/healthz`, 5 s timeout, restarted after 3 failures), nor make the
//! port hold more than a bounded memory.
//!
//! Attackers connect from 127.0.0.10 and up (each address a client of its own, as the
//! server counts them), or from 127.0.0.1, the probe's.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use wasm_ccm_tests::https::{Credentials, TestCa, connect_from, https_get, tcp_from};
use wasm_ccm_tests::{Stack, TempDir, kubelet_publish, listening_port, metric, wait_until};

const TIMEOUT: Duration = Duration::from_secs(60);
/// deploy/'s liveness probe `timeoutSeconds`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long probes are sent, one a second, while an attack holds its connections.
const PROBING: Duration = Duration::from_secs(30);
/// The server's header read timeout (upstream's 32 s).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// The server's cap on a request's headers.
const MAX_HEADER_BYTES: usize = 16 * 1024;
/// The longest an attack runs.
const ATTACK: Duration = Duration::from_secs(150);
/// The most the port's memory may grow under an attack.
const RSS_GROWTH: u64 = 32 * 1024 * 1024;
/// The probe's address.
const PROBE_ADDRESS: [u8; 4] = [127, 0, 0, 1];

/// `wasm-ccm` with the secure port as deployed (self-signed certificate; `/metrics`
/// open too, for the test to read what the port counted), once `/healthz` answers: its
/// port and process. `descriptors`: its file descriptor limit, if not the test's.
async fn secure_manager(stack: &Stack, descriptors: Option<u64>) -> (u16, tokio::process::Child) {
    raise_descriptor_limit();
    let port = listening_port();
    let mut command = stack.secure_controller_manager_command(
        port,
        &[
            "--leader-elect=false",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ],
    );
    if let Some(limit) = descriptors {
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    let child = command.spawn().unwrap();
    wait_until(TIMEOUT, "/healthz over HTTPS", || async {
        probe(port).await == Some(200)
    })
    .await;
    (port, child)
}

/// Lets this process open as many connections as its hard limit allows: the attacks
/// of tests running side by side hold over a thousand.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct they are given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
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

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// The `n`-th attacker address: 127.0.0.10 and up (127.0.1.10 and up after 200).
fn attacker(n: usize) -> IpAddr {
    IpAddr::from([127, 0, (n / 200) as u8, 10 + (n % 200) as u8])
}

/// What an attacker's connection does.
#[derive(Clone, Copy)]
enum Kind {
    /// Never sends a byte.
    Silent,
    /// Completes TLS, sends most of the headers the server accepts at once, then the
    /// rest a byte a second, never ending them.
    Trickle,
}

/// Connections an attacker holds, each opened again when the server closes it.
struct Attack {
    stop: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Attack {
    /// `per_source` connections from each of `sources`, doing `kind`; bounded: each
    /// opens at most 2,000 connections for at most [`ATTACK`].
    /// Each connection the server closed is opened again after `pause`.
    fn start(
        port: u16,
        sources: &[IpAddr],
        per_source: usize,
        kind: Kind,
        pause: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for source in sources {
            for _ in 0..per_source {
                let (stop, open, source) = (stop.clone(), open.clone(), *source);
                tasks.push(tokio::spawn(async move {
                    let started = Instant::now();
                    for _ in 0..2000 {
                        if stop.load(Ordering::Relaxed) || started.elapsed() > ATTACK {
                            break;
                        }
                        let held = match kind {
                            Kind::Silent => silent(source, port, &open).await,
                            Kind::Trickle => trickle(source, port, &open, &stop).await,
                        };
                        let wait = if held {
                            pause
                        } else {
                            Duration::from_millis(100)
                        };
                        tokio::time::sleep(wait).await;
                    }
                }));
            }
        }
        Self { stop, open, tasks }
    }

    /// Waits until `n` connections are open at once.
    async fn holds(&self, n: usize) {
        wait_until(
            TIMEOUT,
            &format!("the attack holds {n} connections"),
            || async { self.open.load(Ordering::Relaxed) >= n },
        )
        .await;
    }

    /// Stops and closes every connection.
    async fn end(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

/// One connection that never sends, held until the server closes it: whether it was
/// opened.
async fn silent(source: IpAddr, port: u16, open: &AtomicUsize) -> bool {
    let Ok(mut tcp) = tcp_from(source, port).await else {
        return false;
    };
    open.fetch_add(1, Ordering::Relaxed);
    let mut byte = [0u8; 1];
    let _ = tokio::time::timeout(ATTACK, tcp.read(&mut byte)).await;
    open.fetch_sub(1, Ordering::Relaxed);
    true
}

/// One TLS connection whose headers never end, held until the server closes it:
/// whether it was opened.
async fn trickle(source: IpAddr, port: u16, open: &AtomicUsize, stop: &AtomicBool) -> bool {
    let Ok(mut tls) = connect_from(source, port, &Credentials::default()).await else {
        return false;
    };
    open.fetch_add(1, Ordering::Relaxed);
    let mut head = b"GET /healthz HTTP/1.1\r\nX-Fill: ".to_vec();
    // All but the last bytes the port accepts, then a byte a second.
    head.resize(MAX_HEADER_BYTES - 256, b'a');
    if tls.write_all(&head).await.is_ok() {
        for _ in 0..ATTACK.as_secs() {
            if stop.load(Ordering::Relaxed)
                || tls.write_all(b"a").await.is_err()
                || tls.flush().await.is_err()
            {
                break;
            }
            let mut buf = [0u8; 64];
            // The server closing the connection ends it; else a second passes.
            if let Ok(read) = tokio::time::timeout(Duration::from_secs(1), tls.read(&mut buf)).await
                && !matches!(read, Ok(n) if n > 0)
            {
                break;
            }
        }
    }
    open.fetch_sub(1, Ordering::Relaxed);
    true
}

/// A probe a second for [`PROBING`], as the kubelet's (ten seconds apart) compressed:
/// every one must answer 200 within the probe's timeout. The most resident memory of
/// `pid` seen meanwhile.
async fn probes_keep_answering(port: u16, pid: u32) -> u64 {
    let mut failed = Vec::new();
    let mut most = 0;
    let seconds = PROBING.as_secs();
    for i in 0..seconds {
        let started = Instant::now();
        match probe(port).await {
            Some(200) => {}
            other => failed.push(format!(
                "probe {i}: {other:?} after {:?}",
                started.elapsed()
            )),
        }
        most = most.max(rss(pid));
        tokio::time::sleep_until((started + Duration::from_secs(1)).into()).await;
    }
    assert!(
        failed.is_empty(),
        "{} of {seconds} probes failed: {failed:?}",
        failed.len()
    );
    most
}

/// One idle TCP connection (never starting TLS) from each of 80, then 250, addresses:
/// more clients than any small pool of handshakes; the port holds them all and closes
/// each after 5 s of silence, and the probe never waits for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idle_connection_from_each_of_hundreds_of_addresses_cannot_starve_the_probe() {
    let stack = Stack::start().await;
    let (port, ccm) = secure_manager(&stack, None).await;
    let pid = ccm.id().unwrap();
    let before = rss(pid);
    for addresses in [80, 250] {
        let sources: Vec<_> = (0..addresses).map(attacker).collect();
        let attack = Attack::start(port, &sources, 1, Kind::Silent, Duration::ZERO);
        attack.holds(addresses).await;
        let most = probes_keep_answering(port, pid).await;
        attack.end().await;
        eprintln!(
            "{addresses} addresses, one idle connection each: resident memory {} -> {} KiB",
            before / 1024,
            most / 1024
        );
    }
    assert!(closed(port, "first-byte-timeout").await > 0.0);
}

/// 64 idle connections from one other address, then 8 and 64 from the probe's own
/// (the node's IP, which every hostNetwork process shares): no share of the address is
/// taken from the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_address_even_the_probe_s_own_cannot_starve_it() {
    let stack = Stack::start().await;
    let (port, ccm) = secure_manager(&stack, None).await;
    let pid = ccm.id().unwrap();
    let other = [attacker(0)];
    let own = [IpAddr::from(PROBE_ADDRESS)];
    for (sources, count) in [(&other, 64), (&own, 8), (&own, 64)] {
        let attack = Attack::start(port, sources, count, Kind::Silent, Duration::ZERO);
        attack.holds(count).await;
        probes_keep_answering(port, pid).await;
        attack.end().await;
    }
    assert!(closed(port, "first-byte-timeout").await > 0.0);
}

/// Idle connections from 40 addresses, 640 at once, two and a half times what the port
/// holds under a low file descriptor limit (768: 256 connections): the oldest give
/// their places, and the probe is never refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_idle_connections_than_the_descriptors_allow_cannot_starve_the_probe() {
    let stack = Stack::start().await;
    let (port, ccm) = secure_manager(&stack, Some(768)).await;
    let pid = ccm.id().unwrap();
    let sources: Vec<_> = (0..40).map(attacker).collect();
    // Each connection closed for a newcomer comes back a second later: hundreds a
    // second, each taking another's place, without the test's own reconnections
    // becoming the load under test.
    let attack = Attack::start(port, &sources, 16, Kind::Silent, Duration::from_secs(1));
    wait_until(TIMEOUT, "connections closed for newcomers", || async {
        closed(port, "evicted-connection").await > 0.0
    })
    .await;
    probes_keep_answering(port, pid).await;
    attack.end().await;
}

/// 256 TLS connections from 16 addresses, each sending nearly all the headers the port
/// accepts and then a byte a second: the probe answers, the port's memory grows by at
/// most 32 MiB, and each connection is closed by the header read timeout; headers past
/// the cap are answered 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_trickling_request_headers_cannot_starve_the_probe_nor_its_memory() {
    let stack = Stack::start().await;
    let (port, ccm) = secure_manager(&stack, None).await;
    let pid = ccm.id().unwrap();
    // A few requests first, so what every connection's first request allocates once
    // is not counted as growth.
    for _ in 0..5 {
        assert_eq!(probe(port).await, Some(200));
    }
    let before = rss(pid);
    let sources: Vec<_> = (0..16).map(attacker).collect();
    let started = Instant::now();
    let attack = Attack::start(port, &sources, 16, Kind::Trickle, Duration::ZERO);
    attack.holds(256).await;
    let most = probes_keep_answering(port, pid).await;
    eprintln!(
        "256 connections trickling headers: resident memory {} -> {} KiB",
        before / 1024,
        most / 1024
    );
    assert!(
        most.saturating_sub(before) <= RSS_GROWTH,
        "resident memory grew from {before} to {most} bytes"
    );
    wait_until(
        TIMEOUT,
        "slow headers closed by the header read timeout",
        || async { closed(port, "header-timeout").await > 0.0 },
    )
    .await;
    assert!(
        started.elapsed() >= HEADER_READ_TIMEOUT - Duration::from_secs(2),
        "closed after {:?}",
        started.elapsed()
    );
    attack.end().await;

    // Headers past the cap: 431, and counted.
    let mut tls = connect_from(attacker(30), port, &Credentials::default())
        .await
        .unwrap();
    let mut head = b"GET /healthz HTTP/1.1\r\nX-Fill: ".to_vec();
    head.resize(MAX_HEADER_BYTES + 8192, b'a');
    let _ = tls.write_all(&head).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, tls.read_to_end(&mut answer)).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 431"),
        "answered {:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(64)])
    );
    assert!(closed(port, "header-too-large").await > 0.0);
}

/// 512 TLS connections from 32 addresses trickling their headers: more than the memory
/// the port gives connections reading headers (32 MiB at 96 KiB each: 341), so the
/// oldest give way to newcomers; the probe answers and the port's memory grows by at
/// most 32 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_connections_trickling_headers_than_the_memory_bound_cannot_starve_the_probe() {
    let stack = Stack::start().await;
    let (port, ccm) = secure_manager(&stack, None).await;
    let pid = ccm.id().unwrap();
    for _ in 0..5 {
        assert_eq!(probe(port).await, Some(200));
    }
    let before = rss(pid);
    let sources: Vec<_> = (0..32).map(attacker).collect();
    let attack = Attack::start(port, &sources, 16, Kind::Trickle, Duration::ZERO);
    wait_until(
        TIMEOUT,
        "connections reading headers closed for newcomers",
        || async { closed(port, "evicted-pending").await > 0.0 },
    )
    .await;
    let most = probes_keep_answering(port, pid).await;
    eprintln!(
        "512 connections trickling headers: resident memory {} -> {} KiB",
        before / 1024,
        most / 1024
    );
    assert!(
        most.saturating_sub(before) <= RSS_GROWTH,
        "resident memory grew from {before} to {most} bytes"
    );
    attack.end().await;
}

/// An anonymous client's connection is closed after its answer (`Connection: close`):
/// nobody unauthenticated keeps a connection between requests, not even from the
/// probe's own address (the kubelet's probes never reuse theirs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_client_s_connection_is_closed_after_its_answer() {
    let stack = Stack::start().await;
    let (port, _ccm) = secure_manager(&stack, None).await;
    let mut tls = connect_from(IpAddr::from(PROBE_ADDRESS), port, &Credentials::default())
        .await
        .unwrap();
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    // Ends only when the server closes the connection.
    tokio::time::timeout(PROBE_TIMEOUT, tls.read_to_end(&mut answer))
        .await
        .expect("the connection was kept open after the answer")
        .ok();
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
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
