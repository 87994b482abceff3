//! The shared load balancers' part of the world: load balancers (their VIP ports and
//! `PENDING_*` → `ACTIVE` by reads), listeners, pools, members and health monitors,
//! each in its own map keyed by ID and naming its parent.

use serde_json::{Map, Value};

use super::State;

/// A shared load balancer.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancer {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The subnet's `neutron_subnet_id`.
    pub vip_subnet_id: String,
    pub vip_address: String,
    /// The VIP's port: what an EIP binds to.
    pub vip_port_id: String,
    /// `vlb`.
    pub provider: String,
    /// `PENDING_CREATE`, `PENDING_UPDATE`, `ACTIVE`, `ERROR`.
    pub provisioning_status: String,
    /// `ONLINE` (or `OFFLINE`, `DEGRADED`, as a test sets it).
    pub operating_status: String,
    pub admin_state_up: bool,
    pub tags: Vec<String>,
    pub enterprise_project_id: String,
    pub created: i64,
    pub updated: i64,
    /// Reads that still see it `PENDING_*` ([`State::pending_reads`]).
    pub reads_left: u32,
}

/// A listener.
#[derive(Debug, Clone, PartialEq)]
pub struct Listener {
    pub id: String,
    pub name: String,
    pub description: String,
    pub loadbalancer_id: String,
    /// `TCP`, `UDP`, `HTTP`, `TERMINATED_HTTPS`.
    pub protocol: String,
    pub protocol_port: u16,
    /// -1: no limit.
    pub connection_limit: i64,
    pub http2_enable: bool,
    pub default_pool_id: Option<String>,
    pub default_tls_container_ref: Option<String>,
    pub client_ca_tls_container_ref: Option<String>,
    pub sni_container_refs: Vec<String>,
    pub tags: Vec<String>,
    /// `{"X-Forwarded-ELB-IP": true, "X-Forwarded-Host": true}`, as given.
    pub insert_headers: Map<String, Value>,
    pub tls_ciphers_policy: Option<String>,
    /// Seconds: idle timeout (`keepalive_timeout`), HTTP request (`client_timeout`) and
    /// response (`member_timeout`) timeouts.
    pub keepalive_timeout: Option<i64>,
    pub client_timeout: Option<i64>,
    pub member_timeout: Option<i64>,
    pub transparent_client_ip_enable: bool,
    pub admin_state_up: bool,
    pub created: i64,
    pub updated: i64,
}

/// A pool's session persistence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPersistence {
    /// `SOURCE_IP`, `HTTP_COOKIE`, `APP_COOKIE`.
    pub kind: String,
    pub cookie_name: Option<String>,
    /// Minutes.
    pub persistence_timeout: Option<i64>,
}

/// A pool (backend server group).
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub id: String,
    pub name: String,
    pub description: String,
    pub loadbalancer_id: String,
    pub listener_id: Option<String>,
    /// `TCP`, `UDP`, `HTTP`.
    pub protocol: String,
    /// `ROUND_ROBIN`, `LEAST_CONNECTIONS`, `SOURCE_IP`.
    pub lb_algorithm: String,
    pub session_persistence: Option<SessionPersistence>,
    pub healthmonitor_id: Option<String>,
    pub admin_state_up: bool,
}

/// A pool member (backend server).
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub id: String,
    pub pool_id: String,
    pub name: String,
    pub address: String,
    pub protocol_port: u16,
    /// The subnet's `neutron_subnet_id`.
    pub subnet_id: String,
    pub weight: i64,
    pub admin_state_up: bool,
}

/// A health monitor.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthMonitor {
    pub id: String,
    pub pool_id: String,
    pub name: String,
    /// `TCP`, `UDP_CONNECT`, `HTTP`.
    pub kind: String,
    pub delay: i64,
    pub timeout: i64,
    pub max_retries: i64,
    pub monitor_port: Option<u16>,
    pub url_path: Option<String>,
    pub http_method: Option<String>,
    pub expected_codes: Option<String>,
    pub domain_name: Option<String>,
    pub admin_state_up: bool,
}

