//! What the service controller keeps between reconciles: one entry per Service key
//! (`namespace/name`) holding its lock, its last sync (upstream's service cache) and the
//! node set its load balancer was last given (upstream's `lastSyncedNodes`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use kube::runtime::reflector;
use tokio::sync::mpsc;

use super::Options;
use crate::controllers::Context;
use crate::controllers::backoff::Backoff;
use crate::events::Recorder;

/// The controller's state, shared by the Service reconciles, the node sync and the
/// cleanup of deleted Services.
pub(super) struct State {
    pub ctx: Context,
    pub options: Options,
    pub recorder: Recorder,
    pub backoff: Backoff,
    /// Per Service key; see [`Entry`].
    entries: Mutex<HashMap<String, Entry>>,
    /// The Services, as the watch keeps them.
    pub services: reflector::Store<Service>,
    /// Services to sync again (the node sync's failures), into the controller's queue.
    pub resync: mpsc::UnboundedSender<Arc<Service>>,
    /// The node set built last, handed out again while the nodes do not change.
    shared_nodes: Mutex<NodeSet>,
}

/// A Service's last sync: its state (what upstream's `needsUpdate` compares the next
/// one with), and the outcome.
#[derive(Debug, Clone)]
pub(super) struct Cached {
    pub state: Arc<Service>,
    /// The sync succeeded: nothing to do until those fields change.
    pub ok: bool,
    /// After a failure: when the next attempt is due.
    pub retry_at: Option<Instant>,
}

/// The node set as upstream's `nodesSufficientlyEqual` compares it: name → provider
/// ID, so a provider ID set after a Node joined (by cloud-node) updates load balancers.
/// Shared: every load balancer given the same nodes holds the same set
/// ([`State::node_set`]), as upstream's `lastSyncedNodes` holds pointers to the
/// informer's Nodes (a copy per Service is half a MiB at 5,000 Nodes).
pub(super) type NodeSet = Arc<BTreeMap<String, String>>;

/// What is kept of one Service key.
#[derive(Default)]
struct Entry {
    /// One sync at a time per key (upstream's work queue guarantees it), across the
    /// Service reconciles, the node sync and the cleanup of deleted Services.
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The last sync; none before the first, and after the load balancer is deleted.
    synced: Option<Cached>,
    /// The node set the load balancer was last given (set before the first sync ends).
    last_nodes: Option<NodeSet>,
}

impl State {
    pub fn new(
        ctx: Context,
        options: Options,
        recorder: Recorder,
        backoff: Backoff,
        services: reflector::Store<Service>,
        resync: mpsc::UnboundedSender<Arc<Service>>,
    ) -> Self {
        Self {
            ctx,
            options,
            recorder,
            backoff,
            entries: Mutex::new(HashMap::new()),
            services,
            resync,
            shared_nodes: Mutex::default(),
        }
    }

