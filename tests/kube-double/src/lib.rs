//! A Kubernetes API server double: test and demo infrastructure.
//!
//! No kube-apiserver can be installed on the machines this project builds on, so the
//! integration tests, the benchmarks and `wasm-ccm playground` run against this
//! in-memory server instead. It serves the resources a cloud-controller-manager
//! uses — core/v1 Nodes, Services, Events, Namespaces, ConfigMaps; events.k8s.io/v1 Events;
//! coordination.k8s.io/v1 Leases — under the real paths, and it is deliberately
//! strict where the CCM depends on the server's behaviour:
//!
//! - uid, creationTimestamp, a monotonically increasing resourceVersion;
//! - optimistic concurrency: a stale resourceVersion is a 409 Conflict;
//! - status subresources: writes to the object ignore status, and vice versa;
//! - finalizers: delete marks `deletionTimestamp`; removing the last finalizer deletes;
//! - JSON merge, JSON and strategic merge patches with upstream's list semantics
//!   (conditions and addresses merge by `type`, finalizers as a set, taints replace);
//! - label and field selectors (only the fields the real server indexes);
//! - watches from a resourceVersion with ADDED/MODIFIED/DELETED, bookmarks, and 410
//!   Gone (as an ERROR event) for versions older than the retained history;
//! - Status error bodies with the real reasons (NotFound, AlreadyExists, Conflict,
//!   Invalid, Expired, BadRequest);
//! - Service defaults (cluster IP, node ports) and Node taint validation.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let api = kube_double::ApiServer::start(kube_double::Settings::default()).await?;
//! api.write_kubeconfig("/tmp/kubeconfig".as_ref())?;
//! println!("kubectl --kubeconfig /tmp/kubeconfig get nodes  # {}", api.url());
//! # Ok(()) }
//! ```

pub mod convert;
pub mod errors;
pub mod openapi;
pub mod patch;
pub mod resources;
pub(crate) mod reviews;
pub mod selector;
mod server;
pub mod store;
pub mod table;
pub mod time;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

pub use errors::ApiError;
pub use store::Store;

/// How to run the double.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where to listen (port 0: any free port).
    pub listen: String,
    /// Require this bearer token (also written into the kubeconfig).
    pub token: Option<String>,
    /// Changes kept for watches; older resource versions get 410 Gone.
    pub history: usize,
    /// Interval of BOOKMARK events for watches that allow them (the real server sends
    /// about one a minute).
    pub bookmark_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".into(),
            token: None,
            history: 10_000,
            bookmark_interval: Duration::from_secs(60),
        }
    }
}

/// One kind of request a client made: what an RBAC rule must allow.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// API group (`""` for the core group).
    pub group: String,
    /// Plural resource, with `/subresource` when one was addressed.
    pub resource: String,
    /// RBAC verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// Namespace (`""` for cluster-scoped requests).
    pub namespace: String,
    /// The client's `User-Agent` (empty when it sent none).
    pub user_agent: String,
}

/// An injected failure: the next `count` requests with this verb on this resource
/// are answered with an error instead of being served (client-go's fake reactors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// Plural resource, with `/subresource` when one is addressed (as in [`Access`]).
    pub resource: String,
    /// RBAC verb, e.g. `update`.
    pub verb: String,
    /// The answer.
    pub error: InjectedError,
    /// How many requests still fail.
    pub count: u64,
    /// How many requests it failed so far.
    pub served: u64,
}

/// What an [`InjectedFault`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedError {
    /// 409 Conflict: another writer changed the object first.
    Conflict,
    /// 404 NotFound: the object was deleted meanwhile.
    NotFound,
}

/// A running API server double. Stops when dropped.
pub struct ApiServer {
    addr: SocketAddr,
    state: Arc<server::AppState>,
    store: Arc<Store>,
    token: Option<String>,
    disconnect: tokio::sync::watch::Sender<u64>,
    app: axum::Router,
    task: JoinHandle<()>,
}

