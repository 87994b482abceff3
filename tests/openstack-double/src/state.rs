//! The double's world: servers and their ports, networks and subnets, a router, floating
//! IPs, and Octavia load balancers with their listeners, pools, members and health
//! monitors. Everything a test may set up or inspect goes through [`State`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A Nova server.
#[derive(Debug, Clone)]
pub struct Server {
    pub id: String,
    pub name: String,
    /// `ACTIVE`, `SHUTOFF`, `ERROR`, ...
    pub status: String,
    /// The flavor's name (`flavor.original_name` from microversion 2.47).
    pub flavor: String,
    /// `OS-EXT-AZ:availability_zone`.
    pub zone: String,
    pub metadata: BTreeMap<String, String>,
}

/// A Neutron network.
#[derive(Debug, Clone)]
pub struct Network {
    pub id: String,
    pub name: String,
    /// `router:external`: floating IPs come from it.
    pub external: bool,
}

/// A Neutron subnet.
#[derive(Debug, Clone)]
pub struct Subnet {
    pub id: String,
    pub name: String,
    pub network_id: String,
    pub cidr: String,
    pub ip_version: u8,
    pub tags: Vec<String>,
    /// No address is left: a floating IP asked of it is refused
    /// (`IpAddressGenerationFailure`).
    pub exhausted: bool,
}

/// A Neutron port (a server's interface, or a load balancer's VIP).
#[derive(Debug, Clone)]
pub struct Port {
    pub id: String,
    pub network_id: String,
    /// The server (or load balancer) it is attached to.
    pub device_id: String,
    pub device_owner: String,
    pub mac_address: String,
    /// `(subnet_id, ip_address)`.
    pub fixed_ips: Vec<(String, String)>,
    /// `(ip_address, mac_address)`.
    pub allowed_address_pairs: Vec<(String, String)>,
    /// `port_security_enabled` (Neutron refuses allowed address pairs without it).
    pub port_security_enabled: bool,
}

/// A Neutron floating IP.
#[derive(Debug, Clone)]
pub struct FloatingIp {
    pub id: String,
    pub floating_ip_address: String,
    pub floating_network_id: String,
    pub port_id: Option<String>,
    pub fixed_ip_address: Option<String>,
    pub description: String,
    /// The subnet its address was taken from (Neutron does not show it; tests do).
    pub subnet_id: String,
}

/// A Neutron router and its extra routes (`(destination, nexthop)`).
#[derive(Debug, Clone)]
pub struct Router {
    pub id: String,
    pub name: String,
    pub routes: Vec<(String, String)>,
    /// Neutron's `revision_number`: one more on every change (`If-Match` compares it).
    pub revision_number: u64,
}

/// An Octavia load balancer. Its listeners, pools, members and monitors are their own
/// maps, keyed by ID, each naming its parent.
#[derive(Debug, Clone, Default)]
pub struct LoadBalancer {
    pub id: String,
    pub name: String,
    pub description: String,
    pub vip_address: String,
    pub vip_port_id: String,
    pub vip_subnet_id: String,
    pub vip_network_id: String,
    /// The VIP port was given (`vip_port_id`): it is the user's and outlives the load
    /// balancer.
    pub vip_port_given: bool,
    pub tags: Vec<String>,
    pub provider: String,
    /// `ACTIVE`, `PENDING_CREATE`, `PENDING_UPDATE`, `PENDING_DELETE`, `ERROR`.
    pub provisioning_status: String,
    /// Until when the current operation runs (then `ACTIVE`, or gone when deleting).
    pub busy_until: Option<Instant>,
}

/// An Octavia listener.
#[derive(Debug, Clone)]
pub struct Listener {
    pub id: String,
    pub name: String,
    pub loadbalancer_id: String,
    pub protocol: String,
    pub protocol_port: u16,
    pub default_pool_id: Option<String>,
    pub allowed_cidrs: Vec<String>,
    /// `tags` (occm tags each listener with its Service's load balancer name).
    pub tags: Vec<String>,
    /// `insert_headers` (e.g. `{"X-Forwarded-For": "true"}`).
    pub insert_headers: BTreeMap<String, String>,
    /// `default_tls_container_ref` of a TERMINATED_HTTPS listener.
    pub default_tls_container_ref: Option<String>,
    /// `timeout_client_data`, `timeout_member_connect`, `timeout_member_data`,
    /// `timeout_tcp_inspect` (milliseconds), and `connection_limit`.
    pub settings: BTreeMap<String, i64>,
}

