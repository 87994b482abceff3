//! What occm finds when the cloud config names no network: the VIP subnet is the
//! subnet of a Node's address (occm's `getSubnetIDForLB`), the floating network the
//! first external network with an IPv4 subnet (occm's `GetFloatingNetworkID`); without
//! one, the load balancer is internal (Warning `LoadBalancerForcedInternal`).

use std::time::Duration;

use serde_json::Value;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, Node, Service};
use wasm_ccm_guest::{cache, cloud_error, events};

use super::listeners::member_address;
use super::settings::Wanted;
use crate::OpenStack;
use crate::api;
use crate::instances::parse_provider_id;

/// How long the floating network found is kept in the shared cache.
const FOUND_TTL: Duration = Duration::from_secs(600);

fn refused(service: &Service, message: &str) -> CloudError {
    let _ = events::warning("UnsupportedLoadBalancerSetting", message, None);
    cloud_error::other(format!(
        "service {}/{}: {message}",
        service.metadata.namespace, service.metadata.name
    ))
}

impl OpenStack {
    /// Fills in the VIP subnet and the floating network where nothing names them.
    pub(super) fn autodetect(
        &self,
        wanted: &mut Wanted,
        service: &Service,
        nodes: &[Node],
    ) -> Result<(), CloudError> {
        // Without Nodes only an update comes here (an ensure is refused first, as occm's
        // `checkService`): its load balancer has its VIP, and with no member none needs a
        // subnet (occm's `checkServiceUpdate` looks a Node's subnet up only with Nodes).
        if wanted.vip_subnet.is_empty() && wanted.vip_network.is_empty() && !nodes.is_empty() {
            let subnet = match nodes.first() {
                Some(node) => self.subnet_of_node(node, wanted.ipv6)?,
                None => None,
            };
            let Some(subnet) = subnet else {
                return Err(refused(
                    service,
                    "no VIP subnet: set [LoadBalancer] subnet-id (or network-id), or the \
                     Service's loadbalancer.openstack.org/subnet-id annotation (none found from \
                     the Nodes' ports)",
                ));
            };
            if wanted.member_subnet.is_empty() {
                wanted.member_subnet = subnet.clone();
            }
            wanted.vip_subnet = subnet;
        }
        if !wanted.internal && wanted.floating_network.is_empty() {
            match self.external_network()? {
                Some(network) => wanted.floating_network = network,
                None => {
                    let _ = events::warning(
                        "LoadBalancerForcedInternal",
                        "Floating network configuration not provided and no external network \
                         found, forcing an internal load balancer",
                        None,
                    );
                    wanted.internal = true;
                }
            }
        }
        Ok(())
    }

    /// The subnet of `node`'s member address, from its server's ports.
    fn subnet_of_node(&self, node: &Node, ipv6: bool) -> Result<Option<String>, CloudError> {
        let Some(address) = member_address(node, ipv6) else {
            return Ok(None);
        };
        let Some(provider_id) = node.provider_id.as_deref().filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let server = parse_provider_id(provider_id)?.id;
        let ports = self.ports_of(&[server.as_str()])?;
        Ok(ports
            .values()
            .flatten()
            .flat_map(|p| p["fixed_ips"].as_array().cloned().unwrap_or_default())
            .find(|ip| ip["ip_address"] == address)
            .and_then(|ip| ip["subnet_id"].as_str().map(str::to_owned)))
    }

    /// The first external network with an IPv4 subnet (kept in the shared cache).
    fn external_network(&self) -> Result<Option<String>, CloudError> {
        let neutron = self.neutron()?;
        let key = format!("external-network/{neutron}");
        if let Some(found) = cache::get_json::<String>(&key) {
            return Ok(Some(found));
        }
        let networks = api::list(
            Request::get(&format!("{neutron}/networks")).query("router:external", "true"),
            "networks",
            "list external networks",
        )?;
        for network in networks.iter().filter(|n| n["router:external"] == true) {
            let id = network["id"].as_str().unwrap_or_default();
            let subnets = api::list(
                Request::get(&format!("{neutron}/subnets")).query("network_id", id),
                "subnets",
                "list the external network's subnets",
            )?;
            if subnets.iter().any(|s: &Value| s["ip_version"] == 4) {
                let _ = cache::set_json(&key, &id.to_owned(), FOUND_TTL);
                return Ok(Some(id.to_owned()));
            }
        }
        Ok(None)
    }
}
