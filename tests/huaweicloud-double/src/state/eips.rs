//! EIPs (the VPC service's `publicips`) and the ports they bind to: a server's NIC or a
//! load balancer's VIP port.

use super::State;

/// An EIP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eip {
    pub id: String,
    pub public_ip_address: String,
    /// `5_bgp`, `5_sbgp`, ...
    pub kind: String,
    /// `DOWN` unbound, `ACTIVE` bound (`PENDING_CREATE` only in its creation's answer).
    pub status: String,
    /// The port it is bound to.
    pub port_id: Option<String>,
    /// The bound port's fixed address.
    pub private_ip_address: Option<String>,
    pub bandwidth_id: String,
    pub bandwidth_name: String,
    /// Mbit/s.
    pub bandwidth_size: i64,
    /// `PER` (dedicated) or `WHOLE` (shared).
    pub bandwidth_share_type: String,
    /// `traffic` or `bandwidth`.
    pub charge_mode: String,
    pub alias: Option<String>,
    pub enterprise_project_id: String,
    pub created: i64,
}

/// A port an EIP can bind to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub id: String,
    /// Its fixed address.
    pub ip: String,
    /// The server or load balancer it belongs to.
    pub device_id: String,
    /// `compute:<zone>` or `neutron:LOADBALANCER`.
    pub device_owner: String,
}

impl State {
    /// Allocates an unbound EIP (`5_bgp`, a dedicated 5 Mbit/s bandwidth) at
    /// `public_ip` (else the next free address), as if made on the console: the EIP.
    pub fn add_eip(&mut self, public_ip: Option<&str>) -> Eip {
        let address = match public_ip {
            Some(ip) => ip.to_owned(),
            None => self.public_ip(),
        };
        let eip = self.new_eip(address, "5_bgp", "bandwidth-console", 5, "PER", "bandwidth");
        self.eips.insert(eip.id.clone(), eip.clone());
        eip
    }

    /// A new, unbound EIP (not yet added).
    pub(crate) fn new_eip(
        &mut self,
        address: String,
        kind: &str,
        bandwidth_name: &str,
        bandwidth_size: i64,
        share_type: &str,
        charge_mode: &str,
    ) -> Eip {
        Eip {
            id: self.id(),
            public_ip_address: address,
            kind: kind.into(),
            status: "DOWN".into(),
            port_id: None,
            private_ip_address: None,
            bandwidth_id: self.id(),
            bandwidth_name: bandwidth_name.into(),
            bandwidth_size,
            bandwidth_share_type: share_type.into(),
            charge_mode: charge_mode.into(),
            alias: None,
            enterprise_project_id: "0".into(),
            created: self.now(),
        }
    }

    /// Every EIP, in creation order.
    pub fn eips(&self) -> Vec<Eip> {
        self.eips.values().cloned().collect()
    }

    /// The EIP `id`.
    pub fn eip(&self, id: &str) -> Option<&Eip> {
        self.eips.get(id)
    }

    /// The EIP `id`, to change.
    pub fn eip_mut(&mut self, id: &str) -> Option<&mut Eip> {
        self.eips.get_mut(id)
    }

    /// The port `id`: a server's NIC or a load balancer's VIP port.
    pub fn port(&self, id: &str) -> Option<Port> {
        for server in self.servers.values() {
            if let Some(nic) = server.nics.iter().find(|n| n.port_id == id) {
                return Some(Port {
                    id: id.into(),
                    ip: nic.ip.clone(),
                    device_id: server.id.clone(),
                    device_owner: format!("compute:{}", server.zone),
                });
            }
        }
        self.load_balancers
            .values()
            .find(|lb| lb.vip_port_id == id)
            .map(|lb| Port {
                id: id.into(),
                ip: lb.vip_address.clone(),
                device_id: lb.id.clone(),
                device_owner: "neutron:LOADBALANCER".into(),
            })
    }

    /// The EIPs bound to port `id`.
    pub fn eips_on_port(&self, id: &str) -> Vec<&Eip> {
        self.eips
            .values()
            .filter(|e| e.port_id.as_deref() == Some(id))
            .collect()
    }

    /// Binds EIP `eip` to port `port` (both must exist).
    pub(crate) fn bind(&mut self, eip: &str, port: &Port) {
        if let Some(e) = self.eips.get_mut(eip) {
            e.port_id = Some(port.id.clone());
            e.private_ip_address = Some(port.ip.clone());
            e.status = "ACTIVE".into();
        }
    }

    /// Unbinds EIP `eip`.
    pub(crate) fn unbind(&mut self, eip: &str) {
        if let Some(e) = self.eips.get_mut(eip) {
            e.port_id = None;
            e.private_ip_address = None;
            e.status = "DOWN".into();
        }
    }

    /// Unbinds every EIP bound to port `id` (which is going away).
    pub(crate) fn unbind_port(&mut self, id: &str) {
        let bound: Vec<String> = self.eips_on_port(id).iter().map(|e| e.id.clone()).collect();
        for eip in bound {
            self.unbind(&eip);
        }
    }
}