impl ApiServer {
    /// Starts serving plain HTTP on `settings.listen`.
    pub async fn start(settings: Settings) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(&settings.listen).await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store::new(settings.history));
        let (disconnect, _) = tokio::sync::watch::channel(0u64);
        let state = Arc::new(server::AppState {
            disconnect: disconnect.clone(),
            store: store.clone(),
            settings: server::ServerSettings {
                token: settings.token.clone(),
                bookmark_interval: settings.bookmark_interval,
            },
            address: addr.to_string(),
            accesses: Default::default(),
            faults: Default::default(),
            reviews: Default::default(),
        });
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(state.clone());
        let served = app.clone();
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, served).await {
                tracing::error!(error = %err, "API server double stopped");
            }
        });
        Ok(Self {
            addr,
            state,
            store,
            token: settings.token,
            disconnect,
            app,
            task,
        })
    }

    /// The server as a service to call in process, on the same store: a client built
    /// on it (`kube::Client::new(api.router(), "default")`) reaches the double with no
    /// socket in between, so a test may pause tokio's clock (with a socket, a paused
    /// clock jumps to the next timer whenever the runtime waits for it).
    pub fn router(&self) -> axum::Router {
        self.app.clone()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers the next `count` `verb` requests on `resource` with 409 Conflict, as when
    /// another writer changed the object first.
    pub fn inject_conflicts(&self, resource: &str, verb: &str, count: u64) {
        self.inject(resource, verb, InjectedError::Conflict, count);
    }

    /// Answers the next `count` `verb` requests on `resource` with 404 NotFound, as when
    /// the object was deleted between the client's read and its write.
    pub fn inject_not_found(&self, resource: &str, verb: &str, count: u64) {
        self.inject(resource, verb, InjectedError::NotFound, count);
    }

    fn inject(&self, resource: &str, verb: &str, error: InjectedError, count: u64) {
        self.state
            .faults
            .lock()
            .expect("fault lock")
            .push(InjectedFault {
                resource: resource.into(),
                verb: verb.into(),
                error,
                count,
                served: 0,
            });
    }

    /// How many requests the failures injected for `verb` on `resource` answered so far:
    /// a test that injects one checks it fired.
    pub fn faults_served(&self, resource: &str, verb: &str) -> u64 {
        self.state
            .faults
            .lock()
            .expect("fault lock")
            .iter()
            .filter(|f| f.resource == resource && f.verb == verb)
            .map(|f| f.served)
            .sum()
    }

    /// `token` authenticates as `name` in `groups` (`TokenReview`), for delegated
    /// authentication.
    pub fn add_user(&self, token: &str, name: &str, groups: &[&str]) {
        self.state
            .reviews
            .lock()
            .expect("reviews lock")
            .users
            .push(reviews::User {
                token: token.into(),
                name: name.into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
            });
    }

    /// `subject` (a user or a group) may use `verb` (or `*`) on the non-resource
    /// `path` (exact, or a prefix ending in `*`), as an RBAC rule with
    /// `nonResourceURLs` bound to it (`SubjectAccessReview`).
    pub fn allow_non_resource(&self, subject: &str, verb: &str, path: &str) {
        self.state
            .reviews
            .lock()
            .expect("reviews lock")
            .grants
            .push(reviews::Grant {
                subject: subject.into(),
                verb: verb.into(),
                path: path.into(),
            });
    }

    /// Every kind of request served so far, for checking RBAC rules.
    pub fn accesses(&self) -> Vec<Access> {
        self.state
            .accesses
            .lock()
            .expect("access log lock")
            .keys()
            .cloned()
            .collect()
    }

    /// How many requests of each kind were served so far (watches count once, when
    /// they start), for measuring what a client costs the API server.
    pub fn request_counts(&self) -> std::collections::BTreeMap<Access, u64> {
        self.state.accesses.lock().expect("access log lock").clone()
    }

    /// The store, for direct inspection and for forcing 410s ([`Store::compact`]).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Ends every open watch, as an API server restart or a load balancer timeout
    /// does; clients must reconnect (and relist after [`Store::compact`]).
    pub fn disconnect_watches(&self) {
        self.disconnect.send_modify(|generation| *generation += 1);
    }

    /// A kubeconfig for this server (context `wasm-ccm-double`).
    pub fn kubeconfig(&self) -> String {
        let user = match &self.token {
            Some(token) => format!("user:\n    token: {token}\n"),
            None => "user: {}\n".to_owned(),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: wasm-ccm-double\n  cluster:\n    server: {url}\ncontexts:\n- name: wasm-ccm-double\n  context:\n    cluster: wasm-ccm-double\n    user: wasm-ccm-double\n    namespace: default\ncurrent-context: wasm-ccm-double\nusers:\n- name: wasm-ccm-double\n  {user}",
            url = self.url(),
        )
    }

    /// Writes [`ApiServer::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.kubeconfig())
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
