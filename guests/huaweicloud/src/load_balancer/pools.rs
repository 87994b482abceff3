//! A listener's pool (backend server group), its members (the Nodes at the port's node
//! port) and its health monitor: upstream's `getPool`, `createPool`,
//! `addOrRemoveMembers`, `ensureHealthCheck` and `deletePool`.
//!
//! Every change is followed by a wait for the ELB to be `ACTIVE` again
//! ([`wait::active`]), as upstream waits after each member and monitor it adds.

use serde_json::{Value, json};
use wasm_ccm_guest::log;
use wasm_ccm_guest::types::{CloudError, Node, NodeAddressType, Service, ServicePort};

use super::annotations::{HealthCheck, Settings};
use super::cloud::{Cloud, ELB, Endpoint, encode, text};
use super::{fail_for, names, wait};

/// The ELB's pools (`GET /v2/{project_id}/elb/pools?loadbalancer_id=`).
pub(super) fn list(cloud: &Cloud, lb_id: &str) -> Result<Vec<Value>, CloudError> {
    cloud.list(
        Endpoint::Elb,
        &format!("{ELB}/pools?loadbalancer_id={}", encode(lb_id)),
        "pools",
        "list the ELB's pools",
    )
}

/// Upstream's `getPool`: the pool one of whose `listeners` is `listener_id`.
pub(super) fn of_listener<'a>(pools: &'a [Value], listener_id: &str) -> Option<&'a Value> {
    pools.iter().find(|pool| {
        pool["listeners"]
            .as_array()
            .is_some_and(|ls| ls.iter().any(|l| l["id"] == listener_id))
    })
}

/// Upstream's pool protocol (`createPool`): HTTP behind an HTTPS or TLS-terminating
/// listener, else the listener's.
fn pool_protocol(listener_protocol: &str) -> &str {
    match listener_protocol {
        "HTTPS" | "TERMINATED_HTTPS" => "HTTP",
        other => other,
    }
}

/// The listener's pool, made as upstream's `createPool` makes it when it has none;
/// an existing pool's algorithm and session persistence are brought to the Service's
/// (upstream leaves an existing pool as it is).
pub(super) fn ensure(
    cloud: &Cloud,
    lb_id: &str,
    listener: &Value,
    pools: &[Value],
    settings: &Settings,
) -> Result<Value, CloudError> {
    let listener_id = text(listener, "id");
    if let Some(pool) = of_listener(pools, listener_id) {
        update_settings(cloud, lb_id, pool, settings)?;
        return Ok(pool.clone());
    }
    let mut pool = json!({
        "name": names::pool(text(listener, "name")),
        "protocol": pool_protocol(text(listener, "protocol")),
        "lb_algorithm": settings.lb_algorithm,
        "listener_id": listener_id,
    });
    if let Some(persistence) = &settings.persistence {
        pool["session_persistence"] = persistence.to_json();
    }
    let created = cloud.post(
        Endpoint::Elb,
        &format!("{ELB}/pools"),
        &json!({ "pool": pool }),
        "create a pool",
    )?;
    wait::active(cloud, lb_id)?;
    Ok(created["pool"].clone())
}

/// Whether `current` (the API's `session_persistence`) is what `settings` ask.
fn same_persistence(current: &Value, settings: &Settings) -> bool {
    match &settings.persistence {
        None => current.is_null() || text(current, "type").is_empty(),
        Some(wanted) => {
            text(current, "type") == wanted.kind
                && wanted
                    .cookie_name
                    .as_ref()
                    .is_none_or(|name| text(current, "cookie_name") == name.as_str())
                && wanted
                    .timeout
                    .is_none_or(|t| current["persistence_timeout"].as_i64() == Some(t))
        }
    }
}

fn update_settings(
    cloud: &Cloud,
    lb_id: &str,
    pool: &Value,
    settings: &Settings,
) -> Result<(), CloudError> {
    let algorithm_ok = text(pool, "lb_algorithm") == settings.lb_algorithm;
    if algorithm_ok && same_persistence(&pool["session_persistence"], settings) {
        return Ok(());
    }
    let persistence = settings
        .persistence
        .as_ref()
        .map_or(Value::Null, |p| p.to_json());
    cloud.put(
        Endpoint::Elb,
        &format!("{ELB}/pools/{}", encode(text(pool, "id"))),
        &json!({"pool": {"lb_algorithm": settings.lb_algorithm,
                         "session_persistence": persistence}}),
        "update a pool",
    )?;
    wait::active(cloud, lb_id)?;
    Ok(())
}

