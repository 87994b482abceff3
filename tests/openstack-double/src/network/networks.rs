//! Networks and subnets (with Neutron's tag filters).

use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{Filters, error};
use crate::{Shared, reply};

fn network_json(n: &crate::state::Network, subnets: Vec<String>) -> Value {
    json!({"id": n.id, "name": n.name, "router:external": n.external, "status": "ACTIVE",
           "admin_state_up": true, "subnets": subnets, "tenant_id": "project", "project_id": "project"})
}

pub(super) async fn list_networks(
    Extract(shared): Extract<Shared>,
    RawQuery(query): RawQuery,
) -> Response {
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

pub(super) async fn show_network(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
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

pub(super) async fn list_subnets(
    Extract(shared): Extract<Shared>,
    RawQuery(query): RawQuery,
) -> Response {
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

pub(super) async fn show_subnet(
    Extract(shared): Extract<Shared>,
    Path(id): Path<String>,
) -> Response {
    shared.with(|s| match s.subnets.get(&id) {
        Some(x) => reply(StatusCode::OK, json!({"subnet": subnet_json(x)})),
        None => error(
            StatusCode::NOT_FOUND,
            "SubnetNotFound",
            &format!("Subnet {id} could not be found."),
        ),
    })
}
