//! Neutron's part of the world: networks, subnets and their free addresses, ports,
//! floating IPs and the router.

use super::State;

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
    /// `port_security_enabled` (Neutron refuses allowed address pairs and security
    /// groups without it).
    pub port_security_enabled: bool,
    /// The IDs of its security groups (a server's port starts in the project's
    /// `default` one, as Nova makes it).
    pub security_groups: Vec<String>,
    /// Its tags (the `standard-attr-tag` extension).
    pub tags: Vec<String>,
}

/// A Neutron trunk: a parent port (a server's interface) carrying subports, each a
/// port on its own network reached as a VLAN of the parent's interface. A subport's
/// `device_id` is the trunk's ID (`device_owner` `trunk:subport`), so Neutron lists it
/// with no server's ports and Nova shows none of its addresses; the parent port shows
/// the subports in its `trunk_details` (the `trunk-details` extension).
#[derive(Debug, Clone)]
pub struct Trunk {
    pub id: String,
    /// The parent port.
    pub port_id: String,
    /// `(subport ID, VLAN segmentation ID)`.
    pub sub_ports: Vec<(String, u32)>,
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

impl State {
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
            security_groups: vec![self.default_security_group()],
            tags: Vec::new(),
        };
        self.ports.insert(id, port.clone());
        port
    }

    /// Adds to the trunk of `server`'s first port (made that port's trunk if it has none)
    /// a subport holding `ip` on the network named `network` (made, with a subnet, if
    /// missing): the subport.
    pub fn add_subport(&mut self, server: &str, network: &str, ip: &str) -> Port {
        let parent = self
            .ports
            .values()
            .find(|p| p.device_id == server)
            .map(|p| p.id.clone())
            .expect("the server's port");
        let trunk = match self.trunks.values().find(|t| t.port_id == parent) {
            Some(t) => t.id.clone(),
            None => {
                let id = self.id();
                self.trunks.insert(
                    id.clone(),
                    Trunk {
                        id: id.clone(),
                        port_id: parent,
                        sub_ports: Vec::new(),
                    },
                );
                id
            }
        };
        let network = self.network(network, false);
        let subnet = match self.subnet_of(&network) {
            Some(s) => s.id.clone(),
            None => self.subnet(&network, "192.168.0.0/24"),
        };
        let id = self.id();
        let port = Port {
            id: id.clone(),
            network_id: network,
            device_id: trunk.clone(),
            device_owner: "trunk:subport".into(),
            mac_address: format!(
                "fa:16:3e:01:{:02x}:{:02x}",
                (self.next >> 8) & 0xff,
                self.next & 0xff
            ),
            fixed_ips: vec![(subnet, ip.to_owned())],
            allowed_address_pairs: Vec::new(),
            port_security_enabled: true,
            security_groups: vec![self.default_security_group()],
            tags: Vec::new(),
        };
        self.ports.insert(id.clone(), port.clone());
        let trunk = self.trunks.get_mut(&trunk).expect("the trunk");
        let vlan = 100 + trunk.sub_ports.len() as u32;
        trunk.sub_ports.push((id, vlan));
        port
    }

    /// Deletes a port; Neutron unbinds the floating IPs on it.
    pub(super) fn remove_port(&mut self, port: &str) {
        self.ports.remove(port);
        for fip in self.floating_ips.values_mut() {
            if fip.port_id.as_deref() == Some(port) {
                fip.port_id = None;
                fip.fixed_ip_address = None;
            }
        }
    }
}
