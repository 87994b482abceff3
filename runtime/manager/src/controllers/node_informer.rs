//! One view of Nodes shared by every controller, as upstream's shared Node informer.
//!
//! One watch (after one paged list) keeps every Node in memory; controllers read the
//! [`NodeInformer`]'s store for their periodic passes (cloud-node's status update,
//! cloud-node-lifecycle's monitor, the route reconciliation, the service controller's
//! node sets) instead of listing Nodes from the API server each period, and
//! [`NodeInformer::subscribe`] hands each one the changes as upstream's event
//! handlers see them: added, updated (with the previous object), deleted. When the
//! watch has to list again (its resource version expired), the new list is compared
//! with the old one, so a Node deleted meanwhile still arrives as deleted (upstream's
//! `DeletedFinalStateUnknown`).

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::broadcast;

/// Node changes a subscriber may fall behind by before it must re-read the store
/// ([`broadcast::error::RecvError::Lagged`]).
const BACKLOG: usize = 4096;

/// A change to a Node.
#[derive(Debug, Clone)]
pub enum NodeEvent {
    /// A Node appeared (or was listed for the first time).
    Added(Arc<Node>),
    /// A Node changed; `old` is what the store held before.
    Updated {
        /// The Node before the change.
        old: Arc<Node>,
        /// The Node now.
        new: Arc<Node>,
    },
    /// A Node is gone; its last known state.
    Deleted(Arc<Node>),
}

impl NodeEvent {
    /// The Node as it is now (for a deletion, as it was last).
    pub fn node(&self) -> &Arc<Node> {
        match self {
            Self::Added(node) | Self::Deleted(node) | Self::Updated { new: node, .. } => node,
        }
    }
}

/// The shared view of Nodes. Cheap to clone.
#[derive(Clone)]
pub struct NodeInformer {
    store: Store<Node>,
    events: broadcast::Sender<NodeEvent>,
    /// True once the first list is complete. (Not `Store::wait_until_ready`: its
    /// one-shot wakes only the last of several waiters.)
    ready: tokio::sync::watch::Receiver<bool>,
}

impl NodeInformer {
    /// The informer, and the future that keeps it current until `shutdown` turns true.
    pub fn new(
        client: kube::Client,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store::<Node>();
        let (events, _) = broadcast::channel(BACKLOG);
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let informer = Self {
            store: store.clone(),
            events: events.clone(),
            ready,
        };
        let run = watch(Api::all(client), store, writer, events, ready_tx, shutdown);
        (informer, run)
    }

    /// Waits until the first list is complete; false if the informer stopped first.
    pub async fn ready(&self) -> bool {
        self.ready.clone().wait_for(|ready| *ready).await.is_ok()
    }

    /// Every Node (empty before [`Self::ready`]).
    pub fn list(&self) -> Vec<Arc<Node>> {
        self.store.state()
    }

    /// The Node named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Node>> {
        self.store.get(&ObjectRef::new(name))
    }

    /// The store, for a `kube` controller reading Nodes from it.
    pub fn store(&self) -> Store<Node> {
        self.store.clone()
    }

    /// Node changes from now on. A subscriber that falls more than [`BACKLOG`] changes
    /// behind gets `Lagged` and should treat every Node in the store as changed.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeEvent> {
        self.events.subscribe()
    }

    /// Every Node once the first list is complete, then each Node changed (its current
    /// state): what a `kube` controller reconciling Nodes is triggered by. After a lag,
    /// every Node again.
    pub fn changed_nodes(&self) -> impl futures_util::Stream<Item = Arc<Node>> + Send + 'static {
        let store = self.store.clone();
        // Subscribed before the store is read: no change falls in between.
        let changes = self.subscribe();
        let informer = self.clone();
        let existing = futures_util::stream::once(async move {
            if informer.ready().await {
                informer.list()
            } else {
                Vec::new()
            }
        });
        let changes = futures_util::stream::unfold(changes, move |mut rx| {
            let store = store.clone();
            async move {
                loop {
                    match rx.recv().await {
                        Ok(NodeEvent::Deleted(_)) => continue,
                        Ok(event) => return Some((vec![event.node().clone()], rx)),
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            return Some((store.state(), rx));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        });
        existing.chain(changes).flat_map(futures_util::stream::iter)
    }
}

/// Drops what no controller reads before a Node is cached, as kube-controller-manager
/// trims its informers: the managed fields and the kubelet's reports of its images,
/// versions, resources and volumes (the bulk of a Node). The cloud-node controller
/// updates a Node from this cache (an update of a Node leaves its status and, with no
/// managed fields in it, its managed fields as they are); the other controllers patch.
fn trim(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.node_info = None;
        status.capacity = None;
        status.allocatable = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.daemon_endpoints = None;
        status.config = None;
        status.features = None;
        status.runtime_handlers = None;
    }
}

