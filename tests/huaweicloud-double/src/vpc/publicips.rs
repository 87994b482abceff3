//! EIPs: created with a type and a bandwidth (`PENDING_CREATE` in the creation's
//! answer, `DOWN` from then on until bound, `ACTIVE` while bound), bound to a port (a
//! server's NIC or a load balancer's VIP port) by `PUT {"publicip": {"port_id": ...}}`
//! and unbound with `port_id` null or empty, listed by `id`, `port_id`,
//! `public_ip_address`, `private_ip_address` (each repeatable) and `ip_version`, paged
//! with `marker` and `limit`.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{bad_request, error};
use crate::clock::spaced;
use crate::query::{self, Params};
use crate::state::{Eip, State};
use crate::{Shared, reply};

fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "VPC.0504",
        "Floating IP could not be found.",
    )
}

/// An EIP as show, list and update answer it (`PublicipShowResp`; `tags` for show and
/// list).
fn eip_json(s: &State, e: &Eip, tags: bool) -> Value {
    let mut v = json!({
        "id": e.id,
        "status": e.status,
        "type": e.kind,
        "public_ip_address": e.public_ip_address,
        "tenant_id": s.project_id(),
        "create_time": spaced(e.created),
        "bandwidth_id": e.bandwidth_id,
        "bandwidth_name": e.bandwidth_name,
        "bandwidth_share_type": e.bandwidth_share_type,
        "bandwidth_size": e.bandwidth_size,
        "enterprise_project_id": e.enterprise_project_id,
        "ip_version": 4,
        "public_border_group": "center",
        "allow_share_bandwidth_types": [],
        "profile": {"region_id": s.region()},
    });
    if let Some(alias) = &e.alias {
        v["alias"] = json!(alias);
    }
    if let Some(port) = &e.port_id {
        v["port_id"] = json!(port);
        v["private_ip_address"] = json!(e.private_ip_address);
    }
    if tags {
        v["tags"] = json!([]);
    }
    v
}

/// The `publicip` and `bandwidth` of a creation, checked.
struct Creation {
    kind: String,
    address: Option<String>,
    port: Option<String>,
    alias: Option<String>,
    bandwidth_name: String,
    bandwidth_size: i64,
    share_type: String,
    charge_mode: String,
}

fn object<'a>(body: &'a Value, key: &str) -> Result<&'a Map<String, Value>, Response> {
    body.get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| bad_request(&format!("The request body has no {key}.")))
}

fn text(object: &Map<String, Value>, key: &str) -> Result<Option<String>, Response> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(bad_request(&format!("{key} '{other}' is not a string."))),
    }
}

fn ip_version(object: &Map<String, Value>) -> Result<(), Response> {
    match object.get("ip_version") {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.as_i64() == Some(4) => Ok(()),
        Some(v) => Err(bad_request(&format!(
            "ip_version {v} is not supported: only 4 is."
        ))),
    }
}

fn creation(bytes: &[u8]) -> Result<Creation, Response> {
    let body: Value = serde_json::from_slice(bytes)
        .map_err(|e| bad_request(&format!("The request body is not JSON: {e}")))?;
    let publicip = object(&body, "publicip")?;
    let bandwidth = object(&body, "bandwidth")?;
    let kind = text(publicip, "type")?.ok_or_else(|| bad_request("publicip type is required."))?;
    ip_version(publicip)?;
    let share_type = text(bandwidth, "share_type")?.unwrap_or_default();
    let (bandwidth_name, bandwidth_size) = match share_type.as_str() {
        "PER" => {
            let name = text(bandwidth, "name")?
                .filter(|n| (1..=64).contains(&n.len()))
                .ok_or_else(|| {
                    bad_request("A dedicated bandwidth needs a name of 1 to 64 characters.")
                })?;
            let size = bandwidth
                .get("size")
                .and_then(Value::as_i64)
                .filter(|s| (1..=2000).contains(s))
                .ok_or_else(|| {
                    bad_request("A dedicated bandwidth needs a size of 1 to 2000 Mbit/s.")
                })?;
            (name, size)
        }
        "WHOLE" => {
            let id = text(bandwidth, "id")?
                .ok_or_else(|| bad_request("A shared bandwidth needs its id."))?;
            (format!("shared-{id}"), 5)
        }
        other => {
            return Err(bad_request(&format!(
                "bandwidth share_type '{other}' is not PER or WHOLE."
            )));
        }
    };
    let charge_mode = text(bandwidth, "charge_mode")?.unwrap_or_else(|| "bandwidth".into());
    if !matches!(charge_mode.as_str(), "bandwidth" | "traffic") {
        return Err(bad_request(&format!(
            "bandwidth charge_mode '{charge_mode}' is not bandwidth or traffic."
        )));
    }
    Ok(Creation {
        kind,
        address: text(publicip, "ip_address")?,
        port: text(publicip, "port_id")?.filter(|p| !p.is_empty()),
        alias: text(publicip, "alias")?,
        bandwidth_name,
        bandwidth_size,
        share_type,
        charge_mode,
    })
}

