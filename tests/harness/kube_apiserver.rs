//! The real Kubernetes API server: `kube-apiserver` and `etcd`, as
//! `scripts/ensure-kube-apiserver.sh` builds them from their Go modules into
//! `target/kube/bin/` (or where `$KUBE_APISERVER` and `$ETCD` point), started on
//! 127.0.0.1 with a fresh data directory:
//!
//! - serving and client certificates from a test CA, an admin client certificate
//!   (`system:masters`) and the admin kubeconfig ([`KubeApiServer::kubeconfig`]);
//! - a service-account issuer and signing key, so `TokenRequest` issues tokens
//!   ([`KubeApiServer::token`]) the server's `TokenReview` accepts;
//! - `--authorization-mode=Node,RBAC` and the default admission plugins;
//! - an audit log of every request's metadata ([`KubeApiServer::audit`]): who asked
//!   for what, and the answer's code.
//!
//! Dropping it stops the API server, then etcd (in that order: an API server whose etcd
//! is gone waits a long time in its graceful shutdown), and removes the directory.
//!
//! ```no_run
//! # async fn demo() {
//! let server = wasm_ccm_tests::kube_apiserver::KubeApiServer::start().await;
//! let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(server.client().await);
//! println!("{} nodes", nodes.list(&Default::default()).await.unwrap().items.len());
//! # }
//! ```

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use rcgen::KeyPair;

use crate::TempDir;
use crate::https::TestCa;

/// How long the API server may take to answer `/readyz` (about 3 s on an idle 2-core
/// machine).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running kube-apiserver and its etcd.
pub struct KubeApiServer {
    apiserver: Child,
    etcd: Child,
    port: u16,
    dir: TempDir,
}

/// The binary `name` (`kube-apiserver`, `etcd`): `$VARIABLE`, else target/kube/bin/.
fn binary(variable: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/kube/bin")
                .join(name)
        });
    assert!(
        path.is_file(),
        "{} is missing: run `scripts/ensure-kube-apiserver.sh` (scripts/test.sh does), \
         which builds kube-apiserver and etcd from their Go modules",
        path.display()
    );
    path
}

/// A port of 127.0.0.1 free now (the servers bind it themselves).
fn port() -> u16 {
    crate::free_port()
}

