//! Neutron (network API v2.0): networks, subnets, ports (their allowed address
//! pairs), floating IPs, a router's extra routes (`add_extraroutes` /
//! `remove_extraroutes`, the `extraroute-atomic` extension) and the extension list.
//! Lists filter on any field given in the query, as Neutron does.

use std::collections::HashMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde_json::{Value, json};

use crate::state::{FloatingIp, Port};
use crate::{Shared, reply};

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/extensions", get(extensions))
        .route("/networks", get(list_networks))
        .route("/networks/{id}", get(show_network))
        .route("/subnets", get(list_subnets))
        .route("/subnets/{id}", get(show_subnet))
        .route("/ports", get(list_ports))
        .route("/ports/{id}", get(show_port).put(update_port))
        .route(
            "/floatingips",
            get(list_floating_ips).post(create_floating_ip),
        )
        .route(
            "/floatingips/{id}",
            get(show_floating_ip)
                .put(update_floating_ip)
                .delete(delete_floating_ip),
        )
        .route("/routers/{id}", get(show_router).put(update_router))
        .route("/routers/{id}/add_extraroutes", put(add_extraroutes))
        .route("/routers/{id}/remove_extraroutes", put(remove_extraroutes))
}

/// Neutron's error body.
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"NeutronError": {"type": kind, "message": message, "detail": ""}})),
    )
        .into_response()
}

fn bad_request(status: StatusCode, message: &str) -> Response {
    error(status, "HTTPBadRequest", message)
}

/// The query's filters: a field given several times matches any of its values, as
/// Neutron's (`device_id=a&device_id=b`); `fields` and paging parameters are not
/// filters.
#[derive(Default)]
struct Filters(HashMap<String, Vec<String>>);

impl Filters {
    fn parse(query: Option<String>) -> Self {
        let mut filters: HashMap<String, Vec<String>> = HashMap::new();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            if ![
                "fields",
                "limit",
                "marker",
                "sort_key",
                "sort_dir",
                "page_reverse",
            ]
            .contains(&key.as_ref())
            {
                filters
                    .entry(key.into_owned())
                    .or_default()
                    .push(value.into_owned());
            }
        }
        Self(filters)
    }

    /// Keeps the objects whose fields equal one of each filter's values (compared as
    /// text, lists by membership).
    fn apply(&self, items: Vec<Value>) -> Vec<Value> {
        items
            .into_iter()
            .filter(|item| {
                self.0.iter().all(|(key, wanted)| {
                    wanted.iter().any(|wanted| match &item[key] {
                        Value::String(s) => s == wanted,
                        Value::Bool(b) => b.to_string() == *wanted,
                        Value::Number(n) => n.to_string() == *wanted,
                        // `fixed_ips=ip_address=10.0.0.5`: a field of one of the objects.
                        Value::Array(list) => list.iter().any(|v| {
                            v.as_str() == Some(wanted)
                                || wanted
                                    .split_once('=')
                                    .is_some_and(|(k, val)| v[k].as_str() == Some(val))
                        }),
                        _ => false,
                    })
                })
            })
            .collect()
    }
}

/// `GET /extensions`: [`crate::State::network_extensions`].
async fn extensions(Extract(shared): Extract<Shared>) -> Response {
    let list: Vec<Value> = shared.with(|s| {
        s.network_extensions
            .iter()
            .map(|alias| json!({"alias": alias, "name": alias, "description": "", "links": [], "updated": "2026-01-01T00:00:00-00:00"}))
            .collect()
    });
    reply(StatusCode::OK, json!({"extensions": list}))
}

/// Whether Neutron has the extension `alias`.
fn has_extension(s: &crate::State, alias: &str) -> bool {
    s.network_extensions.iter().any(|e| e == alias)
}

fn network_json(n: &crate::state::Network, subnets: Vec<String>) -> Value {
    json!({"id": n.id, "name": n.name, "router:external": n.external, "status": "ACTIVE",
           "admin_state_up": true, "subnets": subnets, "tenant_id": "project", "project_id": "project"})
}