/// An Octavia pool.
#[derive(Debug, Clone)]
pub struct Pool {
    pub id: String,
    pub name: String,
    pub loadbalancer_id: String,
    pub listener_id: Option<String>,
    pub protocol: String,
    pub lb_algorithm: String,
    pub healthmonitor_id: Option<String>,
    /// `session_persistence.type`: `SOURCE_IP`, `HTTP_COOKIE`, `APP_COOKIE`, or none.
    pub session_persistence: Option<String>,
}

/// An Octavia pool member.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub pool_id: String,
    pub name: String,
    pub address: String,
    pub protocol_port: u16,
    pub subnet_id: Option<String>,
    /// Where the member's health is probed, when not its `protocol_port`.
    pub monitor_port: Option<u16>,
}

/// An Octavia health monitor.
#[derive(Debug, Clone)]
pub struct HealthMonitor {
    pub id: String,
    pub name: String,
    pub pool_id: String,
    pub kind: String,
    pub delay: i64,
    pub timeout: i64,
    pub max_retries: i64,
    pub max_retries_down: i64,
    /// HTTP monitors: `url_path`, `http_method`, `expected_codes`.
    pub url_path: Option<String>,
    pub http_method: Option<String>,
    pub expected_codes: Option<String>,
}

/// A server to add: its name, and its interfaces' networks and addresses.
#[derive(Debug, Clone)]
pub struct NewServer {
    pub name: String,
    pub flavor: String,
    pub zone: String,
    pub status: String,
    /// `(network name, fixed IP)` per interface; the networks are created as needed.
    pub interfaces: Vec<(String, String)>,
}

impl NewServer {
    /// An `ACTIVE` `m1.small` server in `nova` with one interface on `private`.
    pub fn named(name: &str, ip: &str) -> Self {
        Self {
            name: name.into(),
            flavor: "m1.small".into(),
            zone: "nova".into(),
            status: "ACTIVE".into(),
            interfaces: vec![("private".into(), ip.into())],
        }
    }
}

/// Every resource of the double, and what it was asked.
#[derive(Debug, Clone)]
pub struct State {
    pub servers: BTreeMap<String, Server>,
    pub networks: BTreeMap<String, Network>,
    pub subnets: BTreeMap<String, Subnet>,
    pub ports: BTreeMap<String, Port>,
    pub floating_ips: BTreeMap<String, FloatingIp>,
    pub routers: BTreeMap<String, Router>,
    pub load_balancers: BTreeMap<String, LoadBalancer>,
    pub listeners: BTreeMap<String, Listener>,
    pub pools: BTreeMap<String, Pool>,
    pub members: BTreeMap<String, Member>,
    pub monitors: BTreeMap<String, HealthMonitor>,
    /// Nova flavors: ID to name (a server's flavor is added when the server is).
    pub flavors: BTreeMap<String, String>,
    /// How long an Octavia operation keeps its load balancer `PENDING_*`.
    pub provisioning_time: Duration,
    /// Octavia's API version, `(2, minor)`: its version document lists `v2.0` to it,
    /// and fields newer than it are refused as unknown attributes (timeouts 2.1, tags
    /// 2.5, `flavor_id` 2.6, `allowed_cidrs` 2.12, `availability_zone` 2.14, HTTP
    /// monitors on UDP pools 2.16).
    pub octavia_version: (u32, u32),
    /// Neutron's extensions (their aliases), as `GET /v2.0/extensions` lists them.
    pub network_extensions: Vec<String>,
    /// `METHOD path` of every authenticated request, in order.
    pub requests: Vec<String>,
    next: u64,
    next_ip: u32,
}

impl Default for State {
    fn default() -> Self {
        let mut state = Self {
            servers: BTreeMap::new(),
            networks: BTreeMap::new(),
            subnets: BTreeMap::new(),
            ports: BTreeMap::new(),
            floating_ips: BTreeMap::new(),
            routers: BTreeMap::new(),
            load_balancers: BTreeMap::new(),
            listeners: BTreeMap::new(),
            pools: BTreeMap::new(),
            members: BTreeMap::new(),
            monitors: BTreeMap::new(),
            flavors: BTreeMap::new(),
            provisioning_time: Duration::from_millis(300),
            octavia_version: (2, 27),
            network_extensions: [
                "router",
                "extraroute",
                "extraroute-atomic",
                "allowed-address-pairs",
                "external-net",
                "standard-attr-tag",
                "revision-if-match",
            ]
            .map(String::from)
            .to_vec(),
            requests: Vec::new(),
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
            };
            state.ports.insert(id, port);
        }
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