/// A Node's member address: upstream's `getNodeAddress` takes the first InternalIP or
/// ExternalIP in the Node's list; here an InternalIP first, an ExternalIP otherwise.
pub(super) fn node_address(node: &Node) -> Option<&str> {
    let of = |kind: NodeAddressType| {
        node.addresses
            .iter()
            .find(|a| a.address_type == kind && !a.address.is_empty())
            .map(|a| a.address.as_str())
    };
    of(NodeAddressType::InternalIp).or_else(|| of(NodeAddressType::ExternalIp))
}

/// The members' port: the Service port's node port (upstream's `getMemberIP` with
/// `allocateLoadBalancerNodePorts`, which the API server sets true by default).
/// Without node ports upstream adds the Pods themselves (their IPs and target
/// ports, from its own Kubernetes client), which this provider is not given.
fn member_port(service: &Service, port: &ServicePort) -> Result<i32, CloudError> {
    if service.allocate_load_balancer_node_ports == Some(false) {
        return Err(fail_for(
            service,
            "spec.allocateLoadBalancerNodePorts is false: a shared ELB's members are the \
             Nodes at their node ports here (Pod members are not supported)",
        ));
    }
    if port.node_port <= 0 {
        return Err(fail_for(
            service,
            &format!("port {} has no node port yet", port.port),
        ));
    }
    Ok(port.node_port)
}

/// Upstream's `addOrRemoveMembers`, with the Nodes the controller selects (upstream
/// takes the hosts of the Service's ready Pods, found through its own Kubernetes
/// client): a member per Node at the node port, in the subnet of the Node's interface
/// holding that address (upstream's `getNodeSubnetIDByHostIP`); members of Nodes no
/// longer selected go. A Node without an address is skipped, as upstream skips it.
pub(super) fn reconcile_members(
    cloud: &Cloud,
    lb: &Value,
    pool: &Value,
    service: &Service,
    port: &ServicePort,
    nodes: &[Node],
) -> Result<(), CloudError> {
    let node_port = member_port(service, port)?;
    let lb_id = text(lb, "id");
    let pool_id = text(pool, "id");
    let members = list_members(cloud, pool_id)?;
    let mut wanted: Vec<&str> = Vec::new();
    for node in nodes {
        match node_address(node) {
            Some(address) if !wanted.contains(&address) => wanted.push(address),
            Some(_) => {}
            None => log::warn(
                "node has no InternalIP or ExternalIP: not added to the ELB",
                &[("node", &node.metadata.name)],
            ),
        }
    }
    let exists = |address: &str| {
        members.iter().any(|m| {
            text(m, "address") == address
                && m["protocol_port"].as_i64() == Some(i64::from(node_port))
        })
    };
    for address in wanted.iter().copied().filter(|a| !exists(a)) {
        let node = nodes.iter().find(|n| node_address(n) == Some(address));
        let subnet = member_subnet(cloud, lb, node, address)?;
        let member = json!({
            "address": address,
            "protocol_port": node_port,
            "subnet_id": subnet,
        });
        cloud.post(
            Endpoint::Elb,
            &format!("{ELB}/pools/{}/members", encode(pool_id)),
            &json!({ "member": member }),
            &format!("add member {address}:{node_port} to pool {pool_id}"),
        )?;
        wait::active(cloud, lb_id)?;
    }
    for member in &members {
        let obsolete = !wanted.contains(&text(member, "address"))
            || member["protocol_port"].as_i64() != Some(i64::from(node_port));
        if obsolete {
            delete_member(cloud, lb_id, pool_id, member)?;
        }
    }
    Ok(())
}

/// The subnet (its `neutron_subnet_id`) of the member at `address`: upstream's
/// `getNodeSubnetIDByHostIP`, the `subnet_id` of the fixed IP `address` among the
/// interfaces of the Node's ECS (`os-interface`); upstream's error when none holds it.
/// A Node without a provider ID yet (not initialized) gets the ELB's own subnet.
fn member_subnet(
    cloud: &Cloud,
    lb: &Value,
    node: Option<&Node>,
    address: &str,
) -> Result<String, CloudError> {
    let Some(provider_id) = node
        .and_then(|n| n.provider_id.as_deref())
        .filter(|id| !id.is_empty())
    else {
        return Ok(text(lb, "vip_subnet_id").to_owned());
    };
    let id = crate::instances::parse_provider_id(provider_id)?;
    let interfaces = cloud
        .find(
            Endpoint::Ecs,
            &format!(
                "/v1/{{project_id}}/cloudservers/{}/os-interface",
                encode(&id)
            ),
            &format!("list the interfaces of ECS {id}"),
        )?
        .unwrap_or_default();
    interfaces["interfaceAttachments"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["fixed_ips"].as_array().into_iter().flatten())
        .find(|ip| text(ip, "ip_address") == address)
        .map(|ip| text(ip, "subnet_id").to_owned())
        .filter(|subnet| !subnet.is_empty())
        .ok_or_else(|| {
            CloudError::Other(format!(
                "failed to get node subnet ID with private IP: {address}"
            ))
        })
}

