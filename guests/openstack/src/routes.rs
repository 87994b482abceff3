//! `routes` with the extra routes of the Neutron router `[Route] router-id`, as occm:
//! a route is `{destination: <pod CIDR>, nexthop: <the Node's internal IP>}`, added and
//! removed atomically (`add_extraroutes` / `remove_extraroutes`, the
//! `extraroute-atomic` extension), and the Node's port allows the pod CIDR as an
//! allowed address pair (port security would drop the pods' traffic otherwise).
//! Listed routes name their target by the server whose address is the next hop; a
//! next hop no server has is a blackhole route (the route controller deletes it).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, NodeAddressType, Route};
use wasm_ccm_guest::{Routes, cache, cloud_error};

use crate::OpenStack;
use crate::api::{self, COMPUTE_MICROVERSION, Endpoints};
use crate::instances::{node_addresses, parse_provider_id};

/// How long the next-hop → server name map is kept (it is read again when a next hop
/// is missing from it, and dropped when a route is created).
const NEXT_HOPS_TTL: Duration = Duration::from_secs(60);

impl OpenStack {
    fn network_endpoint(&self) -> Result<String, CloudError> {
        api::endpoint(
            &Endpoints::get(&self.config)?.network,
            "network",
            &self.config,
        )
    }

    fn router_url(&self) -> Result<String, CloudError> {
        if self.config.router_id.is_empty() {
            return Err(cloud_error::other(
                "routes need `[Route] router-id` in the cloud config",
            ));
        }
        Ok(format!(
            "{}/routers/{}",
            self.network_endpoint()?,
            self.config.router_id
        ))
    }

    fn next_hops_key(&self) -> String {
        format!("next-hops/{}", self.config.router_id)
    }

    /// Every server's addresses → its name (and ID), from one server and one port listing.
    fn next_hops(&self, fresh: bool) -> Result<BTreeMap<String, (String, String)>, CloudError> {
        let key = self.next_hops_key();
        if !fresh && let Some(map) = cache::get_json(&key) {
            return Ok(map);
        }
        let endpoints = Endpoints::get(&self.config)?;
        let compute = api::endpoint(&endpoints.compute, "compute", &self.config)?;
        let servers = api::list(
            Request::get(&format!("{compute}/servers/detail"))
                .header("openstack-api-version", COMPUTE_MICROVERSION)
                .query("limit", "1000"),
            "servers",
            "list servers",
        )?;
        let ids: Vec<&str> = servers.iter().filter_map(|s| s["id"].as_str()).collect();
        let mut ports = self.ports_of(&ids)?;
        let mut map = BTreeMap::new();
        for server in &servers {
            let id = server["id"].as_str().unwrap_or_default();
            let own: Vec<Value> = ports.remove(id).unwrap_or_default();
            let name = server["name"].as_str().unwrap_or_default().to_owned();
            for address in node_addresses(server, &own, &self.config.networking) {
                map.insert(address.address, (name.clone(), id.to_owned()));
            }
        }
        let _ = cache::set_json(&key, &map, NEXT_HOPS_TTL);
        Ok(map)
    }

