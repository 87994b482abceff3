//! Coalescing the cloud-node controller's initialization calls: Nodes that arrive
//! within a short window (`--node-init-batch-window`) are asked about in one batched
//! `instances-metadata` call of at most `--instances-batch-size` Nodes, so a thousand
//! Nodes joining at once cost a handful of provider calls (and of cloud requests)
//! instead of a thousand.
//!
//! With a provider that does not export `instances-batch`, or with
//! `--instances-batch-size 1`, nothing waits: each Node is asked about on its own, as
//! upstream does. Either way at most
//! `--concurrent-node-syncs` provider calls are in flight.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::cloud::{self, Cloud, InstanceMetadata};

type Reply = oneshot::Sender<Result<InstanceMetadata, cloud::Error>>;

/// A Node's request: the provider version its reconcile took, the Node, where to answer.
type Request = (Arc<dyn Cloud>, Arc<Node>, Reply);

/// Hands Nodes' metadata requests to the cloud, batched when the provider can.
#[derive(Clone)]
pub struct MetadataBatcher {
    requests: mpsc::UnboundedSender<Request>,
    calls: Arc<Semaphore>,
    /// False with `--instances-batch-size 1`: every Node is asked about on its own.
    coalesce: bool,
}

/// How requests are coalesced.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    /// How long the first request of a batch waits for others.
    pub window: Duration,
    /// The most Nodes in one call.
    pub max_nodes: usize,
    /// Provider calls in flight at once.
    pub concurrent_calls: usize,
}

impl MetadataBatcher {
    /// Starts the coalescing task (it ends when the last handle is dropped).
    pub fn start(batching: Batching) -> Self {
        let (requests, mut incoming) = mpsc::unbounded_channel::<Request>();
        let calls = Arc::new(Semaphore::new(batching.concurrent_calls.max(1)));
        let this = Self {
            requests,
            calls: calls.clone(),
            coalesce: batching.max_nodes > 1,
        };
        let max_nodes = batching.max_nodes.max(1);
        tokio::spawn(async move {
            // A request of another provider version (or canary) than its batch's starts
            // the next.
            let mut carried: Option<Request> = None;
            loop {
                let first = match carried.take() {
                    Some(request) => request,
                    None => match incoming.recv().await {
                        Some(request) => request,
                        None => break,
                    },
                };
                let (cloud, node, reply) = first;
                let version = (cloud.version(), cloud.candidate_version());
                let mut batch = vec![(node, reply)];
                let deadline = tokio::time::Instant::now() + batching.window;
                while batch.len() < max_nodes {
                    match tokio::time::timeout_at(deadline, incoming.recv()).await {
                        Ok(Some((other, node, reply)))
                            if (other.version(), other.candidate_version()) == version =>
                        {
                            batch.push((node, reply));
                        }
                        Ok(Some(request)) => {
                            carried = Some(request);
                            break;
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
                let permit = calls
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed");
                tokio::spawn(async move {
                    let (nodes, replies): (Vec<Arc<Node>>, Vec<Reply>) = batch.into_iter().unzip();
                    tracing::debug!(
                        nodes = nodes.len(),
                        "asking the cloud about joining nodes in one call"
                    );
                    let answers =
                        cloud::per_node(cloud.instances_metadata(&nodes).await, nodes.len());
                    drop(permit);
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        // A reconcile that gave up (shutdown) no longer listens.
                        let _ = reply.send(answer);
                    }
                });
            }
        });
        this
    }

    /// Whether a request asked of `cloud` waits for its batch (the provider batches and
    /// `--instances-batch-size` is above 1), or is asked on its own at once.
    pub fn batches(&self, cloud: &dyn Cloud) -> bool {
        self.coalesce && cloud.batches()
    }

    /// The metadata of `node` from `cloud`, the provider version its reconcile took:
    /// asked together with the Nodes arriving with it when [`Self::batches`], else on
    /// its own (a batch holds one version).
    pub async fn metadata(
        &self,
        cloud: Arc<dyn Cloud>,
        node: Arc<Node>,
    ) -> Result<InstanceMetadata, cloud::Error> {
        if !self.batches(cloud.as_ref()) {
            return self.alone(cloud.as_ref(), &node).await;
        }
        let (reply, answer) = oneshot::channel();
        if self
            .requests
            .send((cloud.clone(), node.clone(), reply))
            .is_err()
        {
            return self.alone(cloud.as_ref(), &node).await;
        }
        match answer.await {
            Ok(answer) => answer,
            // The batch task dropped the request (shutting down): ask directly.
            Err(_) => self.alone(cloud.as_ref(), &node).await,
        }
    }

    /// `node`'s metadata in a call of its own, within `--concurrent-node-syncs`.
    async fn alone(
        &self,
        cloud: &dyn Cloud,
        node: &Node,
    ) -> Result<InstanceMetadata, cloud::Error> {
        let _permit = self.calls.acquire().await.expect("never closed");
        cloud.instance_metadata(node).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::fake::{Calls, Recording, Switch};

    fn node(name: &str) -> Arc<Node> {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        Arc::new(node)
    }

    /// Two Nodes asked about across a hot swap: each is answered by the version its
    /// reconcile took, never both by the newer one.
    #[tokio::test]
    async fn a_batch_holds_one_provider_version() {
        let calls = Calls::default();
        let switch = Switch::new(Arc::new(Recording::new(1, &calls).batching()));
        let batcher = MetadataBatcher::start(Batching {
            window: Duration::from_millis(200),
            max_nodes: 2,
            concurrent_calls: 1,
        });
        let first = tokio::spawn({
            let batcher = batcher.clone();
            let cloud = switch.shared().current();
            async move { batcher.metadata(cloud, node("a")).await }
        });
        // On this single-threaded runtime, the first reconcile (which took v1) queues its
        // request when this task yields: before the swap.
        tokio::task::yield_now().await;
        switch.set(Arc::new(Recording::new(2, &calls).batching()));
        let second = batcher
            .metadata(switch.shared().current(), node("b"))
            .await
            .unwrap();
        let first = first.await.unwrap().unwrap();
        assert_eq!(first.provider_id, "fake://a");
        assert_eq!(second.provider_id, "fake://b");
        let mut taken = calls.taken();
        taken.sort();
        assert_eq!(taken, [(1, "metadata"), (2, "metadata")]);
    }
}
