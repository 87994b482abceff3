//! ECS servers with their NICs (each a port on a subnet, whose ID is what the server's
//! address entries name in `OS-EXT-IPS:port_id`), and VPC subnets. As on Huawei Cloud,
//! a subnet's ID is also its Neutron network's (`neutron_network_id`), and its
//! `neutron_subnet_id` is what a load balancer's `vip_subnet_id` and a member's
//! `subnet_id` name.

use std::collections::BTreeMap;

use super::{State, cidr, in_cidr, ipv4};

/// The image every server is made from.
pub const IMAGE_ID: &str = "1a9e0000-0000-4000-8000-000000000001";

/// An ECS server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: String,
    pub name: String,
    /// `ACTIVE`, `SHUTOFF`, `BUILD`, `REBOOT`, `ERROR`, ... A NIC's port is `ACTIVE`
    /// while its server is, `DOWN` otherwise.
    pub status: String,
    /// The flavor's ID, which is also its name (`s6.large.2`).
    pub flavor: String,
    /// `OS-EXT-AZ:availability_zone`.
    pub zone: String,
    pub image_id: String,
    pub metadata: BTreeMap<String, String>,
    /// `key=value` tags.
    pub tags: Vec<String>,
    /// The NICs, the primary one first.
    pub nics: Vec<Nic>,
    /// When it was created and last changed (seconds since the epoch).
    pub created: i64,
    pub updated: i64,
}

/// A server's NIC: a port with one fixed IPv4 address on a subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub port_id: String,
    /// The VPC subnet's ID (the Neutron network's).
    pub subnet_id: String,
    pub ip: String,
    pub mac: String,
}

/// A server to add.
#[derive(Debug, Clone)]
pub struct NewServer {
    pub name: String,
    /// The primary NIC's address.
    pub private_ip: String,
    /// The availability zone (empty: `<region>a`).
    pub zone: String,
    /// The flavor (`s6.large.2` by default).
    pub flavor: String,
    /// `ACTIVE` by default.
    pub status: String,
    /// The primary NIC's subnet (the VPC subnet ID); None: the subnet whose CIDR holds
    /// `private_ip`, else the default subnet.
    pub subnet_id: Option<String>,
    /// More NICs' addresses, each on the subnet whose CIDR holds it (else the primary
    /// NIC's).
    pub extra_ips: Vec<String>,
    pub metadata: BTreeMap<String, String>,
    pub tags: Vec<String>,
}

impl NewServer {
    /// An `ACTIVE` `s6.large.2` server named `name` with one NIC at `private_ip`.
    pub fn named(name: &str, private_ip: &str) -> Self {
        Self {
            name: name.into(),
            private_ip: private_ip.into(),
            zone: String::new(),
            flavor: "s6.large.2".into(),
            status: "ACTIVE".into(),
            subnet_id: None,
            extra_ips: Vec::new(),
            metadata: BTreeMap::new(),
            tags: Vec::new(),
        }
    }
}

/// A VPC subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    /// The subnet's ID, which is also its `neutron_network_id`.
    pub id: String,
    pub name: String,
    pub cidr: String,
    pub gateway_ip: String,
    pub vpc_id: String,
    pub availability_zone: String,
    pub neutron_network_id: String,
    /// What the ELB API calls the subnet (`vip_subnet_id`, a member's `subnet_id`).
    pub neutron_subnet_id: String,
    pub status: String,
    pub created: i64,
}

/// A subnet to add.
#[derive(Debug, Clone)]
pub struct NewSubnet {
    pub name: String,
    pub cidr: String,
    /// The VPC (None: the default VPC).
    pub vpc_id: Option<String>,
    /// None: `<region>a`.
    pub availability_zone: Option<String>,
    /// None: the CIDR's first address.
    pub gateway_ip: Option<String>,
}

impl NewSubnet {
    /// `name` on `cidr` in the default VPC.
    pub fn new(name: &str, cidr: &str) -> Self {
        Self {
            name: name.into(),
            cidr: cidr.into(),
            vpc_id: None,
            availability_zone: None,
            gateway_ip: None,
        }
    }
}

impl State {
    /// Adds a subnet (panics on a malformed CIDR): the subnet.
    pub fn add_subnet(&mut self, new: NewSubnet) -> Subnet {
        let (network, _) = cidr(&new.cidr).unwrap_or_else(|| panic!("bad CIDR {}", new.cidr));
        let id = self.id();
        let subnet = Subnet {
            id: id.clone(),
            name: new.name,
            cidr: new.cidr,
            gateway_ip: new
                .gateway_ip
                .unwrap_or_else(|| std::net::Ipv4Addr::from(network + 1).to_string()),
            vpc_id: new.vpc_id.unwrap_or_else(|| self.default_vpc.clone()),
            availability_zone: new
                .availability_zone
                .unwrap_or_else(|| format!("{}a", self.region)),
            neutron_network_id: id.clone(),
            neutron_subnet_id: self.id(),
            status: "ACTIVE".into(),
            created: self.now(),
        };
        self.subnets.insert(id, subnet.clone());
        subnet
    }

