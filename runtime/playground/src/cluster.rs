//! The playground's Kubernetes API server: the embedded double (the default: it
//! starts in milliseconds) or the real kube-apiserver and etcd (`--apiserver real`, as
//! `scripts/ensure-kube-apiserver.sh` builds them); and what the playground does with
//! either: seed Nodes and Services, post the kubelets' Node status, follow changes.

use std::collections::HashMap;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube_apiserver_peer::KubeApiServer;
use kube_double::store::{EventType, PatchType, Store, Target};
use kube_double::{ApiServer, resources};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::seeding::{ApiServerKind, PlaygroundError};

/// The running API server.
pub enum Cluster {
    /// The double, in this process.
    Double(ApiServer),
    /// kube-apiserver and etcd, child processes; `client` has the admin's credentials.
    Real {
        /// The servers (stopped when dropped).
        server: KubeApiServer,
        /// The admin's client.
        client: kube::Client,
    },
}

/// A change the playground prints.
#[derive(Debug, Clone)]
pub struct Change {
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for a deletion: its last state).
    pub object: Value,
    /// The object before the change (changes only).
    pub old: Option<Value>,
}

/// What following the cluster yields.
#[derive(Debug)]
pub enum Followed {
    /// One change.
    Change(Change),
    /// This many changes were missed (the follower fell behind).
    Lagged(u64),
}

/// The changes of a cluster as they happen; following stops when this is dropped.
pub struct Following {
    rx: mpsc::UnboundedReceiver<Followed>,
    tasks: Vec<JoinHandle<()>>,
}

impl Following {
    /// The next change; `None` when following ended.
    pub async fn recv(&mut self) -> Option<Followed> {
        self.rx.recv().await
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// Where the kubelets read and post Node status.
#[derive(Clone)]
pub enum Nodes {
    /// The double's store.
    Double(Arc<Store>),
    /// The real server's Nodes.
    Real(Box<Api<Node>>),
}

impl Cluster {
    /// Starts the API server `kind`: the double on `listen`; the real one on `listen`'s
    /// port of 127.0.0.1, with its data under `work_dir/kube-apiserver`.
    pub async fn start(
        kind: ApiServerKind,
        listen: &str,
        work_dir: &Path,
    ) -> Result<Self, PlaygroundError> {
        match kind {
            ApiServerKind::Double => {
                let api = ApiServer::start(kube_double::Settings {
                    listen: listen.to_owned(),
                    ..kube_double::Settings::default()
                })
                .await
                .map_err(|source| PlaygroundError::Listen {
                    addr: listen.to_owned(),
                    source,
                })?;
                Ok(Cluster::Double(api))
            }
            ApiServerKind::Real => {
                let addr: SocketAddr = listen.parse().map_err(|_| {
                    PlaygroundError::Usage(format!(
                        "--api-listen {listen}: the real API server listens on 127.0.0.1:PORT"
                    ))
                })?;
                if addr.ip() != std::net::Ipv4Addr::LOCALHOST {
                    return Err(PlaygroundError::Usage(format!(
                        "--api-listen {listen}: the real API server listens on 127.0.0.1 only"
                    )));
                }
                let server = KubeApiServer::start_with(kube_apiserver_peer::Settings {
                    dir: Some(work_dir.join("kube-apiserver")),
                    port: (addr.port() != 0).then_some(addr.port()),
                    ..kube_apiserver_peer::Settings::default()
                })
                .await
                .map_err(PlaygroundError::RealApiServer)?;
                let client = server
                    .try_client()
                    .await
                    .map_err(PlaygroundError::RealApiServer)?;
                Ok(Cluster::Real { server, client })
            }
        }
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        match self {
            Cluster::Double(api) => api.url(),
            Cluster::Real { server, .. } => server.url(),
        }
    }

    /// What the server is, for the banner.
    pub fn label(&self) -> &'static str {
        match self {
            Cluster::Double(_) => "double",
            Cluster::Real { .. } => "kube-apiserver",
        }
    }

    /// Writes an admin kubeconfig for kubectl and the controllers at `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), PlaygroundError> {
        let failed = |message: String| PlaygroundError::Write {
            path: path.to_owned(),
            source: std::io::Error::other(message),
        };
        match self {
            Cluster::Double(api) => {
                api.write_kubeconfig(path)
                    .map_err(|source| PlaygroundError::Write {
                        path: path.to_owned(),
                        source,
                    })
            }
            Cluster::Real { server, .. } => server
                .write_kubeconfig(path, None)
                .map_err(|e| failed(e.to_string())),
        }
    }

    /// Creates a Node (as its kubelet registers it).
    pub async fn create_node(&self, node: Value) -> Result<(), PlaygroundError> {
        match self {
            Cluster::Double(api) => create_in_double(api, "", "nodes", node),
            Cluster::Real { client, .. } => {
                create_real(Api::<Node>::all(client.clone()), "nodes", node).await
            }
        }
    }

