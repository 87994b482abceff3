//! `load-balancer` with Octavia, as occm does by default: one load balancer per
//! Service named `kube_service_<cluster>_<namespace>_<name>` (also its tag, so an
//! occm-made load balancer is recognised), a listener and a pool per Service port
//! (`listener_<i>_<lb>`, `pool_<i>_<lb>`), the Nodes' internal IPs and node ports as
//! members, a health monitor when configured (`monitor_<i>_<lb>`), and a floating IP
//! from the floating network on the VIP port unless the load balancer is internal.
//! `loadBalancerSourceRanges` become the listeners' allowed CIDRs.
//!
//! Octavia works asynchronously: after each change the load balancer is
//! `PENDING_*` for a while and refuses other changes. Each call does what it can,
//! waits for `ACTIVE` while the call's deadline allows, and otherwise answers
//! `retry-after` so the controller calls again and the work resumes where it stopped.
//! Deletion is Octavia's cascade delete; the floating IP is released first (kept, only
//! unbound, with `keep-floatingip` or when it is the Service's `loadBalancerIP`).

use std::time::Duration;

use serde_json::{Value, json};
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{
    CloudError, LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddressType, Protocol, Service,
};
use wasm_ccm_guest::{LoadBalancer, LoadBalancerName, cloud_error, deadline, events, url};

use crate::OpenStack;
use crate::api::{self, Endpoints};

/// The annotations' prefix.
const PREFIX: &str = "loadbalancer.openstack.org/";
/// occm's (and the in-tree provider's) internal load balancer annotation.
const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";

/// The annotations this provider reads (after [`PREFIX`]).
pub const SUPPORTED: [&str; 20] = [
    "floating-network-id",
    "floating-subnet-id",
    "keep-floatingip",
    "subnet-id",
    "network-id",
    "member-subnet-id",
    "timeout-client-data",
    "timeout-member-connect",
    "timeout-member-data",
    "timeout-tcp-inspect",
    "proxy-protocol",
    "enable-health-monitor",
    "health-monitor-delay",
    "health-monitor-timeout",
    "health-monitor-max-retries",
    "health-monitor-max-retries-down",
    "flavor-id",
    "availability-zone",
    "lb-method",
    "connection-limit",
];

/// occm's annotations this provider does not implement yet: a Service using one is
/// refused (a Warning event names it) rather than served without it.
pub const NOT_YET: [&str; 10] = [
    "port-id",
    "load-balancer-id",
    "class",
    "floating-subnet",
    "floating-subnet-tags",
    "x-forwarded-for",
    "default-tls-container-ref",
    "hostname",
    "enable-ingress-hostname",
    "load-balancer-address",
];

/// How long one wait for `ACTIVE` sleeps between reads.
const POLL: Duration = Duration::from_millis(500);
/// What a call keeps of its deadline for the work after a wait.
const RESERVE: Duration = Duration::from_secs(2);
/// The delay asked for when a load balancer is still busy at the end of a call.
const BUSY_RETRY_MS: u64 = 3_000;

/// occm's load balancer name for a Service (255 characters at most).
pub fn load_balancer_name(cluster: &str, service: &Service) -> String {
    let name = format!(
        "kube_service_{cluster}_{}_{}",
        service.metadata.namespace, service.metadata.name
    );
    name.chars().take(255).collect()
}

fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn ours<'a>(service: &'a Service, name: &str) -> Option<&'a str> {
    annotation(service, &format!("{PREFIX}{name}"))
}

fn truthy(value: Option<&str>) -> Option<bool> {
    value.map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "yes" | "1"))
}

/// What the Service and the cloud config ask for.
#[derive(Debug, Clone, PartialEq)]
struct Wanted {
    name: String,
    internal: bool,
    vip_subnet: String,
    vip_network: String,
    member_subnet: String,
    floating_network: String,
    floating_subnet: String,
    lb_method: String,
    proxy: Option<&'static str>,
    monitor: Option<(u64, u64, u64, u64)>,
    listener_settings: Vec<(&'static str, i64)>,
    allowed_cidrs: Vec<String>,
    flavor: String,
    zone: String,
    keep_floating_ip: bool,
}

impl OpenStack {
    fn octavia(&self) -> Result<String, CloudError> {
        api::endpoint(
            &Endpoints::get(&self.config)?.load_balancer,
            "load-balancer",
            &self.config,
        )
    }