async fn list_networks(Extract(shared): Extract<Shared>, RawQuery(query): RawQuery) -> Response {
    shared.with(|s| {
        let all = s
            .networks
            .values()
            .map(|n| {
                network_json(
                    n,
                    s.subnets
                        .values()
                        .filter(|x| x.network_id == n.id)
                        .map(|x| x.id.clone())
                        .collect(),
                )
            })
            .collect();
        reply(
            StatusCode::OK,
            json!({"networks": Filters::parse(query).apply(all)}),
        )
    })
}

async fn show_network(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.networks.get(&id) {
        Some(n) => reply(
            StatusCode::OK,
            json!({"network": network_json(n, s.subnets.values().filter(|x| x.network_id == n.id).map(|x| x.id.clone()).collect())}),
        ),
        None => error(StatusCode::NOT_FOUND, "NetworkNotFound", &format!("Network {id} could not be found.")),
    })
}

fn subnet_json(x: &crate::state::Subnet) -> Value {
    json!({"id": x.id, "network_id": x.network_id, "cidr": x.cidr, "ip_version": x.ip_version,
           "name": x.name, "tags": x.tags, "tenant_id": "project", "project_id": "project"})
}

/// Neutron's tag filters (the `tag-ext` API): `tags` (all of them), `tags-any`,
/// `not-tags` (not all of them), `not-tags-any` (none of them); comma-separated.
const TAG_FILTERS: [&str; 4] = ["tags", "tags-any", "not-tags", "not-tags-any"];

fn tags_match(filter: &str, wanted: &str, tags: &[String]) -> bool {
    let wanted: Vec<&str> = wanted.split(',').filter(|t| !t.is_empty()).collect();
    let has = |t: &&str| tags.iter().any(|x| x == t);
    match filter {
        "tags" => wanted.iter().all(has),
        "tags-any" => wanted.iter().any(has),
        "not-tags" => !wanted.iter().all(has),
        _ => !wanted.iter().any(has),
    }
}

async fn list_subnets(Extract(shared): Extract<Shared>, RawQuery(query): RawQuery) -> Response {
    shared.with(|s| {
        let mut filters = Filters::parse(query);
        let tag_filters: Vec<(String, Vec<String>)> = TAG_FILTERS
            .iter()
            .filter_map(|f| filters.0.remove_entry(*f))
            .collect();
        let all = s
            .subnets
            .values()
            .filter(|x| {
                tag_filters
                    .iter()
                    .all(|(f, values)| values.iter().all(|v| tags_match(f, v, &x.tags)))
            })
            .map(subnet_json)
            .collect();
        reply(StatusCode::OK, json!({"subnets": filters.apply(all)}))
    })
}

async fn show_subnet(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.subnets.get(&id) {
        Some(x) => reply(StatusCode::OK, json!({"subnet": subnet_json(x)})),
        None => error(
            StatusCode::NOT_FOUND,
            "SubnetNotFound",
            &format!("Subnet {id} could not be found."),
        ),
    })
}

fn port_json(p: &Port) -> Value {
    json!({
        "id": p.id, "network_id": p.network_id, "device_id": p.device_id,
        "device_owner": p.device_owner, "mac_address": p.mac_address, "status": "ACTIVE",
        "admin_state_up": true, "tenant_id": "project", "project_id": "project", "name": "",
        "port_security_enabled": p.port_security_enabled,
        "fixed_ips": p.fixed_ips.iter().map(|(subnet, ip)| json!({"subnet_id": subnet, "ip_address": ip})).collect::<Vec<_>>(),
        "allowed_address_pairs": p.allowed_address_pairs.iter().map(|(ip, mac)| json!({"ip_address": ip, "mac_address": mac})).collect::<Vec<_>>(),
        "security_groups": [],
    })
}

