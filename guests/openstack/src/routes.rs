//! `routes` with the extra routes of the Neutron router `[Route] router-id`, as occm:
//! a route is `{destination: <pod CIDR>, nexthop: <the Node's internal IP>}`, added and
//! removed atomically (`add_extraroutes` / `remove_extraroutes`, the
//! `extraroute-atomic` extension), and the Node's port allows the pod CIDR as an
//! allowed address pair (port security would drop the pods' traffic otherwise).
//! As occm's `ListRoutes`, listed routes name their target by the next hop only: the
//! host finds the Node holding that address (a next hop no Node holds is a blackhole
//! route, which the route controller deletes), so listing costs one request whatever
//! the project's size. The allowed address pair is added before the route and removed
//! before it (occm's `CreateRoute` and `DeleteRoute` do both after it, and undo the route
//! when the pair fails): a call cut between the two (a lost answer, or the host
//! refusing a request the deadline leaves no time for) leaves what the next call finds
//! again, never a listed route without its pair, which the route controller would not
//! create again, nor a pair no listed route leads back to. The pair is skipped on a
//! port without port security. A next hop on a trunk subport (occm's `nodeAddresses`
//! reads those) is found among the subports of the server's trunks, as occm's
//! `getPortByIP` finds it by address.
//!
//! Neutron's extensions decide how, as occm's `NewRoutes`: without `extraroute-atomic`
//! the router's whole route list is read and written back (occm does it under a lock;
//! here with `If-Match: revision_number`, read again when another change came
//! between); without `allowed-address-pairs` the ports are left alone; without
//! `extraroute` either, routes are not supported. The extensions are read once and
//! kept in the shared cache.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, NodeAddress, NodeAddressType, Route};
use wasm_ccm_guest::{Routes, cache, cloud_error};

use crate::OpenStack;
use crate::api::{self, Endpoints};
use crate::instances::{parse_provider_id, subport_ids};

/// How long Neutron's extensions are kept in the shared cache.
const EXTENSIONS_TTL: Duration = Duration::from_secs(3600);

/// How many times a whole-router update is tried when other changes keep coming
/// between its read and its write.
const ROUTER_UPDATE_TRIES: usize = 5;

/// A router's `revision_number` (when shown) and its `(destination, nexthop)` routes.
type RouterRoutes = (Option<u64>, Vec<(String, String)>);

/// What Neutron's extensions allow for routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct RouteExtensions {
    /// `extraroute-atomic`: `add_extraroutes` / `remove_extraroutes`.
    atomic: bool,
    /// `extraroute` (or the atomic one): routes at all.
    routes: bool,
    /// `allowed-address-pairs`.
    address_pairs: bool,
}

impl RouteExtensions {
    fn from_aliases(aliases: &[&str]) -> Self {
        let has = |a: &str| aliases.contains(&a);
        RouteExtensions {
            atomic: has("extraroute-atomic"),
            routes: has("extraroute") || has("extraroute-atomic"),
            address_pairs: has("allowed-address-pairs"),
        }
    }
}