/// `command` gets SIGKILL when the thread that started it ends, so a test killed on a
/// timeout leaves no server behind (drop does not run then).
fn die_with_parent(command: &mut Command) -> &mut Command {
    // SAFETY: prctl(2) only, between fork and exec: async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}

/// One request as the audit log records it (level `Metadata`).
#[derive(Debug, Clone)]
pub struct Audited {
    /// `user.username`.
    pub user: String,
    /// `verb`.
    pub verb: String,
    /// `objectRef.apiGroup`, `objectRef.resource` (and `/subresource`), or the URI of a
    /// non-resource request.
    pub group: String,
    pub resource: String,
    pub namespace: String,
    /// `responseStatus.code`.
    pub code: u16,
}

/// Stops `child`: SIGTERM, then SIGKILL after `grace`.
fn stop(child: &mut Child, grace: Duration) {
    // SAFETY: signalling our own child by its PID.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl KubeApiServer {
    /// Starts etcd and kube-apiserver and waits until the API server is ready.
    pub async fn start() -> Self {
        let etcd_bin = binary("ETCD", "etcd");
        let apiserver_bin = binary("KUBE_APISERVER", "kube-apiserver");
        let dir = TempDir::new("kube-apiserver");
        let path = dir.path().to_path_buf();
        let write = |name: &str, text: &str| {
            std::fs::write(path.join(name), text).expect("write the server's files");
        };
        let ca = TestCa::new();
        write("ca.crt", &ca.pem());
        let serving = ca.server(&["127.0.0.1", "localhost"]);
        write("server.crt", &serving.cert_pem);
        write("server.key", &serving.key_pem);
        let admin = ca.client("admin", &["system:masters"]);
        write("admin.crt", &admin.cert_pem);
        write("admin.key", &admin.key_pem);
        write(
            "audit-policy.yaml",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: Metadata\n",
        );
        let signing = KeyPair::generate().expect("a service account signing key");
        write("sa.key", &signing.serialize_pem());
        write("sa.pub", &signing.public_key_pem());

        let (client, peer, secure) = (port(), port(), port());
        let log =
            |name: &str| std::fs::File::create(path.join(name)).expect("a log file for the server");
        let etcd = die_with_parent(&mut Command::new(etcd_bin))
            .args([
                "--name=test".to_string(),
                format!("--data-dir={}", path.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster=test=http://127.0.0.1:{peer}"),
                "--unsafe-no-fsync".to_string(),
                "--log-level=warn".to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(log("etcd.log"))
            .spawn()
            .expect("start etcd");
        let file = |name: &str| path.join(name).display().to_string();
        let apiserver = die_with_parent(&mut Command::new(apiserver_bin))
            .args([
                format!("--etcd-servers=http://127.0.0.1:{client}"),
                "--bind-address=127.0.0.1".to_string(),
                "--advertise-address=127.0.0.1".to_string(),
                // A loopback advertise address is refused by the endpoint reconciler.
                "--endpoint-reconciler-type=none".to_string(),
                format!("--secure-port={secure}"),
                format!("--tls-cert-file={}", file("server.crt")),
                format!("--tls-private-key-file={}", file("server.key")),
                format!("--client-ca-file={}", file("ca.crt")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
                format!("--service-account-key-file={}", file("sa.pub")),
                format!("--service-account-signing-key-file={}", file("sa.key")),
                "--service-cluster-ip-range=10.96.0.0/16".to_string(),
                "--authorization-mode=Node,RBAC".to_string(),
                format!("--audit-policy-file={}", file("audit-policy.yaml")),
                format!("--audit-log-path={}", file("audit.log")),
            ])
            .stdout(Stdio::null())
            .stderr(log("kube-apiserver.log"))
            .spawn()
            .expect("start kube-apiserver");
        let server = KubeApiServer {
            apiserver,
            etcd,
            port: secure,
            dir,
        };
        server.write_kubeconfig(&server.kubeconfig(), None);
        server.wait_ready().await;
        server
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The admin kubeconfig (client certificate of `system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// Writes a kubeconfig for this server at `path`: with `token` as a bearer token,
    /// else the admin's client certificate.
    pub fn write_kubeconfig(&self, path: &Path, token: Option<&str>) {
        let file = |name: &str| self.dir.path().join(name).display().to_string();
        let user = match token {
            Some(token) => format!("    token: {token}\n"),
            None => format!(
                "    client-certificate: {}\n    client-key: {}\n",
                file("admin.crt"),
                file("admin.key")
            ),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    \
             user: test\ncurrent-context: test\nusers:\n- name: test\n  user:\n{user}",
            self.url(),
            file("ca.crt"),
        );
        std::fs::write(path, text).expect("write a kubeconfig");
    }

    /// A client with the admin's credentials.
    pub async fn client(&self) -> kube::Client {
        client_for(&self.kubeconfig()).await
    }

    /// A token of ServiceAccount `namespace/name` (created when missing) from the
    /// server's `TokenRequest`, valid for an hour.
    pub async fn token(&self, namespace: &str, name: &str) -> String {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client().await, namespace);
        if accounts
            .get_opt(name)
            .await
            .expect("read ServiceAccounts")
            .is_none()
        {
            let account: ServiceAccount =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
            accounts
                .create(&PostParams::default(), &account)
                .await
                .expect("create the ServiceAccount");
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: None,
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let issued: TokenRequest = accounts
            .create_subresource("token", name, &PostParams::default(), &request)
            .await
            .expect("a TokenRequest");
        issued
            .status
            .and_then(|s| s.token)
            .expect("the issued token")
    }

    /// Every request the server has audited so far (the log is written as requests
    /// complete).
    pub fn audit(&self) -> Vec<Audited> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .map(|e| {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
                let object = &e["objectRef"];
                let resource = match object["subresource"].as_str() {
                    Some(sub) => format!("{}/{sub}", text(&object["resource"])),
                    None if object.is_null() => text(&e["requestURI"]),
                    None => text(&object["resource"]),
                };
                Audited {
                    user: text(&e["user"]["username"]),
                    verb: text(&e["verb"]),
                    group: text(&object["apiGroup"]),
                    resource,
                    namespace: text(&object["namespace"]),
                    code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                }
            })
            .collect()
    }

    /// What the API server logged (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let client = self.client().await;
        loop {
            let ready = client
                .request_text(
                    http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("a request"),
                )
                .await;
            if matches!(ready.as_deref().map(str::trim), Ok("ok")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready after {READY_TIMEOUT:?} ({ready:?}); its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A client from the kubeconfig at `path`.
pub async fn client_for(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(config).expect("a client")
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        stop(&mut self.apiserver, Duration::from_secs(15));
        stop(&mut self.etcd, Duration::from_secs(5));
    }
}
