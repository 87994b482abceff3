//! Pool members (backend servers): an address on a subnet (its `neutron_subnet_id`,
//! which must be in the load balancer's VPC) and a port, unique per pool. A member's
//! `operating_status` is `NO_MONITOR` while its pool has no health monitor, else
//! `ONLINE` when a server with that address is `ACTIVE` and `OFFLINE` otherwise.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Fields, conflict, invalid, listing, mutable, not_found, parse, select};
use crate::query::Params;
use crate::state::{Member, State, in_cidr};
use crate::{Shared, reply};

/// A member's `operating_status`.
pub(super) fn member_status(s: &State, m: &Member) -> &'static str {
    let monitored = s
        .pools
        .get(&m.pool_id)
        .is_some_and(|p| p.healthmonitor_id.is_some());
    if !monitored {
        "NO_MONITOR"
    } else if m.admin_state_up
        && s.server_by_ip(&m.address)
            .is_some_and(|server| server.status == "ACTIVE")
    {
        "ONLINE"
    } else {
        "OFFLINE"
    }
}

/// A member as the API shows it (`MemberResp`).
pub(super) fn member_json(s: &State, m: &Member) -> Value {
    json!({
        "id": m.id,
        "project_id": s.project_id(),
        "tenant_id": s.project_id(),
        "name": m.name,
        "admin_state_up": m.admin_state_up,
        "protocol_port": m.protocol_port,
        "subnet_id": m.subnet_id,
        "address": m.address,
        "weight": m.weight,
        "operating_status": member_status(s, m),
    })
}

/// The load balancer of pool `pool`, if it may change now.
fn pool_lb(s: &State, pool: &str) -> Result<String, Response> {
    let lb = s.pool_lb(pool).ok_or_else(|| not_found("pool", pool))?;
    mutable(s, &lb)?;
    Ok(lb)
}

pub(super) async fn list(
    Extract(shared): Extract<Shared>,
    Path((_project, pool)): Path<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = Params::parse(raw.as_deref());
    shared.with(|s| {
        if !s.pools.contains_key(&pool) {
            return not_found("pool", &pool);
        }
        let all = s
            .members
            .values()
            .filter(|m| m.pool_id == pool)
            .map(|m| member_json(s, m))
            .collect();
        match select(all, &params, &[]) {
            Ok(page) => listing("members", page, &params, &headers, &uri),
            Err(e) => e,
        }
    })
}

pub(super) async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, pool, id)): Path<(String, String, String)>,
) -> Response {
    shared.with(|s| {
        if !s.pools.contains_key(&pool) {
            return not_found("pool", &pool);
        }
        match s.members.get(&id).filter(|m| m.pool_id == pool) {
            Some(m) => reply(StatusCode::OK, json!({"member": member_json(s, m)})),
            None => not_found("member", &id),
        }
    })
}

pub(super) async fn create(
    Extract(shared): Extract<Shared>,
    Path((_project, pool)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let object = match parse(&bytes, "member") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "member");
    let fields = (|| -> Result<_, Response> {
        let address = f.required_text("address")?;
        if address.len() > 64 {
            return Err(super::error(
                StatusCode::BAD_REQUEST,
                "ELB.9805",
                &format!(
                    "RequestBody member[address]'s length is {}, greater than 64.",
                    address.len()
                ),
            ));
        }
        let port = f
            .int_in("protocol_port", 1..=65535)?
            .ok_or_else(|| f.missing("protocol_port"))?;
        let subnet = f.required_text("subnet_id")?;
        Ok((
            address,
            port as u16,
            subnet,
            f.int_in("weight", 0..=100)?.unwrap_or(1),
            f.text("name")?.unwrap_or_default(),
            f.boolean("admin_state_up")?.unwrap_or(true),
        ))
    })();
    let (address, port, subnet, weight, name, admin) = match fields {
        Ok(f) => f,
        Err(e) => return e,
    };
    shared.with(|s| {
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        let Some(found) = s.subnet_by_neutron_id(&subnet) else {
            return invalid(&format!("Subnet {subnet} could not be found."));
        };
        if !in_cidr(&address, &found.cidr) {
            return invalid(&format!(
                "IP address {address} is not a valid IP for the specified subnet."
            ));
        }
        let lb_vpc = s
            .load_balancer(&lb)
            .and_then(|l| s.subnet_by_neutron_id(&l.vip_subnet_id))
            .map(|x| x.vpc_id.clone())
            .unwrap_or_default();
        if found.vpc_id != lb_vpc {
            return invalid(&format!(
                "Vpc {} of member's subnet_cidr {subnet} and vpc {lb_vpc} of loadbalancer {lb} mismatch",
                found.vpc_id
            ));
        }
        if s
            .members
            .values()
            .any(|m| m.pool_id == pool && m.address == address && m.protocol_port == port)
        {
            return conflict(&format!(
                "Member with address {address} and protocol_port {port} already present in pool {pool}"
            ));
        }
        let member = Member {
            id: s.id(),
            pool_id: pool.clone(),
            name,
            address,
            protocol_port: port,
            subnet_id: subnet,
            weight,
            admin_state_up: admin,
        };
        let answer = json!({"member": member_json(s, &member)});
        s.members.insert(member.id.clone(), member);
        s.changed(&lb);
        reply(StatusCode::CREATED, answer)
    })
}

pub(super) async fn update(
    Extract(shared): Extract<Shared>,
    Path((_project, pool, id)): Path<(String, String, String)>,
    bytes: Bytes,
) -> Response {
    let object = match parse(&bytes, "member") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "member");
    let fields = (|| -> Result<_, Response> {
        Ok((
            f.text("name")?,
            f.boolean("admin_state_up")?,
            f.int_in("weight", 0..=100)?,
        ))
    })();
    let (name, admin, weight) = match fields {
        Ok(f) => f,
        Err(e) => return e,
    };
    shared.with(|s| {
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        let Some(member) = s.members.get_mut(&id).filter(|m| m.pool_id == pool) else {
            return not_found("member", &id);
        };
        if let Some(name) = name {
            member.name = name;
        }
        if let Some(admin) = admin {
            member.admin_state_up = admin;
        }
        if let Some(weight) = weight {
            member.weight = weight;
        }
        s.changed(&lb);
        reply(
            StatusCode::OK,
            json!({"member": member_json(s, &s.members[&id])}),
        )
    })
}

pub(super) async fn delete(
    Extract(shared): Extract<Shared>,
    Path((_project, pool, id)): Path<(String, String, String)>,
) -> Response {
    shared.with(|s| {
        let lb = match pool_lb(s, &pool) {
            Ok(lb) => lb,
            Err(e) => return e,
        };
        if s.members.get(&id).is_none_or(|m| m.pool_id != pool) {
            return not_found("member", &id);
        }
        s.members.remove(&id);
        s.changed(&lb);
        StatusCode::NO_CONTENT.into_response()
    })
}
