//! Nova's part of the world: servers (with a port per interface), flavors, and a
//! server's addresses as Nova shows them. As Nova, a server's `updated` changes with
//! its name, status, flavor, zone or metadata (a test may change those in place: the
//! change is seen, and stamped, at the next compute request), not with its addresses;
//! a deleted server stays listed under `changes-since` as `DELETED`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::{Port, State};

/// A Nova server.
#[derive(Debug, Clone)]
pub struct Server {
    pub id: String,
    pub name: String,
    /// `ACTIVE`, `SHUTOFF`, `ERROR`, ... (`DELETED` once deleted).
    pub status: String,
    /// The flavor's name (`flavor.original_name` from microversion 2.47).
    pub flavor: String,
    /// `OS-EXT-AZ:availability_zone`.
    pub zone: String,
    pub metadata: BTreeMap<String, String>,
    /// When the server was made (`created`).
    pub created: SystemTime,
    /// When it last changed (`updated`; what `changes-since` compares).
    pub updated: SystemTime,
}

impl Server {
    /// Whether `other` is this server unchanged in what changes its `updated` in Nova
    /// (its addresses aside).
    fn unchanged(&self, other: &Server) -> bool {
        self.name == other.name
            && self.status == other.status
            && self.flavor == other.flavor
            && self.zone == other.zone
            && self.metadata == other.metadata
    }
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

impl State {
    /// Adds a server with a port per interface: the server.
    pub fn add_server(&mut self, new: NewServer) -> Server {
        self.flavor_id(&new.flavor);
        let id = self.id();
        let default_group = self.default_security_group();
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
                    security_groups: vec![default_group.clone()],
                    tags: Vec::new(),
                },
            );
        }
        let now = SystemTime::now();
        let server = Server {
            id: id.clone(),
            name: new.name,
            status: new.status,
            flavor: new.flavor,
            zone: new.zone,
            metadata: BTreeMap::new(),
            created: now,
            updated: now,
        };
        self.server_marks.insert(id.clone(), server.clone());
        self.servers.insert(id, server.clone());
        server
    }

    /// Moves every server's `created` and `updated` `by` into the past: a project whose
    /// servers were made (and last changed) earlier.
    pub fn age_servers(&mut self, by: Duration) {
        for server in self.servers.values_mut() {
            server.created -= by;
            server.updated -= by;
        }
    }

    /// Stamps `updated` now on the servers changed in place since the last stamp (a
    /// server put in [`State::servers`] by hand is taken as it is).
    pub fn stamp_server_changes(&mut self) {
        let now = SystemTime::now();
        for server in self.servers.values_mut() {
            match self.server_marks.get(&server.id) {
                Some(mark) if mark.unchanged(server) => continue,
                Some(_) => server.updated = now,
                None => {}
            }
            self.server_marks.insert(server.id.clone(), server.clone());
        }
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

    /// Deletes a server and its ports (and unbinds their floating IPs), with the trunks
    /// on them and their subports.
    pub fn delete_server(&mut self, id: &str) {
        if let Some(mut server) = self.servers.remove(id) {
            server.status = "DELETED".into();
            server.updated = SystemTime::now();
            self.deleted_servers.insert(id.to_owned(), server);
        }
        self.server_marks.remove(id);
        let ports: Vec<String> = self
            .ports
            .values()
            .filter(|p| p.device_id == id)
            .map(|p| p.id.clone())
            .collect();
        let trunks: Vec<super::Trunk> = self
            .trunks
            .values()
            .filter(|t| ports.contains(&t.port_id))
            .cloned()
            .collect();
        for trunk in trunks {
            self.trunks.remove(&trunk.id);
            for (subport, _) in &trunk.sub_ports {
                self.remove_port(subport);
            }
        }
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
}
