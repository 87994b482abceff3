//! The floating IP of an external load balancer: bound to the VIP port (the Service's
//! `loadBalancerIP` when it names one), and released or unbound on deletion or when
//! the Service becomes internal.
//!
//! As occm, only floating IPs this controller made (occm's description, [`DESCRIPTION`])
//! are ever deleted: one made by hand, or the Service's `loadBalancerIP`, or any with
//! `keep-floatingip`, is only unbound.

use serde_json::{Value, json};
use wasm_ccm_guest::cloud_error;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, Service};

use super::floating_subnet::FloatingSubnet;
use super::settings::{PREFIX, Wanted, boolean};
use crate::OpenStack;
use crate::api;

/// The start of the description occm (and this provider) gives the floating IPs it
/// makes: `Floating IP for Kubernetes external service <ns>/<name> from cluster <c>`.
pub(super) const DESCRIPTION: &str = "Floating IP for Kubernetes external service";

impl OpenStack {
    /// The address of the floating IP bound to `lb`'s VIP port, if any.
    pub(super) fn bound_floating_ip(&self, lb: &Value) -> Result<Option<String>, CloudError> {
        let neutron = self.neutron()?;
        let port = lb["vip_port_id"].as_str().unwrap_or_default();
        let bound = api::list(
            Request::get(&format!("{neutron}/floatingips")).query("port_id", port),
            "floatingips",
            "find the load balancer's floating IP",
        )?;
        Ok(bound
            .first()
            .and_then(|f| f["floating_ip_address"].as_str())
            .map(str::to_owned))
    }

    /// Releases the floating IPs bound to `lb`'s VIP port: deleted when this
    /// controller made them and the Service does not keep them, else unbound.
    pub(super) fn release_floating_ips(
        &self,
        lb: &Value,
        service: &Service,
    ) -> Result<(), CloudError> {
        let neutron = self.neutron()?;
        let port = lb["vip_port_id"].as_str().unwrap_or_default();
        if port.is_empty() {
            return Ok(());
        }
        let key = format!("{PREFIX}keep-floatingip");
        let keep = boolean(service, &key).unwrap_or(false);
        for fip in api::list(
            Request::get(&format!("{neutron}/floatingips")).query("port_id", port),
            "floatingips",
            "find the load balancer's floating IP",
        )? {
            let id = fip["id"].as_str().unwrap_or_default();
            let named = service.load_balancer_ip.as_deref() == fip["floating_ip_address"].as_str();
            let made_here = fip["description"]
                .as_str()
                .is_some_and(|d| d.starts_with(DESCRIPTION));
            if keep || named || !made_here {
                api::send(
                    Request::put(&format!("{neutron}/floatingips/{id}"))
                        .json(&json!({"floatingip": {"port_id": null}})),
                    "unbind the floating IP",
                )?;
            } else {
                api::send(
                    Request::delete(&format!("{neutron}/floatingips/{id}")),
                    "release the floating IP",
                )?;
            }
        }
        Ok(())
    }

    /// The floating IP bound to the VIP port (bound now if missing): its address.
    pub(super) fn ensure_floating_ip(
        &self,
        lb: &Value,
        wanted: &Wanted,
        service: &Service,
        cluster: &str,
    ) -> Result<String, CloudError> {
        if let Some(address) = self.bound_floating_ip(lb)? {
            return Ok(address);
        }
        let neutron = self.neutron()?;
        let port = lb["vip_port_id"].as_str().unwrap_or_default();
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
        let body = json!({"floating_network_id": wanted.floating_network, "port_id": port,
            "description": format!("{DESCRIPTION} {}/{} from cluster {cluster}",
                service.metadata.namespace, service.metadata.name)});
        let asked = service
            .load_balancer_ip
            .as_deref()
            .filter(|a| !a.is_empty());
        let create = |subnet: &str| {
            let mut body = body.clone();
            if !subnet.is_empty() {
                body["subnet_id"] = json!(subnet);
            }
            if let Some(address) = asked {
                body["floating_ip_address"] = json!(address);
            }
            api::json(
                Request::post(&format!("{neutron}/floatingips")).json(&json!({"floatingip": body})),
                "create a floating IP",
            )
        };
        let spec = &wanted.floating_subnet;
        let created = if asked.is_none() && spec.matches_by_pattern() {
            // occm's getOrCreateFloatingIP: each matching subnet in turn.
            let subnets = self.floating_subnets(&wanted.floating_network, spec)?;
            if subnets.is_empty() {
                return Err(cloud_error::other(format!(
                    "no subnet matching {spec} found for network {}",
                    wanted.floating_network
                )));
            }
            let mut created = None;
            let mut last = String::new();
            for subnet in &subnets {
                match create(subnet) {
                    Ok(answer) => {
                        created = Some(answer);
                        break;
                    }
                    // Throttled: called again later, not another subnet.
                    Err(e @ CloudError::RetryAfter(_)) => return Err(e),
                    Err(CloudError::Other(e)) => last = e,
                    Err(e) => last = format!("{e:?}"),
                }
            }
            created.ok_or_else(|| {
                cloud_error::other(format!(
                    "no free subnet matching {spec} found for network {} (last error: {last})",
                    wanted.floating_network
                ))
            })?
        } else {
            create(&spec.id)?
        };
        Ok(created["floatingip"]["floating_ip_address"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// The IDs of the floating network's subnets `spec` matches, in Neutron's order
    /// (occm's `listSubnetsForNetwork`: tags filtered by Neutron, names here).
    fn floating_subnets(
        &self,
        network: &str,
        spec: &FloatingSubnet,
    ) -> Result<Vec<String>, CloudError> {
        let mut request =
            Request::get(&format!("{}/subnets", self.neutron()?)).query("network_id", network);
        if let Some((key, tags)) = spec.tag_query() {
            request = request.query(key, &tags);
        }
        let names = spec.name_matcher().map_err(cloud_error::other)?;
        let subnets = api::list(request, "subnets", "list the floating network's subnets")?;
        Ok(subnets
            .iter()
            .filter(|s| {
                names
                    .as_ref()
                    .is_none_or(|m| m.matches(s["name"].as_str().unwrap_or_default()))
            })
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect())
    }
}