async fn watch(
    api: Api<Node>,
    store: Store<Node>,
    mut writer: reflector::store::Writer<Node>,
    events: broadcast::Sender<NodeEvent>,
    ready: tokio::sync::watch::Sender<bool>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim);
    futures_util::pin_mut!(stream);
    loop {
        let event = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            event = stream.next() => match event {
                Some(event) => event,
                None => return,
            },
        };
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                tracing::warn!(error = %err, "node watch failed; retrying");
                continue;
            }
        };
        // Nobody subscribed is fine: send errors are ignored.
        match &event {
            watcher::Event::Apply(node) => {
                let key = ObjectRef::from_obj(node);
                let old = store.get(&key);
                writer.apply_watcher_event(&event);
                let Some(new) = store.get(&key) else {
                    continue;
                };
                let _ = events.send(match old {
                    Some(old) => NodeEvent::Updated { old, new },
                    None => NodeEvent::Added(new),
                });
            }
            watcher::Event::Delete(node) => {
                writer.apply_watcher_event(&event);
                let _ = events.send(NodeEvent::Deleted(Arc::new(node.clone())));
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {
                writer.apply_watcher_event(&event);
            }
            watcher::Event::InitDone => {
                let before: HashMap<ObjectRef<Node>, Arc<Node>> = store
                    .state()
                    .into_iter()
                    .map(|n| (ObjectRef::from_obj(n.as_ref()), n))
                    .collect();
                writer.apply_watcher_event(&event);
                let mut before = before;
                for new in store.state() {
                    let key = ObjectRef::from_obj(new.as_ref());
                    let _ = events.send(match before.remove(&key) {
                        None => NodeEvent::Added(new),
                        Some(old)
                            if old.metadata.resource_version != new.metadata.resource_version =>
                        {
                            NodeEvent::Updated { old, new }
                        }
                        Some(_) => continue,
                    });
                }
                for (_, gone) in before {
                    let _ = events.send(NodeEvent::Deleted(gone));
                }
                ready.send_replace(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache keeps what the controllers read (metadata but the managed fields, the
    /// spec, addresses and conditions) and drops the kubelet's reports.
    #[test]
    fn a_cached_node_keeps_what_the_controllers_read() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"a": "b"}, "annotations": {"c": "d"},
                         "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"providerID": "x://1", "podCIDRs": ["10.244.1.0/24"],
                     "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"},
                "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1}],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                             "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                             "machineID": "", "operatingSystem": "linux", "osImage": "",
                             "systemUUID": ""},
                "volumesInUse": ["v"],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}
            }
        }))
        .unwrap();
        let kept = (node.metadata.labels.clone(), node.spec.clone());
        trim(&mut node);
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!((node.metadata.labels.clone(), node.spec.clone()), kept);
        assert!(node.metadata.annotations.is_some());
        let status = node.status.unwrap();
        assert_eq!(status.addresses.unwrap().len(), 1);
        assert_eq!(status.conditions.unwrap().len(), 1);
        assert!(status.capacity.is_none() && status.allocatable.is_none());
        assert!(status.images.is_none() && status.node_info.is_none());
        assert!(status.volumes_in_use.is_none() && status.daemon_endpoints.is_none());
    }
}