async fn list_ports(Extract(shared): Extract<Shared>, RawQuery(query): RawQuery) -> Response {
    shared.with(|s| {
        let all = s.ports.values().map(port_json).collect();
        reply(
            StatusCode::OK,
            json!({"ports": Filters::parse(query).apply(all)}),
        )
    })
}

async fn show_port(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.ports.get(&id) {
        Some(p) => reply(StatusCode::OK, json!({"port": port_json(p)})),
        None => error(
            StatusCode::NOT_FOUND,
            "PortNotFound",
            &format!("Port {id} could not be found."),
        ),
    })
}

/// `PUT /ports/{id}`: only `allowed_address_pairs` (and `name`, ignored) may change,
/// and only with the `allowed-address-pairs` extension.
async fn update_port(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(pairs) = body["port"]["allowed_address_pairs"].as_array() else {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "Only allowed_address_pairs can be updated here",
        );
    };
    let mut parsed = Vec::new();
    for pair in pairs {
        let Some(ip) = pair["ip_address"].as_str() else {
            return bad_request(
                StatusCode::BAD_REQUEST,
                "Invalid input for allowed_address_pairs: ip_address is required",
            );
        };
        parsed.push((
            ip.to_owned(),
            pair["mac_address"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    shared.with(|s| match s.ports.get_mut(&id) {
        _ if !s.network_extensions.iter().any(|e| e == "allowed-address-pairs") => bad_request(
            StatusCode::BAD_REQUEST,
            "Unrecognized attribute(s) 'allowed_address_pairs'",
        ),
        Some(p) if !p.port_security_enabled && !parsed.is_empty() => bad_request(
            StatusCode::CONFLICT,
            &format!(
                "Port Security must be enabled in order to have allowed address pairs on a port {id}"
            ),
        ),
        Some(p) => {
            for pair in &mut parsed {
                if pair.1.is_empty() {
                    pair.1 = p.mac_address.clone();
                }
            }
            p.allowed_address_pairs = parsed;
            reply(StatusCode::OK, json!({"port": port_json(p)}))
        }
        None => error(
            StatusCode::NOT_FOUND,
            "PortNotFound",
            &format!("Port {id} could not be found."),
        ),
    })
}

fn floating_ip_json(f: &FloatingIp) -> Value {
    json!({"id": f.id, "floating_ip_address": f.floating_ip_address,
           "floating_network_id": f.floating_network_id, "port_id": f.port_id,
           "fixed_ip_address": f.fixed_ip_address, "description": f.description,
           "status": if f.port_id.is_some() { "ACTIVE" } else { "DOWN" },
           "router_id": null, "tenant_id": "project", "project_id": "project"})
}

async fn list_floating_ips(
    Extract(shared): Extract<Shared>,
    RawQuery(query): RawQuery,
) -> Response {
    shared.with(|s| {
        let all = s.floating_ips.values().map(floating_ip_json).collect();
        reply(
            StatusCode::OK,
            json!({"floatingips": Filters::parse(query).apply(all)}),
        )
    })
}

async fn show_floating_ip(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.floating_ips.get(&id) {
        Some(f) => reply(StatusCode::OK, json!({"floatingip": floating_ip_json(f)})),
        None => error(
            StatusCode::NOT_FOUND,
            "FloatingIPNotFound",
            &format!("Floating IP {id} could not be found"),
        ),
    })
}

/// `(port_id, fixed_ip_address)` for binding to `port` (its first fixed IP).
fn binding(s: &crate::State, port: &str) -> Result<(String, String), Response> {
    let Some(p) = s.ports.get(port) else {
        return Err(error(
            StatusCode::NOT_FOUND,
            "PortNotFound",
            &format!("Port {port} could not be found."),
        ));
    };
    let ip = p
        .fixed_ips
        .first()
        .map(|(_, ip)| ip.clone())
        .unwrap_or_default();
    Ok((port.to_owned(), ip))
}

async fn create_floating_ip(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let request = &body["floatingip"];
    let Some(network) = request["floating_network_id"].as_str() else {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "Invalid input for floating_network_id",
        );
    };
    shared.with(|s| {
        if !s.networks.get(network).is_some_and(|n| n.external) {
            return error(
                StatusCode::NOT_FOUND,
                "ExternalNetworkNotFound",
                &format!("External network {network} could not be found."),
            );
        }
        let bound = match request["port_id"].as_str() {
            None => None,
            Some(port) => match binding(s, port) {
                Ok(b) => Some(b),
                Err(e) => return e,
            },
        };
        let subnet = match request["subnet_id"].as_str() {
            None => s.subnet_of(network).map(|x| x.id.clone()).unwrap_or_default(),
            Some(id) => match s.subnets.get(id) {
                Some(x) if x.network_id != network => {
                    return bad_request(
                        StatusCode::BAD_REQUEST,
                        &format!("Bad floatingip request: Subnet {id} does not belong to network {network}."),
                    );
                }
                Some(x) if x.exhausted => {
                    return error(
                        StatusCode::CONFLICT,
                        "IpAddressGenerationFailure",
                        &format!("No more IP addresses available on network {network}."),
                    );
                }
                Some(x) => x.id.clone(),
                None => {
                    return error(
                        StatusCode::NOT_FOUND,
                        "SubnetNotFound",
                        &format!("Subnet {id} could not be found."),
                    );
                }
            },
        };
        let address = match request["floating_ip_address"].as_str() {
            Some(wanted)
                if s.floating_ips
                    .values()
                    .any(|f| f.floating_ip_address == wanted) =>
            {
                return error(
                    StatusCode::CONFLICT,
                    "IpAddressAlreadyAllocated",
                    &format!("IP address {wanted} already allocated"),
                );
            }
            Some(wanted) => wanted.to_owned(),
            None => s.free_ip_in(&subnet),
        };
        let id = s.id();
        let fip = FloatingIp {
            id: id.clone(),
            floating_ip_address: address,
            floating_network_id: network.to_owned(),
            port_id: bound.as_ref().map(|b| b.0.clone()),
            fixed_ip_address: bound.map(|b| b.1),
            description: request["description"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            subnet_id: subnet,
        };
        let answer = json!({"floatingip": floating_ip_json(&fip)});
        s.floating_ips.insert(id, fip);
        reply(StatusCode::CREATED, answer)
    })
}

/// `PUT /floatingips/{id}`: binds to `port_id`, or unbinds with `null`.
async fn update_floating_ip(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let body = match crate::body(&bytes, bad_request) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let request = &body["floatingip"];
    shared.with(|s| {
        let bound = match &request["port_id"] {
            Value::Null => None,
            Value::String(port) => match binding(s, port) {
                Ok(b) => Some(b),
                Err(e) => return e,
            },
            _ => return bad_request(StatusCode::BAD_REQUEST, "Invalid input for port_id"),
        };
        match s.floating_ips.get_mut(&id) {
            Some(f) => {
                f.port_id = bound.as_ref().map(|b| b.0.clone());
                f.fixed_ip_address = bound.map(|b| b.1);
                if let Some(d) = request["description"].as_str() {
                    f.description = d.to_owned();
                }
                reply(StatusCode::OK, json!({"floatingip": floating_ip_json(f)}))
            }
            None => error(
                StatusCode::NOT_FOUND,
                "FloatingIPNotFound",
                &format!("Floating IP {id} could not be found"),
            ),
        }
    })
}

async fn delete_floating_ip(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.floating_ips.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "FloatingIPNotFound",
            &format!("Floating IP {id} could not be found"),
        ),
    })
}

