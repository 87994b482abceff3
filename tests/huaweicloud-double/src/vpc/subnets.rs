//! Subnets (`/v1/{project_id}/subnets`): listed (by `vpc_id`, paged with `marker` and
//! `limit`) and read, each with its `neutron_network_id` (its own ID, as on Huawei
//! Cloud) and `neutron_subnet_id` (what the ELB API calls it).

use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{bad_request, error};
use crate::clock::iso8601;
use crate::query::{self, Params};
use crate::state::{State, Subnet, cidr};
use crate::{Shared, reply};

/// The addresses of a subnet no one holds (the network, broadcast, gateway and two DHCP
/// addresses excluded, as the VPC service counts).
fn available(s: &State, x: &Subnet) -> u64 {
    let size = cidr(&x.cidr).map_or(0, |(_, length)| 1u64 << (32 - length));
    let used = s
        .servers
        .values()
        .flat_map(|srv| &srv.nics)
        .filter(|n| n.subnet_id == x.id)
        .count()
        + s.load_balancers
            .values()
            .filter(|lb| lb.vip_subnet_id == x.neutron_subnet_id)
            .count();
    size.saturating_sub(5 + used as u64)
}

/// A subnet as the API shows it (`Subnet`).
pub(super) fn subnet_json(s: &State, x: &Subnet) -> Value {
    let dns = ["100.125.1.250", "100.125.129.250"];
    json!({
        "id": x.id,
        "name": x.name,
        "description": "",
        "cidr": x.cidr,
        "gateway_ip": x.gateway_ip,
        "ipv6_enable": false,
        "dhcp_enable": true,
        "primary_dns": dns[0],
        "secondary_dns": dns[1],
        "dnsList": dns,
        "availability_zone": x.availability_zone,
        "vpc_id": x.vpc_id,
        "status": x.status,
        "neutron_network_id": x.neutron_network_id,
        "neutron_subnet_id": x.neutron_subnet_id,
        "extra_dhcp_opts": [],
        "scope": "center",
        "tenant_id": s.project_id(),
        "created_at": iso8601(x.created),
        "updated_at": iso8601(x.created),
        "available_ip_address_count": available(s, x),
    })
}

pub(super) async fn list(Extract(shared): Extract<Shared>, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw.as_deref());
    shared.with(|s| {
        let all: Vec<Value> = s
            .subnets
            .values()
            .filter(|x| params.get("vpc_id").is_none_or(|v| x.vpc_id == v))
            .map(|x| subnet_json(s, x))
            .collect();
        match query::page(all, &params) {
            Ok(page) => reply(StatusCode::OK, json!({"subnets": page.items})),
            Err(m) => bad_request(&m),
        }
    })
}

pub(super) async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.subnet(&id) {
        Some(x) => reply(StatusCode::OK, json!({"subnet": subnet_json(s, x)})),
        None => error(
            StatusCode::NOT_FOUND,
            "VPC.0202",
            &format!("Query resource by id {id} fail.the subnet could not be found."),
        ),
    })
}
