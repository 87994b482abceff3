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
//! With `manage-security-groups`, occm's security group opens the node ports on the
//! members' ports ([`security_groups`]); it goes with the Service.

mod autodetect;
mod creation;
mod features;
mod floating_ip;
mod floating_subnet;
mod listeners;
mod networks;
mod rename;
mod security_groups;
mod settings;
mod shared;

use std::time::Duration;

use serde_json::Value;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{
    CloudError, IpMode, LoadBalancerIngress, LoadBalancerStatus, Node, Service,
};
use wasm_ccm_guest::{
    LoadBalancer, LoadBalancerName, annotations, cloud_error, deadline, events, url,
};

use crate::OpenStack;
use crate::api::{self, Endpoints};
use settings::{PREFIX, ours};

/// The first pause between two reads of a busy load balancer, and its growth: occm's
/// `WaitActiveAndGetLoadBalancer` back-off (1 s, ×1.2 each time).
const POLL_FIRST: Duration = Duration::from_secs(1);
const POLL_FACTOR: f64 = 1.2;

/// The pauses of one wait: occm's back-off, within the call's deadline.
struct Poll {
    next: Duration,
}

impl Poll {
    fn new() -> Self {
        Self { next: POLL_FIRST }
    }

    /// Sleeps the next pause, or answers `retry-after` (saying `why`) when the call's
    /// deadline leaves no room for it and the work after it.
    fn pause(&mut self, why: impl FnOnce() -> String) -> Result<(), CloudError> {
        if deadline::remaining() < self.next + RESERVE {
            return Err(cloud_error::retry_after(BUSY_RETRY_MS, why()));
        }
        std::thread::sleep(self.next);
        self.next = self.next.mul_f64(POLL_FACTOR);
        Ok(())
    }
}
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

/// The in-tree provider's (and old occm's) name: `a` and the Service's UID without
/// dashes, cut to 32 characters (`cloudprovider.DefaultLoadBalancerName`).
pub fn legacy_name(service: &Service) -> String {
    wasm_ccm_guest::default_load_balancer_name(service)
}

/// occm's annotation naming the Service's load balancer (written on every Service).
const LOAD_BALANCER_ID: &str = "load-balancer-id";
/// occm's annotation holding the load balancer's address (occm ≥ 1.27).
const LOAD_BALANCER_ADDRESS: &str = "load-balancer-address";

/// Records the load balancer on the Service as occm does, so occm (or this provider)
/// finds it by ID after a move either way.
fn record(service: &Service, id: &str, address: Option<&str>) {
    let set = |name: &str, value: &str| {
        if let Err(e) = annotations::ensure(service, &format!("{PREFIX}{name}"), value) {
            wasm_ccm_guest::log::warn(
                "cannot record the load balancer on the Service (the policy's \
                 serviceAnnotations must list loadbalancer.openstack.org/)",
                &[("annotation", name), ("error", &format!("{e:?}"))],
            );
        }
    };
    if !id.is_empty() {
        set(LOAD_BALANCER_ID, id);
    }
    if let Some(address) = address.filter(|a| !a.is_empty()) {
        set(LOAD_BALANCER_ADDRESS, address);
    }
}

/// occm's error for a load balancer that is not `ACTIVE` (`ensureOctaviaLoadBalancer`).
fn not_active(id: &str, status: &str) -> CloudError {
    cloud_error::other(format!(
        "load balancer {id} is not ACTIVE, current provisioning status: {status}"
    ))
}

/// occm's event reason when an IPv6 VIP gets no floating IP (`eventLBFloatingIPSkipped`).
const FLOATING_IP_SKIPPED: &str = "LoadBalancerFloatingIPSkipped";

/// The Warning occm's `ensureOctaviaLoadBalancer` records for an IPv6 VIP, which is the
/// Service's address (Neutron has no IPv6 floating IPs), with occm's reason and words.
fn floating_ip_skipped(service: &Service, vip: &str) {
    let _ = events::warning(
        FLOATING_IP_SKIPPED,
        &format!(
            "Floating IP not supported for IPv6 Service {}/{}. Using IPv6 address instead {vip}.",
            service.metadata.namespace, service.metadata.name
        ),
        None,
    );
}