    /// The network named `name`, created (with no subnet) if missing: its ID.
    pub fn network(&mut self, name: &str, external: bool) -> String {
        if let Some(n) = self.networks.values().find(|n| n.name == name) {
            return n.id.clone();
        }
        let id = self.id();
        self.networks.insert(
            id.clone(),
            Network {
                id: id.clone(),
                name: name.into(),
                external,
            },
        );
        id
    }

    /// Adds a subnet to `network`: its ID.
    pub fn subnet(&mut self, network: &str, cidr: &str) -> String {
        let id = self.id();
        self.subnets.insert(
            id.clone(),
            Subnet {
                id: id.clone(),
                name: String::new(),
                network_id: network.into(),
                cidr: cidr.into(),
                ip_version: if cidr.contains(':') { 6 } else { 4 },
                tags: Vec::new(),
                exhausted: false,
            },
        );
        id
    }

    /// The first subnet of `network`.
    pub fn subnet_of(&self, network: &str) -> Option<&Subnet> {
        self.subnets.values().find(|s| s.network_id == network)
    }

    /// The ID of the network named `name`.
    pub fn network_id(&self, name: &str) -> Option<String> {
        self.networks
            .values()
            .find(|n| n.name == name)
            .map(|n| n.id.clone())
    }

    /// The router's ID (there is one).
    pub fn router_id(&self) -> String {
        self.routers.keys().next().cloned().expect("one router")
    }

    /// An address of the first subnet of `network` no port holds yet: from `.100` of
    /// the subnet on (IPv4).
    pub fn free_ip(&mut self, network: &str) -> String {
        let subnet = self.subnet_of(network).map(|s| s.id.clone());
        self.free_ip_in(subnet.as_deref().unwrap_or_default())
    }

    /// An address of the subnet `subnet` no port holds yet (see [`State::free_ip`]).
    pub fn free_ip_in(&mut self, subnet: &str) -> String {
        self.next_ip += 1;
        let cidr = self
            .subnets
            .get(subnet)
            .map(|s| s.cidr.clone())
            .unwrap_or_else(|| "10.0.0.0/16".into());
        let (base, bits) = cidr.split_once('/').unwrap_or(("10.0.0.0", "16"));
        if let Ok(base) = base.parse::<std::net::Ipv6Addr>() {
            return std::net::Ipv6Addr::from(u128::from(base) + 100 + u128::from(self.next_ip))
                .to_string();
        }
        let base: std::net::Ipv4Addr = base.parse().unwrap_or(std::net::Ipv4Addr::new(10, 0, 0, 0));
        let size = 1u32 << (32 - bits.parse::<u32>().unwrap_or(16).min(30));
        let offset = 100 + (self.next_ip - 11) % (size - 102);
        std::net::Ipv4Addr::from(u32::from(base) + offset).to_string()
    }

    /// Adds a server with a port per interface: the server.
    pub fn add_server(&mut self, new: NewServer) -> Server {
        self.flavor_id(&new.flavor);
        let id = self.id();
        for (network_name, ip) in &new.interfaces {
            let network = self.network(network_name, false);
            let subnet = match self.subnet_of(&network) {
                Some(s) => s.id.clone(),
                None => self.subnet(&network, "192.168.0.0/24"),
            };
            let port = self.id();
            let mac = format!(
                "fa:16:3e:00:{:02x}:{:02x}",
                (self.next >> 8) & 0xff,
                self.next & 0xff
            );
            self.ports.insert(
                port.clone(),
                Port {
                    id: port,
                    network_id: network,
                    device_id: id.clone(),
                    device_owner: format!("compute:{}", new.zone),
                    mac_address: mac,
                    fixed_ips: vec![(subnet, ip.clone())],
                    allowed_address_pairs: Vec::new(),
                    port_security_enabled: true,
                },
            );
        }
        let server = Server {
            id: id.clone(),
            name: new.name,
            status: new.status,
            flavor: new.flavor,
            zone: new.zone,
            metadata: BTreeMap::new(),
        };
        self.servers.insert(id, server.clone());
        server
    }