    /// Every subnet, in creation order.
    pub fn subnets(&self) -> Vec<Subnet> {
        self.subnets.values().cloned().collect()
    }

    /// The subnet `id` (its VPC subnet ID).
    pub fn subnet(&self, id: &str) -> Option<&Subnet> {
        self.subnets.get(id)
    }

    /// The subnet whose `neutron_subnet_id` is `id`.
    pub fn subnet_by_neutron_id(&self, id: &str) -> Option<&Subnet> {
        self.subnets.values().find(|s| s.neutron_subnet_id == id)
    }

    /// The default subnet (the first one).
    pub fn default_subnet(&self) -> &Subnet {
        self.subnets.values().next().expect("the default subnet")
    }

    /// Whether `ip` is taken on subnet `id` (its gateway, a server's NIC, a load
    /// balancer's VIP).
    pub fn ip_in_use(&self, id: &str, ip: &str) -> bool {
        let Some(subnet) = self.subnets.get(id) else {
            return false;
        };
        subnet.gateway_ip == ip
            || self
                .servers
                .values()
                .flat_map(|s| &s.nics)
                .any(|n| n.subnet_id == id && n.ip == ip)
            || self
                .load_balancers
                .values()
                .any(|lb| lb.vip_subnet_id == subnet.neutron_subnet_id && lb.vip_address == ip)
    }

    /// A free address on subnet `id` (from the 100th host on, then from the 2nd).
    pub fn free_ip(&self, id: &str) -> Option<String> {
        let (network, length) = cidr(&self.subnets.get(id)?.cidr)?;
        let size = 1u64 << (32 - length);
        let last = size.saturating_sub(1);
        let hosts = (100..last).chain(2..100u64.min(last));
        hosts
            .map(|offset| std::net::Ipv4Addr::from(network + offset as u32).to_string())
            .find(|ip| !self.ip_in_use(id, ip))
    }

    /// Adds a server, a port per address: the server.
    pub fn add_server(&mut self, new: NewServer) -> Server {
        let home = |state: &State, ip: &str| {
            state
                .subnets
                .values()
                .find(|s| in_cidr(ip, &s.cidr))
                .map(|s| s.id.clone())
        };
        assert!(
            ipv4(&new.private_ip).is_some(),
            "bad IPv4 address {}",
            new.private_ip
        );
        let primary = match &new.subnet_id {
            Some(id) => {
                assert!(self.subnets.contains_key(id), "no subnet {id}");
                id.clone()
            }
            None => home(self, &new.private_ip).unwrap_or_else(|| self.default_subnet().id.clone()),
        };
        let addresses: Vec<(String, String)> =
            std::iter::once((new.private_ip.clone(), primary.clone()))
                .chain(new.extra_ips.iter().map(|ip| {
                    (
                        ip.clone(),
                        home(self, ip).unwrap_or_else(|| primary.clone()),
                    )
                }))
                .collect();
        let id = self.id();
        let mut nics = Vec::new();
        for (ip, subnet) in addresses {
            let port_id = self.id();
            let mac = self.mac();
            nics.push(Nic {
                port_id,
                subnet_id: subnet,
                ip,
                mac,
            });
        }
        let now = self.now();
        let server = Server {
            id: id.clone(),
            name: new.name,
            status: new.status,
            flavor: new.flavor,
            zone: if new.zone.is_empty() {
                format!("{}a", self.region)
            } else {
                new.zone
            },
            image_id: IMAGE_ID.into(),
            metadata: new.metadata,
            tags: new.tags,
            nics,
            created: now,
            updated: now,
        };
        self.servers.insert(id, server.clone());
        server
    }

    /// Every server, in creation order.
    pub fn servers(&self) -> Vec<Server> {
        self.servers.values().cloned().collect()
    }

    /// The server `id`.
    pub fn server(&self, id: &str) -> Option<&Server> {
        self.servers.get(id)
    }

    /// The server `id`, to change (its status, name, ...; set `updated` as ECS would).
    pub fn server_mut(&mut self, id: &str) -> Option<&mut Server> {
        self.servers.get_mut(id)
    }

    /// Deletes the server `id` (its EIPs are unbound): the server it was.
    pub fn delete_server(&mut self, id: &str) -> Option<Server> {
        let server = self.servers.remove(id)?;
        for nic in &server.nics {
            self.unbind_port(&nic.port_id);
        }
        Some(server)
    }

    /// The server with a NIC at `ip`.
    pub fn server_by_ip(&self, ip: &str) -> Option<&Server> {
        self.servers
            .values()
            .find(|s| s.nics.iter().any(|n| n.ip == ip))
    }
}
