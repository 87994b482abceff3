//! A recording cloud for the controllers' in-process tests, as upstream's `fake.Cloud`:
//! every call is logged with the version that answered it, what it was about (the
//! Node, the Service and the Nodes passed, the route) and when (on tokio's clock, which
//! a test may pause); chosen calls fail, are throttled or answer slowly, and a hook runs
//! right after a named call (a hot swap between two calls of one reconcile, with no
//! timing involved).
//!
//! ```ignore
//! let calls = Calls::default();
//! let switch = Switch::new(Arc::new(Recording::new(1, &calls)));
//! let v2: Arc<dyn Cloud> = Arc::new(Recording::new(2, &calls));
//! let swap = switch.clone();
//! switch.set(Arc::new(
//!     Recording::new(1, &calls).after("get", move || swap.set(v2.clone())),
//! ));
//! // ... run a controller on `switch.shared()`, then:
//! assert_eq!(calls.taken(), [(1, "get"), (1, "delete")]);
//! ```

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, NodeAddress, Service};
use wasm_ccm_host::provider::{CloudError, ProviderError};

use super::{Cloud, CloudFuture, Error, InstanceMetadata, Requirement, Route, SharedCloud};

/// The calls made, in order: the answering version and the call's short name (`get`,
/// `ensure`, `update`, `delete` for load balancers; `metadata`, `addresses`, `exists`,
/// `shutdown` for instances; `list-routes`, `create-route`, `delete-route`), and when
/// on tokio's clock (which a test may pause).
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<Vec<Call>>>);

/// One recorded call.
#[derive(Clone, Debug)]
pub struct Call {
    /// The version that answered it.
    pub version: u64,
    /// The call's short name.
    pub name: &'static str,
    /// What it was about: the Node's name (instances), the Service's `namespace/name`
    /// (load balancers), the cluster's name (`list-routes`) or the route's destination
    /// CIDR (`create-route`, `delete-route`).
    pub subject: String,
    /// The Nodes passed (`ensure`, `update`), by name, in the order given.
    pub nodes: Vec<String>,
    /// When it was made, on tokio's clock.
    pub at: tokio::time::Instant,
}

impl Calls {
    /// The calls so far, as (version, name).
    pub fn taken(&self) -> Vec<(u64, &'static str)> {
        let calls = self.0.lock().unwrap();
        calls.iter().map(|c| (c.version, c.name)).collect()
    }

    /// The `name` calls so far, whole, in order.
    pub fn of(&self, name: &str) -> Vec<Call> {
        let calls = self.0.lock().unwrap();
        calls.iter().filter(|c| c.name == name).cloned().collect()
    }

    /// What each `name` call so far was about ([`Call::subject`]), in order.
    pub fn subjects(&self, name: &str) -> Vec<String> {
        self.of(name).into_iter().map(|c| c.subject).collect()
    }

    /// When each `name` call so far was made.
    pub fn times(&self, name: &str) -> Vec<tokio::time::Instant> {
        self.of(name).into_iter().map(|c| c.at).collect()
    }

    fn push(&self, call: Call) {
        self.0.lock().unwrap().push(call);
    }
}

/// What a call is about, as [`Call`] records it.
struct About {
    subject: String,
    nodes: Vec<String>,
}

impl About {
    fn node(node: &Node) -> Self {
        Self::named(node.metadata.name.as_deref().unwrap_or_default())
    }

    fn service(service: &Service) -> Self {
        let meta = &service.metadata;
        Self::named(&format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        ))
    }

    fn hosts(service: &Service, nodes: &[Arc<Node>]) -> Self {
        let nodes = nodes
            .iter()
            .map(|n| n.metadata.name.clone().unwrap_or_default())
            .collect();
        Self {
            nodes,
            ..Self::service(service)
        }
    }

    fn named(subject: &str) -> Self {
        Self {
            subject: subject.to_string(),
            nodes: Vec::new(),
        }
    }
}

/// The cloud a [`SharedCloud`] hands out, changed at will.
#[derive(Clone)]
pub struct Switch(Arc<Mutex<Arc<dyn Cloud>>>);

impl Switch {
    pub fn new(first: Arc<dyn Cloud>) -> Self {
        Self(Arc::new(Mutex::new(first)))
    }

    /// What the controllers take their cloud from.
    pub fn shared(&self) -> SharedCloud {
        let slot = self.0.clone();
        SharedCloud {
            current: Arc::new(move || slot.lock().unwrap().clone()),
        }
    }

    /// From now on, `current()` answers `cloud`.
    pub fn set(&self, cloud: Arc<dyn Cloud>) {
        *self.0.lock().unwrap() = cloud;
    }

