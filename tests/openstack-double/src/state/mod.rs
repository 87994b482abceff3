//! The double's world: servers and their ports (and trunks), networks and subnets, a
//! router, floating IPs, security groups and their rules, and Octavia load balancers
//! with their listeners, pools, members and health monitors. Everything a test may set
//! up or inspect goes through [`State`].
//! This module holds [`State`] itself (its defaults and IDs); the resources of each
//! service and what a test does with them are in the modules below.

mod load_balancers;
mod networks;
mod security_groups;
mod servers;

use std::collections::BTreeMap;
use std::time::Duration;

pub use load_balancers::{HealthMonitor, Listener, LoadBalancer, Member, Pool};
pub use networks::{FloatingIp, Network, Port, Router, Subnet, Trunk};
pub use security_groups::{SecurityGroup, SecurityGroupRule};
pub use servers::{NewServer, Server};

/// Every resource of the double, and what it was asked.
#[derive(Debug, Clone)]
pub struct State {
    pub servers: BTreeMap<String, Server>,
    /// Deleted servers (status `DELETED`, `updated` when deleted), by ID: Nova lists
    /// them under `changes-since` until its database's deleted rows are archived.
    pub deleted_servers: BTreeMap<String, Server>,
    pub networks: BTreeMap<String, Network>,
    pub subnets: BTreeMap<String, Subnet>,
    pub ports: BTreeMap<String, Port>,
    /// Neutron trunks (the `trunk` extension), by ID.
    pub trunks: BTreeMap<String, Trunk>,
    pub floating_ips: BTreeMap<String, FloatingIp>,
    pub routers: BTreeMap<String, Router>,
    /// Neutron security groups, by ID (the project's `default` one from the start).
    pub security_groups: BTreeMap<String, SecurityGroup>,
    /// Their rules, by ID.
    pub security_group_rules: BTreeMap<String, SecurityGroupRule>,
    pub load_balancers: BTreeMap<String, LoadBalancer>,
    pub listeners: BTreeMap<String, Listener>,
    pub pools: BTreeMap<String, Pool>,
    pub members: BTreeMap<String, Member>,
    pub monitors: BTreeMap<String, HealthMonitor>,
    /// Nova flavors: ID to name (a server's flavor is added when the server is).
    pub flavors: BTreeMap<String, String>,
    /// How long an Octavia operation keeps its load balancer `PENDING_*`.
    pub provisioning_time: Duration,
    /// Every authenticated request is answered after a delay in this range (spread
    /// over it request by request), once its work is done: a slow cloud, whose answer
    /// a client that stops waiting never reads although the change took effect. None
    /// by default.
    pub latency: Option<(Duration, Duration)>,
    /// The answers of the next this many successful `POST`s (creations) are withheld
    /// for [`State::lost_answer_delay`] once their work is done, as a cloud whose
    /// answer a client stops waiting for: the object exists, the client never learns
    /// its ID.
    pub lost_answers: u32,
    /// How long a lost answer is withheld (60 s by default: longer than a request
    /// timeout).
    pub lost_answer_delay: Duration,
    /// How long a new load balancer stays `PENDING_CREATE` (an amphora booting), when
    /// longer than [`State::provisioning_time`].
    pub creation_time: Option<Duration>,
    /// Octavia's API version, `(2, minor)`: its version document lists `v2.0` to it,
    /// and fields newer than it are refused as unknown attributes (timeouts 2.1, tags
    /// 2.5, `flavor_id` 2.6, `allowed_cidrs` 2.12, `availability_zone` 2.14, HTTP
    /// monitors on UDP pools 2.16).
    pub octavia_version: (u32, u32),
    /// Octavia's version document answers 500 (a proxy in front of the endpoint's
    /// root, say): its API version cannot be read. False by default.
    pub octavia_versions_fail: bool,
    /// Octavia's `[api_settings] default_provider_driver`: the provider of a load
    /// balancer created without one (`amphora`, Octavia's own default).
    pub default_provider: String,
    /// Neutron's extensions (their aliases), as `GET /v2.0/extensions` lists them.
    pub network_extensions: Vec<String>,
    /// Octavia provider drivers that need serial API calls (occm's
    /// `provider-requires-serial-api-calls`, for vendor drivers): they implement
    /// neither the batch member update (`PUT /lbaas/pools/{id}/members`) nor a fully
    /// populated load balancer creation, which Octavia answers 501 on their load
    /// balancers. None by default.
    pub serial_providers: Vec<String>,
    /// How many of the next load balancers created through the API end their
    /// `PENDING_CREATE` in `ERROR` (an amphora that failed to boot), as Octavia leaves them.
    pub failing_creations: u32,
    /// `METHOD path` of every authenticated request, in order.
    pub requests: Vec<String>,
    /// Each server as its `updated` was last stamped for
    /// ([`State::stamp_server_changes`]).
    server_marks: BTreeMap<String, Server>,
    next: u64,
    next_ip: u32,
}

