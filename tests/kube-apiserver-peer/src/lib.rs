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
//! [`KubeApiServer::start`] is for tests (it panics when the server cannot start);
//! [`KubeApiServer::start_with`] answers an [`Error`] instead.
//!
//! Dropping it stops the API server, then etcd (in that order: an API server whose etcd
//! is gone waits a long time in its graceful shutdown), and removes the directory.
//!
//! ```no_run
//! # async fn demo() {
//! let server = kube_apiserver_peer::KubeApiServer::start().await;
//! let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(server.client().await);
//! println!("{} nodes", nodes.list(&Default::default()).await.unwrap().items.len());
//! # }
//! ```

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use rcgen::KeyPair;
use tracing::instrument::WithSubscriber;

pub mod pki;

use pki::TestCa;

/// How long the API server may take to answer `/readyz` (about 3 s on an idle 2-core
/// machine).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a server could not be started or reached.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary is not where it was looked for.
    #[error(
        "{path} is missing: run `scripts/ensure-kube-apiserver.sh`, which builds kube-apiserver \
         and etcd from their Go modules into target/kube/bin (or set $KUBE_APISERVER and $ETCD)"
    )]
    Missing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A file of the server's directory could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A process could not be started.
    #[error("cannot start {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The server did not answer `/readyz` in time.
    #[error("kube-apiserver not ready after {timeout:?} ({last}); its log ends:\n{log}")]
    NotReady {
        /// How long it was given.
        timeout: Duration,
        /// The last answer or error.
        last: String,
        /// The end of its log.
        log: String,
    },
    /// A client of the server could not be made.
    #[error("a client of the API server: {0}")]
    Client(String),
}

/// Where and how to start the server.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The data directory (emptied first, removed when the server is dropped); a fresh
    /// one under the system's temporary directory when `None`.
    pub dir: Option<PathBuf>,
    /// The secure port on 127.0.0.1 (a free one when `None`).
    pub port: Option<u16>,
    /// The kube-apiserver binary (else `$KUBE_APISERVER`, else target/kube/bin/).
    pub kube_apiserver: Option<PathBuf>,
    /// The etcd binary (else `$ETCD`, else target/kube/bin/).
    pub etcd: Option<PathBuf>,
    /// The audit policy (YAML); every request's metadata when `None`.
    pub audit_policy: Option<String>,
}

/// A running kube-apiserver and its etcd.
pub struct KubeApiServer {
    apiserver: Child,
    etcd: Child,
    port: u16,
    dir: PathBuf,
    /// Boxed: the issuer is large, and the server is held in enums.
    ca: Box<TestCa>,
}

/// The binary `name` (`kube-apiserver`, `etcd`): `given`, else `$VARIABLE`, else the
/// workspace's target/kube/bin/.
pub fn binary(given: Option<&Path>, variable: &str, name: &str) -> Result<PathBuf, Error> {
    let path = given
        .map(Path::to_owned)
        .or_else(|| std::env::var_os(variable).map(PathBuf::from))
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/kube/bin")
                .join(name)
        });
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Missing { path })
    }
}