    /// Versions 1 to `failures` on `calls`, each made to fail `call` by `fail` and
    /// swapped for the next right after its `call`; version `failures + 1` answers.
    /// The first is set now.
    pub fn set_failing_versions(
        &self,
        calls: &Calls,
        failures: u64,
        call: &'static str,
        fail: impl Fn(Recording) -> Recording,
    ) {
        let mut next: Arc<dyn Cloud> = Arc::new(Recording::new(failures + 1, calls));
        for version in (1..=failures).rev() {
            let (swap, after) = (self.clone(), next);
            next =
                Arc::new(fail(Recording::new(version, calls)).after(call, move || swap.set(after)));
        }
        self.set(next);
    }
}

type Hook = Box<dyn FnOnce() + Send>;

/// One version of the cloud: it records every call in [`Calls`]; the load balancer
/// exists (get answers a status) and every instance exists and runs, unless told
/// otherwise.
pub struct Recording {
    version: u64,
    calls: Calls,
    exists: bool,
    instance_exists: bool,
    shut_down: bool,
    batches: bool,
    failing: Vec<&'static str>,
    throttled: Option<(&'static str, std::time::Duration)>,
    slow: Vec<(&'static str, std::time::Duration)>,
    metadata: Option<InstanceMetadata>,
    routes: Mutex<Vec<Route>>,
    hook: Mutex<Option<(&'static str, Hook)>>,
}

impl Recording {
    pub fn new(version: u64, calls: &Calls) -> Self {
        Self {
            version,
            calls: calls.clone(),
            exists: true,
            instance_exists: true,
            shut_down: false,
            batches: false,
            failing: Vec::new(),
            throttled: None,
            slow: Vec::new(),
            metadata: None,
            routes: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
        }
    }

    /// `call` answers a cloud error.
    pub fn failing(mut self, call: &'static str) -> Self {
        self.failing.push(call);
        self
    }

    /// `call` answers `retry-after` with `delay` (upstream's `api.RetryError`).
    pub fn throttled(mut self, call: &'static str, delay: std::time::Duration) -> Self {
        self.throttled = Some((call, delay));
        self
    }

    /// `call` answers after `delay` on tokio's clock (a cloud that takes its time;
    /// recorded when it is made).
    pub fn slow(mut self, call: &'static str, delay: std::time::Duration) -> Self {
        self.slow.push((call, delay));
        self
    }

    /// Every instance is described by `metadata` (its addresses are also what
    /// `addresses` answers), instead of `fake://<node>` of type `fake.small` in
    /// `zone-a`, `region-1`, with no addresses.
    pub fn answering(mut self, metadata: InstanceMetadata) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The cloud's routes to start with; create and delete change them.
    pub fn with_routes(self, routes: Vec<Route>) -> Self {
        *self.routes.lock().unwrap() = routes;
        self
    }

    /// The routes now, sorted by destination.
    pub fn routes(&self) -> Vec<Route> {
        let mut routes = self.routes.lock().unwrap().clone();
        routes.sort_by(|a, b| a.destination_cidr.cmp(&b.destination_cidr));
        routes
    }

    /// Get answers that the load balancer does not exist.
    pub fn without_load_balancer(mut self) -> Self {
        self.exists = false;
        self
    }

    /// Every instance is gone: exists answers false.
    pub fn without_instances(mut self) -> Self {
        self.instance_exists = false;
        self
    }

    /// Every instance is shut down: shutdown answers true.
    pub fn shut_down(mut self) -> Self {
        self.shut_down = true;
        self
    }

    /// It answers calls about several Nodes at once (`instances-batch`); each Node is
    /// still recorded as a `metadata` call.
    pub fn batching(mut self) -> Self {
        self.batches = true;
        self
    }

    /// Runs `hook` once, right after the first `call`.
    pub fn after(self, call: &'static str, hook: impl FnOnce() + Send + 'static) -> Self {
        *self.hook.lock().unwrap() = Some((call, Box::new(hook)));
        self
    }

    fn record(&self, call: &'static str, about: About) -> Result<(), Error> {
        self.calls.push(Call {
            version: self.version,
            name: call,
            subject: about.subject,
            nodes: about.nodes,
            at: tokio::time::Instant::now(),
        });
        let hook = {
            let mut slot = self.hook.lock().unwrap();
            match slot.take() {
                Some((name, hook)) if name == call => Some(hook),
                other => {
                    *slot = other;
                    None
                }
            }
        };
        if let Some(hook) = hook {
            hook();
        }
        let injected = match self.throttled {
            Some((throttled, delay)) if throttled == call => Some(CloudError::RetryAfter {
                delay,
                message: format!("{call} throttled (injected)"),
            }),
            _ if self.failing.contains(&call) => {
                Some(CloudError::Other(format!("{call} failed (injected)")))
            }
            _ => None,
        };
        if let Some(error) = injected {
            return Err(Error::Provider(ProviderError::Cloud {
                provider: "fake".into(),
                function: call,
                error,
            }));
        }
        Ok(())
    }

    fn answer<'a, T: Send + 'a>(
        &'a self,
        call: &'static str,
        about: About,
        value: impl FnOnce() -> T + Send + 'a,
    ) -> CloudFuture<'a, T> {
        let result = self.record(call, about).map(|()| value());
        let delay = self
            .slow
            .iter()
            .find(|(slow, _)| *slow == call)
            .map(|s| s.1);
        match delay {
            Some(delay) => Box::pin(async move {
                tokio::time::sleep(delay).await;
                result
            }),
            None => Box::pin(std::future::ready(result)),
        }
    }
}

/// The status of every load balancer: ingress [`INGRESS_IP`].
fn status() -> LoadBalancerStatus {
    serde_json::from_value(serde_json::json!({"ingress": [{"ip": INGRESS_IP}]}))
        .expect("a load balancer status")
}

/// The address a [`Recording`] cloud's load balancers answer at.
pub const INGRESS_IP: &str = "192.0.2.10";

impl Cloud for Recording {
    fn name(&self) -> &str {
        "fake"
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn meets(&self, _requirement: Requirement) -> bool {
        true
    }

    fn batches(&self) -> bool {
        self.batches
    }

    fn instance_metadata<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, InstanceMetadata> {
        let scripted = self.metadata.clone();
        self.answer("metadata", About::node(node), move || {
            scripted.unwrap_or_else(|| InstanceMetadata {
                provider_id: format!(
                    "fake://{}",
                    node.metadata.name.as_deref().unwrap_or_default()
                ),
                instance_type: "fake.small".into(),
                zone: "zone-a".into(),
                region: "region-1".into(),
                ..Default::default()
            })
        })
    }

    fn node_addresses<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<Vec<NodeAddress>>> {
        let addresses = self.metadata.as_ref().map(|m| m.addresses.clone());
        self.answer("addresses", About::node(node), move || {
            Some(addresses.unwrap_or_default())
        })
    }

    fn instance_exists<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        let exists = self.instance_exists;
        self.answer("exists", About::node(node), move || Some(exists))
    }

    fn instance_shutdown<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        let shut_down = self.shut_down;
        self.answer("shutdown", About::node(node), move || Some(shut_down))
    }

    fn get_load_balancer<'a>(
        &'a self,
        _cluster: &'a str,
        service: &'a Service,
    ) -> CloudFuture<'a, Option<LoadBalancerStatus>> {
        let exists = self.exists;
        self.answer("get", About::service(service), move || exists.then(status))
    }

    fn ensure_load_balancer<'a>(
        &'a self,
        _cluster: &'a str,
        service: &'a Service,
        nodes: &'a [Arc<Node>],
    ) -> CloudFuture<'a, LoadBalancerStatus> {
        self.answer("ensure", About::hosts(service, nodes), status)
    }

    fn update_load_balancer<'a>(
        &'a self,
        _cluster: &'a str,
        service: &'a Service,
        nodes: &'a [Arc<Node>],
    ) -> CloudFuture<'a, ()> {
        self.answer("update", About::hosts(service, nodes), || ())
    }

    fn ensure_load_balancer_deleted<'a>(
        &'a self,
        _cluster: &'a str,
        service: &'a Service,
    ) -> CloudFuture<'a, ()> {
        self.answer("delete", About::service(service), || ())
    }

    fn list_routes<'a>(&'a self, cluster: &'a str) -> CloudFuture<'a, Vec<Route>> {
        self.answer("list-routes", About::named(cluster), move || {
            self.routes.lock().unwrap().clone()
        })
    }

    fn create_route<'a>(
        &'a self,
        _cluster: &'a str,
        name_hint: &'a str,
        route: &'a Route,
    ) -> CloudFuture<'a, ()> {
        let about = About::named(&route.destination_cidr);
        self.answer("create-route", about, move || {
            let mut made = route.clone();
            made.name = name_hint.to_string();
            self.routes.lock().unwrap().push(made);
        })
    }

    fn delete_route<'a>(&'a self, _cluster: &'a str, route: &'a Route) -> CloudFuture<'a, ()> {
        let about = About::named(&route.destination_cidr);
        self.answer("delete-route", about, move || {
            self.routes
                .lock()
                .unwrap()
                .retain(|r| r.destination_cidr != route.destination_cidr || r.name != route.name);
        })
    }
}
