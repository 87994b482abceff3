//! ECS: servers listed in detail (`GET /v1/{project_id}/cloudservers/detail`, also
//! under `/v1.1`), read one by one, and their NICs (`os-interface`, the ECS v1 API the
//! Huawei CCM uses, and Nova's v2.1 one). Shapes are the SDK's `ServerDetail`,
//! `ListServersDetailsResponse` (`{"count": N, "servers": [...]}`) and
//! `InterfaceAttachment`.
//!
//! List filters: `name` (a regular expression searched in the name, which is how ECS's
//! "fuzzy match" behaves for the CCM's `^name$`; text that is no regular expression is
//! searched as is), `ip` (a fixed address containing it), `ip_eq` (a fixed address
//! equal to it), `status`, `flavor` (its ID), `tags` / `not-tags` (`key=value`), and
//! `server_id` (IDs, comma-separated; the other filters are then ignored and an unknown
//! ID is listed with only its `id` and `fault`, as ECS does). Paging: `limit` (25 by
//! default, at most 1000) with `offset` (the page number, from 1; 0 is 1) or `marker`
//! (the last ID of the previous page); `count` is every match.
//!
//! Errors are ECS's: `{"error": {"code": "Ecs.0114", "message": "..."}}` for a server
//! not found (404), `Ecs.0005` for a bad parameter (400); Nova's v2.1 path answers
//! Nova's `itemNotFound`.

use axum::Router;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};

use crate::clock::iso8601;
use crate::query::Params;
use crate::state::{IMAGE_ID, Server, State};
use crate::{Shared, reply};

/// The most servers in one page.
pub const MAX_LIMIT: usize = 1000;
/// The page size without `limit`.
pub const DEFAULT_LIMIT: usize = 25;
/// The security group every server is in.
pub const SECURITY_GROUP_ID: &str = "5ec90000-0000-4000-8000-000000000001";

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/v1/{project_id}/cloudservers/detail", get(list_detail))
        .route("/v1.1/{project_id}/cloudservers/detail", get(list_detail))
        .route("/v1/{project_id}/cloudservers/{server_id}", get(show))
        .route(
            "/v1/{project_id}/cloudservers/{server_id}/os-interface",
            get(interfaces),
        )
        .route(
            "/v2.1/{project_id}/servers/{server_id}/os-interface",
            get(nova_interfaces),
        )
        .route(
            "/v2.1/{project_id}/servers/{server_id}/os-interface/{port_id}",
            get(nova_interface),
        )
}

/// ECS's error body.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response {
    reply(status, json!({"error": {"code": code, "message": message}}))
}

fn not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "Ecs.0114",
        &format!("Instance[{id}] could not be found."),
    )
}

fn nova_not_found(message: &str) -> Response {
    reply(
        StatusCode::NOT_FOUND,
        json!({"itemNotFound": {"code": 404, "message": message}}),
    )
}

/// `(vCPUs, RAM in MiB)` of a flavor named like `s6.large.2` (size, then RAM per vCPU
/// in GiB); 2 and 4096 when the name says otherwise.
fn flavor_size(flavor: &str) -> (u64, u64) {
    let parts: Vec<&str> = flavor.split('.').collect();
    let vcpus = match parts.get(1).copied().unwrap_or_default() {
        "small" | "medium" => 1,
        "large" => 2,
        "xlarge" => 4,
        other => other
            .strip_suffix("xlarge")
            .and_then(|n| n.parse::<u64>().ok())
            .map_or(2, |n| n * 4),
    };
    let ratio = parts
        .get(2)
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(2);
    (vcpus, vcpus * ratio * 1024)
}

/// The VPC of a server's NIC.
fn vpc_of(state: &State, subnet_id: &str) -> String {
    state
        .subnet(subnet_id)
        .map(|s| s.vpc_id.clone())
        .unwrap_or_default()
}

