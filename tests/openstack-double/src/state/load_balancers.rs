//! Octavia's part of the world: load balancers (their VIP ports and `PENDING_*`
//! operations), listeners, pools, members and health monitors.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{Port, State};

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
    /// Its creation ends in `ERROR` rather than `ACTIVE` ([`State::failing_creations`]).
    pub creation_fails: bool,
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

impl State {
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
                security_groups: Vec::new(),
                tags: Vec::new(),
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
                let failed = lb.creation_fails && lb.provisioning_status == "PENDING_CREATE";
                lb.provisioning_status = String::from(if failed { "ERROR" } else { "ACTIVE" });
                lb.busy_until = None;
            }
        }
    }

    /// Starts an operation on a load balancer: `PENDING_<what>` for
    /// [`State::provisioning_time`] ([`State::creation_time`] for `CREATE`, if set).
    pub fn start_operation(&mut self, id: &str, what: &str) {
        let time = match self.creation_time {
            Some(creation) if what == "CREATE" => creation,
            _ => self.provisioning_time,
        };
        let until = Instant::now() + time;
        if let Some(lb) = self.load_balancers.get_mut(id) {
            lb.provisioning_status = format!("PENDING_{what}");
            lb.busy_until = Some(until);
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
