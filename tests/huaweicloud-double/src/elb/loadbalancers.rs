//! Load balancers: created `PENDING_CREATE` with a VIP on `vip_subnet_id` (a subnet's
//! `neutron_subnet_id`), `ACTIVE` after [`crate::State::pending_reads`] reads; their
//! `publicips` are the EIPs bound to their VIP port; deleted only without listeners and
//! pools. `statuses` shows the tree under one.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::members::member_status;
use super::{Fields, error, in_use, invalid, listing, mutable, not_found, parse, refs, select};
use crate::clock::iso8601_local;
use crate::query::Params;
use crate::state::{LoadBalancer, Pool, State, in_cidr};
use crate::{Shared, reply};

/// A load balancer as the API shows it (`LoadbalancerResp`).
pub(super) fn lb_json(s: &State, lb: &LoadBalancer) -> Value {
    let listeners = s.listeners.values().filter(|l| l.loadbalancer_id == lb.id);
    let pools = s.pools.values().filter(|p| p.loadbalancer_id == lb.id);
    let publicips: Vec<Value> = s
        .eips_on_port(&lb.vip_port_id)
        .iter()
        .map(|e| {
            json!({"publicip_id": e.id, "publicip_address": e.public_ip_address, "ip_version": 4})
        })
        .collect();
    json!({
        "id": lb.id,
        "tenant_id": s.project_id(),
        "project_id": s.project_id(),
        "name": lb.name,
        "description": lb.description,
        "vip_subnet_id": lb.vip_subnet_id,
        "vip_port_id": lb.vip_port_id,
        "vip_address": lb.vip_address,
        "listeners": refs(listeners.map(|l| &l.id)),
        "pools": refs(pools.map(|p| &p.id)),
        "provider": lb.provider,
        "operating_status": lb.operating_status,
        "provisioning_status": lb.provisioning_status,
        "admin_state_up": lb.admin_state_up,
        "created_at": iso8601_local(lb.created),
        "updated_at": iso8601_local(lb.updated),
        "enterprise_project_id": lb.enterprise_project_id,
        "tags": lb.tags,
        "publicips": publicips,
        "billing_info": "",
        "frozen_scene": "",
        "protection_status": "nonProtection",
        "protection_reason": "",
    })
}

/// The fields only filters see: the VPC, and the members' addresses and servers.
const HIDDEN: [&str; 3] = ["vpc_id", "member_address", "member_device_id"];

fn filterable(s: &State, lb: &LoadBalancer) -> Value {
    let mut v = lb_json(s, lb);
    let members: Vec<&crate::state::Member> = s
        .members
        .values()
        .filter(|m| s.pool_lb(&m.pool_id).as_deref() == Some(lb.id.as_str()))
        .collect();
    v["vpc_id"] = json!(
        s.subnet_by_neutron_id(&lb.vip_subnet_id)
            .map(|x| x.vpc_id.clone())
    );
    v["member_address"] = json!(members.iter().map(|m| &m.address).collect::<Vec<_>>());
    v["member_device_id"] = json!(
        members
            .iter()
            .filter_map(|m| s.server_by_ip(&m.address).map(|x| x.id.clone()))
            .collect::<Vec<_>>()
    );
    v
}

pub(super) async fn list(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = Params::parse(raw.as_deref());
    shared.with(|s| {
        let state: &State = s;
        let all: Vec<Value> = state
            .load_balancers
            .values()
            .map(|lb| filterable(state, lb))
            .collect();
        let mut page = match select(all, &params, &HIDDEN) {
            Ok(page) => page,
            Err(e) => return e,
        };
        // Each load balancer listed is read.
        let ids: Vec<String> = page
            .items
            .iter()
            .filter_map(|i| i["id"].as_str().map(str::to_owned))
            .collect();
        for id in &ids {
            s.read_load_balancer(id);
        }
        page.items = ids
            .iter()
            .filter_map(|id| s.load_balancer(id))
            .map(|lb| lb_json(s, lb))
            .collect();
        listing("loadbalancers", page, &params, &headers, &uri)
    })
}

pub(super) async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| {
        if s.load_balancer(&id).is_none() {
            return not_found("loadbalancer", &id);
        }
        s.read_load_balancer(&id);
        let lb = s.load_balancer(&id).expect("checked");
        reply(StatusCode::OK, json!({"loadbalancer": lb_json(s, lb)}))
    })
}