fn router_json(r: &crate::state::Router) -> Value {
    json!({"id": r.id, "name": r.name, "status": "ACTIVE", "admin_state_up": true,
           "tenant_id": "project", "project_id": "project", "revision_number": r.revision_number,
           "routes": r.routes.iter().map(|(d, n)| json!({"destination": d, "nexthop": n})).collect::<Vec<_>>()})
}

async fn show_router(Extract(shared): Extract<Shared>, Path(id): Path<String>) -> Response {
    shared.with(|s| match s.routers.get(&id) {
        Some(r) => reply(StatusCode::OK, json!({"router": router_json(r)})),
        None => error(
            StatusCode::NOT_FOUND,
            "RouterNotFound",
            &format!("Router {id} could not be found"),
        ),
    })
}

/// Neutron without `extraroute-atomic`: the action is not routed.
fn no_such_action() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "HTTPNotFound",
        "The resource could not be found.",
    )
}

/// `PUT /routers/{id}` with `{"router": {"routes": [...]}}`: the whole list replaced
/// (the `extraroute` extension), refused with 412 when `If-Match:
/// revision_number=N` names another revision (`revision-if-match`).
async fn update_router(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    bytes: Bytes,
) -> Response {
    let new = match routes(&bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let expected = headers
        .get("if-match")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("revision_number="))
        .map(|n| n.parse::<u64>().unwrap_or(u64::MAX));
    shared.with(|s| {
        let revision_if_match = has_extension(s, "revision-if-match");
        match s.routers.get_mut(&id) {
            None => error(
                StatusCode::NOT_FOUND,
                "RouterNotFound",
                &format!("Router {id} could not be found"),
            ),
            Some(r) if revision_if_match && expected.is_some_and(|n| n != r.revision_number) => {
                error(
                    StatusCode::PRECONDITION_FAILED,
                    "RevisionNumberConstraintFailed",
                    &format!(
                        "Constrained to {}, but current revision is {}",
                        expected.unwrap_or_default(),
                        r.revision_number
                    ),
                )
            }
            Some(r) => {
                r.routes = new;
                r.revision_number += 1;
                reply(StatusCode::OK, json!({"router": router_json(r)}))
            }
        }
    })
}