    fn neutron(&self) -> Result<String, CloudError> {
        api::endpoint(
            &Endpoints::get(&self.config)?.network,
            "network",
            &self.config,
        )
    }

    /// Checks the Service against what the provider supports, and reads its settings.
    fn wanted(&self, cluster: &str, service: &Service) -> Result<Wanted, CloudError> {
        let refuse = |message: String| {
            let _ = events::warning("UnsupportedLoadBalancerSetting", &message, None);
            Err(cloud_error::other(format!(
                "service {}/{}: {message}",
                service.metadata.namespace, service.metadata.name
            )))
        };
        if !self.config.load_balancer.enabled {
            return refuse("load balancers are disabled ([LoadBalancer] enabled = false)".into());
        }
        for (key, _) in &service.metadata.annotations {
            let Some(name) = key.strip_prefix(PREFIX) else {
                continue;
            };
            if NOT_YET.contains(&name) {
                return refuse(format!(
                    "annotation {key} is not supported by this provider yet; no load balancer \
                     is made rather than one that ignores it"
                ));
            }
            if !SUPPORTED.contains(&name) {
                wasm_ccm_guest::log::warn(
                    "annotation not known to occm or this provider (a typo?); ignored",
                    &[("annotation", key.as_str())],
                );
            }
        }
        if service.ports.iter().any(|p| p.protocol == Protocol::Sctp) {
            return refuse("SCTP ports are not supported".into());
        }
        let config = &self.config.load_balancer;
        let text = |name: &str, default: &str| ours(service, name).unwrap_or(default).to_owned();
        let number = |name: &str, default: u64| -> Result<u64, CloudError> {
            match ours(service, name) {
                None => Ok(default),
                Some(v) => v.trim().trim_end_matches('s').parse().map_err(|_| {
                    cloud_error::other(format!("annotation {PREFIX}{name} `{v}` is not a number"))
                }),
            }
        };
        let proxy = match ours(service, "proxy-protocol").map(str::trim) {
            None | Some("false") | Some("") => None,
            Some("true") | Some("v1") => Some("PROXY"),
            Some("v2") => Some("PROXYV2"),
            Some(other) => {
                return refuse(format!(
                    "annotation {PREFIX}proxy-protocol `{other}` is not true, v1 or v2"
                ));
            }
        };
        let monitor = truthy(ours(service, "enable-health-monitor"))
            .unwrap_or(config.create_monitor)
            .then(|| -> Result<_, CloudError> {
                Ok((
                    number("health-monitor-delay", config.monitor_delay)?,
                    number("health-monitor-timeout", config.monitor_timeout)?,
                    number("health-monitor-max-retries", config.monitor_max_retries)?,
                    number(
                        "health-monitor-max-retries-down",
                        config.monitor_max_retries_down,
                    )?,
                ))
            })
            .transpose()?;
        let mut listener_settings = Vec::new();
        for (annotation, field) in [
            ("timeout-client-data", "timeout_client_data"),
            ("timeout-member-connect", "timeout_member_connect"),
            ("timeout-member-data", "timeout_member_data"),
            ("timeout-tcp-inspect", "timeout_tcp_inspect"),
            ("connection-limit", "connection_limit"),
        ] {
            if let Some(v) = ours(service, annotation) {
                let n = v.trim().parse::<i64>().map_err(|_| {
                    cloud_error::other(format!(
                        "annotation {PREFIX}{annotation} `{v}` is not a number"
                    ))
                })?;
                listener_settings.push((field, n));
            }
        }
        let internal = truthy(annotation(service, INTERNAL)).unwrap_or(config.internal_lb);
        let wanted = Wanted {
            name: load_balancer_name(cluster, service),
            internal,
            vip_subnet: text("subnet-id", &config.subnet_id),
            vip_network: text("network-id", &config.network_id),
            member_subnet: text(
                "member-subnet-id",
                if config.member_subnet_id.is_empty() {
                    &config.subnet_id
                } else {
                    &config.member_subnet_id
                },
            ),
            floating_network: text("floating-network-id", &config.floating_network_id),
            floating_subnet: text("floating-subnet-id", &config.floating_subnet_id),
            lb_method: text("lb-method", &config.lb_method),
            proxy,
            monitor,
            listener_settings,
            allowed_cidrs: service.load_balancer_source_ranges.clone(),
            flavor: text("flavor-id", &config.flavor_id),
            zone: text("availability-zone", &config.availability_zone),
            keep_floating_ip: truthy(ours(service, "keep-floatingip")).unwrap_or(false),
        };
        if wanted.vip_subnet.is_empty() && wanted.vip_network.is_empty() {
            return refuse(
                "no VIP subnet: set [LoadBalancer] subnet-id (or network-id), or the Service's \
                 loadbalancer.openstack.org/subnet-id annotation"
                    .into(),
            );
        }
        if !wanted.internal && wanted.floating_network.is_empty() {
            return refuse(
                "an external load balancer needs a floating network: set [LoadBalancer] \
                 floating-network-id or the loadbalancer.openstack.org/floating-network-id \
                 annotation, or make it internal"
                    .into(),
            );
        }
        Ok(wanted)
    }