/// occm's `checkService` (the start of `ensureOctaviaLoadBalancer`): no load balancer is
/// made or changed by an ensure without Nodes. An update (occm's
/// `updateOctaviaLoadBalancer`) with none empties the pools instead.
fn no_available_nodes(service: &Service) -> CloudError {
    cloud_error::other(format!(
        "there are no available nodes for LoadBalancer service {}/{}",
        service.metadata.namespace, service.metadata.name
    ))
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

    /// The load balancer named `name` (occm's name; its tag too).
    fn find_load_balancer(&self, name: &str) -> Result<Option<Value>, CloudError> {
        let octavia = self.octavia()?;
        let found = api::list(
            Request::get(&format!("{octavia}/lbaas/loadbalancers")).query("name", name),
            "loadbalancers",
            "find the load balancer",
        )?;
        let mut live: Vec<Value> = found
            .into_iter()
            .filter(|lb| {
                lb["name"] == name
                    && !matches!(
                        lb["provisioning_status"].as_str(),
                        Some("DELETED" | "PENDING_DELETE")
                    )
            })
            .collect();
        // One that works before one in ERROR (a failed delete can leave one behind).
        live.sort_by_key(|lb| lb["provisioning_status"] == "ERROR");
        Ok(live.into_iter().next())
    }

    /// The Service's load balancer, as occm's `EnsureLoadBalancer` finds it: the one
    /// `loadbalancer.openstack.org/load-balancer-id` names (an error when it is gone:
    /// occm makes no other), else the one of occm's name, else the one of the legacy
    /// name `a<uid>` (the in-tree provider's and old occm's).
    fn find_service_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<Option<Value>, CloudError> {
        if let Some(id) = ours(service, LOAD_BALANCER_ID).filter(|id| !id.is_empty()) {
            return match self.get_load_balancer_by_id(id)? {
                Some(lb) if lb["provisioning_status"] != "DELETED" => Ok(Some(lb)),
                _ => Err(cloud_error::other(format!(
                    "load balancer {id} named by {PREFIX}{LOAD_BALANCER_ID} on Service {}/{} \
                     does not exist (remove the annotation to have one made)",
                    service.metadata.namespace, service.metadata.name
                ))),
            };
        }
        if let Some(lb) = self.find_load_balancer(&load_balancer_name(cluster, service))? {
            return Ok(Some(lb));
        }
        self.find_load_balancer(&legacy_name(service))
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
        let lb = self.wait_settled(id)?;
        if lb["provisioning_status"] == "ERROR" {
            return Err(not_active(id, "ERROR"));
        }
        Ok(lb)
    }

    /// Waits (within the call's deadline) until the load balancer is `ACTIVE` or in
    /// `ERROR` (Octavia's two settled states) and answers it; a `retry-after` when it is
    /// neither by then.
    fn wait_settled(&self, id: &str) -> Result<Value, CloudError> {
        let mut poll = Poll::new();
        let mut seen: Option<String> = None;
        loop {
            let read = match (self.get_load_balancer_by_id(id), &seen) {
                // Asked to come back (the call's time is up, the cloud throttles):
                // saying what the load balancer was doing.
                (Err(CloudError::RetryAfter(retry)), Some(status)) => {
                    return Err(cloud_error::retry_after(
                        retry.delay_ms,
                        format!(
                            "load balancer {id} is {status}; resuming later: {}",
                            retry.message
                        ),
                    ));
                }
                (read, _) => read?,
            };
            let Some(lb) = read else {
                return Err(cloud_error::other(format!(
                    "load balancer {id} disappeared"
                )));
            };
            match lb["provisioning_status"].as_str().unwrap_or_default() {
                "ACTIVE" | "ERROR" => return Ok(lb),
                status => {
                    poll.pause(|| format!("load balancer {id} is {status}; resuming later"))?;
                    seen = Some(status.to_owned());
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

    /// The Service's status, as occm's `createLoadBalancerStatus`: the `hostname`
    /// annotation alone when set; with PROXY protocol, `<address>.<suffix>` as the
    /// hostname when `enable-ingress-hostname`, else the address with `ipMode: Proxy`
    /// (kube-proxy then sends in-cluster traffic through the load balancer, which adds
    /// the PROXY header); else the address with `ipMode: VIP`.
    fn status(&self, service: &Service, address: String) -> LoadBalancerStatus {
        let ingress = |ip: Option<String>, hostname: Option<String>, ip_mode| LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip,
                hostname,
                ip_mode,
                ports: Vec::new(),
            }],
        };
        let hostname = ours(service, "hostname")
            .map(str::trim)
            .filter(|h| !h.is_empty());
        if let Some(hostname) = hostname {
            return ingress(None, Some(hostname.to_owned()), None);
        }
        let proxy = ours(service, "proxy-protocol")
            .map(str::trim)
            .is_some_and(|p| matches!(p, "true" | "v1" | "v2"));
        if proxy {
            let config = &self.config.load_balancer;
            if config.enable_ingress_hostname {
                let hostname = format!("{address}.{}", config.ingress_hostname_suffix);
                return ingress(None, Some(hostname), None);
            }
            return ingress(Some(address), None, Some(IpMode::Proxy));
        }
        ingress(Some(address), None, Some(IpMode::Vip))
    }

    /// Brings the Service's load balancer to what it asks; creates it when `create`
    /// (an ensure), else (an update, as occm's `UpdateLoadBalancer`) fails when there
    /// is none, before anything is made.
    fn ensure(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
        create: bool,
    ) -> Result<LoadBalancerStatus, CloudError> {
        let mut wanted = self.wanted(cluster, service)?;
        // What this Octavia's API version does not take is left out (or refused).
        if let Err(e) = features::within_version(&mut wanted, self.octavia_version()) {
            let _ = events::warning("UnsupportedLoadBalancerSetting", &e, None);
            return Err(cloud_error::other(format!(
                "service {}/{}: {e}",
                service.metadata.namespace, service.metadata.name
            )));
        }
        self.autodetect(&mut wanted, service, nodes)?;
        let lb = self.ensure_created(&wanted, service, cluster, create)?;
        // One occm made under another --cluster-name: renamed as occm renames it when
        // the Service asks for it, else refused by name (occm's lbHasOldClusterName).
        let lb = self.of_this_cluster(lb, cluster, service)?;
        let owner = shared::owns(&lb, cluster, service);
        if !owner {
            self.check_share(&lb, &wanted)?;
        }
        self.reconcile(&lb, &wanted, service, nodes, owner)?;
        let vip = lb["vip_address"].as_str().unwrap_or_default().to_owned();
        let address = if vip.contains(':') {
            // occm (`ensureOctaviaLoadBalancer`): an IPv6 VIP is the address, whatever
            // the Service (Neutron has no IPv6 floating IPs), with its Warning (not at an
            // update: occm's `updateOctaviaLoadBalancer` records none).
            if create {
                floating_ip_skipped(service, &vip);
            }
            vip
        } else if !owner {
            // occm: only the owner attaches a floating IP; the others use it.
            match self.bound_floating_ip(&lb)? {
                Some(address) => address,
                None => {
                    return Err(cloud_error::other(format!(
                        "cannot attach a floating IP to a load balancer for a shared Service \
                         {}/{}, only owner Service can do that",
                        service.metadata.namespace, service.metadata.name
                    )));
                }
            }
        } else if wanted.internal {
            // A Service switched from external to internal loses its floating IP.
            self.release_floating_ips(&lb, service)?;
            vip
        } else {
            self.ensure_floating_ip(&lb, &wanted, service, cluster)?
        };
        self.tag_load_balancer(&lb, &wanted.name)?;
        record(
            service,
            lb["id"].as_str().unwrap_or_default(),
            Some(&address),
        );
        // occm's last step of an ensure and of an update.
        self.reconcile_security_group(cluster, service, nodes, &wanted, &lb, create)?;
        Ok(self.status(service, address))
    }
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
        // occm's GetLoadBalancer: a load balancer the annotation names that is gone is
        // not there (so the Service's cleanup can finish).
        let lb = match self.find_service_load_balancer(&cluster_name, &service) {
            Ok(Some(lb)) => lb,
            Ok(None) => return Ok(None),
            Err(_) if self.named_gone(&service)? => return Ok(None),
            Err(e) => return Err(e),
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
        // What ensure-load-balancer answers (occm's GetLoadBalancer gives the address
        // alone; the contract asks both for one status).
        Ok(Some(self.status(&service, address)))
    }

    fn ensure_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError> {
        // occm refuses before it reads or makes anything (`checkService`).
        if nodes.is_empty() {
            return Err(no_available_nodes(&service));
        }
        self.ensure(&cluster_name, &service, &nodes, true)
    }

    fn update_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<(), CloudError> {
        self.ensure(&cluster_name, &service, &nodes, false)
            .map(|_| ())
    }

    fn ensure_load_balancer_deleted(
        &self,
        cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        match self.find_service_load_balancer(&cluster_name, &service) {
            // One occm made under another --cluster-name is refused by name (neither
            // left behind nor deleted), or renamed first when the Service asks for it.
            Ok(Some(lb)) => match self.of_this_cluster_for_deletion(lb, &cluster_name, &service)? {
                rename::ForDeletion::Ours(lb) => {
                    self.delete_or_leave(&cluster_name, &service, &lb)?
                }
                rename::ForDeletion::Under(theirs, lb) => {
                    self.delete_or_leave(&theirs, &service, &lb)?
                }
            },
            Ok(None) => {}
            // The annotation names a load balancer that is gone: nothing to delete (a
            // delete cut by the deadline ends here on the next call), but the annotation
            // still goes.
            Err(_) if self.named_gone(&service)? => {}
            Err(e) => return Err(e),
        }
        // occm's `ensureSecurityGroupDeleted`, whatever `manage-security-groups` says;
        // also when the load balancer was gone already (a deletion cut after it went).
        self.ensure_security_group_deleted(&service)?;
        // The Service no longer names it (a Service made a LoadBalancer again gets a new
        // one rather than an error about this one).
        if ours(&service, LOAD_BALANCER_ID).is_some_and(|id| !id.is_empty()) {
            let _ = annotations::set(&format!("{PREFIX}{LOAD_BALANCER_ID}"), "");
        }
        Ok(())
    }
}

impl OpenStack {
    /// Deletes the Service's load balancer `lb` when it is its last user, else removes
    /// only what is the Service's from it.
    fn delete_or_leave(
        &self,
        cluster_name: &str,
        service: &Service,
        lb: &Value,
    ) -> Result<(), CloudError> {
        let name = load_balancer_name(cluster_name, service);
        if self.last_user(lb, &name, service) {
            self.delete_load_balancer(lb, service)
        } else {
            // Other Services use it (or occm did not make it): only ours goes.
            let owner = shared::owns(lb, cluster_name, service);
            self.leave_load_balancer(lb, &name, owner)
        }
    }

    /// Whether the Service's `load-balancer-id` names a load balancer that is gone.
    fn named_gone(&self, service: &Service) -> Result<bool, CloudError> {
        match ours(service, LOAD_BALANCER_ID).filter(|id| !id.is_empty()) {
            Some(id) => Ok(self
                .get_load_balancer_by_id(id)?
                .is_none_or(|lb| lb["provisioning_status"] == "DELETED")),
            None => Ok(false),
        }
    }

    /// Releases the floating IP and cascade-deletes `lb`, waiting for the 404 while
    /// the call's deadline allows.
    fn delete_load_balancer(&self, lb: &Value, service: &Service) -> Result<(), CloudError> {
        let id = lb["id"].as_str().unwrap_or_default().to_owned();
        self.start_delete(lb, service)?;
        // Gone when Octavia says 404.
        let mut poll = Poll::new();
        loop {
            if self.get_load_balancer_by_id(&id)?.is_none() {
                return Ok(());
            }
            poll.pause(|| format!("load balancer {id} is being deleted; checking again later"))?;
        }
    }

    /// Releases (or unbinds) the floating IP and asks Octavia for a cascade delete of
    /// `lb`, once it is not busy; a load balancer in ERROR is deleted as it is.
    fn start_delete(&self, lb: &Value, service: &Service) -> Result<(), CloudError> {
        let id = lb["id"].as_str().unwrap_or_default().to_owned();
        if lb["provisioning_status"] != "PENDING_DELETE" {
            // The floating IP first: released, or only unbound when it is to be kept
            // or was not made here.
            self.release_floating_ips(lb, service)?;
            if lb["provisioning_status"] != "ERROR" {
                self.wait_active(&id)?;
            }
            api::send(
                Request::delete(&format!("{}/lbaas/loadbalancers/{id}", self.octavia()?))
                    .query("cascade", "true"),
                "delete the load balancer",
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasm_ccm_guest::cache;

    /// Service `default/web`, no annotations.
    fn service() -> Service {
        settings::tests::service(&[])
    }

    /// occm's `checkService`: an ensure without Nodes is refused with occm's words,
    /// before any request (none can be sent from a native test).
    #[test]
    fn an_ensure_without_nodes_is_refused_as_occm() {
        let provider = OpenStack {
            config: crate::config::Config::parse(
                "[Global]\nauth-url = https://k/v3\n[LoadBalancer]\nsubnet-id = s1\n",
            )
            .unwrap(),
        };
        match provider.ensure_load_balancer("kubernetes".into(), service(), Vec::new()) {
            Err(CloudError::Other(message)) => assert_eq!(
                message,
                "there are no available nodes for LoadBalancer service default/web"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// A delete cut by the deadline after Octavia took it: the next call finds the load
    /// balancer the annotation names gone, and clears the annotation all the same (a
    /// Service made a LoadBalancer again gets a new load balancer, not an error).
    #[test]
    fn a_delete_resumed_after_the_load_balancer_went_clears_its_annotation() {
        use wasm_ccm_guest::http::Response;
        use wasm_ccm_guest::testing::MockTransport;
        cache::clear();
        let _ = annotations::recorded();
        let cloud = MockTransport::new();
        let catalog = json!({"catalog": [
            {"type": "load-balancer", "endpoints": [
                {"interface": "public", "region_id": "RegionOne", "url": "http://octavia"}]},
            {"type": "network", "endpoints": [
                {"interface": "public", "region_id": "RegionOne", "url": "http://neutron"}]}]});
        cloud.on(
            "GET",
            "/v3/auth/catalog",
            Response::with_json(200, &catalog),
        );
        cloud.on("GET", "/v2/lbaas/loadbalancers/lb-1", Response::new(404));
        // No security group of the Service's name (occm's `ensureSecurityGroupDeleted`).
        cloud.on(
            "GET",
            "/v2.0/security-groups",
            Response::with_json(200, &json!({"security_groups": []})),
        );
        let _installed = cloud.install();
        let provider = OpenStack {
            config: crate::config::Config::parse("[Global]\nauth-url = https://k/v3\n").unwrap(),
        };
        let key = format!("{PREFIX}{LOAD_BALANCER_ID}");
        let service = settings::tests::service(&[(key.as_str(), "lb-1")]);
        provider
            .ensure_load_balancer_deleted("kubernetes".into(), service)
            .unwrap();
        assert_eq!(annotations::recorded(), [(key, String::new())]);
        // Nothing but reads: nothing was there to delete; the security group was looked
        // for even so.
        assert_eq!(cloud.count("GET", "/v2.0/security-groups"), 1);
        assert!(
            cloud
                .requests()
                .iter()
                .all(|r| r.method().as_str() == "GET")
        );
    }

    /// occm's Warning for an IPv6 VIP: `LoadBalancerFloatingIPSkipped`, its words.
    #[test]
    fn an_ipv6_vip_gets_occms_floating_ip_skipped_warning() {
        let _ = events::recorded();
        floating_ip_skipped(&service(), "fd00:10::5");
        let recorded = events::recorded();
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        let (kind, reason, message) = &recorded[0];
        assert!(matches!(kind, events::EventType::Warning));
        assert_eq!(reason, "LoadBalancerFloatingIPSkipped");
        assert_eq!(
            message,
            "Floating IP not supported for IPv6 Service default/web. Using IPv6 address \
             instead fd00:10::5."
        );
    }
}
