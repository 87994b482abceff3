//! Making a Service's load balancer, as occm's `createOctaviaLoadBalancer`, and what
//! becomes of one found or made in `ERROR` (occm's `ensureOctaviaLoadBalancer` keeps
//! it; one this controller has just made, which never served, is made again).

use std::time::Duration;

use serde_json::{Value, json};
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, Service};
use wasm_ccm_guest::{annotations, cache, cloud_error, events};

use super::settings::{PREFIX, Wanted};
use super::{LOAD_BALANCER_ID, not_active, record, shared};
use crate::OpenStack;
use crate::api;

/// The shared cache's mark on a load balancer this controller made that has not been
/// `ACTIVE` yet (it never served): only such a one is deleted when it lands in `ERROR`.
fn unserved_key(id: &str) -> String {
    format!("unserved-load-balancer/{id}")
}

/// How long the mark lasts (the host keeps an entry a day at most); a load balancer
/// still not settled by then is kept whatever becomes of it.
const UNSERVED_TTL: Duration = Duration::from_secs(24 * 3600);

impl OpenStack {
    /// Creates the load balancer, or returns the existing one, `ACTIVE`.
    ///
    /// As occm's `ensureOctaviaLoadBalancer`, a load balancer in `ERROR` is kept (its
    /// listeners, its floating IP, the Service's address) and the call fails ("not
    /// ACTIVE") until it is repaired or deleted in Octavia. The one exception is occm's
    /// `createOctaviaLoadBalancer`: one this controller has just made that lands in
    /// `ERROR` before it was ever `ACTIVE` (it never served) is deleted, and the next call
    /// makes it again.
    pub(super) fn ensure_created(
        &self,
        wanted: &Wanted,
        service: &Service,
        cluster: &str,
        create: bool,
    ) -> Result<Value, CloudError> {
        let lb = match self.find_service_load_balancer(cluster, service)? {
            Some(lb) if lb["provisioning_status"] == "ERROR" => lb,
            Some(lb) => {
                let id = lb["id"].as_str().unwrap_or_default().to_owned();
                record(service, &id, None);
                self.wait_settled(&id)?
            }
            None if !create => {
                return Err(CloudError::Other(format!(
                    "load balancer {} of Service {}/{} does not exist",
                    wanted.name, service.metadata.namespace, service.metadata.name
                )));
            }
            None => self.create_load_balancer(wanted, service, cluster)?,
        };
        let id = lb["id"].as_str().unwrap_or_default().to_owned();
        if lb["provisioning_status"] != "ERROR" {
            // ACTIVE: it has served, and is kept from now on whatever becomes of it.
            cache::delete(&unserved_key(&id));
            return Ok(lb);
        }
        let unserved = cache::get(&unserved_key(&id)).is_some();
        let sole_owner =
            shared::owns(&lb, cluster, service) && !shared::has_other_users(&lb, &wanted.name);
        if !(create && unserved && sole_owner) {
            // occm records the ID before it checks the status.
            record(service, &id, None);
            return Err(not_active(&id, "ERROR"));
        }
        // occm's createOctaviaLoadBalancer: "If LB landed in ERROR state we should delete
        // it and retry the creation later." The ID is cleared (it may have been recorded
        // by this very call): the next call looks the load balancer up by name and,
        // finding none, makes it again.
        let _ = annotations::set(&format!("{PREFIX}{LOAD_BALANCER_ID}"), "");
        self.start_delete(&lb, service)?;
        cache::delete(&unserved_key(&id));
        Err(cloud_error::other(format!(
            "loadbalancer {id} has gone into ERROR state, please check Octavia for details. \
             Load balancer was deleted and its creation will be retried"
        )))
    }

    /// Makes the Service's load balancer (marked unserved until it is `ACTIVE`) and
    /// waits for it to settle.
    fn create_load_balancer(
        &self,
        wanted: &Wanted,
        service: &Service,
        cluster: &str,
    ) -> Result<Value, CloudError> {
        let mut body = json!({
            "name": wanted.name,
            "description": format!(
                "Kubernetes external service {}/{} from cluster {cluster}",
                service.metadata.namespace, service.metadata.name
            ),
            "tags": [wanted.name],
        });
        vip(&mut body, wanted, service);
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
        // Without the mark (a full cache) it is kept should it land in ERROR: the safe way.
        if let Err(e) = cache::set(&unserved_key(&id), b"", UNSERVED_TTL) {
            wasm_ccm_guest::log::warn(
                "cannot mark the new load balancer as unserved; should it land in ERROR \
                 it is kept",
                &[("id", id.as_str()), ("error", &format!("{e:?}"))],
            );
        }
        record(service, &id, None);
        let _ = events::normal(
            "CreatingLoadBalancer",
            &format!(
                "Octavia load balancer {} ({id}) is being created",
                wanted.name
            ),
            None,
        );
        self.wait_settled(&id)
    }
}