    /// The load balancer named `name` (occm's name; its tag too).
    fn find_load_balancer(&self, name: &str) -> Result<Option<Value>, CloudError> {
        let octavia = self.octavia()?;
        let found = api::list(
            Request::get(&format!("{octavia}/lbaas/loadbalancers")).query("name", name),
            "loadbalancers",
            "find the load balancer",
        )?;
        Ok(found
            .into_iter()
            .find(|lb| lb["name"] == name && lb["provisioning_status"] != "DELETED"))
    }

    fn get_load_balancer_by_id(&self, id: &str) -> Result<Option<Value>, CloudError> {
        let url = format!(
            "{}/lbaas/loadbalancers/{}",
            self.octavia()?,
            url::encode_component(id)
        );
        let response = Request::get(&url)
            .header("accept", "application/json")
            .send()?;
        match cloud_error::check_found(response, "get the load balancer")? {
            None => Ok(None),
            Some(response) => {
                let body: Value = cloud_error::json(&response, "get the load balancer")?;
                Ok(Some(body["loadbalancer"].clone()))
            }
        }
    }

    /// Waits (within the call's deadline) until the load balancer is `ACTIVE`; a
    /// `retry-after` when it is not by then, an error when it is in `ERROR`.
    fn wait_active(&self, id: &str) -> Result<Value, CloudError> {
        loop {
            let Some(lb) = self.get_load_balancer_by_id(id)? else {
                return Err(cloud_error::other(format!(
                    "load balancer {id} disappeared"
                )));
            };
            match lb["provisioning_status"].as_str().unwrap_or_default() {
                "ACTIVE" => return Ok(lb),
                "ERROR" => {
                    return Err(cloud_error::other(format!(
                        "load balancer {id} is in provisioning status ERROR"
                    )));
                }
                status => {
                    if deadline::remaining() < POLL + RESERVE {
                        return Err(cloud_error::retry_after(
                            BUSY_RETRY_MS,
                            format!("load balancer {id} is {status}; resuming later"),
                        ));
                    }
                    std::thread::sleep(POLL);
                }
            }
        }
    }

    /// One change on the load balancer, then a wait for it to settle.
    fn change(&self, lb: &str, request: Request, what: &str) -> Result<Value, CloudError> {
        let answer = api::send(request, what)?;
        self.wait_active(lb)?;
        Ok(if answer.body.is_empty() {
            Value::Null
        } else {
            cloud_error::json(&answer, what)?
        })
    }

    fn list_children(&self, path: &str, key: &str, lb: &str) -> Result<Vec<Value>, CloudError> {
        api::list(
            Request::get(&format!("{}/lbaas/{path}", self.octavia()?)).query("loadbalancer_id", lb),
            key,
            &format!("list the load balancer's {key}"),
        )
    }