/// The `routes` of `{"router": {"routes": [...]}}`.
fn routes(bytes: &[u8]) -> Result<Vec<(String, String)>, Response> {
    let body = crate::body(bytes, bad_request)?;
    let Some(list) = body["router"]["routes"].as_array() else {
        return Err(bad_request(
            StatusCode::BAD_REQUEST,
            "Bad router request: routes is required",
        ));
    };
    list.iter()
        .map(
            |r| match (r["destination"].as_str(), r["nexthop"].as_str()) {
                (Some(d), Some(n)) => Ok((d.to_owned(), n.to_owned())),
                _ => Err(bad_request(
                    StatusCode::BAD_REQUEST,
                    "Invalid input for routes: destination and nexthop are required",
                )),
            },
        )
        .collect()
}

async fn add_extraroutes(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let add = match routes(&bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| match s.routers.get_mut(&id) {
        _ if !s
            .network_extensions
            .iter()
            .any(|e| e == "extraroute-atomic") =>
        {
            no_such_action()
        }
        Some(r) => {
            for route in add {
                if !r.routes.contains(&route) {
                    r.routes.push(route);
                }
            }
            r.revision_number += 1;
            reply(StatusCode::OK, json!({"router": router_json(r)}))
        }
        None => error(
            StatusCode::NOT_FOUND,
            "RouterNotFound",
            &format!("Router {id} could not be found"),
        ),
    })
}

async fn remove_extraroutes(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let remove = match routes(&bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| match s.routers.get_mut(&id) {
        _ if !s
            .network_extensions
            .iter()
            .any(|e| e == "extraroute-atomic") =>
        {
            no_such_action()
        }
        Some(r) => {
            r.routes.retain(|route| !remove.contains(route));
            r.revision_number += 1;
            reply(StatusCode::OK, json!({"router": router_json(r)}))
        }
        None => error(
            StatusCode::NOT_FOUND,
            "RouterNotFound",
            &format!("Router {id} could not be found"),
        ),
    })
}