    fn router_routes(&self) -> Result<Vec<(String, String)>, CloudError> {
        let router = api::json(Request::get(&self.router_url()?), "get the router")?;
        Ok(router["router"]["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                Some((
                    r["destination"].as_str()?.to_owned(),
                    r["nexthop"].as_str()?.to_owned(),
                ))
            })
            .collect())
    }

    fn change_routes(&self, action: &str, routes: &[(String, String)]) -> Result<(), CloudError> {
        let body = json!({"router": {"routes": routes.iter()
            .map(|(d, n)| json!({"destination": d, "nexthop": n})).collect::<Vec<_>>()}});
        api::send(
            Request::put(&format!("{}/{action}", self.router_url()?)).json(&body),
            &format!("{action} on the router"),
        )?;
        Ok(())
    }

    /// Adds (or removes) `cidr` as an allowed address pair of the port of `server`
    /// holding `address`.
    fn allow_on_port(
        &self,
        server: &str,
        address: &str,
        cidr: &str,
        allow: bool,
    ) -> Result<(), CloudError> {
        let network = self.network_endpoint()?;
        let ports = api::list(
            Request::get(&format!("{network}/ports")).query("device_id", server),
            "ports",
            "list the node's ports",
        )?;
        let Some(port) = ports.iter().find(|p| {
            p["fixed_ips"]
                .as_array()
                .is_some_and(|ips| ips.iter().any(|ip| ip["ip_address"] == address))
        }) else {
            return if allow {
                Err(cloud_error::other(format!(
                    "no port of server {server} holds {address}"
                )))
            } else {
                Ok(())
            };
        };
        let mut pairs: Vec<Value> = port["allowed_address_pairs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let present = pairs.iter().any(|p| p["ip_address"] == cidr);
        match (allow, present) {
            (true, true) | (false, false) => return Ok(()),
            (true, false) => pairs.push(json!({"ip_address": cidr})),
            (false, true) => pairs.retain(|p| p["ip_address"] != cidr),
        }
        let id = port["id"].as_str().unwrap_or_default();
        api::send(
            Request::put(&format!("{network}/ports/{id}"))
                .json(&json!({"port": {"allowed_address_pairs": pairs}})),
            "update the node's port's allowed address pairs",
        )?;
        Ok(())
    }
}

/// The target's internal IP for `destination` (IPv6 for an IPv6 CIDR).
fn next_hop(route: &Route) -> Option<String> {
    let v6 = route.destination_cidr.contains(':');
    route
        .target_node_addresses
        .iter()
        .filter(|a| a.address_type == NodeAddressType::InternalIp)
        .map(|a| a.address.clone())
        .find(|a| a.contains(':') == v6)
}

impl Routes for OpenStack {
    fn list_routes(&self, _cluster_name: String) -> Result<Vec<Route>, CloudError> {
        let routes = self.router_routes()?;
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        let mut hops = self.next_hops(false)?;
        if routes.iter().any(|(_, hop)| !hops.contains_key(hop)) {
            hops = self.next_hops(true)?;
        }
        Ok(routes
            .into_iter()
            .map(|(destination, hop)| {
                let target = hops.get(&hop);
                Route {
                    name: destination.clone(),
                    target_node: target.map_or_else(|| hop.clone(), |(name, _)| name.clone()),
                    target_node_addresses: Vec::new(),
                    destination_cidr: destination,
                    blackhole: target.is_none(),
                    enable_node_addresses: false,
                    target_node_provider_id: target.map(|(_, id)| format!("openstack:///{id}")),
                }
            })
            .collect())
    }

    fn create_route(
        &self,
        _cluster_name: String,
        _name_hint: String,
        route: Route,
    ) -> Result<(), CloudError> {
        let hop = next_hop(&route).ok_or_else(|| {
            cloud_error::other(format!(
                "node {} has no internal address for {}",
                route.target_node, route.destination_cidr
            ))
        })?;
        let server = match route.target_node_provider_id.as_deref() {
            Some(p) => parse_provider_id(p)?.id,
            None => self
                .next_hops(true)?
                .get(&hop)
                .map(|(_, id)| id.clone())
                .ok_or_else(|| cloud_error::other(format!("no server has address {hop}")))?,
        };
        self.allow_on_port(&server, &hop, &route.destination_cidr, true)?;
        self.change_routes("add_extraroutes", &[(route.destination_cidr.clone(), hop)])?;
        cache::delete(&self.next_hops_key());
        Ok(())
    }

    fn delete_route(&self, _cluster_name: String, route: Route) -> Result<(), CloudError> {
        let existing: Vec<(String, String)> = self
            .router_routes()?
            .into_iter()
            .filter(|(destination, _)| *destination == route.destination_cidr)
            .collect();
        if existing.is_empty() {
            return Ok(());
        }
        self.change_routes("remove_extraroutes", &existing)?;
        let hops = self.next_hops(false)?;
        for (destination, hop) in &existing {
            if let Some((_, server)) = hops.get(hop) {
                self.allow_on_port(server, hop, destination, false)?;
            }
        }
        Ok(())
    }
}