    /// The set of `nodes`: the one built last when it is the same, so load balancers
    /// given the same nodes share it.
    pub fn node_set(&self, nodes: &[Arc<Node>]) -> NodeSet {
        let built: BTreeMap<String, String> = nodes
            .iter()
            .map(|n| {
                let provider_id = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.provider_id.clone())
                    .unwrap_or_default();
                (n.name_any(), provider_id)
            })
            .collect();
        let mut shared = self.shared_nodes.lock().expect("shared node set lock");
        if **shared != built {
            *shared = Arc::new(built);
        }
        shared.clone()
    }

    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        f(self
            .entries
            .lock()
            .expect("service entries lock")
            .entry(key.to_owned())
            .or_default())
    }

    /// The key's lock: held for a whole sync.
    pub fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.with(key, |e| e.lock.clone())
    }

    /// The key's last sync.
    pub fn synced(&self, key: &str) -> Option<Cached> {
        let entries = self.entries.lock().expect("service entries lock");
        entries.get(key).and_then(|e| e.synced.clone())
    }

    /// Whether the key was synced (and its load balancer not deleted since).
    pub fn is_synced(&self, key: &str) -> bool {
        let entries = self.entries.lock().expect("service entries lock");
        entries.get(key).is_some_and(|e| e.synced.is_some())
    }

    /// Every Service synced, as last synced.
    pub fn synced_states(&self) -> Vec<Arc<Service>> {
        let entries = self.entries.lock().expect("service entries lock");
        entries
            .values()
            .filter_map(|e| e.synced.as_ref().map(|c| c.state.clone()))
            .collect()
    }

    /// Records a sync of the key.
    pub fn record(&self, key: &str, cached: Cached) {
        self.with(key, |e| e.synced = Some(cached));
    }

    /// The key's Service was replaced by another of the same name, whose first sync
    /// comes next.
    pub fn replaced(&self, key: &str) {
        self.with(key, |e| e.synced = None);
    }

    /// The key's load balancer is deleted: no last sync, no node set.
    pub fn deleted(&self, key: &str) {
        self.with(key, |e| {
            e.synced = None;
            e.last_nodes = None;
        });
    }

    /// Records the node set given to the key's load balancer; the one before.
    pub fn set_nodes(&self, key: &str, set: NodeSet) -> Option<NodeSet> {
        self.with(key, |e| e.last_nodes.replace(set))
    }

    /// The key's last sync is no longer a success (its node update failed).
    pub fn mark_failed(&self, key: &str) {
        self.update_synced(key, |synced| synced.ok = false);
    }

    /// After a failure: the key's next attempt is due at `at`.
    pub fn set_retry_at(&self, key: &str, at: Instant) {
        self.update_synced(key, |synced| synced.retry_at = Some(at));
    }

    /// Changes the key's last sync in place, if there is one (no entry is made for an
    /// unknown key).
    fn update_synced(&self, key: &str, f: impl FnOnce(&mut Cached)) {
        let mut entries = self.entries.lock().expect("service entries lock");
        if let Some(synced) = entries.get_mut(key).and_then(|e| e.synced.as_mut()) {
            f(synced);
        }
    }

    /// Forgets the key altogether (its Service is gone and cleaned up).
    pub fn forget(&self, key: &str) {
        self.entries
            .lock()
            .expect("service entries lock")
            .remove(key);
    }
}

#[cfg(test)]
impl State {
    /// A state for in-process tests: the cloud from `cloud`, an API server nobody
    /// answers at (events are logged as not recorded), no Nodes; with the Service
    /// store's writer and the resync queue.
    pub fn for_test(
        cloud: crate::cloud::SharedCloud,
    ) -> (
        Self,
        reflector::store::Writer<Service>,
        mpsc::UnboundedReceiver<Arc<Service>>,
    ) {
        Self::in_context(crate::controllers::test_cluster::context_without_api(cloud))
    }

    /// Records `svc` as synced with success, as its sync would leave it.
    pub fn synced_ok(&self, svc: Arc<Service>) {
        let key = super::key(&svc);
        self.record(
            &key,
            Cached {
                state: svc,
                ok: true,
                retry_at: None,
            },
        );
    }

    /// A state for in-process tests in `ctx` (a [`TestCluster`]'s, with the API server
    /// double), `--cluster-name kubernetes`; with the Service store's writer and the
    /// resync queue.
    ///
    /// [`TestCluster`]: crate::controllers::test_cluster::TestCluster
    pub fn in_context(
        ctx: Context,
    ) -> (
        Self,
        reflector::store::Writer<Service>,
        mpsc::UnboundedReceiver<Arc<Service>>,
    ) {
        let (reader, writer) = reflector::store();
        let (resync, queued) = mpsc::unbounded_channel();
        let options = Options::for_test();
        let recorder = ctx.recorder("service-controller");
        let backoff = Backoff::new(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(300),
        );
        let state = Self::new(ctx, options, recorder, backoff, reader, resync);
        (state, writer, queued)
    }
}