/// A port of 127.0.0.1 free now (the servers bind it themselves).
fn free_port() -> Result<u16, Error> {
    loopback_port::reserve().map_err(|source| Error::Write {
        path: "127.0.0.1:0".into(),
        source,
    })
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
    /// `objectRef.name` (empty for a list or a non-resource request).
    pub name: String,
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
    /// Starts etcd and kube-apiserver with default [`Settings`] and waits until the API
    /// server is ready; panics when it cannot (a test peer).
    pub async fn start() -> Self {
        Self::start_with(Settings::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts etcd and kube-apiserver and waits until the API server is ready.
    pub async fn start_with(settings: Settings) -> Result<Self, Error> {
        let etcd_bin = binary(settings.etcd.as_deref(), "ETCD", "etcd")?;
        let apiserver_bin = binary(
            settings.kube_apiserver.as_deref(),
            "KUBE_APISERVER",
            "kube-apiserver",
        )?;
        let path = match settings.dir {
            Some(dir) => dir,
            None => {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                std::env::temp_dir().join(format!(
                    "wasm-ccm-kube-apiserver-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ))
            }
        };
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
        let write = |name: &str, text: &str| {
            std::fs::write(path.join(name), text).map_err(|source| Error::Write {
                path: path.join(name),
                source,
            })
        };
        let ca = TestCa::new();
        write("ca.crt", &ca.pem())?;
        let serving = ca.server(&["127.0.0.1", "localhost"]);
        write("server.crt", &serving.cert_pem)?;
        write("server.key", &serving.key_pem)?;
        let admin = ca.client("admin", &["system:masters"]);
        write("admin.crt", &admin.cert_pem)?;
        write("admin.key", &admin.key_pem)?;
        write(
            "audit-policy.yaml",
            settings.audit_policy.as_deref().unwrap_or(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
                 rules:\n- level: Metadata\n",
            ),
        )?;
        let signing = KeyPair::generate().expect("a service account signing key");
        write("sa.key", &signing.serialize_pem())?;
        write("sa.pub", &signing.public_key_pem())?;

        let (client, peer) = (free_port()?, free_port()?);
        let secure = match settings.port {
            Some(port) => port,
            None => free_port()?,
        };
        let log = |name: &str| {
            std::fs::File::create(path.join(name)).map_err(|source| Error::Write {
                path: path.join(name),
                source,
            })
        };
        let etcd = die_with_parent(&mut Command::new(&etcd_bin))
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
            .stderr(log("etcd.log")?)
            .spawn()
            .map_err(|source| Error::Spawn {
                binary: etcd_bin.clone(),
                source,
            })?;
        let file = |name: &str| path.join(name).display().to_string();
        let apiserver = die_with_parent(&mut Command::new(&apiserver_bin))
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
            .stderr(log("kube-apiserver.log")?)
            .spawn();
        let mut etcd = etcd;
        let apiserver = match apiserver {
            Ok(child) => child,
            Err(source) => {
                stop(&mut etcd, Duration::from_secs(5));
                return Err(Error::Spawn {
                    binary: apiserver_bin,
                    source,
                });
            }
        };
        let server = KubeApiServer {
            apiserver,
            etcd,
            port: secure,
            dir: path,
            ca: Box::new(ca),
        };
        server.write_kubeconfig(&server.kubeconfig(), None)?;
        server.wait_ready().await?;
        Ok(server)
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The data directory (certificates, logs, etcd's data).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The admin kubeconfig (client certificate of `system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// Writes a kubeconfig for this server at `path`: with `token` as a bearer token,
    /// else the admin's client certificate.
    pub fn write_kubeconfig(&self, path: &Path, token: Option<&str>) -> Result<(), Error> {
        let file = |name: &str| self.dir.join(name).display().to_string();
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
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| Error::Write {
                path: dir.to_owned(),
                source,
            })?;
        }
        std::fs::write(path, text).map_err(|source| Error::Write {
            path: path.to_owned(),
            source,
        })
    }

    /// Writes a kubeconfig at `path` authenticating as `user` in `groups` with a client
    /// certificate of the server's CA (kept beside it as `<path>.crt` and `<path>.key`),
    /// as kube-controller-manager and kubelets authenticate.
    pub fn write_user_kubeconfig(
        &self,
        path: &Path,
        user: &str,
        groups: &[&str],
    ) -> Result<(), Error> {
        let issued = self.ca.client(user, groups);
        let beside = |extension: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(extension);
            PathBuf::from(name)
        };
        let (cert, key) = (beside(".crt"), beside(".key"));
        for (file, text) in [(&cert, &issued.cert_pem), (&key, &issued.key_pem)] {
            std::fs::write(file, text).map_err(|source| Error::Write {
                path: file.to_path_buf(),
                source,
            })?;
        }
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    \
             user: test\ncurrent-context: test\nusers:\n- name: test\n  user:\n    \
             client-certificate: {}\n    client-key: {}\n",
            self.url(),
            self.dir.join("ca.crt").display(),
            cert.display(),
            key.display(),
        );
        std::fs::write(path, text).map_err(|source| Error::Write {
            path: path.to_owned(),
            source,
        })
    }

    /// The process IDs of kube-apiserver and etcd (to read their resource use).
    pub fn pids(&self) -> (u32, u32) {
        (self.apiserver.id(), self.etcd.id())
    }

    /// A client with the admin's credentials; panics when none can be made (a test peer).
    pub async fn client(&self) -> kube::Client {
        self.try_client().await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// A client with the admin's credentials.
    pub async fn try_client(&self) -> Result<kube::Client, Error> {
        try_client_for(&self.kubeconfig()).await
    }

    /// A token of ServiceAccount `namespace/name` (created when missing) from the
    /// server's `TokenRequest`, valid for an hour.
    pub async fn token(&self, namespace: &str, name: &str) -> String {
        self.token_for(namespace, name, 3600).await
    }

    /// [`Self::token`], valid for `seconds`.
    pub async fn token_for(&self, namespace: &str, name: &str, seconds: i64) -> String {
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
                expiration_seconds: Some(seconds),
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
        let text = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
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
                    name: text(&object["name"]),
                    code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                }
            })
            .collect()
    }

    /// What the API server logged (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kube-apiserver.log")).unwrap_or_default()
    }

    async fn wait_ready(&self) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let client = self.try_client().await?;
        loop {
            // Refused connections and 500s are expected until it is ready: not logged.
            let ready = client
                .request_text(
                    http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("a request"),
                )
                .with_subscriber(tracing::subscriber::NoSubscriber::default())
                .await;
            if matches!(ready.as_deref().map(str::trim), Ok("ok")) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                return Err(Error::NotReady {
                    timeout: READY_TIMEOUT,
                    last: format!("{ready:?}"),
                    log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A client from the kubeconfig at `path`; panics when none can be made (a test peer).
pub async fn client_for(path: &Path) -> kube::Client {
    try_client_for(path).await.unwrap_or_else(|e| panic!("{e}"))
}

/// A client from the kubeconfig at `path`.
pub async fn try_client_for(path: &Path) -> Result<kube::Client, Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| Error::Client(format!("{}: {e}", path.display())))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| Error::Client(format!("{}: {e}", path.display())))?;
    // TLS on ring: with aws-lc-rs also compiled into the workspace, rustls picks
    // neither by itself.
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        stop(&mut self.apiserver, Duration::from_secs(15));
        stop(&mut self.etcd, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