/// Whether EIP `eip` may be bound to port `port`: the port (or the refusal).
fn bindable(s: &State, eip: Option<&Eip>, port: &str) -> Result<crate::state::Port, Response> {
    let Some(found) = s.port(port) else {
        return Err(error(
            StatusCode::NOT_FOUND,
            "VPC.0514",
            &format!("Update port fail. Port {port} could not be found."),
        ));
    };
    if let Some(bound) = eip
        .and_then(|e| e.port_id.as_deref())
        .filter(|p| *p != port)
    {
        return Err(error(
            StatusCode::CONFLICT,
            "VPC.0514",
            &format!("Update port fail. The publicip is already bound to port {bound}."),
        ));
    }
    if let Some(other) = s
        .eips_on_port(port)
        .into_iter()
        .find(|o| eip.is_none_or(|e| e.id != o.id))
    {
        return Err(error(
            StatusCode::CONFLICT,
            "VPC.0514",
            &format!(
                "Update port fail. Port {port} already has publicip {}.",
                other.id
            ),
        ));
    }
    Ok(found)
}

pub(super) async fn create(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let new = match creation(&bytes) {
        Ok(c) => c,
        Err(e) => return e,
    };
    shared.with(|s| {
        if let Some(address) = &new.address
            && s.eips.values().any(|e| &e.public_ip_address == address)
        {
            return error(
                StatusCode::CONFLICT,
                "VPC.0501",
                &format!("The public IP address {address} is already in use."),
            );
        }
        let port = match new.port.as_deref().map(|p| bindable(s, None, p)) {
            None => None,
            Some(Ok(port)) => Some(port),
            Some(Err(e)) => return e,
        };
        let address = new.address.clone().unwrap_or_else(|| s.public_ip());
        let mut eip = s.new_eip(
            address,
            &new.kind,
            &new.bandwidth_name,
            new.bandwidth_size,
            &new.share_type,
            &new.charge_mode,
        );
        eip.alias = new.alias.clone();
        let id = eip.id.clone();
        s.eips.insert(id.clone(), eip);
        if let Some(port) = &port {
            s.bind(&id, port);
        }
        let e = &s.eips[&id];
        reply(
            StatusCode::OK,
            json!({"publicip": {
                "id": e.id,
                "status": "PENDING_CREATE",
                "type": e.kind,
                "public_ip_address": e.public_ip_address,
                "tenant_id": s.project_id(),
                "ip_version": 4,
                "create_time": spaced(e.created),
                "bandwidth_size": e.bandwidth_size,
                "enterprise_project_id": e.enterprise_project_id,
                "alias": e.alias,
            }}),
        )
    })
}

/// Keeps the EIPs every filter matches.
fn listed(e: &Eip, params: &Params) -> bool {
    let any = |key: &str, value: Option<&str>| {
        let wanted = params.all(key);
        wanted.is_empty() || value.is_some_and(|v| wanted.contains(&v))
    };
    any("id", Some(&e.id))
        && any("port_id", e.port_id.as_deref())
        && any("public_ip_address", Some(&e.public_ip_address))
        && any("private_ip_address", e.private_ip_address.as_deref())
        && any("ip_version", Some("4"))
}

pub(super) async fn list(Extract(shared): Extract<Shared>, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw.as_deref());
    shared.with(|s| {
        let all: Vec<Value> = s
            .eips
            .values()
            .filter(|e| listed(e, &params))
            .map(|e| eip_json(s, e, true))
            .collect();
        match query::page(all, &params) {
            Ok(page) => reply(StatusCode::OK, json!({"publicips": page.items})),
            Err(m) => bad_request(&m),
        }
    })
}

pub(super) async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.eips.get(&id) {
        Some(e) => reply(StatusCode::OK, json!({"publicip": eip_json(s, e, true)})),
        None => not_found(),
    })
}

/// `PUT`: binds to `port_id`, unbinds with `port_id` null or empty; sets `alias`.
pub(super) async fn update(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let body: Value = match serde_json::from_slice(&bytes) {
        Ok(b) => b,
        Err(e) => return bad_request(&format!("The request body is not JSON: {e}")),
    };
    let publicip = match object(&body, "publicip") {
        Ok(p) => p,
        Err(e) => return e,
    };
    let port = match text(publicip, "port_id") {
        Ok(p) => p.filter(|p| !p.is_empty()),
        Err(e) => return e,
    };
    let alias = match text(publicip, "alias").and_then(|a| ip_version(publicip).map(|()| a)) {
        Ok(a) => a,
        Err(e) => return e,
    };
    shared.with(|s| {
        let Some(eip) = s.eips.get(&id) else {
            return not_found();
        };
        if publicip.contains_key("port_id") {
            match &port {
                None => s.unbind(&id),
                Some(port) => match bindable(s, Some(eip), port) {
                    Ok(found) => s.bind(&id, &found),
                    Err(e) => return e,
                },
            }
        }
        if let Some(alias) = alias
            && let Some(e) = s.eips.get_mut(&id)
        {
            e.alias = Some(alias);
        }
        reply(
            StatusCode::OK,
            json!({"publicip": eip_json(s, &s.eips[&id], false)}),
        )
    })
}

pub(super) async fn delete(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.eips.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => not_found(),
    })
}
