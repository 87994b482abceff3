//! One listener per Service port, each with its pool: upstream's `parseProtocol`,
//! `filterListenerByPort`, `createListener`, `updateListener`, `deleteListeners` and
//! the loops of `EnsureLoadBalancer` and `UpdateLoadBalancer`.
//!
//! Listeners are listed through ELB v2 and made and changed through ELB v3 (as
//! upstream does: only v3 takes timeouts and transparent client IP).

use serde_json::{Value, json};
use wasm_ccm_guest::types::{CloudError, Node, Protocol, Service, ServicePort};

use super::annotations::Settings;
use super::cloud::{Cloud, ELB, ELB_V3, Endpoint, encode, text};
use super::{fail_for, names, pools, wait};

/// Upstream's `parseProtocol`: `TERMINATED_HTTPS` with a default TLS container, else
/// `HTTP` with `x-forwarded-host`, else the port's protocol. SCTP is not an ELB
/// protocol.
pub(super) fn protocol(
    service: &Service,
    settings: &Settings,
    port: &ServicePort,
) -> Result<&'static str, CloudError> {
    if settings.tls_container.is_some() {
        return Ok("TERMINATED_HTTPS");
    }
    if settings.x_forwarded_host {
        return Ok("HTTP");
    }
    match port.protocol {
        Protocol::Tcp => Ok("TCP"),
        Protocol::Udp => Ok("UDP"),
        Protocol::Sctp => Err(fail_for(
            service,
            &format!(
                "port {}: SCTP is not a protocol of shared ELB listeners",
                port.port
            ),
        )),
    }
}

/// The ELB's listeners (`GET /v2/{project_id}/elb/listeners?loadbalancer_id=`).
pub(super) fn list(cloud: &Cloud, lb_id: &str) -> Result<Vec<Value>, CloudError> {
    cloud.list(
        Endpoint::Elb,
        &format!("{ELB}/listeners?loadbalancer_id={}", encode(lb_id)),
        "listeners",
        "list the ELB's listeners",
    )
}

/// Upstream's `filterListenerByPort`: same protocol and port.
pub(super) fn find<'a>(listeners: &'a [Value], protocol: &str, port: i32) -> Option<&'a Value> {
    listeners.iter().find(|l| {
        text(l, "protocol") == protocol && l["protocol_port"].as_i64() == Some(i64::from(port))
    })
}

/// The settings upstream's `createListener` and `updateListener` both send: the name,
/// `X-Forwarded-Host`, the timeouts (0: the API's default) and, on TCP and UDP
/// listeners, transparent client IP.
fn common_body(service: &Service, settings: &Settings, protocol: &str, port: i32) -> Value {
    let mut body = json!({
        "name": names::listener(service, protocol, port),
        "insert_headers": {"X-Forwarded-Host": settings.x_forwarded_host},
    });
    // The API refuses a keepalive timeout on a shared ELB's UDP listener (upstream
    // sends it all the same).
    if settings.idle_timeout != 0 && protocol != "UDP" {
        body["keepalive_timeout"] = json!(settings.idle_timeout);
    }
    if matches!(protocol, "HTTP" | "TERMINATED_HTTPS") {
        if settings.request_timeout != 0 {
            body["client_timeout"] = json!(settings.request_timeout);
        }
        if settings.response_timeout != 0 {
            body["member_timeout"] = json!(settings.response_timeout);
        }
    }
    if matches!(protocol, "TCP" | "UDP") {
        body["transparent_client_ip_enable"] = json!(settings.transparent_client_ip);
    }
    if protocol == "TERMINATED_HTTPS"
        && let Some(container) = &settings.tls_container
    {
        body["default_tls_container_ref"] = json!(container);
    }
    body
}

