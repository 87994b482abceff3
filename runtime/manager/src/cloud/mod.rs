//! The cloud seam: the one place where Kubernetes objects become provider contract
//! calls and answers become Kubernetes objects again.
//!
//! Controllers speak Kubernetes (`k8s-openapi` types) to a [`Cloud`]; nothing else in
//! the controller manager touches the contract's bindings. [`ProviderCloud`] is the
//! implementation over a loaded provider: it converts the objects ([`convert`]),
//! chooses `instances-v2` or falls back to legacy `instances` + `zones` exactly as
//! upstream `k8s.io/cloud-provider` does, and formats provider IDs
//! ([`provider_id`]). Other implementations (a native Rust port in the benchmarks)
//! plug in at the same trait.
//!
//! Each reconcile takes one [`SharedCloud::current`] and makes all its calls on it, so
//! a hot swap never changes the provider under a reconcile in flight.

pub(crate) mod convert;
mod error;
#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod methods;
mod provider;
pub mod provider_annotations;
pub mod provider_events;
pub mod shadow;
pub mod validate;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, NodeAddress, Service};
use wasm_ccm_host::provider::SharedProvider;
use wasm_ccm_host::provider::{Exports, Interface};

use methods::cloud_trait;

pub use error::Error;
pub use provider::ProviderCloud;
pub use wasm_ccm_host::provider::CloudError;

/// What a cloud call returns: a boxed future, so [`Cloud`] can be a trait object.
pub type CloudFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// What a call about several Nodes returns: one answer per Node, in order (the outer
/// error fails them all).
pub type BatchFuture<'a, T> = CloudFuture<'a, Vec<Result<T, Error>>>;

/// Asks about each Node in turn: what the batch methods do for a provider without
/// `instances-batch`.
pub async fn each<'a, T, F, Fut>(
    nodes: &'a [Arc<Node>],
    ask: F,
) -> Result<Vec<Result<T, Error>>, Error>
where
    F: Fn(&'a Node) -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut answers = Vec::with_capacity(nodes.len());
    for node in nodes {
        answers.push(ask(node).await);
    }
    Ok(answers)
}

/// Spreads a whole-batch failure over every Node of the batch.
pub fn per_node<T>(
    result: Result<Vec<Result<T, Error>>, Error>,
    nodes: usize,
) -> Vec<Result<T, Error>> {
    match result {
        Ok(answers) => answers,
        Err(err) => {
            let shared = Arc::new(err);
            (0..nodes)
                .map(|_| Err(Error::Batch(shared.clone())))
                .collect()
        }
    }
}

/// What a controller needs from the provider to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// `instances-v2` or the legacy `instances`.
    Instances,
    /// `load-balancer`.
    LoadBalancer,
    /// `routes`.
    Routes,
}

impl Requirement {
    /// Whether a component exporting `exports` satisfies it.
    pub fn met_by(self, exports: Exports) -> bool {
        match self {
            Self::Instances => {
                exports.contains(Interface::InstancesV2) || exports.contains(Interface::Instances)
            }
            Self::LoadBalancer => exports.contains(Interface::LoadBalancer),
            Self::Routes => exports.contains(Interface::Routes),
        }
    }

    /// The interface(s) by WIT name, for messages.
    pub fn interface(self) -> &'static str {
        match self {
            Self::Instances => "instances-v2 or instances",
            Self::LoadBalancer => "load-balancer",
            Self::Routes => "routes",
        }
    }
}

/// What the cloud says about a Node's instance (upstream `cloudprovider.InstanceMetadata`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceMetadata {
    /// `ProviderName://...`; the Node's own when the cloud gave none.
    pub provider_id: String,
    pub instance_type: String,
    pub addresses: Vec<NodeAddress>,
    pub zone: String,
    pub region: String,
    /// Labels the provider wants on the Node (filtered by the cloud-node controller).
    pub additional_labels: Vec<(String, String)>,
}

/// A cloud route (upstream `cloudprovider.Route`).
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The provider's name for the route; empty when creating.
    pub name: String,
    /// The Node the route sends traffic to.
    pub target_node: String,
    /// That Node's addresses when the route was made (empty when unknown).
    pub target_node_addresses: Vec<NodeAddress>,
    pub destination_cidr: String,
    /// The route's target is gone.
    pub blackhole: bool,
    /// Upstream's `EnableNodeAddresses`: `target_node_addresses` is meaningful (compared
    /// to the Node's, a change re-creates the route).
    pub enable_node_addresses: bool,
    /// The target Node's provider ID (set on create).
    pub target_node_provider_id: Option<String>,
}

methods::cloud_methods!(cloud_trait);

fn not_exported<'a, T: Send + 'a>(requirement: Requirement) -> CloudFuture<'a, T> {
    Box::pin(std::future::ready(Err(Error::NotExported(
        requirement.interface(),
    ))))
}

/// Upstream's provider ID format: `ProviderName://instance-id`.
pub fn provider_id(provider_name: &str, instance_id: &str) -> String {
    format!("{provider_name}://{instance_id}")
}

/// The Node's addresses as the cloud sees them (of the known address types).
pub fn node_addresses(node: &Node) -> Vec<NodeAddress> {
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_deref());
    convert::known_addresses(addresses.unwrap_or_default())
}

/// The cloud serving now, replaceable while controllers run (hot swap).
#[derive(Clone)]
pub struct SharedCloud {
    current: Arc<dyn Fn() -> Arc<dyn Cloud> + Send + Sync>,
}

impl std::fmt::Debug for SharedCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedCloud")
    }
}

impl SharedCloud {
    /// The provider serving in `shared`, whichever version that is at each call.
    pub fn provider(shared: SharedProvider) -> Self {
        Self::provider_with_canary(shared, shadow::CanarySlot::default())
    }

    /// The same, with the version on trial in `canary` (if any) asked beside the
    /// serving one ([`shadow::ShadowCloud`]).
    pub fn provider_with_canary(shared: SharedProvider, canary: shadow::CanarySlot) -> Self {
        Self {
            current: Arc::new(move || {
                let serving: Arc<dyn Cloud> = Arc::new(ProviderCloud::new(shared.current()));
                match canary.get() {
                    None => serving,
                    Some(trial) => Arc::new(shadow::ShadowCloud::new(
                        serving,
                        Arc::new(ProviderCloud::new(trial.provider)),
                        trial.comparison,
                        trial.observer,
                    )),
                }
            }),
        }
    }

    /// Always `cloud` (an implementation that is not a provider component).
    pub fn fixed(cloud: Arc<dyn Cloud>) -> Self {
        Self {
            current: Arc::new(move || cloud.clone()),
        }
    }

    /// The cloud to make one reconcile's calls on.
    pub fn current(&self) -> Arc<dyn Cloud> {
        (self.current)()
    }
}