impl State {
    /// Adds a load balancer named `name` with a VIP on `neutron_subnet_id` (at
    /// `vip_address`, else a free address), `PENDING_CREATE` for
    /// [`State::pending_reads`] reads: its ID. The subnet must exist.
    pub fn insert_load_balancer(
        &mut self,
        name: &str,
        description: &str,
        neutron_subnet_id: &str,
        vip_address: Option<&str>,
    ) -> Option<String> {
        let subnet = self.subnet_by_neutron_id(neutron_subnet_id)?.id.clone();
        let address = match vip_address {
            Some(a) => a.to_owned(),
            None => self.free_ip(&subnet)?,
        };
        let id = self.id();
        let vip_port_id = self.id();
        let now = self.now();
        let lb = LoadBalancer {
            id: id.clone(),
            name: name.into(),
            description: description.into(),
            vip_subnet_id: neutron_subnet_id.into(),
            vip_address: address,
            vip_port_id,
            provider: "vlb".into(),
            provisioning_status: "PENDING_CREATE".into(),
            operating_status: "ONLINE".into(),
            admin_state_up: true,
            tags: Vec::new(),
            enterprise_project_id: "0".into(),
            created: now,
            updated: now,
            reads_left: self.pending_reads,
        };
        self.load_balancers.insert(id.clone(), lb);
        Some(id)
    }

    /// A load balancer as another controller (or the console) made it: named `name`,
    /// its VIP on the default subnet, `ACTIVE`.
    pub fn add_load_balancer(&mut self, name: &str) -> LoadBalancer {
        let subnet = self.default_subnet().neutron_subnet_id.clone();
        let id = self
            .insert_load_balancer(name, "", &subnet, None)
            .expect("a free address on the default subnet");
        let lb = self.load_balancers.get_mut(&id).expect("just added");
        lb.provisioning_status = "ACTIVE".into();
        lb.reads_left = 0;
        lb.clone()
    }

    /// Every load balancer, in creation order.
    pub fn load_balancers(&self) -> Vec<LoadBalancer> {
        self.load_balancers.values().cloned().collect()
    }

    /// The load balancer `id`.
    pub fn load_balancer(&self, id: &str) -> Option<&LoadBalancer> {
        self.load_balancers.get(id)
    }

    /// The load balancer `id`, to change (its `provisioning_status`, say).
    pub fn load_balancer_mut(&mut self, id: &str) -> Option<&mut LoadBalancer> {
        self.load_balancers.get_mut(id)
    }

    /// Every listener, in creation order.
    pub fn listeners(&self) -> Vec<Listener> {
        self.listeners.values().cloned().collect()
    }

    /// Every pool, in creation order.
    pub fn pools(&self) -> Vec<Pool> {
        self.pools.values().cloned().collect()
    }

    /// Every member, in creation order.
    pub fn members(&self) -> Vec<Member> {
        self.members.values().cloned().collect()
    }

    /// Every health monitor, in creation order.
    pub fn healthmonitors(&self) -> Vec<HealthMonitor> {
        self.healthmonitors.values().cloned().collect()
    }

    /// A read of load balancer `id`: one fewer read sees it `PENDING_*`; when none is
    /// left, it is `ACTIVE`.
    pub fn read_load_balancer(&mut self, id: &str) {
        if let Some(lb) = self.load_balancers.get_mut(id)
            && lb.provisioning_status.starts_with("PENDING_")
        {
            if lb.reads_left == 0 {
                lb.provisioning_status = "ACTIVE".into();
            } else {
                lb.reads_left -= 1;
            }
        }
    }

    /// A change under load balancer `id` took effect: `updated` is now, and with
    /// [`State::pending_on_change`] it is `PENDING_UPDATE` for
    /// [`State::pending_reads`] reads.
    pub(crate) fn changed(&mut self, id: &str) {
        let (now, pending, reads) = (self.now(), self.pending_on_change, self.pending_reads);
        if let Some(lb) = self.load_balancers.get_mut(id) {
            lb.updated = now;
            if pending {
                lb.provisioning_status = "PENDING_UPDATE".into();
                lb.reads_left = reads;
            }
        }
    }

    /// The load balancer of pool `id`.
    pub(crate) fn pool_lb(&self, id: &str) -> Option<String> {
        self.pools.get(id).map(|p| p.loadbalancer_id.clone())
    }

    /// Removes load balancer `id` (its children must be gone); EIPs bound to its VIP
    /// are unbound.
    pub(crate) fn remove_load_balancer(&mut self, id: &str) {
        if let Some(lb) = self.load_balancers.remove(id) {
            self.unbind_port(&lb.vip_port_id);
        }
    }
}
