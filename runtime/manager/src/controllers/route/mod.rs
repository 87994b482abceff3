//! The route controller, as upstream's.
//!
//! Every `--route-reconciliation-period`, from the shared Node view: for each Node pod
//! CIDR, create the missing route (name hint: the Node UID) or re-create one whose
//! target addresses changed; delete routes this cluster owns (upstream's
//! `isResponsibleForRoute`: the route's first or last address lies in a
//! `--cluster-cidr`) that are blackholed or that no Node's pod CIDR wants as they are;
//! never touch other routes. Deletes, then creates, run up to 200 at once. Then each
//! Node with pod CIDRs or targeted by a route gets `NetworkUnavailable`: `False`
//! (`RouteCreated`) when all its CIDRs are routed, else `True` (`NoRouteCreated`).
//! A failed create records `FailedToCreateRoute` on the Node (source `route_controller`).

use std::collections::{BTreeMap, HashMap};

use futures_util::StreamExt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::events::EventType;
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::node_informer::NodeEvent;
use super::{Context, node_event, tick};
use crate::cloud::{self, Route};

/// Routes a provider names by next hop only (`target_node` empty, the next hop in
/// `target_node_addresses`), as occm's `ListRoutes` does with its Node informer: the
/// Node holding that address is the target (its provider ID too); a next hop no Node
/// holds is a blackhole route named by the address.
pub fn resolve_targets(routes: Vec<Route>, nodes: &[Arc<Node>]) -> Vec<Route> {
    routes
        .into_iter()
        .map(|mut route| {
            if !route.target_node.is_empty() || route.target_node_addresses.is_empty() {
                return route;
            }
            // A Node whose InternalIP is the next hop first, then one holding it otherwise.
            let holds = |node: &&Arc<Node>, internal_only: bool| {
                cloud::node_addresses(node).iter().any(|a| {
                    (!internal_only || a.type_ == "InternalIP")
                        && route
                            .target_node_addresses
                            .iter()
                            .any(|hop| hop.address == a.address)
                })
            };
            let holder = nodes
                .iter()
                .find(|n| holds(n, true))
                .or_else(|| nodes.iter().find(|n| holds(n, false)));
            match holder {
                Some(node) => {
                    route.target_node = node.name_any();
                    route.target_node_provider_id =
                        node.spec.as_ref().and_then(|s| s.provider_id.clone());
                }
                None => {
                    route.target_node = route.target_node_addresses[0].address.clone();
                    route.blackhole = true;
                }
            }
            route
        })
        .collect()
}

/// The controller's name: in `--controllers`, metrics and logs.
pub const NAME: &str = "route";

/// An IPv4 or IPv6 CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether this is an IPv6 CIDR.
    pub fn is_ipv6(&self) -> bool {
        self.addr.is_ipv6()
    }

    /// Parses `10.244.0.0/16` or `fd00::/64`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a CIDR such as 10.244.0.0/16");
        let (addr, prefix) = text.trim().split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { addr, prefix })
    }

    /// The address in the high bits of a u128 (IPv4 shifted up), so a prefix of
    /// length n is always the top n bits.
    fn bits(addr: IpAddr) -> u128 {
        match addr {
            IpAddr::V4(a) => u128::from(u32::from(a)) << 96,
            IpAddr::V6(a) => u128::from(a),
        }
    }

    /// The first and last addresses of this CIDR (in [`Self::bits`] form).
    fn range(&self) -> (u128, u128) {
        let mask = self.mask();
        let first = Self::bits(self.addr) & mask;
        let host = if self.addr.is_ipv4() {
            !mask & (u128::from(u32::MAX) << 96)
        } else {
            !mask
        };
        (first, first | host)
    }

    fn mask(&self) -> u128 {
        let prefix = u32::from(self.prefix);
        if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        }
    }

    /// Whether an address (in [`Self::bits`] form, same family) lies in this CIDR.
    fn contains_bits(&self, bits: u128) -> bool {
        Self::bits(self.addr) & self.mask() == bits & self.mask()
    }

    /// Whether `other` lies entirely inside this CIDR (same family).
    pub fn contains(&self, other: &Cidr) -> bool {
        if self.addr.is_ipv4() != other.addr.is_ipv4() || other.prefix < self.prefix {
            return false;
        }
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        };
        Self::bits(self.addr) & mask == Self::bits(other.addr) & mask
    }
}