impl Default for State {
    fn default() -> Self {
        let mut state = Self {
            servers: BTreeMap::new(),
            deleted_servers: BTreeMap::new(),
            networks: BTreeMap::new(),
            subnets: BTreeMap::new(),
            ports: BTreeMap::new(),
            trunks: BTreeMap::new(),
            floating_ips: BTreeMap::new(),
            routers: BTreeMap::new(),
            security_groups: BTreeMap::new(),
            security_group_rules: BTreeMap::new(),
            load_balancers: BTreeMap::new(),
            listeners: BTreeMap::new(),
            pools: BTreeMap::new(),
            members: BTreeMap::new(),
            monitors: BTreeMap::new(),
            flavors: BTreeMap::new(),
            provisioning_time: Duration::from_millis(300),
            latency: None,
            lost_answers: 0,
            lost_answer_delay: Duration::from_secs(60),
            creation_time: None,
            octavia_version: (2, 27),
            octavia_versions_fail: false,
            default_provider: "amphora".into(),
            network_extensions: [
                "router",
                "extraroute",
                "extraroute-atomic",
                "allowed-address-pairs",
                "external-net",
                "standard-attr-tag",
                "revision-if-match",
                "trunk",
                "trunk-details",
                "security-group",
                "port-security",
            ]
            .map(String::from)
            .to_vec(),
            serial_providers: Vec::new(),
            failing_creations: 0,
            requests: Vec::new(),
            server_marks: BTreeMap::new(),
            next: 0,
            next_ip: 10,
        };
        let private = state.network("private", false);
        let private_subnet = state.subnet(&private, "10.0.0.0/16");
        let public = state.network("public", true);
        let public_subnet = state.subnet(&public, "203.0.113.0/24");
        let router = state.id();
        state.routers.insert(
            router.clone(),
            Router {
                id: router.clone(),
                name: "router1".into(),
                routes: Vec::new(),
                revision_number: 1,
            },
        );
        // The router's ports, as Neutron lists them with `device_id=<router>`: its
        // interface on the private subnet (the gateway address) and its external gateway.
        for (network, subnet, ip, owner) in [
            (
                &private,
                &private_subnet,
                "10.0.0.1",
                "network:router_interface",
            ),
            (
                &public,
                &public_subnet,
                "203.0.113.2",
                "network:router_gateway",
            ),
        ] {
            let id = state.id();
            let port = Port {
                id: id.clone(),
                network_id: network.clone(),
                device_id: router.clone(),
                device_owner: owner.into(),
                mac_address: format!("fa:16:3e:00:00:{:02x}", state.next & 0xff),
                fixed_ips: vec![(subnet.clone(), ip.into())],
                allowed_address_pairs: Vec::new(),
                port_security_enabled: false,
                security_groups: Vec::new(),
                tags: Vec::new(),
            };
            state.ports.insert(id, port);
        }
        // The project's `default` security group, made last so the IDs above stay.
        state.add_default_security_group();
        state
    }
}

impl State {
    /// A new UUID-shaped ID.
    pub fn id(&mut self) -> String {
        self.next += 1;
        format!(
            "0a5e{:04x}-0000-4000-8000-{:012x}",
            self.next >> 48,
            self.next
        )
    }
}