/// Upstream's `createListener` (`POST /v3/{project_id}/elb/listeners`).
fn create(
    cloud: &Cloud,
    lb_id: &str,
    service: &Service,
    settings: &Settings,
    protocol: &str,
    port: i32,
) -> Result<Value, CloudError> {
    let mut body = common_body(service, settings, protocol, port);
    body["loadbalancer_id"] = json!(lb_id);
    body["protocol"] = json!(protocol);
    body["protocol_port"] = json!(port);
    let created = cloud.post(
        Endpoint::Elb,
        &format!("{ELB_V3}/listeners"),
        &json!({ "listener": body }),
        &format!("create the {protocol} listener of port {port}"),
    )?;
    wait::active(cloud, lb_id)?;
    Ok(created["listener"].clone())
}

/// Upstream's `updateListener` (`PUT /v3/{project_id}/elb/listeners/{id}`), at every
/// ensure as upstream; here the TLS container follows the annotation too. The ELB is
/// `PENDING_UPDATE` after it: waited for, so the changes after it are not refused.
fn update(
    cloud: &Cloud,
    lb_id: &str,
    listener: &Value,
    service: &Service,
    settings: &Settings,
) -> Result<(), CloudError> {
    let protocol = text(listener, "protocol");
    let port = listener["protocol_port"].as_i64().unwrap_or_default() as i32;
    cloud.put(
        Endpoint::Elb,
        &format!("{ELB_V3}/listeners/{}", encode(text(listener, "id"))),
        &json!({ "listener": common_body(service, settings, protocol, port) }),
        &format!("update the {protocol} listener of port {port}"),
    )?;
    wait::active(cloud, lb_id).map(drop)
}

/// `kubernetes.io/elb.connection-limit` (documented upstream, read by none of its
/// code): set through ELB v2 (v3 has no such field) when it differs.
fn ensure_connection_limit(
    cloud: &Cloud,
    lb_id: &str,
    listener: &Value,
    settings: &Settings,
) -> Result<(), CloudError> {
    let Some(limit) = settings.connection_limit else {
        return Ok(());
    };
    if listener["connection_limit"].as_i64() == Some(limit) {
        return Ok(());
    }
    cloud.put(
        Endpoint::Elb,
        &format!("{ELB}/listeners/{}", encode(text(listener, "id"))),
        &json!({"listener": {"connection_limit": limit}}),
        "set the listener's connection limit",
    )?;
    wait::active(cloud, lb_id)?;
    Ok(())
}

/// Upstream's `deleteListeners` for one listener: its pool ([`pools::delete`]), then
/// the listener; gone already counts as deleted.
fn delete(cloud: &Cloud, lb_id: &str, listener: &Value, pools: &[Value]) -> Result<(), CloudError> {
    let listener_id = text(listener, "id");
    if let Some(pool) = pools::of_listener(pools, listener_id) {
        pools::delete(cloud, lb_id, pool)?;
    }
    cloud.delete(
        Endpoint::Elb,
        &format!("{ELB}/listeners/{}", encode(listener_id)),
        &format!(
            "delete the {} listener of port {}",
            text(listener, "protocol"),
            listener["protocol_port"]
        ),
    )?;
    wait::active(cloud, lb_id)?;
    Ok(())
}