pub(super) async fn create(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let object = match parse(&bytes, "loadbalancer") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "loadbalancer");
    let fields = (|| -> Result<_, Response> {
        let subnet = f.required_text("vip_subnet_id")?;
        let name = f.text("name")?.unwrap_or_default();
        let description = f.text("description")?.unwrap_or_default();
        let address = f.text("vip_address")?;
        f.one_of("provider", &["vlb"])?;
        if f.boolean("admin_state_up")? == Some(false) {
            return Err(invalid(
                "Invalid input for admin_state_up. Reason: it can only be true.",
            ));
        }
        Ok((subnet, name, description, address))
    })();
    let (subnet, name, description, address) = match fields {
        Ok(f) => f,
        Err(e) => return e,
    };
    shared.with(|s| {
        let Some(found) = s.subnet_by_neutron_id(&subnet).cloned() else {
            return invalid(&format!("Subnet {subnet} could not be found."));
        };
        if let Some(address) = &address {
            if !in_cidr(address, &found.cidr) {
                return invalid(&format!(
                    "IP address {address} is not a valid IP for the specified subnet."
                ));
            }
            if s.ip_in_use(&found.id, address) {
                return error(StatusCode::BAD_REQUEST, "ELB.1101", "Vip address is exist.");
            }
        }
        let Some(id) = s.insert_load_balancer(&name, &description, &subnet, address.as_deref())
        else {
            return super::conflict(&format!(
                "No more IP addresses available on subnet {subnet}."
            ));
        };
        let lb = s.load_balancer(&id).expect("just added");
        reply(StatusCode::CREATED, json!({"loadbalancer": lb_json(s, lb)}))
    })
}

pub(super) async fn update(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let object = match parse(&bytes, "loadbalancer") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "loadbalancer");
    let fields = (|| -> Result<_, Response> {
        Ok((
            f.text("name")?,
            f.text("description")?,
            f.boolean("admin_state_up")?,
        ))
    })();
    let (name, description, admin) = match fields {
        Ok(f) => f,
        Err(e) => return e,
    };
    if admin == Some(false) {
        return invalid("Invalid input for admin_state_up. Reason: it can only be true.");
    }
    shared.with(|s| {
        if let Err(e) = mutable(s, &id) {
            return e;
        }
        let lb = s.load_balancer_mut(&id).expect("checked");
        if let Some(name) = name {
            lb.name = name;
        }
        if let Some(description) = description {
            lb.description = description;
        }
        s.changed(&id);
        let lb = s.load_balancer(&id).expect("checked");
        reply(StatusCode::OK, json!({"loadbalancer": lb_json(s, lb)}))
    })
}

pub(super) async fn delete(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| {
        if let Err(e) = mutable(s, &id) {
            return e;
        }
        if let Some(l) = s.listeners.values().find(|l| l.loadbalancer_id == id) {
            return in_use("listener", &l.id, "loadbalancer");
        }
        if let Some(p) = s.pools.values().find(|p| p.loadbalancer_id == id) {
            return in_use("pool", &p.id, "loadbalancer");
        }
        s.remove_load_balancer(&id);
        StatusCode::NO_CONTENT.into_response()
    })
}

/// A pool in a `statuses` tree.
fn pool_status(s: &State, p: &Pool) -> Value {
    let members: Vec<Value> = s
        .members
        .values()
        .filter(|m| m.pool_id == p.id)
        .map(|m| {
            json!({"id": m.id, "address": m.address, "protocol_port": m.protocol_port,
                   "provisioning_status": "ACTIVE", "operating_status": member_status(s, m)})
        })
        .collect();
    let monitor = p
        .healthmonitor_id
        .as_ref()
        .and_then(|h| s.healthmonitors.get(h))
        .map_or(json!({}), |h| {
            json!({"id": h.id, "type": h.kind, "name": h.name, "provisioning_status": "ACTIVE"})
        });
    json!({"id": p.id, "name": p.name, "provisioning_status": "ACTIVE",
           "operating_status": "ONLINE", "members": members, "healthmonitor": monitor})
}

/// `GET .../loadbalancers/{id}/statuses`: the tree under a load balancer (a read).
pub(super) async fn statuses(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| {
        if s.load_balancer(&id).is_none() {
            return not_found("loadbalancer", &id);
        }
        s.read_load_balancer(&id);
        let state: &State = s;
        let lb = state.load_balancer(&id).expect("checked");
        let listeners: Vec<Value> = state
            .listeners
            .values()
            .filter(|l| l.loadbalancer_id == id)
            .map(|l| {
                let pools: Vec<Value> = state
                    .pools
                    .values()
                    .filter(|p| p.listener_id.as_deref() == Some(l.id.as_str()))
                    .map(|p| pool_status(state, p))
                    .collect();
                json!({"id": l.id, "name": l.name, "provisioning_status": "ACTIVE",
                       "operating_status": "ONLINE", "pools": pools, "l7policies": []})
            })
            .collect();
        let pools: Vec<Value> = state
            .pools
            .values()
            .filter(|p| p.loadbalancer_id == id)
            .map(|p| pool_status(state, p))
            .collect();
        reply(
            StatusCode::OK,
            json!({"statuses": {"loadbalancer": {
                "id": lb.id, "name": lb.name,
                "provisioning_status": lb.provisioning_status,
                "operating_status": lb.operating_status,
                "listeners": listeners, "pools": pools}}}),
        )
    })
}