/// The VIP of a new load balancer, as occm's `createOctaviaLoadBalancer`: the `port-id`
/// port itself, else the VIP subnet and network (each when named; occm sends both);
/// the Service's `loadBalancerIP` as the VIP address when the Service is internal or
/// its first IP family is IPv6 (an external IPv4 Service's `loadBalancerIP` is its
/// floating IP instead).
fn vip(body: &mut Value, wanted: &Wanted, service: &Service) {
    if !wanted.vip_port.is_empty() {
        body["vip_port_id"] = json!(wanted.vip_port);
    } else {
        if !wanted.vip_subnet.is_empty() {
            body["vip_subnet_id"] = json!(wanted.vip_subnet);
        }
        if !wanted.vip_network.is_empty() || wanted.vip_subnet.is_empty() {
            body["vip_network_id"] = json!(wanted.vip_network);
        }
    }
    if let Some(ip) = service
        .load_balancer_ip
        .as_deref()
        .filter(|ip| (wanted.internal || wanted.ipv6) && !ip.is_empty())
    {
        body["vip_address"] = json!(ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;
    use wasm_ccm_guest::types::IpFamily;

    /// Service `default/web` with `loadBalancerIP` `ip` and first IP family IPv6 or not.
    fn service(ip: &str, ipv6: bool) -> Service {
        let mut service = crate::load_balancer::settings::tests::service(&[]);
        service.load_balancer_ip = Some(ip.into());
        service.ip_families = vec![if ipv6 { IpFamily::Ipv6 } else { IpFamily::Ipv4 }];
        service
    }

    /// What the load balancer's creation says of its VIP.
    fn vip_of(wanted: &Wanted, service: &Service) -> Value {
        let mut body = json!({});
        vip(&mut body, wanted, service);
        body
    }

    /// occm's createOctaviaLoadBalancer: `loadBalancerIP` is the VIP address when the
    /// Service is internal or IPv6; an external IPv4 Service's is its floating IP.
    #[test]
    fn load_balancer_ip_is_the_vip_when_internal_or_ipv6_as_occm() {
        let wanted = |internal, ipv6| Wanted {
            vip_subnet: "s1".into(),
            internal,
            ipv6,
            ..Wanted::default()
        };
        let v6 = vip_of(&wanted(false, true), &service("fd00:10::5", true));
        assert_eq!(
            v6,
            json!({"vip_subnet_id": "s1", "vip_address": "fd00:10::5"})
        );
        let internal = vip_of(&wanted(true, false), &service("10.0.5.5", false));
        assert_eq!(internal["vip_address"], "10.0.5.5");
        let external = vip_of(&wanted(false, false), &service("203.0.113.9", false));
        assert_eq!(external, json!({"vip_subnet_id": "s1"}));
    }

    /// occm sends the VIP subnet and network both when both are named; the port alone
    /// when `port-id` names one.
    #[test]
    fn the_vip_subnet_and_network_are_sent_as_occm_sends_them() {
        let both = Wanted {
            vip_subnet: "s1".into(),
            vip_network: "n1".into(),
            ..Wanted::default()
        };
        let plain = service("", false);
        assert_eq!(
            vip_of(&both, &plain),
            json!({"vip_subnet_id": "s1", "vip_network_id": "n1"})
        );
        let port = Wanted {
            vip_port: "p1".into(),
            ..both
        };
        assert_eq!(vip_of(&port, &plain), json!({"vip_port_id": "p1"}));
    }

    /// The creation an IPv6 Service's ensure sends: its `loadBalancerIP` as the VIP.
    #[test]
    fn an_ipv6_service_asks_for_its_load_balancer_ip() {
        cache::clear();
        let cloud = MockTransport::new();
        let catalog = json!({"catalog": [{"type": "load-balancer", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://octavia"}]}]});
        cloud.on(
            "GET",
            "/v3/auth/catalog",
            Response::with_json(200, &catalog),
        );
        let lb = json!({"loadbalancer": {"id": "lb-1", "provisioning_status": "ACTIVE",
            "vip_address": "fd00:10::5"}});
        cloud.on(
            "POST",
            "/v2/lbaas/loadbalancers",
            Response::with_json(201, &lb),
        );
        cloud.on(
            "GET",
            "/v2/lbaas/loadbalancers/lb-1",
            Response::with_json(200, &lb),
        );
        let _installed = cloud.install();
        let provider = OpenStack {
            config: crate::config::Config::parse("[Global]\nauth-url = https://k/v3\n").unwrap(),
        };
        let wanted = Wanted {
            name: "kube_service_kubernetes_default_web".into(),
            vip_subnet: "v6-subnet".into(),
            ipv6: true,
            ..Wanted::default()
        };
        let made = provider
            .create_load_balancer(&wanted, &service("fd00:10::5", true), "kubernetes")
            .unwrap();
        assert_eq!(made["vip_address"], "fd00:10::5");
        let post = cloud
            .requests()
            .into_iter()
            .find(|r| r.method().as_str() == "POST")
            .unwrap();
        let sent: Value = serde_json::from_slice(post.body_bytes()).unwrap();
        assert_eq!(sent["loadbalancer"]["vip_address"], "fd00:10::5");
        assert_eq!(sent["loadbalancer"]["vip_subnet_id"], "v6-subnet");
        let _ = annotations::recorded();
        let _ = events::recorded();
    }
}