impl OpenStack {
    /// Neutron's extensions (the shared cache, else `GET /extensions`); when they
    /// cannot be read, all of them are assumed (and the requests answer for it).
    fn route_extensions(&self) -> Result<RouteExtensions, CloudError> {
        let network = self.network_endpoint()?;
        let key = format!("neutron-extensions/{network}");
        if let Some(found) = cache::get_json::<RouteExtensions>(&key) {
            return Ok(found);
        }
        let found = match api::json(
            Request::get(&format!("{network}/extensions")),
            "list Neutron's extensions",
        ) {
            Ok(list) => {
                let aliases: Vec<&str> = list["extensions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["alias"].as_str())
                    .collect();
                RouteExtensions::from_aliases(&aliases)
            }
            // Throttled, or not sent for the call's deadline: read again in the next
            // call rather than assumed for an hour.
            Err(e @ CloudError::RetryAfter(_)) => return Err(e),
            Err(e) => {
                wasm_ccm_guest::log::warn(
                    "Neutron's extensions could not be read (is `GET **/v2.0/extensions` in \
                     the policy's allowedActions?); extraroute-atomic and \
                     allowed-address-pairs are assumed",
                    &[("error", &format!("{e:?}"))],
                );
                RouteExtensions::from_aliases(&["extraroute-atomic", "allowed-address-pairs"])
            }
        };
        let _ = cache::set_json(&key, &found, EXTENSIONS_TTL);
        if !found.routes {
            return Err(cloud_error::other(
                "Neutron has neither the extraroute nor the extraroute-atomic extension: \
                 routes are not supported on this cloud",
            ));
        }
        Ok(found)
    }

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

    fn router_routes(&self) -> Result<Vec<(String, String)>, CloudError> {
        Ok(self.router()?.1)
    }

    /// The router's revision (when Neutron shows it) and routes.
    fn router(&self) -> Result<RouterRoutes, CloudError> {
        let router = api::json(Request::get(&self.router_url()?), "get the router")?;
        let routes = router["router"]["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                Some((
                    r["destination"].as_str()?.to_owned(),
                    r["nexthop"].as_str()?.to_owned(),
                ))
            })
            .collect();
        Ok((router["router"]["revision_number"].as_u64(), routes))
    }

    /// Adds (`add_extraroutes`) or removes (`remove_extraroutes`) `routes`: atomically
    /// with `extraroute-atomic`, else by writing the router's whole list back.
    fn change_routes(&self, action: &str, routes: &[(String, String)]) -> Result<(), CloudError> {
        let body = |routes: &[(String, String)]| {
            json!({"router": {"routes": routes.iter()
                .map(|(d, n)| json!({"destination": d, "nexthop": n})).collect::<Vec<_>>()}})
        };
        if self.route_extensions()?.atomic {
            api::send(
                Request::put(&format!("{}/{action}", self.router_url()?)).json(&body(routes)),
                &format!("{action} on the router"),
            )?;
            return Ok(());
        }
        let adding = action == "add_extraroutes";
        for _ in 0..ROUTER_UPDATE_TRIES {
            let (revision, mut list) = self.router()?;
            let before = list.len();
            if adding {
                for route in routes {
                    if !list.contains(route) {
                        list.push(route.clone());
                    }
                }
            } else {
                list.retain(|route| !routes.contains(route));
            }
            if list.len() == before {
                return Ok(());
            }
            let mut request = Request::put(&self.router_url()?).json(&body(&list));
            if let Some(revision) = revision {
                request = request.header("if-match", &format!("revision_number={revision}"));
            }
            let response = request.header("accept", "application/json").send()?;
            if response.status == 412 {
                // Another change came between the read and the write: read again.
                continue;
            }
            cloud_error::check(response, "update the router's routes")?;
            return Ok(());
        }
        Err(cloud_error::retry_after(
            1_000,
            format!("the router changed under each of {ROUTER_UPDATE_TRIES} updates of its routes"),
        ))
    }

    /// Adds (or removes) `cidr` as an allowed address pair of the port (of `server`,
    /// when known) holding `address`; nothing on a port without port security (occm
    /// skips it there).
    fn allow_on_port(
        &self,
        server: Option<&str>,
        address: &str,
        cidr: &str,
        allow: bool,
    ) -> Result<(), CloudError> {
        if !self.route_extensions()?.address_pairs {
            // occm: "Route created (skipping the allowed_address_pairs update)".
            return Ok(());
        }
        let network = self.network_endpoint()?;
        // The server's own ports when known (another network may reuse the address).
        let request = match server {
            Some(server) => Request::get(&format!("{network}/ports")).query("device_id", server),
            None => Request::get(&format!("{network}/ports"))
                .query("fixed_ips", &format!("ip_address={address}")),
        };
        let mut ports = api::list(request, "ports", "find the node's port")?;
        let holds = |p: &Value| {
            p["fixed_ips"]
                .as_array()
                .is_some_and(|ips| ips.iter().any(|ip| ip["ip_address"] == address))
        };
        if server.is_some() && !ports.iter().any(holds) {
            // An address of a trunk subport (its device is the trunk, not the server).
            let subports = self.ports_by_id(&subport_ids(&ports))?;
            ports = subports;
        }
        let Some(port) = ports.iter().find(|p| holds(p)) else {
            return if allow {
                Err(cloud_error::other(format!("no port holds {address}")))
            } else {
                Ok(())
            };
        };
        if port["port_security_enabled"] == false {
            return Ok(());
        }
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

/// The server the route's target Node is, when its provider ID is known.
fn server_of(route: &Route) -> Result<Option<String>, CloudError> {
    route
        .target_node_provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|p| parse_provider_id(p).map(|r| r.id))
        .transpose()
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
        Ok(self
            .router_routes()?
            .into_iter()
            .map(|(destination, hop)| Route {
                name: destination.clone(),
                // The host names the Node holding the next hop (occm: its Node informer).
                target_node: String::new(),
                target_node_addresses: vec![NodeAddress {
                    address_type: NodeAddressType::InternalIp,
                    address: hop,
                }],
                destination_cidr: destination,
                blackhole: false,
                enable_node_addresses: false,
                target_node_provider_id: None,
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
        // The pair first (occm adds it after the route): a route listed without its pair
        // would never be created again. A pair left by a call cut before the route is
        // found present by the next one.
        let server = server_of(&route)?;
        self.allow_on_port(server.as_deref(), &hop, &route.destination_cidr, true)?;
        self.change_routes("add_extraroutes", &[(route.destination_cidr, hop)])
    }

    fn delete_route(&self, _cluster_name: String, route: Route) -> Result<(), CloudError> {
        // occm's DeleteRoute: the route to this next hop (every route to the
        // destination when the next hop is not given).
        let hop = route
            .target_node_addresses
            .iter()
            .find(|a| a.address_type == NodeAddressType::InternalIp)
            .map(|a| a.address.clone());
        let existing: Vec<(String, String)> = self
            .router_routes()?
            .into_iter()
            .filter(|(destination, next)| {
                *destination == route.destination_cidr && hop.as_ref().is_none_or(|h| h == next)
            })
            .collect();
        if existing.is_empty() {
            return Ok(());
        }
        // The pairs first (occm removes them after the route): a call cut before the
        // route goes leaves it listed, so the route controller deletes it again.
        let server = server_of(&route)?;
        for (destination, hop) in &existing {
            self.allow_on_port(server.as_deref(), hop, destination, false)?;
        }
        self.change_routes("remove_extraroutes", &existing)
    }
}

#[cfg(test)]
mod tests {
    use wasm_ccm_guest::http::{Error, ErrorKind, Response};
    use wasm_ccm_guest::testing::MockTransport;

    use super::*;

    #[test]
    fn extensions_decide_as_occm() {
        let all = RouteExtensions::from_aliases(&["extraroute-atomic", "allowed-address-pairs"]);
        assert!(all.atomic && all.routes && all.address_pairs);
        let classic = RouteExtensions::from_aliases(&["extraroute"]);
        assert!(!classic.atomic && classic.routes && !classic.address_pairs);
        assert!(!RouteExtensions::from_aliases(&["router"]).routes);
    }

    /// The router's, the add and the remove paths, and the Node's port's.
    const ROUTER: &str = "/v2.0/routers/r1";
    const ADD: &str = "/v2.0/routers/r1/add_extraroutes";
    const REMOVE: &str = "/v2.0/routers/r1/remove_extraroutes";
    const PORT: &str = "/v2.0/ports/p1";

    /// A provider with router `r1`; `cloud` answers the catalog (Neutron at
    /// `http://neutron`) and Neutron's extensions (atomic routes, address pairs).
    fn routed(cloud: &MockTransport) -> OpenStack {
        cache::clear();
        let catalog = json!({"catalog": [{"type": "network", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://neutron"}]}]});
        cloud.on(
            "GET",
            "/v3/auth/catalog",
            Response::with_json(200, &catalog),
        );
        let extensions = json!({"extensions": [
            {"alias": "extraroute-atomic"}, {"alias": "allowed-address-pairs"}]});
        cloud.on(
            "GET",
            "/v2.0/extensions",
            Response::with_json(200, &extensions),
        );
        let text = "[Global]\nauth-url = https://k/v3\n[Route]\nrouter-id = r1\n";
        OpenStack {
            config: crate::config::Config::parse(text).unwrap(),
        }
    }

    /// Server `srv-1`'s port `p1` holding 10.0.0.11, with `pairs`.
    fn ports(pairs: &[&str]) -> Response {
        let pairs: Vec<Value> = pairs.iter().map(|p| json!({"ip_address": p})).collect();
        Response::with_json(
            200,
            &json!({"ports": [{"id": "p1", "device_id": "srv-1",
                "fixed_ips": [{"ip_address": "10.0.0.11"}], "allowed_address_pairs": pairs}]}),
        )
    }

    /// Node `node-a` (server `srv-1`, 10.0.0.11) and its pod CIDR 10.244.1.0/24.
    fn route() -> Route {
        Route {
            name: String::new(),
            target_node: "node-a".into(),
            target_node_addresses: vec![NodeAddress {
                address_type: NodeAddressType::InternalIp,
                address: "10.0.0.11".into(),
            }],
            destination_cidr: "10.244.1.0/24".into(),
            blackhole: false,
            enable_node_addresses: false,
            target_node_provider_id: Some("openstack:///srv-1".into()),
        }
    }

    /// The paths of the PUTs sent, in order.
    fn puts(cloud: &MockTransport) -> Vec<String> {
        cloud
            .requests()
            .iter()
            .filter(|r| r.method().as_str() == "PUT")
            .map(|r| r.url().unwrap().path_and_query)
            .collect()
    }

    /// A create cut after its first change (the route's answer lost) leaves the pair,
    /// never a route without one (which the route controller, seeing the route listed,
    /// would not create again); the next call finds the pair and adds the route.
    #[test]
    fn a_create_cut_between_pair_and_route_is_resumed() {
        let cloud = MockTransport::new();
        let provider = routed(&cloud);
        cloud.on_sequence(
            "GET",
            "/v2.0/ports",
            vec![Ok(ports(&[])), Ok(ports(&["10.244.1.0/24"]))],
        );
        cloud.on("PUT", PORT, Response::new(200));
        cloud.on_sequence(
            "PUT",
            ADD,
            vec![
                Err(Error::new(ErrorKind::Timeout, "slow")),
                Ok(Response::new(200)),
            ],
        );
        let _installed = cloud.install();
        let cut = provider.create_route("k".into(), String::new(), route());
        assert!(cut.is_err(), "{cut:?}");
        // The pair first; the route is not undone (it may have been made).
        assert_eq!(puts(&cloud), [PORT, ADD]);
        provider
            .create_route("k".into(), String::new(), route())
            .unwrap();
        assert_eq!(puts(&cloud), [PORT, ADD, ADD]);
        let added: Value =
            serde_json::from_slice(cloud.requests().last().unwrap().body_bytes()).unwrap();
        assert_eq!(
            added,
            json!({"router": {"routes": [
                {"destination": "10.244.1.0/24", "nexthop": "10.0.0.11"}]}})
        );
    }

    /// A throttled read of Neutron's extensions is read again in the next call, not
    /// replaced by the assumption kept for an hour.
    #[test]
    fn throttled_extensions_are_read_again() {
        let cloud = MockTransport::new();
        let provider = routed(&cloud);
        let classic = json!({"extensions": [{"alias": "extraroute"}]});
        cloud.on_sequence(
            "GET",
            "/v2.0/extensions",
            vec![
                Ok(Response::new(503)),
                Ok(Response::with_json(200, &classic)),
            ],
        );
        let _installed = cloud.install();
        let throttled = provider.route_extensions();
        assert!(
            matches!(throttled, Err(CloudError::RetryAfter(_))),
            "{throttled:?}"
        );
        let read = provider.route_extensions().unwrap();
        assert!(!read.atomic && read.routes && !read.address_pairs);
    }

    /// A delete removes the pair before the route: cut between the two, the route is
    /// still listed, and the next call (the pair gone) removes only the route.
    #[test]
    fn a_delete_cut_between_pair_and_route_is_resumed() {
        let cloud = MockTransport::new();
        let provider = routed(&cloud);
        let router = json!({"router": {"id": "r1", "routes": [
            {"destination": "10.244.1.0/24", "nexthop": "10.0.0.11"}]}});
        cloud.on("GET", ROUTER, Response::with_json(200, &router));
        cloud.on_sequence(
            "GET",
            "/v2.0/ports",
            vec![Ok(ports(&["10.244.1.0/24"])), Ok(ports(&[]))],
        );
        cloud.on("PUT", PORT, Response::new(200));
        cloud.on_sequence(
            "PUT",
            REMOVE,
            vec![
                Err(Error::new(ErrorKind::Timeout, "slow")),
                Ok(Response::new(200)),
            ],
        );
        let _installed = cloud.install();
        assert!(provider.delete_route("k".into(), route()).is_err());
        assert_eq!(puts(&cloud), [PORT, REMOVE]);
        provider.delete_route("k".into(), route()).unwrap();
        assert_eq!(puts(&cloud), [PORT, REMOVE, REMOVE]);
    }
}