/// Options of the controller (upstream flags).
#[derive(Debug, Clone)]
pub struct Options {
    pub cluster_name: String,
    /// `--cluster-cidr`, one or two (dual stack).
    pub cluster_cidrs: Vec<Cidr>,
    /// `--route-reconciliation-period`.
    pub period: Duration,
    /// Upstream's `CloudControllerManagerWatchBasedRoutesReconciliation` gate: reconcile
    /// on the Node changes that can change routes, at most once per
    /// [`MIN_RESYNC_INTERVAL`], instead of every `period`.
    pub watch_based: bool,
}

/// Upstream's `minRouteResyncInterval`: with watch-based reconciliation, the least time
/// between two reconciles however many Node changes come.
pub const MIN_RESYNC_INTERVAL: Duration = Duration::from_secs(10);

/// With watch-based reconciliation, a reconcile even without a Node change, as the
/// informer's periodic resync makes one upstream (between 12 and 24 h there).
pub const WATCH_RESYNC_INTERVAL: Duration = Duration::from_secs(12 * 3600);

fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let mut cidrs = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
    if cidrs.is_empty()
        && let Some(cidr) = spec.and_then(|s| s.pod_cidr.clone())
    {
        cidrs.push(cidr);
    }
    cidrs
}

fn same_addresses(a: &[NodeAddress], b: &[NodeAddress]) -> bool {
    fn key(v: &[NodeAddress]) -> Vec<(&str, &str)> {
        let mut k: Vec<(&str, &str)> = v
            .iter()
            .map(|a| (a.type_.as_str(), a.address.as_str()))
            .collect();
        k.sort();
        k
    }
    key(a) == key(b)
}

async fn set_network_condition(
    api: &Api<Node>,
    node: &Node,
    routed: bool,
) -> Result<(), kube::Error> {
    let (status, reason, message) = if routed {
        ("False", "RouteCreated", "RouteController created a route")
    } else {
        (
            "True",
            "NoRouteCreated",
            "RouteController failed to create a route",
        )
    };
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "NetworkUnavailable"));
    if current.is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason)) {
        return Ok(());
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = json!({
        "type": "NetworkUnavailable", "status": status, "reason": reason, "message": message,
        "lastTransitionTime": now, "lastHeartbeatTime": now,
    });
    api.patch_status(
        &node.name_any(),
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [condition]}})),
    )
    .await
    .map(drop)
}

/// What a reconciliation does with one pod CIDR of a Node (upstream's `routeAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// The route exists and points at the Node as it is.
    Keep,
    /// No route yet.
    Add,
    /// The route's target addresses changed: delete it, then create it again.
    Update,
}

/// Route operations in flight at once (upstream's `maxConcurrentRouteOperations`).
const MAX_CONCURRENT_ROUTE_OPERATIONS: usize = 200;

/// Upstream's `getRouteAction`.
fn route_action(routes: &[&Route], cidr: &str, addresses: &[NodeAddress]) -> Action {
    match routes.iter().find(|r| r.destination_cidr == cidr) {
        None => Action::Add,
        // Upstream compares addresses only on routes with EnableNodeAddresses.
        Some(r) if !r.enable_node_addresses => Action::Keep,
        Some(r) if same_addresses(&r.target_node_addresses, addresses) => Action::Keep,
        Some(_) => Action::Update,
    }
}

