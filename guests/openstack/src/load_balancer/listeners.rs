//! The load balancer's listeners, pools, members and health monitors, made to match
//! the Service's ports, the Nodes and the settings.

use serde_json::{Value, json};
use wasm_ccm_guest::cloud_error;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, Node, NodeAddressType, Protocol, Service};

use super::settings::Wanted;
use crate::OpenStack;
use crate::api;

impl OpenStack {
    /// The Service's listeners on `lb` (all untagged ones too when it is the `owner`),
    /// one per port, with their pools; the Service's obsolete ones deleted, other
    /// Services' left alone.
    pub(super) fn reconcile(
        &self,
        lb: &Value,
        wanted: &Wanted,
        service: &Service,
        nodes: &[Node],
        owner: bool,
    ) -> Result<(), CloudError> {
        let id = lb["id"].as_str().unwrap_or_default();
        let octavia = self.octavia()?;
        let listeners = self.list_children("listeners", "listeners", id)?;
        let pools = self.list_children("pools", "pools", id)?;
        let mut kept = Vec::new();
        let mut replaced: Vec<String> = Vec::new();
        for (index, port) in service.ports.iter().enumerate() {
            // occm's getListenerProtocol: a TLS certificate makes TERMINATED_HTTPS,
            // x-forwarded-for HTTP, else the port's protocol.
            let protocol = if !wanted.tls_container_ref.is_empty() {
                "TERMINATED_HTTPS"
            } else if wanted.x_forwarded_for {
                "HTTP"
            } else {
                match port.protocol {
                    Protocol::Udp => "UDP",
                    Protocol::Sctp => "SCTP",
                    _ => "TCP",
                }
            };
            let name = format!("listener_{index}_{}", wanted.name);
            // Octavia allows one listener per port and transport (TCP carries HTTP and
            // TLS too).
            let mut existing = listeners.iter().find(|l| {
                l["protocol_port"] == port.port
                    && transport(l["protocol"].as_str().unwrap_or_default()) == transport(protocol)
            });
            // occm's checkListenerPorts: a port another Service listens on is not ours.
            if let Some(l) = existing.filter(|l| !listener_is_ours(l, &wanted.name, owner)) {
                return Err(cloud_error::other(format!(
                    "the listener port {} already exists on load balancer {id} (listener {}, \
                     another Service's)",
                    port.port,
                    l["name"].as_str().unwrap_or_default()
                )));
            }
            // Ours with another protocol (x-forwarded-for or a certificate set or
            // unset): replaced, as its protocol cannot change.
            if let Some(l) = existing.filter(|l| l["protocol"] != protocol) {
                self.delete_listener(id, l, &pools)?;
                replaced.push(l["id"].as_str().unwrap_or_default().to_owned());
                existing = None;
            }
            let mut settings = json!({"name": name, "tags": [wanted.name]});
            // Left out (neither sent nor compared) where Octavia lacks them, as occm's
            // OctaviaFeatureVIPACL: a listener keeps what it has.
            if !wanted.allowed_cidrs.is_empty() {
                settings["allowed_cidrs"] = json!(wanted.allowed_cidrs);
            }
            if wanted.x_forwarded_for {
                settings["insert_headers"] = json!({"X-Forwarded-For": "true"});
            }
            if !wanted.tls_container_ref.is_empty() {
                settings["default_tls_container_ref"] = json!(wanted.tls_container_ref);
            }
            // Every protocol's, as occm sends them (Octavia keeps them on UDP and SCTP
            // listeners too).
            for (field, value) in &wanted.listener_settings {
                settings[*field] = json!(value);
            }
            let listener = match existing {
                Some(l) => {
                    if let Some(update) = listener_update(l, &settings, &wanted.name) {
                        let lid = l["id"].as_str().unwrap_or_default();
                        self.change(
                            id,
                            Request::put(&format!("{octavia}/lbaas/listeners/{lid}"))
                                .json(&json!({"listener": update})),
                            "update a listener",
                        )?;
                    }
                    l.clone()
                }
                None => {
                    let mut body = settings.clone();
                    body["protocol"] = json!(protocol);
                    body["protocol_port"] = json!(port.port);
                    body["loadbalancer_id"] = json!(id);
                    self.change(
                        id,
                        Request::post(&format!("{octavia}/lbaas/listeners"))
                            .json(&json!({"listener": body})),
                        "create a listener",
                    )?["listener"]
                        .clone()
                }
            };
            let listener_id = listener["id"].as_str().unwrap_or_default().to_owned();
            kept.push(listener_id.clone());
            self.reconcile_pool(
                id,
                &listener_id,
                index,
                port.node_port,
                protocol,
                &pools,
                wanted,
                nodes,
            )?;
        }
        for listener in &listeners {
            let lid = listener["id"].as_str().unwrap_or_default();
            if kept.iter().chain(&replaced).any(|k| k == lid)
                || !listener_is_ours(listener, &wanted.name, owner)
            {
                continue;
            }
            self.delete_listener(id, listener, &pools)?;
        }
        Ok(())
    }