    /// Adds `lb` (its name, description, tags, provider) with a VIP port on `subnet`
    /// of `network` (at `vip_address`, else a free address), `ACTIVE`: its ID.
    pub fn insert_load_balancer(
        &mut self,
        subnet: &str,
        network: &str,
        vip_address: Option<&str>,
        lb: LoadBalancer,
    ) -> String {
        let id = self.id();
        let port = self.id();
        let address = match vip_address {
            Some(address) => address.to_owned(),
            None => self.free_ip(network),
        };
        self.ports.insert(
            port.clone(),
            Port {
                id: port.clone(),
                network_id: network.to_owned(),
                device_id: format!("lb-{id}"),
                device_owner: "Octavia".into(),
                mac_address: "fa:16:3e:ff:00:01".into(),
                fixed_ips: vec![(subnet.to_owned(), address.clone())],
                allowed_address_pairs: Vec::new(),
                port_security_enabled: true,
            },
        );
        self.load_balancers.insert(
            id.clone(),
            LoadBalancer {
                id: id.clone(),
                vip_address: address,
                vip_port_id: port,
                vip_subnet_id: subnet.to_owned(),
                vip_network_id: network.to_owned(),
                provisioning_status: "ACTIVE".into(),
                busy_until: None,
                ..lb
            },
        );
        id
    }

    /// A load balancer as another controller made it: named and tagged `name`, its VIP
    /// on the `private` network, `ACTIVE`. Its ID.
    pub fn add_load_balancer(&mut self, name: &str) -> String {
        let network = self.network_id("private").expect("the private network");
        let subnet = self.subnet_of(&network).expect("its subnet").id.clone();
        self.insert_load_balancer(
            &subnet,
            &network,
            None,
            LoadBalancer {
                name: name.into(),
                tags: vec![name.into()],
                provider: "amphora".into(),
                ..LoadBalancer::default()
            },
        )
    }

    /// A floating IP from the `public` network bound to the port `port_id` (its first
    /// fixed IP), described as `description`.
    pub fn add_floating_ip(&mut self, port_id: &str, description: &str) -> FloatingIp {
        let network = self.network_id("public").expect("the public network");
        let subnet = self.subnet_of(&network).expect("its subnet").id.clone();
        let fixed = self.ports[port_id].fixed_ips.first().map(|f| f.1.clone());
        let id = self.id();
        let fip = FloatingIp {
            id: id.clone(),
            floating_ip_address: self.free_ip_in(&subnet),
            floating_network_id: network,
            port_id: Some(port_id.to_owned()),
            fixed_ip_address: fixed,
            description: description.to_owned(),
            subnet_id: subnet,
        };
        self.floating_ips.insert(id, fip.clone());
        fip
    }

    /// A port on the first subnet of the network named `network`, at a free address,
    /// attached to nothing (a port an operator made for a VIP, say).
    pub fn add_port(&mut self, network: &str) -> Port {
        let network = self.network_id(network).expect("the network");
        let subnet = self.subnet_of(&network).expect("its subnet").id.clone();
        let id = self.id();
        let port = Port {
            id: id.clone(),
            network_id: network,
            device_id: String::new(),
            device_owner: String::new(),
            mac_address: "fa:16:3e:ff:00:02".into(),
            fixed_ips: vec![(subnet.clone(), self.free_ip_in(&subnet))],
            allowed_address_pairs: Vec::new(),
            port_security_enabled: true,
        };
        self.ports.insert(id, port.clone());
        port
    }

    /// Adds `lb` with the existing port `port` as its VIP (`vip_port_id`), `ACTIVE`:
    /// its ID, or why Octavia would refuse.
    pub fn insert_load_balancer_on_port(
        &mut self,
        port: &str,
        lb: LoadBalancer,
    ) -> Result<String, String> {
        let Some(found) = self.ports.get(port) else {
            return Err(format!("Validation failure: Port {port} not found."));
        };
        if !found.device_id.is_empty() {
            return Err(format!(
                "Validation failure: Port {port} is already in use."
            ));
        }
        let Some((subnet, address)) = found.fixed_ips.first().cloned() else {
            return Err(format!("Validation failure: Port {port} has no fixed IP."));
        };
        let network = found.network_id.clone();
        let id = self.id();
        let found = self.ports.get_mut(port).expect("checked");
        found.device_id = format!("lb-{id}");
        found.device_owner = "Octavia".into();
        self.load_balancers.insert(
            id.clone(),
            LoadBalancer {
                id: id.clone(),
                vip_address: address,
                vip_port_id: port.to_owned(),
                vip_subnet_id: subnet,
                vip_network_id: network,
                vip_port_given: true,
                provisioning_status: "ACTIVE".into(),
                busy_until: None,
                ..lb
            },
        );
        Ok(id)
    }