/// Upstream's `isResponsibleForRoute`: the route's first or last address lies in one
/// of the cluster CIDRs. An unparsable destination is not ours.
fn is_responsible(cluster_cidrs: &[Cidr], destination: &str) -> bool {
    let Ok(cidr) = Cidr::parse(destination) else {
        tracing::error!(cidr = destination, "ignoring route with an unparsable CIDR");
        return false;
    };
    let (first, last) = cidr.range();
    cluster_cidrs
        .iter()
        .any(|c| c.is_ipv6() == cidr.is_ipv6() && (c.contains_bits(first) || c.contains_bits(last)))
}

/// One reconciliation (upstream's `reconcile`). Returns whether every step succeeded.
pub async fn reconcile(
    ctx: &Context,
    options: &Options,
    recorder: &crate::events::Recorder,
) -> bool {
    let routes = ctx.cloud.current();
    if !routes.meets(cloud::Requirement::Routes) {
        return true;
    }
    ctx.metrics.upstream.route_sync.inc();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let existing = match routes.list_routes(&options.cluster_name).await {
        Ok(routes) => routes,
        Err(err) => {
            tracing::error!(error = %err, "cannot list routes");
            return false;
        }
    };
    let nodes = ctx.nodes.list();
    let existing = resolve_targets(existing, &nodes);
    let cluster = &options.cluster_name;

    // Upstream's routeMap: for each Node that routes target or that has pod CIDRs,
    // the action for each of its pod CIDRs.
    let mut actions: HashMap<String, BTreeMap<String, Action>> = HashMap::new();
    for route in existing.iter().filter(|r| !r.target_node.is_empty()) {
        actions.entry(route.target_node.clone()).or_default();
    }
    for node in &nodes {
        let cidrs = pod_cidrs(node);
        if cidrs.is_empty() {
            continue;
        }
        let name = node.name_any();
        let targeting: Vec<&Route> = existing.iter().filter(|r| r.target_node == name).collect();
        let addresses = cloud::node_addresses(node);
        let entry = actions.entry(name).or_default();
        for cidr in cidrs {
            let action = route_action(&targeting, &cidr, &addresses);
            entry.insert(cidr, action);
        }
    }

    // Delete, within the cluster CIDRs only, blackholed routes and those no Node's pod
    // CIDR wants as they are.
    let doomed: Vec<Route> = existing
        .iter()
        .filter(|r| {
            is_responsible(&options.cluster_cidrs, &r.destination_cidr)
                && (r.blackhole
                    || !matches!(
                        actions
                            .get(&r.target_node)
                            .and_then(|a| a.get(&r.destination_cidr)),
                        Some(Action::Keep | Action::Add)
                    ))
        })
        .cloned()
        .collect();
    let deleted = futures_util::stream::iter(doomed)
        .map(|route: Route| {
            let routes = routes.clone();
            async move {
                let route = &route;
                let started = Instant::now();
                tracing::info!(route = %route.name, cidr = %route.destination_cidr, target = %route.target_node, blackhole = route.blackhole, "deleting route");
                match routes.delete_route(cluster, route).await {
                    Ok(()) => {
                        tracing::info!(route = %route.name, cidr = %route.destination_cidr, elapsed = ?started.elapsed(), "deleted route");
                        true
                    }
                    Err(err) => {
                        tracing::error!(route = %route.name, cidr = %route.destination_cidr, error = %err, "could not delete route");
                        false
                    }
                }
            }
        })
        .buffer_unordered(MAX_CONCURRENT_ROUTE_OPERATIONS)
        .collect::<Vec<bool>>()
        .await;
    let mut ok = deleted.iter().all(|d| *d);

    // Create what is missing (or re-create what was updated).
    let wanted: Vec<(Arc<Node>, String)> = nodes
        .iter()
        .flat_map(|node| {
            let name = node.name_any();
            actions
                .get(&name)
                .into_iter()
                .flatten()
                .filter(|(_, action)| **action != Action::Keep)
                .map(move |(cidr, _)| (node.clone(), cidr.clone()))
        })
        .collect();
    let created = futures_util::stream::iter(wanted)
        .map(|(node, cidr): (Arc<Node>, String)| {
            let routes = routes.clone();
            async move {
                let node = node.as_ref();
                let name = node.name_any();
                let route = Route {
                    name: String::new(),
                    target_node: name.clone(),
                    target_node_addresses: cloud::node_addresses(node),
                    destination_cidr: cidr.clone(),
                    blackhole: false,
                    enable_node_addresses: true,
                    target_node_provider_id: node
                        .spec
                        .as_ref()
                        .and_then(|s| s.provider_id.clone())
                        .filter(|p| !p.is_empty()),
                };
                let hint = node.metadata.uid.clone().unwrap_or_default();
                let started = Instant::now();
                match routes.create_route(cluster, &hint, &route).await {
                    Ok(()) => {
                        tracing::info!(node = %name, %cidr, hint = %hint, elapsed = ?started.elapsed(), "created route");
                        Some((name, cidr))
                    }
                    Err(err) => {
                        let message = format!(
                            "Could not create route {hint} {cidr} for node {name} after {:?}: {err}",
                            started.elapsed()
                        );
                        tracing::error!(node = %name, %cidr, error = %err, "could not create route");
                        node_event(recorder, node, EventType::Warning, "FailedToCreateRoute", message)
                            .await;
                        None
                    }
                }
            }
        })
        .buffer_unordered(MAX_CONCURRENT_ROUTE_OPERATIONS)
        .collect::<Vec<_>>()
        .await;
    for done in &created {
        match done {
            Some((name, cidr)) => {
                if let Some(action) = actions.get_mut(name).and_then(|a| a.get_mut(cidr)) {
                    *action = Action::Keep;
                }
            }
            None => ok = false,
        }
    }

    // Then each Node's condition: a Node that routes target but that has no pod CIDR
    // is NetworkUnavailable (NoRouteCreated), as is one with a route missing.
    let outcomes: Vec<(Arc<Node>, bool)> = nodes
        .iter()
        .filter_map(|node| {
            let cidr_actions = actions.get(&node.name_any())?;
            let routed =
                !cidr_actions.is_empty() && cidr_actions.values().all(|a| *a == Action::Keep);
            Some((node.clone(), routed))
        })
        .collect();
    let conditions = futures_util::stream::iter(outcomes)
    .map(|(node, routed): (Arc<Node>, bool)| {
        let api = api.clone();
        async move {
            let node = node.as_ref();
            let result = set_network_condition(&api, node, routed).await;
            if let Err(err) = &result {
                tracing::error!(node = %node.name_any(), error = %err, "cannot update the NetworkUnavailable condition");
            }
            result.is_ok()
        }
    })
    .buffer_unordered(MAX_CONCURRENT_ROUTE_OPERATIONS)
    .collect::<Vec<bool>>()
    .await;
    ok && conditions.iter().all(|c| *c)
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(ctx: Context, options: Options, shutdown: tokio::sync::watch::Receiver<bool>) {
    // Upstream's event source for this controller has an underscore.
    let recorder = ctx.recorder("route_controller");
    // Subscribed before the first list is read: no change falls in between.
    let changes = options.watch_based.then(|| ctx.nodes.subscribe());
    if !ctx.nodes.ready().await {
        return;
    }
    if let Some(changes) = changes {
        return watch_based(ctx, options, recorder, changes, shutdown).await;
    }
    loop {
        let started = Instant::now();
        let ok = reconcile(&ctx, &options, &recorder).await;
        ctx.metrics.record(NAME, started, ok);
        if !tick(options.period, &shutdown).await {
            return;
        }
    }
}

/// Whether a Node change can change the routes (upstream's `handleNodeUpdate`): a Node
/// added or deleted, its pod CIDRs or its addresses changed.
fn changes_routes(event: &NodeEvent) -> bool {
    match event {
        NodeEvent::Added(_) | NodeEvent::Deleted(_) => true,
        NodeEvent::Updated { old, new } => {
            pod_cidrs(old) != pod_cidrs(new)
                || !same_addresses(&cloud::node_addresses(old), &cloud::node_addresses(new))
        }
    }
}

/// Upstream's watch-based route reconciliation: a reconcile at start (the informer's
/// first list adds every Node), then one whenever a Node change can change the routes
/// (or the subscription fell behind), one after a failed reconcile, and one every
/// [`WATCH_RESYNC_INTERVAL`]; never two within [`MIN_RESYNC_INTERVAL`], however many
/// changes come (they are folded into the next).
async fn watch_based(
    ctx: Context,
    options: Options,
    recorder: crate::events::Recorder,
    mut changes: tokio::sync::broadcast::Receiver<NodeEvent>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    let mut pending = true;
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        if !pending {
            let resync = tokio::time::sleep(WATCH_RESYNC_INTERVAL);
            tokio::pin!(resync);
            while !pending {
                tokio::select! {
                    _ = shutdown.wait_for(|stop| *stop) => return,
                    () = &mut resync => pending = true,
                    change = changes.recv() => match change {
                        Ok(event) => pending = changes_routes(&event),
                        Err(RecvError::Lagged(_)) => pending = true,
                        Err(RecvError::Closed) => return,
                    },
                }
            }
        }
        if let Some(last) = last {
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                () = tokio::time::sleep_until(last + MIN_RESYNC_INTERVAL) => {}
            }
        }
        // Changes so far are this reconcile's.
        loop {
            match changes.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
        let started = Instant::now();
        last = Some(tokio::time::Instant::now());
        let ok = reconcile(&ctx, &options, &recorder).await;
        ctx.metrics.record(NAME, started, ok);
        // A failed reconcile is tried again, rate limited as upstream requeues it.
        pending = !ok;
    }
}