/// Each Service port with its listener protocol; two ports needing the same listener
/// (TCP and UDP 80 behind `x-forwarded-host`) are an error.
fn wanted<'a>(
    service: &'a Service,
    settings: &Settings,
) -> Result<Vec<(&'a ServicePort, &'static str)>, CloudError> {
    let mut wanted: Vec<(&ServicePort, &'static str)> = Vec::new();
    for port in &service.ports {
        let protocol = protocol(service, settings, port)?;
        if wanted
            .iter()
            .any(|(p, pr)| p.port == port.port && *pr == protocol)
        {
            return Err(fail_for(
                service,
                &format!(
                    "two ports need the same {protocol} listener on port {}",
                    port.port
                ),
            ));
        }
        wanted.push((port, protocol));
    }
    Ok(wanted)
}

/// The listener loop of upstream's `EnsureLoadBalancer`: per port, the listener made or
/// updated, its pool made, its members and health monitor reconciled. On an ELB made
/// here (`owned`), listeners of no Service port are deleted with their pools, first
/// (upstream deletes them last, so a port whose listener changes protocol could not
/// take its port back); on an adopted ELB (`kubernetes.io/elb.id`) other listeners are
/// left alone, as upstream leaves them.
pub(super) fn reconcile(
    cloud: &Cloud,
    lb: &Value,
    service: &Service,
    settings: &Settings,
    nodes: &[Node],
    owned: bool,
) -> Result<(), CloudError> {
    let lb_id = text(lb, "id");
    let wanted = wanted(service, settings)?;
    let mut listeners = list(cloud, lb_id)?;
    let pools = pools::list(cloud, lb_id)?;
    if owned {
        let is_wanted = |l: &Value| {
            wanted.iter().any(|(port, protocol)| {
                find(std::slice::from_ref(l), protocol, port.port).is_some()
            })
        };
        for listener in listeners.iter().filter(|l| !is_wanted(l)) {
            delete(cloud, lb_id, listener, &pools)?;
        }
        listeners.retain(is_wanted);
    }
    for (port, protocol) in wanted {
        let listener = match find(&listeners, protocol, port.port) {
            Some(listener) => {
                update(cloud, lb_id, listener, service, settings)?;
                listener.clone()
            }
            None => create(cloud, lb_id, service, settings, protocol, port.port)?,
        };
        ensure_connection_limit(cloud, lb_id, &listener, settings)?;
        let pool = pools::ensure(cloud, lb_id, &listener, &pools, settings)?;
        pools::reconcile_members(cloud, lb, &pool, service, port, nodes)?;
        pools::ensure_health_check(cloud, lb_id, &pool, protocol, settings)?;
    }
    Ok(())
}

/// The loop of upstream's `UpdateLoadBalancer`: per port, the listener must exist
/// (upstream's error otherwise), its pool is made if missing, its members and health
/// monitor reconciled. Nothing else changes.
pub(super) fn update_members(
    cloud: &Cloud,
    lb: &Value,
    service: &Service,
    settings: &Settings,
    nodes: &[Node],
) -> Result<(), CloudError> {
    let lb_id = text(lb, "id");
    let wanted = wanted(service, settings)?;
    let listeners = list(cloud, lb_id)?;
    let pools = pools::list(cloud, lb_id)?;
    for (port, protocol) in wanted {
        let Some(listener) = find(&listeners, protocol, port.port) else {
            let kind = match port.protocol {
                Protocol::Tcp => "TCP",
                Protocol::Udp => "UDP",
                Protocol::Sctp => "SCTP",
            };
            return Err(fail_for(
                service,
                &format!(
                    "error, can not find a listener matching {kind}:{}",
                    port.port
                ),
            ));
        };
        let pool = pools::ensure(cloud, lb_id, listener, &pools, settings)?;
        pools::reconcile_members(cloud, lb, &pool, service, port, nodes)?;
        pools::ensure_health_check(cloud, lb_id, &pool, protocol, settings)?;
    }
    Ok(())
}

/// Upstream's `deleteELBInstance` first step: every listener of the ELB, with its pool.
pub(super) fn delete_all(cloud: &Cloud, lb_id: &str) -> Result<(), CloudError> {
    let pools = pools::list(cloud, lb_id)?;
    for listener in list(cloud, lb_id)? {
        delete(cloud, lb_id, &listener, &pools)?;
    }
    Ok(())
}

/// Upstream's `deleteListener` for an adopted ELB: only the listeners of the Service's
/// ports (and their pools), found by the protocols `settings` give them.
pub(super) fn delete_matching(
    cloud: &Cloud,
    lb_id: &str,
    service: &Service,
    settings: &Settings,
) -> Result<(), CloudError> {
    let listeners = list(cloud, lb_id)?;
    let pools = pools::list(cloud, lb_id)?;
    for port in &service.ports {
        // A port no listener can serve (SCTP) has none to delete.
        let Ok(protocol) = protocol(service, settings, port) else {
            continue;
        };
        if let Some(listener) = find(&listeners, protocol, port.port) {
            delete(cloud, lb_id, listener, &pools)?;
        }
    }
    Ok(())
}