    /// Creates the load balancer, or returns the existing one (settled).
    fn ensure_created(
        &self,
        wanted: &Wanted,
        service: &Service,
        cluster: &str,
    ) -> Result<Value, CloudError> {
        if let Some(lb) = self.find_load_balancer(&wanted.name)? {
            let id = lb["id"].as_str().unwrap_or_default().to_owned();
            return self.wait_active(&id);
        }
        let mut body = json!({
            "name": wanted.name,
            "description": format!(
                "Kubernetes external service {}/{} from cluster {cluster}",
                service.metadata.namespace, service.metadata.name
            ),
            "tags": [wanted.name],
        });
        if !wanted.vip_subnet.is_empty() {
            body["vip_subnet_id"] = json!(wanted.vip_subnet);
        } else {
            body["vip_network_id"] = json!(wanted.vip_network);
        }
        if !self.config.load_balancer.lb_provider.is_empty() {
            body["provider"] = json!(self.config.load_balancer.lb_provider);
        }
        if !wanted.flavor.is_empty() {
            body["flavor_id"] = json!(wanted.flavor);
        }
        if !wanted.zone.is_empty() {
            body["availability_zone"] = json!(wanted.zone);
        }
        let created = api::json(
            Request::post(&format!("{}/lbaas/loadbalancers", self.octavia()?))
                .json(&json!({"loadbalancer": body})),
            "create the load balancer",
        )?;
        let id = created["loadbalancer"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let _ = events::normal(
            "CreatingLoadBalancer",
            &format!(
                "Octavia load balancer {} ({id}) is being created",
                wanted.name
            ),
            None,
        );
        self.wait_active(&id)
    }

    /// Listeners, pools, members and monitors as `wanted` and the Service say.
    fn reconcile(
        &self,
        lb: &Value,
        wanted: &Wanted,
        service: &Service,
        nodes: &[Node],
    ) -> Result<(), CloudError> {
        let id = lb["id"].as_str().unwrap_or_default();
        let octavia = self.octavia()?;
        let listeners = self.list_children("listeners", "listeners", id)?;
        let pools = self.list_children("pools", "pools", id)?;
        let mut kept = Vec::new();
        for (index, port) in service.ports.iter().enumerate() {
            let protocol = if port.protocol == Protocol::Udp {
                "UDP"
            } else {
                "TCP"
            };
            let name = format!("listener_{index}_{}", wanted.name);
            let existing = listeners
                .iter()
                .find(|l| l["protocol_port"] == port.port && l["protocol"] == protocol);
            let mut settings = json!({"name": name,
                "allowed_cidrs": if wanted.allowed_cidrs.is_empty() { Value::Null } else { json!(wanted.allowed_cidrs) }});
            for (field, value) in &wanted.listener_settings {
                settings[*field] = json!(value);
            }
            let listener = match existing {
                Some(l) => {
                    let differs = settings.as_object().into_iter().flatten().any(|(k, v)| {
                        k != "allowed_cidrs" && l[k] != *v
                            || k == "allowed_cidrs" && !same_cidrs(&l[k], v)
                    });
                    if differs {
                        let lid = l["id"].as_str().unwrap_or_default();
                        self.change(
                            id,
                            Request::put(&format!("{octavia}/lbaas/listeners/{lid}"))
                                .json(&json!({"listener": settings})),
                            "update a listener",
                        )?;
                    }
                    l.clone()
                }
                None => {
                    let mut body = settings.clone();
                    body["protocol"] = json!(protocol);
                    body["protocol_port"] = json!(port.port);
                    body["loadbalancer_id"] = json!(id);
                    self.change(
                        id,
                        Request::post(&format!("{octavia}/lbaas/listeners"))
                            .json(&json!({"listener": body})),
                        "create a listener",
                    )?["listener"]
                        .clone()
                }
            };
            let listener_id = listener["id"].as_str().unwrap_or_default().to_owned();
            kept.push(listener_id.clone());
            self.reconcile_pool(
                id,
                &listener_id,
                index,
                port.node_port,
                protocol,
                &pools,
                wanted,
                nodes,
            )?;
        }
        for listener in &listeners {
            let lid = listener["id"].as_str().unwrap_or_default();
            if kept.iter().any(|k| k == lid) {
                continue;
            }
            if let Some(pool) = pools.iter().find(|p| listener_of(p) == Some(lid)) {
                let pid = pool["id"].as_str().unwrap_or_default();
                self.change(
                    id,
                    Request::delete(&format!("{octavia}/lbaas/pools/{pid}")),
                    "delete a pool",
                )?;
            }
            self.change(
                id,
                Request::delete(&format!("{octavia}/lbaas/listeners/{lid}")),
                "delete a listener",
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn reconcile_pool(
        &self,
        lb: &str,
        listener: &str,
        index: usize,
        node_port: i32,
        protocol: &str,
        pools: &[Value],
        wanted: &Wanted,
        nodes: &[Node],
    ) -> Result<(), CloudError> {
        let octavia = self.octavia()?;
        let pool_protocol = wanted.proxy.unwrap_or(protocol);
        let pool = match pools.iter().find(|p| listener_of(p) == Some(listener)) {
            Some(p) if p["protocol"] == pool_protocol => {
                if p["lb_algorithm"] != wanted.lb_method.as_str() {
                    let pid = p["id"].as_str().unwrap_or_default();
                    self.change(
                        lb,
                        Request::put(&format!("{octavia}/lbaas/pools/{pid}"))
                            .json(&json!({"pool": {"lb_algorithm": wanted.lb_method}})),
                        "update a pool",
                    )?;
                }
                p.clone()
            }
            other => {
                if let Some(p) = other {
                    // The protocol of a pool cannot change: a new one replaces it.
                    let pid = p["id"].as_str().unwrap_or_default();
                    self.change(
                        lb,
                        Request::delete(&format!("{octavia}/lbaas/pools/{pid}")),
                        "delete a pool",
                    )?;
                }
                let body = json!({"pool": {"name": format!("pool_{index}_{}", wanted.name),
                    "listener_id": listener, "protocol": pool_protocol,
                    "lb_algorithm": wanted.lb_method}});
                self.change(
                    lb,
                    Request::post(&format!("{octavia}/lbaas/pools")).json(&body),
                    "create a pool",
                )?["pool"]
                    .clone()
            }
        };
        let pool_id = pool["id"].as_str().unwrap_or_default().to_owned();
        // Members: every Node's internal IP at the node port.
        let mut desired: Vec<Value> = nodes
            .iter()
            .filter_map(|node| {
                let address = node
                    .addresses
                    .iter()
                    .find(|a| a.address_type == NodeAddressType::InternalIp)?;
                let mut member = json!({"name": node.metadata.name, "address": address.address,
                                        "protocol_port": node_port});
                if !wanted.member_subnet.is_empty() {
                    member["subnet_id"] = json!(wanted.member_subnet);
                }
                Some(member)
            })
            .collect();
        desired.sort_by(|a, b| a["address"].as_str().cmp(&b["address"].as_str()));
        let current = api::list(
            Request::get(&format!("{octavia}/lbaas/pools/{pool_id}/members")),
            "members",
            "list the pool's members",
        )?;
        let mut now: Vec<(String, i64)> = current
            .iter()
            .map(|m| {
                (
                    m["address"].as_str().unwrap_or_default().to_owned(),
                    m["protocol_port"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        now.sort();
        let want: Vec<(String, i64)> = desired
            .iter()
            .map(|m| {
                (
                    m["address"].as_str().unwrap_or_default().to_owned(),
                    i64::from(node_port),
                )
            })
            .collect();
        if now != want {
            self.change(
                lb,
                Request::put(&format!("{octavia}/lbaas/pools/{pool_id}/members"))
                    .json(&json!({"members": desired})),
                "update the pool's members",
            )?;
        }
        // The health monitor.
        let monitor = pool["healthmonitor_id"].as_str().filter(|m| !m.is_empty());
        match (wanted.monitor, monitor) {
            (Some((delay, timeout, retries, down)), None) => {
                let kind = if protocol == "UDP" {
                    "UDP-CONNECT"
                } else {
                    "TCP"
                };
                let body = json!({"healthmonitor": {"name": format!("monitor_{index}_{}", wanted.name),
                    "pool_id": pool_id, "type": kind, "delay": delay, "timeout": timeout,
                    "max_retries": retries, "max_retries_down": down}});
                self.change(
                    lb,
                    Request::post(&format!("{octavia}/lbaas/healthmonitors")).json(&body),
                    "create a health monitor",
                )?;
            }
            (Some((delay, timeout, retries, down)), Some(mid)) => {
                let current = api::json(
                    Request::get(&format!("{octavia}/lbaas/healthmonitors/{mid}")),
                    "get the health monitor",
                )?;
                let h = &current["healthmonitor"];
                if h["delay"] != delay
                    || h["timeout"] != timeout
                    || h["max_retries"] != retries
                    || h["max_retries_down"] != down
                {
                    let body = json!({"healthmonitor": {"delay": delay, "timeout": timeout,
                        "max_retries": retries, "max_retries_down": down}});
                    self.change(
                        lb,
                        Request::put(&format!("{octavia}/lbaas/healthmonitors/{mid}")).json(&body),
                        "update the health monitor",
                    )?;
                }
            }
            (None, Some(mid)) => {
                self.change(
                    lb,
                    Request::delete(&format!("{octavia}/lbaas/healthmonitors/{mid}")),
                    "delete the health monitor",
                )?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// The floating IP bound to the VIP port (bound now if missing): its address.
    fn ensure_floating_ip(
        &self,
        lb: &Value,
        wanted: &Wanted,
        service: &Service,
        cluster: &str,
    ) -> Result<String, CloudError> {
        let neutron = self.neutron()?;
        let port = lb["vip_port_id"].as_str().unwrap_or_default();
        let bound = api::list(
            Request::get(&format!("{neutron}/floatingips")).query("port_id", port),
            "floatingips",
            "find the load balancer's floating IP",
        )?;
        if let Some(fip) = bound.first() {
            return Ok(fip["floating_ip_address"]
                .as_str()
                .unwrap_or_default()
                .to_owned());
        }
        if let Some(address) = service
            .load_balancer_ip
            .as_deref()
            .filter(|a| !a.is_empty())
        {
            // The Service names its address: an existing floating IP, bound to the VIP.
            let found = api::list(
                Request::get(&format!("{neutron}/floatingips"))
                    .query("floating_ip_address", address),
                "floatingips",
                "find the Service's loadBalancerIP",
            )?;
            if let Some(fip) = found.first() {
                if fip["port_id"]
                    .as_str()
                    .is_some_and(|p| !p.is_empty() && p != port)
                {
                    return Err(cloud_error::other(format!(
                        "floating IP {address} (loadBalancerIP) is bound to another port"
                    )));
                }
                let id = fip["id"].as_str().unwrap_or_default();
                api::send(
                    Request::put(&format!("{neutron}/floatingips/{id}"))
                        .json(&json!({"floatingip": {"port_id": port}})),
                    "bind the floating IP",
                )?;
                return Ok(address.to_owned());
            }
        }
        let mut body = json!({"floating_network_id": wanted.floating_network, "port_id": port,
            "description": format!("Floating IP for Kubernetes external service {}/{} from cluster {cluster}",
                service.metadata.namespace, service.metadata.name)});
        if !wanted.floating_subnet.is_empty() {
            body["subnet_id"] = json!(wanted.floating_subnet);
        }
        if let Some(address) = service
            .load_balancer_ip
            .as_deref()
            .filter(|a| !a.is_empty())
        {
            body["floating_ip_address"] = json!(address);
        }
        let created = api::json(
            Request::post(&format!("{neutron}/floatingips")).json(&json!({"floatingip": body})),
            "create a floating IP",
        )?;
        Ok(created["floatingip"]["floating_ip_address"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    fn status(address: String) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: Some(address),
                hostname: None,
                ip_mode: None,
                ports: Vec::new(),
            }],
        }
    }

    fn ensure(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus, CloudError> {
        let wanted = self.wanted(cluster, service)?;
        let lb = self.ensure_created(&wanted, service, cluster)?;
        self.reconcile(&lb, &wanted, service, nodes)?;
        let address = if wanted.internal {
            lb["vip_address"].as_str().unwrap_or_default().to_owned()
        } else {
            self.ensure_floating_ip(&lb, &wanted, service, cluster)?
        };
        Ok(Self::status(address))
    }
}

/// The listener a pool serves.
fn listener_of(pool: &Value) -> Option<&str> {
    pool["listeners"].as_array()?.first()?["id"].as_str()
}

/// Whether two `allowed_cidrs` values (null or lists) hold the same CIDRs.
fn same_cidrs(a: &Value, b: &Value) -> bool {
    let set = |v: &Value| {
        let mut list: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_owned))
            .collect();
        list.sort();
        list
    };
    set(a) == set(b)
}

impl LoadBalancerName for OpenStack {
    fn get_load_balancer_name(&self, cluster_name: String, service: Service) -> String {
        load_balancer_name(&cluster_name, &service)
    }
}

impl LoadBalancer for OpenStack {
    fn get_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError> {
        let name = load_balancer_name(&cluster_name, &service);
        let Some(lb) = self.find_load_balancer(&name)? else {
            return Ok(None);
        };
        let neutron = self.neutron()?;
        let port = lb["vip_port_id"].as_str().unwrap_or_default();
        let bound = api::list(
            Request::get(&format!("{neutron}/floatingips")).query("port_id", port),
            "floatingips",
            "find the load balancer's floating IP",
        )?;
        let address = bound
            .first()
            .and_then(|f| f["floating_ip_address"].as_str())
            .or_else(|| lb["vip_address"].as_str())
            .unwrap_or_default()
            .to_owned();
        Ok(Some(Self::status(address)))
    }

    fn ensure_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError> {
        self.ensure(&cluster_name, &service, &nodes)
    }

    fn update_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<(), CloudError> {
        self.ensure(&cluster_name, &service, &nodes).map(|_| ())
    }

    fn ensure_load_balancer_deleted(
        &self,
        cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        let name = load_balancer_name(&cluster_name, &service);
        let Some(lb) = self.find_load_balancer(&name)? else {
            return Ok(());
        };
        let id = lb["id"].as_str().unwrap_or_default().to_owned();
        if lb["provisioning_status"] != "PENDING_DELETE" {
            // The floating IP first: released, or only unbound when it is to be kept.
            let neutron = self.neutron()?;
            let port = lb["vip_port_id"].as_str().unwrap_or_default();
            let keep = truthy(ours(&service, "keep-floatingip")).unwrap_or(false);
            for fip in api::list(
                Request::get(&format!("{neutron}/floatingips")).query("port_id", port),
                "floatingips",
                "find the load balancer's floating IP",
            )? {
                let fid = fip["id"].as_str().unwrap_or_default();
                let named =
                    service.load_balancer_ip.as_deref() == fip["floating_ip_address"].as_str();
                if keep || named {
                    api::send(
                        Request::put(&format!("{neutron}/floatingips/{fid}"))
                            .json(&json!({"floatingip": {"port_id": null}})),
                        "unbind the floating IP",
                    )?;
                } else {
                    api::send(
                        Request::delete(&format!("{neutron}/floatingips/{fid}")),
                        "release the floating IP",
                    )?;
                }
            }
            self.wait_active(&id)?;
            api::send(
                Request::delete(&format!("{}/lbaas/loadbalancers/{id}", self.octavia()?))
                    .query("cascade", "true"),
                "delete the load balancer",
            )?;
        }
        // Gone when Octavia says 404.
        loop {
            if self.get_load_balancer_by_id(&id)?.is_none() {
                return Ok(());
            }
            if deadline::remaining() < POLL + RESERVE {
                return Err(cloud_error::retry_after(
                    BUSY_RETRY_MS,
                    format!("load balancer {id} is being deleted; checking again later"),
                ));
            }
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occm_annotation_is_either_supported_or_refused() {
        for name in NOT_YET {
            assert!(!SUPPORTED.contains(&name), "{name}");
        }
    }

    #[test]
    fn cidr_lists_compare_as_sets() {
        assert!(same_cidrs(&json!(["b", "a"]), &json!(["a", "b"])));
        assert!(same_cidrs(&Value::Null, &json!([])));
        assert!(!same_cidrs(&json!(["a"]), &Value::Null));
    }
}