#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod period_tests;
#[cfg(test)]
mod watch_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// occm's ListRoutes names a route's target by its next hop: the Node holding it,
    /// else a blackhole named by the address.
    #[test]
    fn routes_named_by_next_hop_find_their_node() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "worker-c"},
            "spec": {"providerID": "openstack:///c"},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.13"}]}
        }))
        .unwrap();
        let by_hop = |hop: &str| Route {
            name: "r".into(),
            target_node: String::new(),
            target_node_addresses: vec![NodeAddress {
                type_: "InternalIP".into(),
                address: hop.into(),
            }],
            destination_cidr: "10.244.3.0/24".into(),
            blackhole: false,
            enable_node_addresses: false,
            target_node_provider_id: None,
        };
        let named = Route {
            target_node: "node-a".into(),
            ..by_hop("10.0.0.11")
        };
        let resolved = resolve_targets(
            vec![by_hop("10.0.0.13"), by_hop("10.0.9.9"), named.clone()],
            &[Arc::new(node)],
        );
        assert_eq!(resolved[0].target_node, "worker-c");
        assert_eq!(
            resolved[0].target_node_provider_id.as_deref(),
            Some("openstack:///c")
        );
        assert!(!resolved[0].blackhole);
        assert_eq!(resolved[1].target_node, "10.0.9.9");
        assert!(resolved[1].blackhole);
        assert_eq!(resolved[2], named);

        // A Node whose InternalIP is the next hop wins over one holding it otherwise.
        let other: Node = serde_json::from_value(json!({
            "metadata": {"name": "edge"},
            "status": {"addresses": [{"type": "ExternalIP", "address": "10.0.0.13"}]}
        }))
        .unwrap();
        let worker: Node = serde_json::from_value(json!({
            "metadata": {"name": "worker-c"},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.13"}]}
        }))
        .unwrap();
        let resolved = resolve_targets(
            vec![by_hop("10.0.0.13")],
            &[Arc::new(other), Arc::new(worker)],
        );
        assert_eq!(resolved[0].target_node, "worker-c");
    }

    #[test]
    fn cidr_containment() {
        let cluster = Cidr::parse("10.244.0.0/16").unwrap();
        assert!(cluster.contains(&Cidr::parse("10.244.3.0/24").unwrap()));
        assert!(!cluster.contains(&Cidr::parse("10.245.0.0/24").unwrap()));
        assert!(cluster.contains(&Cidr::parse("10.244.99.0/24").unwrap()));
        assert!(!cluster.contains(&Cidr::parse("192.168.7.0/24").unwrap()));
        assert!(!cluster.contains(&Cidr::parse("11.244.0.0/24").unwrap()));
        assert!(!cluster.contains(&Cidr::parse("10.0.0.0/8").unwrap()));
        let v6 = Cidr::parse("fd00:10::/56").unwrap();
        assert!(v6.contains(&Cidr::parse("fd00:10:0:1::/64").unwrap()));
        assert!(!v6.contains(&Cidr::parse("10.244.0.0/24").unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nonsense").is_err());
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains(&Cidr::parse("1.2.3.0/24").unwrap())
        );
    }

    /// Ported from upstream `TestIsResponsibleForRoute`.
    #[test]
    fn is_responsible_for_route() {
        let cases = [
            ("10.244.0.0/16", "10.244.0.0/24", true),
            ("10.244.0.0/16", "10.244.10.0/24", true),
            ("10.244.0.0/16", "10.244.255.0/24", true),
            ("10.244.0.0/14", "10.244.0.0/24", true),
            ("10.244.0.0/14", "10.247.255.0/24", true),
            ("a00:100::/10", "a00:100::/24", true),
            ("10.244.0.0/16", "10.224.0.0/24", false),
            ("10.244.0.0/16", "10.0.10.0/24", false),
            ("10.244.0.0/16", "10.255.255.0/24", false),
            ("10.244.0.0/14", "10.248.0.0/24", false),
            ("10.244.0.0/14", "10.243.255.0/24", false),
            ("a00:100::/10", "b00:100::/24", false),
            // First or last address inside: a route wider than the cluster CIDR.
            ("10.244.0.0/16", "10.244.0.0/15", true),
            ("10.244.0.0/16", "10.0.0.0/8", false),
            ("10.244.0.0/16", "fd00::/64", false),
            ("10.244.0.0/16", "nonsense", false),
        ];
        for (cluster, route, want) in cases {
            let cluster = [Cidr::parse(cluster).unwrap()];
            assert_eq!(
                is_responsible(&cluster, route),
                want,
                "{route} in {cluster:?}"
            );
        }
    }

    /// Upstream's `getRouteAction`.
    #[test]
    fn route_actions() {
        let addr = |a: &str| NodeAddress {
            type_: "InternalIP".into(),
            address: a.into(),
        };
        let route = |cidr: &str, addresses: Vec<NodeAddress>| Route {
            name: "r".into(),
            target_node: "n".into(),
            enable_node_addresses: !addresses.is_empty(),
            target_node_addresses: addresses,
            destination_cidr: cidr.into(),
            blackhole: false,
            target_node_provider_id: None,
        };
        let plain = route("10.244.1.0/24", vec![]);
        let with_addresses = route("10.244.2.0/24", vec![addr("10.0.0.1")]);
        let routes = [&plain, &with_addresses];
        let now = [addr("10.0.0.2")];
        assert_eq!(route_action(&routes, "10.244.1.0/24", &now), Action::Keep);
        assert_eq!(route_action(&routes, "10.244.2.0/24", &now), Action::Update);
        assert_eq!(
            route_action(&routes, "10.244.2.0/24", &[addr("10.0.0.1")]),
            Action::Keep
        );
        assert_eq!(route_action(&routes, "10.244.3.0/24", &now), Action::Add);
    }
}