/// A server as ECS shows it (`ServerDetail`).
pub fn server_json(state: &State, server: &Server) -> Value {
    let mut addresses: Map<String, Value> = Map::new();
    for (i, nic) in server.nics.iter().enumerate() {
        let entry = addresses
            .entry(vpc_of(state, &nic.subnet_id))
            .or_insert_with(|| Value::Array(Vec::new()));
        let list = entry.as_array_mut().expect("an array");
        list.push(json!({"version": "4", "addr": nic.ip, "primary": i == 0,
            "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": nic.mac,
            "OS-EXT-IPS:port_id": nic.port_id}));
        for eip in state.eips_on_port(&nic.port_id) {
            list.push(
                json!({"version": "4", "addr": eip.public_ip_address, "primary": false,
                "OS-EXT-IPS:type": "floating", "OS-EXT-IPS-MAC:mac_addr": nic.mac,
                "OS-EXT-IPS:port_id": nic.port_id}),
            );
        }
    }
    let (vcpus, ram) = flavor_size(&server.flavor);
    let (vm_state, power_state) = match server.status.as_str() {
        "ACTIVE" => ("active", 1),
        "SHUTOFF" => ("stopped", 4),
        "ERROR" => ("error", 0),
        "BUILD" => ("building", 0),
        "DELETED" => ("deleted", 0),
        _ => ("active", 1),
    };
    let mut metadata = Map::new();
    metadata.insert("charging_mode".into(), json!("0"));
    metadata.insert("metering.image_id".into(), json!(IMAGE_ID));
    metadata.insert("os_type".into(), json!("Linux"));
    if let Some(nic) = server.nics.first() {
        metadata.insert("vpc_id".into(), json!(vpc_of(state, &nic.subnet_id)));
    }
    for (k, v) in &server.metadata {
        metadata.insert(k.clone(), json!(v));
    }
    let host = format!("pod01.{}", server.zone);
    let serial = server.id.rsplit('-').next().unwrap_or_default();
    json!({
        "id": server.id,
        "name": server.name,
        "description": "",
        "status": server.status,
        "created": iso8601(server.created),
        "updated": iso8601(server.updated),
        "auto_terminate_time": "",
        "hostId": crate::signature::hex_sha256(host.as_bytes())[..56].to_owned(),
        "OS-EXT-SRV-ATTR:host": host,
        "OS-EXT-SRV-ATTR:hypervisor_hostname": format!("nova{serial}"),
        "OS-EXT-SRV-ATTR:instance_name": format!("instance-{serial}"),
        "OS-EXT-SRV-ATTR:hostname": server.name.to_ascii_lowercase(),
        "OS-EXT-SRV-ATTR:reservation_id": format!("r-{serial}"),
        "OS-EXT-SRV-ATTR:launch_index": 0,
        "OS-EXT-SRV-ATTR:kernel_id": "",
        "OS-EXT-SRV-ATTR:ramdisk_id": "",
        "OS-EXT-SRV-ATTR:root_device_name": "/dev/vda",
        "addresses": addresses,
        "key_name": "",
        "image": {"id": IMAGE_ID},
        "OS-EXT-STS:task_state": "",
        "OS-EXT-STS:vm_state": vm_state,
        "OS-EXT-STS:power_state": power_state,
        "flavor": {"id": server.flavor, "name": server.flavor, "disk": "0",
                   "vcpus": vcpus.to_string(), "ram": ram.to_string()},
        "security_groups": [{"name": "default", "id": SECURITY_GROUP_ID}],
        "OS-EXT-AZ:availability_zone": server.zone,
        "user_id": "0ce7fe0c0e1a4d2ab3c4d5e6f7a8b9c0",
        "tenant_id": state.project_id(),
        "OS-DCF:diskConfig": "MANUAL",
        "accessIPv4": "",
        "accessIPv6": "",
        "progress": 0,
        "config_drive": "",
        "metadata": metadata,
        "OS-SRV-USG:launched_at": iso8601(server.created),
        "OS-SRV-USG:terminated_at": "",
        "os-extended-volumes:volumes_attached": [{"id": format!("{}-vol", server.id),
            "delete_on_termination": "true", "bootIndex": "0", "device": "/dev/vda"}],
        "host_status": "UP",
        "locked": false,
        "tags": server.tags,
        "os:scheduler_hints": {},
        "enterprise_project_id": "0",
        "sys_tags": [{"key": "_sys_enterprise_project_id", "value": "0"}],
    })
}

/// Whether `server` passes the list's filters (`name` compiled).
fn listed(server: &Server, params: &Params, name: Option<&regex::Regex>) -> bool {
    let ips = || server.nics.iter().map(|n| n.ip.as_str());
    name.is_none_or(|re| re.is_match(&server.name))
        && params
            .get("status")
            .is_none_or(|st| server.status.eq_ignore_ascii_case(st))
        && params.get("flavor").is_none_or(|f| server.flavor == f)
        && params
            .get("ip")
            .is_none_or(|ip| ips().any(|a| a.contains(ip)))
        && params.get("ip_eq").is_none_or(|ip| ips().any(|a| a == ip))
        && params
            .get("tags")
            .is_none_or(|t| server.tags.iter().any(|x| x == t))
        && params
            .get("not-tags")
            .is_none_or(|t| !server.tags.iter().any(|x| x == t))
}

