//! Neutron (network API v2.0): networks, subnets, ports (their allowed address
//! pairs and security groups, a trunk parent's `trunk_details`), security groups and
//! their rules, floating IPs, a router's extra routes (`add_extraroutes` /
//! `remove_extraroutes`, the `extraroute-atomic` extension) and the extension list.
//! Lists filter on any field given in the query, as Neutron does.
//! This module holds the routes, the error bodies, the query filters and the
//! extension list; each kind of resource is in a module below.

mod floating_ips;
mod networks;
mod ports;
mod routers;
mod security_groups;

use std::collections::HashMap;

use axum::Router;
use axum::extract::State as Extract;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, put};
use serde_json::{Value, json};

use crate::{Shared, reply};
use floating_ips::{
    create_floating_ip, delete_floating_ip, list_floating_ips, show_floating_ip, update_floating_ip,
};
use networks::{list_networks, list_subnets, show_network, show_subnet};
use ports::{delete_port_tag, list_ports, show_port, update_port};
use routers::{add_extraroutes, remove_extraroutes, show_router, update_router};
use security_groups::{
    create_security_group, create_security_group_rule, delete_security_group,
    delete_security_group_rule, list_security_group_rules, list_security_groups,
    show_security_group, show_security_group_rule,
};

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/extensions", get(extensions))
        .route("/networks", get(list_networks))
        .route("/networks/{id}", get(show_network))
        .route("/subnets", get(list_subnets))
        .route("/subnets/{id}", get(show_subnet))
        .route("/ports", get(list_ports))
        .route("/ports/{id}", get(show_port).put(update_port))
        .route("/ports/{id}/tags/{tag}", delete(delete_port_tag))
        .route(
            "/security-groups",
            get(list_security_groups).post(create_security_group),
        )
        .route(
            "/security-groups/{id}",
            get(show_security_group).delete(delete_security_group),
        )
        .route(
            "/security-group-rules",
            get(list_security_group_rules).post(create_security_group_rule),
        )
        .route(
            "/security-group-rules/{id}",
            get(show_security_group_rule).delete(delete_security_group_rule),
        )
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
