//! The route controller.
//!
//! Every `--route-reconciliation-period`: for each Node pod CIDR, create the missing
//! route (name hint: the Node UID) and re-create one whose target addresses changed;
//! delete routes inside `--cluster-cidr` that are blackholed, point at unknown Nodes,
//! or are stale; never touch routes outside the cluster CIDRs. A Node whose CIDRs are
//! all routed gets `NetworkUnavailable=False` (reason `RouteCreated`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::events::EventType;
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Context, node_event, tick};
use crate::cloud::{self, Route};

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
}

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

/// One reconciliation. Returns whether every step succeeded.
pub async fn reconcile(
    ctx: &Context,
    options: &Options,
    recorder: &super::events::Recorder,
) -> bool {
    let routes = ctx.cloud.current();
    if !routes.meets(cloud::Requirement::Routes) {
        return true;
    }
    ctx.metrics.upstream.route_sync.inc();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let nodes = ctx.nodes.list();
    let existing = match routes.list_routes(&options.cluster_name).await {
        Ok(routes) => routes,
        Err(err) => {
            tracing::error!(error = %err, "cannot list routes");
            return false;
        }
    };
    let cluster = &options.cluster_name;
    let in_cluster = |cidr: &str| {
        Cidr::parse(cidr).is_ok_and(|c| {
            options
                .cluster_cidrs
                .iter()
                .any(|cluster| cluster.contains(&c))
        })
    };
    let by_node: HashMap<String, &Node> =
        nodes.iter().map(|n| (n.name_any(), n.as_ref())).collect();
    let mut ok = true;

    // Delete blackholed, orphaned and stale routes inside the cluster CIDRs.
    for route in &existing {
        if !in_cluster(&route.destination_cidr) {
            continue;
        }
        let stale = match by_node.get(&route.target_node) {
            None => true,
            Some(node) => {
                !pod_cidrs(node).contains(&route.destination_cidr)
                    || !same_addresses(&route.target_node_addresses, &cloud::node_addresses(node))
                        && !route.target_node_addresses.is_empty()
            }
        };
        if route.blackhole || stale {
            tracing::info!(route = %route.name, cidr = %route.destination_cidr, target = %route.target_node, blackhole = route.blackhole, "deleting route");
            if let Err(err) = routes.delete_route(cluster, route).await {
                tracing::error!(route = %route.name, error = %err, "could not delete route");
                ok = false;
            }
        }
    }
    let remaining: Vec<&Route> = existing
        .iter()
        .filter(|r| {
            !r.blackhole
                && by_node.get(&r.target_node).is_some_and(|n| {
                    pod_cidrs(n).contains(&r.destination_cidr)
                        && (r.target_node_addresses.is_empty()
                            || same_addresses(&r.target_node_addresses, &cloud::node_addresses(n)))
                })
        })
        .collect();

    // Create what is missing; report per Node.
    for node in &nodes {
        let cidrs = pod_cidrs(node);
        if cidrs.is_empty() {
            continue;
        }
        let name = node.name_any();
        let mut routed = true;
        for cidr in &cidrs {
            if remaining
                .iter()
                .any(|r| r.target_node == name && &r.destination_cidr == cidr)
            {
                continue;
            }
            let route = Route {
                name: String::new(),
                target_node: name.clone(),
                target_node_addresses: cloud::node_addresses(node),
                destination_cidr: cidr.clone(),
                blackhole: false,
            };
            let hint = node.metadata.uid.clone().unwrap_or_default();
            match routes.create_route(cluster, &hint, &route).await {
                Ok(()) => tracing::info!(node = %name, %cidr, "created route"),
                Err(err) => {
                    routed = false;
                    ok = false;
                    tracing::error!(node = %name, %cidr, error = %err, "could not create route");
                    node_event(
                        recorder,
                        node,
                        EventType::Warning,
                        "FailedToCreateRoute",
                        format!("Could not create route {hint} {cidr} for node {name}: {err}"),
                    )
                    .await;
                }
            }
        }
        if let Err(err) = set_network_condition(&api, node, routed).await {
            tracing::error!(node = %name, error = %err, "cannot update the NetworkUnavailable condition");
            ok = false;
        }
    }
    ok
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(ctx: Context, options: Options, shutdown: tokio::sync::watch::Receiver<bool>) {
    let recorder = ctx.recorder("route-controller");
    if !ctx.nodes.ready().await {
        return;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