fn list_members(cloud: &Cloud, pool_id: &str) -> Result<Vec<Value>, CloudError> {
    cloud.list(
        Endpoint::Elb,
        &format!("{ELB}/pools/{}/members", encode(pool_id)),
        "members",
        "list the pool's members",
    )
}

/// Upstream's `deleteMember`: gone already is done; then the wait.
fn delete_member(
    cloud: &Cloud,
    lb_id: &str,
    pool_id: &str,
    member: &Value,
) -> Result<(), CloudError> {
    cloud.delete(
        Endpoint::Elb,
        &format!(
            "{ELB}/pools/{}/members/{}",
            encode(pool_id),
            encode(text(member, "id"))
        ),
        &format!(
            "delete member {} of pool {pool_id}",
            text(member, "address")
        ),
    )?;
    wait::active(cloud, lb_id)?;
    Ok(())
}

/// Upstream's monitor type (`createHealthMonitor`, `updateHealthMonitor`): HTTP for
/// HTTPS and TLS-terminating listeners, `UDP_CONNECT` for UDP when created (and none
/// sent when updated), else the listener's protocol.
fn monitor_type(listener_protocol: &str, creating: bool) -> Option<&str> {
    match listener_protocol {
        "HTTPS" | "TERMINATED_HTTPS" => Some("HTTP"),
        "UDP" if creating => Some("UDP_CONNECT"),
        "UDP" => None,
        other => Some(other),
    }
}

fn monitor_body(check: &HealthCheck, kind: Option<&str>) -> Value {
    let mut body = json!({
        "timeout": check.timeout,
        "delay": check.delay,
        "max_retries": check.max_retries,
    });
    if let Some(kind) = kind {
        body["type"] = json!(kind);
    }
    body
}

/// Upstream's `ensureHealthCheck`: a monitor made when the check is on and the pool has
/// none, changed when its values differ (upstream updates it at every call), deleted
/// when the check is off.
pub(super) fn ensure_health_check(
    cloud: &Cloud,
    lb_id: &str,
    pool: &Value,
    listener_protocol: &str,
    settings: &Settings,
) -> Result<(), CloudError> {
    let check = &settings.health;
    let monitor_id = text(pool, "healthmonitor_id");
    let path = format!("{ELB}/healthmonitors/{}", encode(monitor_id));
    if !monitor_id.is_empty() {
        if !check.enable {
            cloud.delete(Endpoint::Elb, &path, "delete a health monitor")?;
            wait::active(cloud, lb_id)?;
            return Ok(());
        }
        if let Some(found) = cloud.find(Endpoint::Elb, &path, "get a health monitor")? {
            let current = &found["healthmonitor"];
            let kind = monitor_type(listener_protocol, false);
            let same = current["timeout"].as_i64() == Some(check.timeout)
                && current["delay"].as_i64() == Some(check.delay)
                && current["max_retries"].as_i64() == Some(check.max_retries)
                && kind.is_none_or(|k| text(current, "type") == k);
            if !same {
                cloud.put(
                    Endpoint::Elb,
                    &path,
                    &json!({ "healthmonitor": monitor_body(check, kind) }),
                    "update a health monitor",
                )?;
                wait::active(cloud, lb_id)?;
            }
            return Ok(());
        }
        // The pool names a monitor that is gone: made again below.
    }
    if !check.enable {
        return Ok(());
    }
    let mut body = monitor_body(check, monitor_type(listener_protocol, true));
    body["pool_id"] = json!(text(pool, "id"));
    cloud.post(
        Endpoint::Elb,
        &format!("{ELB}/healthmonitors"),
        &json!({ "healthmonitor": body }),
        "create a health monitor",
    )?;
    wait::active(cloud, lb_id)?;
    Ok(())
}

/// Upstream's `deletePool`: the members (`DeleteAllPoolMembers`), the monitor, then
/// the pool; what is gone already counts as deleted.
pub(super) fn delete(cloud: &Cloud, lb_id: &str, pool: &Value) -> Result<(), CloudError> {
    let pool_id = text(pool, "id");
    for member in list_members(cloud, pool_id)? {
        delete_member(cloud, lb_id, pool_id, &member)?;
    }
    let monitor_id = text(pool, "healthmonitor_id");
    if !monitor_id.is_empty() {
        cloud.delete(
            Endpoint::Elb,
            &format!("{ELB}/healthmonitors/{}", encode(monitor_id)),
            "delete a health monitor",
        )?;
        wait::active(cloud, lb_id)?;
    }
    cloud.delete(
        Endpoint::Elb,
        &format!("{ELB}/pools/{}", encode(pool_id)),
        "delete a pool",
    )?;
    wait::active(cloud, lb_id)?;
    Ok(())
}