    /// Creates a Service in `namespace`.
    pub async fn create_service(
        &self,
        namespace: &str,
        service: Value,
    ) -> Result<(), PlaygroundError> {
        match self {
            Cluster::Double(api) => create_in_double(api, namespace, "services", service),
            Cluster::Real { client, .. } => {
                let api = Api::<Service>::namespaced(client.clone(), namespace);
                create_real(api, "services", service).await
            }
        }
    }

    /// Where the kubelets read and post Node status.
    pub fn nodes(&self) -> Nodes {
        match self {
            Cluster::Double(api) => Nodes::Double(api.store().clone()),
            Cluster::Real { client, .. } => Nodes::Real(Box::new(Api::all(client.clone()))),
        }
    }

    /// Follows the Nodes, Services and Events from now on.
    pub fn follow(&self) -> Following {
        let (tx, rx) = mpsc::unbounded_channel();
        let tasks = match self {
            Cluster::Double(api) => {
                let store = api.store().clone();
                let (_, mut changes) = store
                    .watch_from(store.resource_version())
                    .expect("watching from now");
                vec![tokio::spawn(async move {
                    use tokio::sync::broadcast::error::RecvError;
                    loop {
                        let followed = match changes.recv().await {
                            Ok(change) => Followed::Change(Change {
                                kind: change.kind,
                                object: change.object.clone(),
                                old: change.old.clone(),
                            }),
                            Err(RecvError::Lagged(n)) => Followed::Lagged(n),
                            Err(RecvError::Closed) => break,
                        };
                        if tx.send(followed).is_err() {
                            break;
                        }
                    }
                })]
            }
            Cluster::Real { client, .. } => vec![
                follow_real::<Node>(Api::all(client.clone()), tx.clone()),
                follow_real::<Service>(Api::all(client.clone()), tx.clone()),
                follow_real::<Event>(Api::all(client.clone()), tx),
            ],
        };
        Following { rx, tasks }
    }
}

fn create_in_double(
    api: &ApiServer,
    namespace: &str,
    plural: &str,
    object: Value,
) -> Result<(), PlaygroundError> {
    let resource = resources::find("", "v1", plural).expect("a core resource");
    api.store()
        .create(resource, namespace, object)
        .map(drop)
        .map_err(|e| PlaygroundError::Seed(format!("{plural}: {e:?}")))
}

async fn create_real<K>(api: Api<K>, plural: &str, object: Value) -> Result<(), PlaygroundError>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let typed: K = serde_json::from_value(object)
        .map_err(|e| PlaygroundError::Seed(format!("{plural}: {e}")))?;
    api.create(&PostParams::default(), &typed)
        .await
        .map(drop)
        .map_err(|e| PlaygroundError::Seed(format!("{plural}: {e}")))
}

/// Follows one kind on the real server: what exists now is the baseline, each later
/// change is sent with the object before it.
fn follow_real<K>(api: Api<K>, tx: mpsc::UnboundedSender<Followed>) -> JoinHandle<()>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + Debug + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut seen: HashMap<(String, String), Value> = HashMap::new();
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures_util::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let (object, deleted, baseline) = match event {
                Ok(watcher::Event::InitApply(object)) => (object, false, true),
                Ok(watcher::Event::Apply(object)) => (object, false, false),
                Ok(watcher::Event::Delete(object)) => (object, true, false),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                Err(err) => {
                    tracing::debug!(error = %err, "following the API server");
                    continue;
                }
            };
            let key = (
                object.meta().namespace.clone().unwrap_or_default(),
                object.meta().name.clone().unwrap_or_default(),
            );
            let Ok(value) = serde_json::to_value(&object) else {
                continue;
            };
            let change = if baseline {
                seen.insert(key, value);
                continue;
            } else if deleted {
                seen.remove(&key);
                Change {
                    kind: EventType::Deleted,
                    object: value,
                    old: None,
                }
            } else {
                let old = seen.insert(key, value.clone());
                Change {
                    kind: if old.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    },
                    object: value,
                    old,
                }
            };
            if tx.send(Followed::Change(change)).is_err() {
                break;
            }
        }
    })
}

impl Nodes {
    /// Every Node; `None` when the server cannot say now.
    pub async fn list(&self) -> Option<Vec<Value>> {
        match self {
            Nodes::Double(store) => {
                let nodes = resources::find("", "v1", "nodes").expect("nodes");
                Some(
                    store
                        .list(nodes, "", &Default::default(), &Default::default())
                        .0,
                )
            }
            Nodes::Real(api) => {
                let list = api.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .map(|node| serde_json::to_value(node).ok())
                    .collect()
            }
        }
    }

    /// Applies a strategic merge `patch` to Node `name`'s status.
    pub async fn patch_status(&self, name: &str, patch: &Value) -> Result<(), String> {
        match self {
            Nodes::Double(store) => {
                let nodes = resources::find("", "v1", "nodes").expect("nodes");
                store
                    .patch(nodes, "", name, Target::Status, PatchType::Strategic, patch)
                    .map(drop)
                    .map_err(|e| format!("{e:?}"))
            }
            Nodes::Real(api) => api
                .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
        }
    }
}