async fn list_detail(Extract(shared): Extract<Shared>, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw.as_deref());
    let bad = |m: &str| error(StatusCode::BAD_REQUEST, "Ecs.0005", m);
    let limit = match params.count("limit") {
        Ok(l) => l.unwrap_or(DEFAULT_LIMIT),
        Err(m) => return bad(&m),
    };
    if limit == 0 || limit > MAX_LIMIT {
        return bad(&format!(
            "Invalid limit {limit}: it must be 1 to {MAX_LIMIT}."
        ));
    }
    let offset = match params.count("offset") {
        Ok(o) => o.unwrap_or(1).max(1),
        Err(m) => return bad(&m),
    };
    let name = params.get("name").map(|n| {
        regex::Regex::new(n).unwrap_or_else(|_| {
            regex::Regex::new(&regex::escape(n)).expect("an escaped pattern compiles")
        })
    });
    shared.with(|s| {
        let state: &State = s;
        if let Some(ids) = params.get("server_id") {
            let servers: Vec<Value> = ids
                .split(',')
                .filter(|id| !id.is_empty())
                .map(|id| match state.server(id) {
                    Some(server) => server_json(state, server),
                    None => json!({"id": id, "fault": {"code": 404,
                        "message": "Instance could not be found", "details": ""}}),
                })
                .collect();
            return reply(
                StatusCode::OK,
                json!({"count": servers.len(), "servers": servers}),
            );
        }
        let matching: Vec<&Server> = state
            .servers
            .values()
            .filter(|srv| listed(srv, &params, name.as_ref()))
            .collect();
        let start = match params.get("marker") {
            None => (offset - 1).saturating_mul(limit),
            Some(marker) => match matching.iter().position(|srv| srv.id == marker) {
                Some(i) => i + 1,
                None => return bad(&format!("Invalid marker {marker}.")),
            },
        };
        let servers: Vec<Value> = matching
            .iter()
            .skip(start)
            .take(limit)
            .map(|srv| server_json(state, srv))
            .collect();
        reply(
            StatusCode::OK,
            json!({"count": matching.len(), "servers": servers}),
        )
    })
}

async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.server(&id) {
        Some(server) => reply(StatusCode::OK, json!({"server": server_json(s, server)})),
        None => not_found(&id),
    })
}

/// A server's NICs as `InterfaceAttachment`s (`full`: with ECS's extra fields).
fn attachments(state: &State, server: &Server, full: bool) -> Vec<Value> {
    let port_state = if server.status == "ACTIVE" {
        "ACTIVE"
    } else {
        "DOWN"
    };
    server
        .nics
        .iter()
        .enumerate()
        .map(|(i, nic)| {
            let subnet = state.subnet(&nic.subnet_id);
            let mut v = json!({
                "port_state": port_state,
                "fixed_ips": [{"subnet_id": subnet.map(|s| s.neutron_subnet_id.clone()),
                               "ip_address": nic.ip}],
                "net_id": subnet.map(|s| s.neutron_network_id.clone()),
                "mac_addr": nic.mac,
                "port_id": nic.port_id,
            });
            if full {
                v["delete_on_termination"] = json!(i == 0);
                v["driver_mode"] = json!("virtio");
                v["min_rate"] = json!(0);
                v["multiqueue_num"] = json!(0);
                v["pci_address"] = json!(format!("0000:00:{:02x}.0", i + 3));
            }
            v
        })
        .collect()
}

/// `GET /v1/{project_id}/cloudservers/{id}/os-interface`.
async fn interfaces(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.server(&id) {
        Some(server) => reply(
            StatusCode::OK,
            json!({"interfaceAttachments": attachments(s, server, true),
                   "attachableQuantity": {"free_nic": 12usize.saturating_sub(server.nics.len())}}),
        ),
        None => not_found(&id),
    })
}

/// `GET /v2.1/{project_id}/servers/{id}/os-interface` (Nova's).
async fn nova_interfaces(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.server(&id) {
        Some(server) => reply(
            StatusCode::OK,
            json!({"interfaceAttachments": attachments(s, server, false)}),
        ),
        None => nova_not_found(&format!("Instance {id} could not be found.")),
    })
}

/// `GET /v2.1/{project_id}/servers/{id}/os-interface/{port_id}` (Nova's).
async fn nova_interface(
    Extract(shared): Extract<Shared>,
    Path((_project, id, port)): Path<(String, String, String)>,
) -> Response {
    shared.with(|s| {
        let Some(server) = s.server(&id) else {
            return nova_not_found(&format!("Instance {id} could not be found."));
        };
        match attachments(s, server, false)
            .into_iter()
            .find(|a| a["port_id"] == port.as_str())
        {
            Some(a) => reply(StatusCode::OK, json!({"interfaceAttachment": a})),
            None => nova_not_found(&format!("Instance {id} is not attached to port {port}.")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavor_sizes() {
        assert_eq!(flavor_size("s6.large.2"), (2, 4096));
        assert_eq!(flavor_size("c7.2xlarge.4"), (8, 32768));
        assert_eq!(flavor_size("m1.small"), (1, 2048));
        assert_eq!(flavor_size("custom"), (2, 4096));
    }
}