    /// The ID of the flavor named `name`, which is added when missing.
    pub fn flavor_id(&mut self, name: &str) -> String {
        if let Some((id, _)) = self.flavors.iter().find(|(_, n)| *n == name) {
            return id.clone();
        }
        let id = self.id();
        self.flavors.insert(id.clone(), name.to_owned());
        id
    }

    /// Deletes a server and its ports (and unbinds their floating IPs).
    pub fn delete_server(&mut self, id: &str) {
        self.servers.remove(id);
        let ports: Vec<String> = self
            .ports
            .values()
            .filter(|p| p.device_id == id)
            .map(|p| p.id.clone())
            .collect();
        for port in ports {
            self.remove_port(&port);
        }
    }

    /// A server's addresses as Nova shows them: by network name, fixed ones and the
    /// floating IPs bound to its ports.
    pub fn server_addresses(
        &self,
        server: &str,
    ) -> BTreeMap<String, Vec<(String, &'static str, String)>> {
        let mut addresses: BTreeMap<String, Vec<(String, &'static str, String)>> = BTreeMap::new();
        for port in self.ports.values().filter(|p| p.device_id == server) {
            let network = self
                .networks
                .get(&port.network_id)
                .map(|n| n.name.clone())
                .unwrap_or_default();
            let entry = addresses.entry(network).or_default();
            for (_, ip) in &port.fixed_ips {
                entry.push((ip.clone(), "fixed", port.mac_address.clone()));
            }
            for fip in self.floating_ips.values() {
                if fip.port_id.as_deref() == Some(port.id.as_str()) {
                    entry.push((
                        fip.floating_ip_address.clone(),
                        "floating",
                        port.mac_address.clone(),
                    ));
                }
            }
        }
        addresses
    }

    /// The provisioning status of a load balancer now, finishing what has run its time
    /// (a finished delete removes it and everything under it).
    pub fn settle(&mut self) {
        let now = Instant::now();
        let done: Vec<String> = self
            .load_balancers
            .values()
            .filter(|lb| lb.busy_until.is_some_and(|t| t <= now))
            .map(|lb| lb.id.clone())
            .collect();
        for id in done {
            let deleting = self.load_balancers[&id].provisioning_status == "PENDING_DELETE";
            if deleting {
                self.remove_load_balancer(&id);
            } else if let Some(lb) = self.load_balancers.get_mut(&id) {
                lb.provisioning_status = "ACTIVE".into();
                lb.busy_until = None;
            }
        }
    }

    /// Starts an operation on a load balancer: `PENDING_<what>` for
    /// [`State::provisioning_time`].
    pub fn start_operation(&mut self, id: &str, what: &str) {
        let until = Instant::now() + self.provisioning_time;
        if let Some(lb) = self.load_balancers.get_mut(id) {
            lb.provisioning_status = format!("PENDING_{what}");
            lb.busy_until = Some(until);
        }
    }

    /// Deletes a port; Neutron unbinds the floating IPs on it.
    fn remove_port(&mut self, port: &str) {
        self.ports.remove(port);
        for fip in self.floating_ips.values_mut() {
            if fip.port_id.as_deref() == Some(port) {
                fip.port_id = None;
                fip.fixed_ip_address = None;
            }
        }
    }

    fn remove_load_balancer(&mut self, id: &str) {
        if let Some(lb) = self.load_balancers.remove(id) {
            if lb.vip_port_given {
                if let Some(port) = self.ports.get_mut(&lb.vip_port_id) {
                    port.device_id.clear();
                    port.device_owner.clear();
                }
            } else {
                // Octavia deletes the VIP port it made.
                self.remove_port(&lb.vip_port_id);
            }
        }
        self.listeners.retain(|_, l| l.loadbalancer_id != id);
        let pools: Vec<String> = self
            .pools
            .values()
            .filter(|p| p.loadbalancer_id == id)
            .map(|p| p.id.clone())
            .collect();
        for pool in &pools {
            self.pools.remove(pool);
            self.members.retain(|_, m| &m.pool_id != pool);
            self.monitors.retain(|_, h| &h.pool_id != pool);
        }
    }

    /// Whether anything the load balancer API created is left (after deletions).
    pub fn load_balancer_resources(&self) -> usize {
        self.load_balancers.len()
            + self.listeners.len()
            + self.pools.len()
            + self.members.len()
            + self.monitors.len()
    }
}