    /// Deletes `listener` of load balancer `lb` with its pool (among `pools`).
    pub(super) fn delete_listener(
        &self,
        lb: &str,
        listener: &Value,
        pools: &[Value],
    ) -> Result<(), CloudError> {
        let octavia = self.octavia()?;
        let lid = listener["id"].as_str().unwrap_or_default();
        if let Some(pool) = pools.iter().find(|p| listener_of(p) == Some(lid)) {
            let pid = pool["id"].as_str().unwrap_or_default();
            self.change(
                lb,
                Request::delete(&format!("{octavia}/lbaas/pools/{pid}")),
                "delete a pool",
            )?;
        }
        self.change(
            lb,
            Request::delete(&format!("{octavia}/lbaas/listeners/{lid}")),
            "delete a listener",
        )?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn reconcile_pool(
        &self,
        lb: &str,
        listener: &str,
        index: usize,
        node_port: i32,
        protocol: &str,
        pools: &[Value],
        wanted: &Wanted,
        nodes: &[Node],
    ) -> Result<(), CloudError> {
        let octavia = self.octavia()?;
        // occm's buildPoolCreateOpt: HTTP behind an HTTP or TLS-terminating listener.
        let pool_protocol = if matches!(protocol, "HTTP" | "TERMINATED_HTTPS") {
            "HTTP"
        } else {
            wanted.proxy.unwrap_or(protocol)
        };
        // occm: `sessionAffinity: ClientIP` is SOURCE_IP persistence, else none.
        let persistence = if wanted.source_ip_persistence {
            json!({"type": "SOURCE_IP"})
        } else {
            Value::Null
        };
        let pool = match pools.iter().find(|p| listener_of(p) == Some(listener)) {
            Some(p) if p["protocol"] == pool_protocol => {
                let same_persistence = p["session_persistence"]["type"] == persistence["type"];
                if p["lb_algorithm"] != wanted.lb_method.as_str() || !same_persistence {
                    let pid = p["id"].as_str().unwrap_or_default();
                    self.change(
                        lb,
                        Request::put(&format!("{octavia}/lbaas/pools/{pid}"))
                            .json(&json!({"pool": {"lb_algorithm": wanted.lb_method,
                                             "session_persistence": persistence}})),
                        "update a pool",
                    )?;
                }
                p.clone()
            }
            other => {
                if let Some(p) = other {
                    // The protocol of a pool cannot change: a new one replaces it.
                    let pid = p["id"].as_str().unwrap_or_default();
                    self.change(
                        lb,
                        Request::delete(&format!("{octavia}/lbaas/pools/{pid}")),
                        "delete a pool",
                    )?;
                }
                let body = json!({"pool": {"name": format!("pool_{index}_{}", wanted.name),
                    "listener_id": listener, "protocol": pool_protocol,
                    "lb_algorithm": wanted.lb_method, "session_persistence": persistence}});
                self.change(
                    lb,
                    Request::post(&format!("{octavia}/lbaas/pools")).json(&body),
                    "create a pool",
                )?["pool"]
                    .clone()
            }
        };
        let pool_id = pool["id"].as_str().unwrap_or_default().to_owned();
        // Members as occm's buildBatchUpdateMemberOpts: the Nodes the node selector
        // picks, at their InternalIP (else ExternalIP) of the Service's first IP family,
        // on the node port; none without a node port (allocateLoadBalancerNodePorts
        // false). With a health check node port, members are probed there.
        // occm's canUseHTTPMonitor: not on a UDP pool before Octavia 2.16.
        let health_check_node_port = wanted
            .health_check_node_port
            .filter(|_| protocol != "UDP" || wanted.http_monitors_on_udp);
        let mut desired: Vec<Value> = nodes
            .iter()
            .filter(|_| node_port > 0)
            .filter(|node| selected(node, &wanted.node_selector))
            .filter_map(|node| {
                let address = member_address(node, wanted.ipv6)?;
                let mut member = json!({"name": node.metadata.name, "address": address,
                                        "protocol_port": node_port});
                if !wanted.member_subnet.is_empty() {
                    member["subnet_id"] = json!(wanted.member_subnet);
                }
                if let Some(port) = health_check_node_port {
                    member["monitor_port"] = json!(port);
                }
                Some(member)
            })
            .collect();
        let current = api::list(
            Request::get(&format!("{octavia}/lbaas/pools/{pool_id}/members")),
            "members",
            "list the pool's members",
        )?;
        if self.config.load_balancer.provider_requires_serial_api_calls {
            // The provider has no batch update: one member at a time, as occm.
            self.reconcile_members_serially(lb, &pool_id, &desired, current)?;
        } else {
            desired.sort_by(|a, b| a["address"].as_str().cmp(&b["address"].as_str()));
            let key = |m: &Value| {
                (
                    m["address"].as_str().unwrap_or_default().to_owned(),
                    m["protocol_port"].as_i64().unwrap_or(0),
                    m["monitor_port"].as_i64(),
                )
            };
            let mut now: Vec<_> = current.iter().map(key).collect();
            now.sort();
            let want: Vec<_> = desired.iter().map(key).collect();
            if now != want {
                self.change(
                    lb,
                    Request::put(&format!("{octavia}/lbaas/pools/{pool_id}/members"))
                        .json(&json!({"members": desired})),
                    "update the pool's members",
                )?;
            }
        }
        // The health monitor: the port's protocol (UDP-CONNECT for UDP), or with a
        // health check node port occm's HTTP `GET /healthz` expecting 200.
        let kind = if health_check_node_port.is_some() {
            "HTTP"
        } else {
            match protocol {
                "UDP" => "UDP-CONNECT",
                "SCTP" => "SCTP",
                _ => "TCP",
            }
        };
        let mut monitor = pool["healthmonitor_id"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
        if let (Some((delay, timeout, retries, down)), Some(mid)) = (wanted.monitor, &monitor) {
            let current = api::json(
                Request::get(&format!("{octavia}/lbaas/healthmonitors/{mid}")),
                "get the health monitor",
            )?;
            let h = &current["healthmonitor"];
            if h["type"] != kind {
                // A monitor's type cannot change: a new one replaces it.
                self.change(
                    lb,
                    Request::delete(&format!("{octavia}/lbaas/healthmonitors/{mid}")),
                    "delete the health monitor",
                )?;
                monitor = None;
            } else if h["delay"] != delay
                || h["timeout"] != timeout
                || h["max_retries"] != retries
                || h["max_retries_down"] != down
            {
                let body = json!({"healthmonitor": {"delay": delay, "timeout": timeout,
                    "max_retries": retries, "max_retries_down": down}});
                self.change(
                    lb,
                    Request::put(&format!("{octavia}/lbaas/healthmonitors/{mid}")).json(&body),
                    "update the health monitor",
                )?;
            }
        }
        match (wanted.monitor, monitor) {
            (Some((delay, timeout, retries, down)), None) => {
                let mut body = json!({"name": format!("monitor_{index}_{}", wanted.name),
                    "pool_id": pool_id, "type": kind, "delay": delay, "timeout": timeout,
                    "max_retries": retries, "max_retries_down": down});
                if kind == "HTTP" {
                    body["url_path"] = json!("/healthz");
                    body["http_method"] = json!("GET");
                    body["expected_codes"] = json!("200");
                }
                self.change(
                    lb,
                    Request::post(&format!("{octavia}/lbaas/healthmonitors"))
                        .json(&json!({"healthmonitor": body})),
                    "create a health monitor",
                )?;
            }
            (None, Some(mid)) => {
                self.change(
                    lb,
                    Request::delete(&format!("{octavia}/lbaas/healthmonitors/{mid}")),
                    "delete the health monitor",
                )?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The members of `pool` as occm's `SeriallyReconcilePoolMembers` makes them with
    /// `provider-requires-serial-api-calls` (for Octavia providers without the batch
    /// update): in the Nodes' order, a member is created (`POST
    /// /lbaas/pools/{id}/members` with its name, address and port only, named
    /// `member_<node>_<address>_<port>` as occm names it there) for each one of
    /// `desired` no member has the address and port of; then
    /// each member left over is deleted (`DELETE /lbaas/pools/{id}/members/{member}`,
    /// one already gone is fine); each call is followed by a wait for `ACTIVE`. A member
    /// that is there is left as it is: occm updates none.
    fn reconcile_members_serially(
        &self,
        lb: &str,
        pool: &str,
        desired: &[Value],
        mut current: Vec<Value>,
    ) -> Result<(), CloudError> {
        let octavia = self.octavia()?;
        // occm's memberExists: the same address and protocol port.
        let same = |m: &Value, d: &Value| {
            m["address"].as_str() == d["address"].as_str()
                && m["protocol_port"].as_i64() == d["protocol_port"].as_i64()
        };
        for member in desired {
            if current.iter().any(|m| same(m, member)) {
                // occm's popMember: kept, and not obsolete.
                current.retain(|m| !same(m, member));
                continue;
            }
            // occm's CreateMemberOpts there: the name, the address and the port only
            // (no subnet, no monitor port: the provider's defaults).
            let body = json!({
                "name": serial_member_name(member),
                "address": member["address"],
                "protocol_port": member["protocol_port"],
            });
            self.change(
                lb,
                Request::post(&format!("{octavia}/lbaas/pools/{pool}/members"))
                    .json(&json!({"member": body})),
                "create a member",
            )?;
        }
        for member in &current {
            let id = member["id"].as_str().unwrap_or_default();
            api::send_found(
                Request::delete(&format!("{octavia}/lbaas/pools/{pool}/members/{id}")),
                "delete an obsolete member",
            )?;
            self.wait_active(lb)?;
        }
        Ok(())
    }
}

/// occm's name for a member it creates alone (`SeriallyReconcilePoolMembers`):
/// `member_<node>_<address>_<node port>`, cut to 255 characters.
fn serial_member_name(member: &Value) -> String {
    format!(
        "member_{}_{}_{}",
        member["name"].as_str().unwrap_or_default(),
        member["address"].as_str().unwrap_or_default(),
        member["protocol_port"].as_i64().unwrap_or(0)
    )
    .chars()
    .take(255)
    .collect()
}

/// What of `settings` the existing listener `l` of the Service `name` lacks, as occm's
/// `ensureOctaviaListener` updates a listener it found by port and protocol: never its
/// name (one named otherwise, such as the in-tree provider's `listener_<lb>_<i>` or one
/// of another port index, keeps it), the Service's name added to its tags when they lack it,
/// allowed CIDRs as sets, the rest by value. `None` when nothing differs.
fn listener_update(l: &Value, settings: &Value, name: &str) -> Option<Value> {
    let update: serde_json::Map<String, Value> = settings
        .as_object()?
        .iter()
        .filter(|(k, v)| match k.as_str() {
            "name" => false,
            "tags" => !tags(l).iter().any(|t| t == name),
            "allowed_cidrs" => !same_cidrs(&l["allowed_cidrs"], v),
            _ => l[k.as_str()] != **v,
        })
        .map(|(k, v)| match k.as_str() {
            // Added to the listener's own tags, as occm appends it.
            "tags" => {
                let mut kept = tags(l);
                kept.push(name.to_owned());
                (k.clone(), json!(kept))
            }
            _ => (k.clone(), v.clone()),
        })
        .collect();
    (!update.is_empty()).then_some(Value::Object(update))
}

/// The transport a listener protocol runs on: one listener per port and transport.
fn transport(protocol: &str) -> &str {
    match protocol {
        "UDP" | "SCTP" => protocol,
        _ => "TCP",
    }
}

/// Whether `node` has every label of `selector` (an empty value: any value): occm's
/// `filterNodes`.
pub(super) fn selected(node: &Node, selector: &[(String, String)]) -> bool {
    selector.iter().all(|(key, value)| {
        node.metadata
            .labels
            .iter()
            .find(|(k, _)| k == key)
            .is_some_and(|(_, v)| value.is_empty() || v == value)
    })
}

/// occm's `nodeAddressForLB`: the Node's first InternalIP of the family, else its
/// first ExternalIP of the family.
pub(super) fn member_address(node: &Node, ipv6: bool) -> Option<&str> {
    let of = |kind: NodeAddressType| {
        node.addresses
            .iter()
            .find(|a| a.address_type == kind && a.address.contains(':') == ipv6)
            .map(|a| a.address.as_str())
    };
    of(NodeAddressType::InternalIp).or_else(|| of(NodeAddressType::ExternalIp))
}

/// The `tags` of an Octavia object.
pub(super) fn tags(value: &Value) -> Vec<String> {
    value["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect()
}

/// Whether a listener is the Service's (`name`): tagged with it, or untagged on the
/// Service's own load balancer (occm's `deleteOctaviaListeners` and `checkListenerPorts`).
pub(super) fn listener_is_ours(listener: &Value, name: &str, owner: bool) -> bool {
    let tags = tags(listener);
    tags.iter().any(|t| t == name) || (owner && tags.is_empty())
}

/// The listener a pool serves.
pub(super) fn listener_of(pool: &Value) -> Option<&str> {
    pool["listeners"].as_array()?.first()?["id"].as_str()
}

/// Whether two `allowed_cidrs` values (null or lists) hold the same CIDRs.
fn same_cidrs(a: &Value, b: &Value) -> bool {
    let set = |v: &Value| {
        let mut list: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_owned))
            .collect();
        list.sort();
        list
    };
    set(a) == set(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_take_an_address_of_the_family_internal_first() {
        use wasm_ccm_guest::types::NodeAddress;
        let addr = |t, a: &str| NodeAddress {
            address_type: t,
            address: a.into(),
        };
        let mut node = Node {
            addresses: vec![
                addr(NodeAddressType::ExternalIp, "203.0.113.5"),
                addr(NodeAddressType::ExternalIp, "2001:db8::5"),
                addr(NodeAddressType::InternalIp, "10.0.0.5"),
            ],
            ..wasm_ccm_guest::testing::node("n")
        };
        node.metadata.labels = vec![("pool".into(), "web".into())];
        assert_eq!(member_address(&node, false), Some("10.0.0.5"));
        assert_eq!(member_address(&node, true), Some("2001:db8::5"));
        assert!(selected(&node, &[("pool".into(), "web".into())]));
        assert!(selected(&node, &[("pool".into(), String::new())]));
        assert!(!selected(&node, &[("pool".into(), "batch".into())]));
        assert!(!selected(&node, &[("zone".into(), String::new())]));
    }

    #[test]
    fn serial_members_are_named_as_occm_names_them() {
        let member = json!({"name": "node-a", "address": "10.0.0.11", "protocol_port": 30080});
        assert_eq!(serial_member_name(&member), "member_node-a_10.0.0.11_30080");
        let long = json!({"name": "n".repeat(300), "address": "10.0.0.11", "protocol_port": 1});
        assert_eq!(serial_member_name(&long).len(), 255);
    }

    /// occm's ensureOctaviaListener: a listener found by port and protocol keeps its
    /// name (the in-tree provider's `listener_<lb>_<i>` too); an untagged one gets the
    /// Service's tag, and only what differs is sent.
    #[test]
    fn existing_listeners_keep_their_names_as_occm() {
        const NAME: &str = "kube_service_kubernetes_default_web";
        let settings = json!({"name": format!("listener_0_{NAME}"), "tags": [NAME],
            "connection_limit": -1, "allowed_cidrs": ["0.0.0.0/0"]});
        let legacy = json!({"name": "listener_a1234567812345678123456781234567_0",
            "tags": ["team-a"], "connection_limit": -1, "allowed_cidrs": ["0.0.0.0/0"]});
        assert_eq!(
            listener_update(&legacy, &settings, NAME),
            Some(json!({"tags": ["team-a", NAME]}))
        );
        // Tagged (among other tags), named otherwise, the same settings: nothing.
        let tagged = json!({"name": "listener_1_x", "tags": ["team-a", NAME],
            "connection_limit": -1, "allowed_cidrs": ["0.0.0.0/0"]});
        assert_eq!(listener_update(&tagged, &settings, NAME), None);
        let limited = json!({"name": "listener_1_x", "tags": [NAME],
            "connection_limit": 10, "allowed_cidrs": ["0.0.0.0/0"]});
        assert_eq!(
            listener_update(&limited, &settings, NAME),
            Some(json!({"connection_limit": -1}))
        );
        // Allowed CIDRs left out (Octavia lacks them): the listener's stay.
        let open = json!({"name": "n", "tags": [NAME], "connection_limit": -1});
        assert_eq!(listener_update(&tagged, &open, NAME), None);
    }

    #[test]
    fn cidr_lists_compare_as_sets() {
        assert!(same_cidrs(&json!(["b", "a"]), &json!(["a", "b"])));
        assert!(same_cidrs(&Value::Null, &json!([])));
        assert!(!same_cidrs(&json!(["a"]), &Value::Null));
    }
}
