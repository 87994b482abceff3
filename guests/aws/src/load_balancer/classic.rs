//! Classic Load Balancers, upstream's default (`EnsureLoadBalancer` without
//! `aws-load-balancer-type: nlb`).
//!
//! One load balancer per Service, named as upstream, with:
//! - listeners per TCP port on the node port ([`classic_options::listeners`]: SSL or
//!   HTTPS with `ssl-cert` on the `ssl-ports`, `backend-protocol`), the
//!   `ssl-negotiation-policy` on the SSL/HTTPS listeners, the proxy protocol
//!   (`proxy-protocol: "*"`) on the node ports;
//! - its own security group `k8s-elb-<name>` admitting the source ranges on each port
//!   (and ICMP "fragmentation needed"), unless `security-groups` (or the cloud config's
//!   `ElbSecurityGroup`) names the groups; `extra-security-groups` are added;
//! - the nodes' groups admitting everything from the load balancer's group;
//! - the health check, the nodes' instances and the attributes.
//!
//! An existing Classic load balancer of the Service is brought to that (listeners,
//! subnets, groups, instances, health check, attributes, policies); deleting revokes
//! the nodes' rules, deletes the load balancer and then its own group (retried while
//! AWS still holds it), and a retried delete finds a group left behind.

use super::classic_options::{self, PROXY_PROTOCOL_POLICY};
use super::own_group;
use super::security_groups::{self, ClassicRules};
use super::{
    annotation, default_name, internal, invalid, source_ranges, status, subnets, tags, targets,
};
use crate::Aws;
use crate::ec2::{Instance, SecurityGroup};
use crate::elb::{Listener, LoadBalancer};
use wasm_ccm_guest::types::{CloudError, LoadBalancerStatus, Node, Service};

/// The group IDs of annotation `suffix` (`security-groups`, `extra-security-groups`).
fn group_list(service: &Service, suffix: &str) -> Vec<String> {
    annotation(service, suffix)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The groups the load balancer gets, and its own group when it has one.
fn security_group_list(
    state: &Aws,
    service: &Service,
    name: &str,
    vpc: &str,
) -> Result<(Vec<String>, Option<SecurityGroup>), CloudError> {
    let list = |suffix: &str| group_list(service, suffix);
    let annotated = list("security-groups");
    let (mut groups, own) = if !annotated.is_empty() {
        (annotated, None)
    } else if !state.config.elb_security_group.is_empty() {
        (vec![state.config.elb_security_group.clone()], None)
    } else {
        let own = own_group::ensure_own_group(state, service, name, vpc)?;
        (vec![own.id.clone()], Some(own))
    };
    for extra in list("extra-security-groups") {
        if !groups.contains(&extra) {
            groups.push(extra);
        }
    }
    Ok((groups, own))
}

pub fn get(state: &Aws, service: &Service) -> Result<Option<LoadBalancerStatus>, CloudError> {
    let name = default_name(service);
    match state.elb.load_balancer(&name)? {
        Some(lb) => Ok(Some(status(&lb.dns_name))),
        // A delete interrupted after the load balancer went leaves its group: the
        // controller then calls ensure-load-balancer-deleted again instead of
        // releasing the Service.
        None if own_group::find_own_group(state, &name, &state.config.vpc)?.is_some() => {
            Ok(Some(LoadBalancerStatus {
                ingress: Vec::new(),
            }))
        }
        None => Ok(None),
    }
}

pub fn ensure(
    state: &Aws,
    service: &Service,
    nodes: &[Node],
) -> Result<LoadBalancerStatus, CloudError> {
    reconcile(state, service, nodes, true)
}

pub fn update(state: &Aws, service: &Service, nodes: &[Node]) -> Result<(), CloudError> {
    reconcile(state, service, nodes, false).map(drop)
}

/// Brings the load balancer to what the Service asks; creates it when `create` (an
/// ensure), else (an update) finds it or fails before anything is made.
fn reconcile(
    state: &Aws,
    service: &Service,
    nodes: &[Node],
    create: bool,
) -> Result<LoadBalancerStatus, CloudError> {
    let name = default_name(service);
    // Everything read from the Service is checked before anything is made.
    if annotation(service, "target-group-attributes").is_some() {
        return Err(invalid(
            service,
            "target group attributes annotation is only supported for NLB",
        ));
    }
    let listeners = classic_options::listeners(service).map_err(|e| invalid(service, e))?;
    if listeners.is_empty() {
        return Err(invalid(
            service,
            "no port has a node port (spec.allocateLoadBalancerNodePorts is false?): a Classic \
             load balancer forwards to node ports",
        ));
    }
    let health = classic_options::health_check(
        service,
        &listeners,
        state.config.shared_health_probe.as_ref(),
    )
    .map_err(|e| invalid(service, e))?;
    let attributes = classic_options::attributes(service).map_err(|e| invalid(service, e))?;
    let proxy = classic_options::proxy_protocol(service).map_err(|e| invalid(service, e))?;
    let sources = source_ranges(service)?;
    let existing = state.elb.load_balancer(&name)?;
    if existing.is_none() && !create {
        return Err(invalid(service, "load balancer not found"));
    }
    let (instances, vpc) = targets(state, service, nodes)?;
    let internal = internal(service);
    let subnets = subnets(state, service, internal, &vpc)?;
    let (groups, own) = security_group_list(state, service, &name, &vpc)?;
    if let Some(own) = &own {
        own_group::set_own_ingress(state, own, service, &sources)?;
    }
    let tags = tags(state, service);
    // Groups the load balancer gave up: removed (when its own) once the nodes admit
    // the new ones, so traffic never stops in between.
    let mut dropped = Vec::new();
    let lb = match existing {
        None => {
            state
                .elb
                .create_load_balancer(&name, internal, &listeners, &subnets, &groups, &tags)?;
            wasm_ccm_guest::log::info(
                "created classic load balancer",
                &[("name", &name), ("subnets", &subnets.join(","))],
            );
            let lb = state.elb.load_balancer(&name)?.ok_or_else(|| {
                invalid(
                    service,
                    format!("load balancer {name} vanished after its creation"),
                )
            })?;
            sync_proxy_protocol(state, &lb, &listeners, proxy)?;
            lb
        }
        Some(lb) => {
            dropped = update_existing(state, &lb, &listeners, &subnets, &groups, proxy)?;
            let additional = annotation(service, "additional-resource-tags")
                .map(super::key_values)
                .unwrap_or_default();
            state.elb.add_tags(&name, &additional)?;
            lb
        }
    };
    if attributes != normalized(&state.elb.attributes(&name)?, &attributes) {
        state.elb.modify_attributes(&name, &attributes)?;
    }
    if let Some(policy) = annotation(service, "ssl-negotiation-policy") {
        ssl_negotiation_policy(state, &name, policy, &listeners, &lb.listener_policies)?;
    }
    if lb.health_check.as_ref() != Some(&health) {
        state.elb.configure_health_check(&name, &health)?;
    }
    if !state.config.disable_security_group_ingress {
        let rules = ClassicRules {
            lb: &name,
            source: groups.first().map(String::as_str),
            groups: &groups,
            own_group: own.as_ref().map(|o| o.id.as_str()),
            releasing: false,
        };
        security_groups::sync_classic(state, &rules, &vpc, &instances)?;
    }
    sync_instances(state, &lb, &instances)?;
    // Its own group, replaced by named groups (now, or before and AWS held it then).
    if own.is_none()
        && let Some(left) = own_group::find_own_group(state, &name, &vpc)?
        && !groups.contains(&left.id)
        && !dropped.contains(&left.id)
    {
        dropped.push(left.id);
    }
    for group in dropped {
        let released = [group];
        let rules = ClassicRules {
            lb: &name,
            source: groups.first().map(String::as_str),
            groups: &released,
            own_group: Some(released[0].as_str()),
            releasing: true,
        };
        own_group::remove_if_owned(state, &rules, &vpc, &instances)?;
    }
    Ok(status(&lb.dns_name))
}

/// `current` with what AWS fills in itself taken from `wanted` where `wanted` leaves it
/// open (the draining timeout, the access log's place while logs are off).
fn normalized(
    current: &crate::elb::Attributes,
    wanted: &crate::elb::Attributes,
) -> crate::elb::Attributes {
    let mut c = current.clone();
    if wanted.draining_timeout.is_none() {
        c.draining_timeout = None;
    }
    if wanted.access_log_emit_interval.is_none() {
        c.access_log_emit_interval = None;
    }
    if !wanted.access_log_enabled {
        c.access_log_bucket = wanted.access_log_bucket.clone();
        c.access_log_prefix = wanted.access_log_prefix.clone();
    }
    c
}

/// Brings an existing load balancer's subnets, groups, listeners and proxy protocol
/// policies to what the Service asks (upstream's `ensureLoadBalancer`, update path;
/// as upstream, the scheme is not changed).
fn update_existing(
    state: &Aws,
    lb: &LoadBalancer,
    listeners: &[Listener],
    subnets: &[String],
    groups: &[String],
    proxy: bool,
) -> Result<Vec<String>, CloudError> {
    let name = &lb.name;
    let missing = |want: &[String], have: &[String]| -> Vec<String> {
        want.iter().filter(|s| !have.contains(s)).cloned().collect()
    };
    state
        .elb
        .change_subnets(name, &missing(&lb.subnets, subnets), false)?;
    state
        .elb
        .change_subnets(name, &missing(subnets, &lb.subnets), true)?;
    let dropped = missing(&lb.security_groups, groups);
    if !dropped.is_empty() || !missing(groups, &lb.security_groups).is_empty() {
        state.elb.apply_security_groups(name, groups)?;
    }
    let stale: Vec<&Listener> = lb
        .listeners
        .iter()
        .filter(|l| !listeners.iter().any(|want| want.same_as(l)))
        .collect();
    for l in &stale {
        state.elb.delete_listener(name, l.port)?;
    }
    let new: Vec<Listener> = listeners
        .iter()
        .filter(|want| !lb.listeners.iter().any(|l| want.same_as(l)))
        .cloned()
        .collect();
    if !new.is_empty() {
        state.elb.create_listeners(name, &new)?;
    }
    if !new.is_empty() || !stale.is_empty() {
        wasm_ccm_guest::log::info(
            "updated classic load balancer listeners",
            &[("name", name), ("listeners", &listeners.len().to_string())],
        );
    }
    sync_proxy_protocol(state, lb, listeners, proxy)?;
    Ok(dropped)
}

/// The proxy protocol policy on every listener's node port when `proxy`, on none
/// otherwise (and on no port without a listener); the policy made when missing.
fn sync_proxy_protocol(
    state: &Aws,
    lb: &LoadBalancer,
    listeners: &[Listener],
    proxy: bool,
) -> Result<(), CloudError> {
    let name = &lb.name;
    let has_proxy = |port: i32| {
        lb.backend_policies
            .iter()
            .any(|(p, policies)| *p == port && policies.iter().any(|x| x == PROXY_PROTOCOL_POLICY))
    };
    let policy_exists = lb
        .backend_policies
        .iter()
        .any(|(_, policies)| policies.iter().any(|x| x == PROXY_PROTOCOL_POLICY));
    if proxy && !policy_exists && !state.elb.has_policy(name, PROXY_PROTOCOL_POLICY)? {
        state.elb.create_policy(
            name,
            PROXY_PROTOCOL_POLICY,
            "ProxyProtocolPolicyType",
            ("ProxyProtocol", "true"),
        )?;
    }
    for l in listeners {
        if has_proxy(l.instance_port) != proxy {
            let policies: &[&str] = if proxy { &[PROXY_PROTOCOL_POLICY] } else { &[] };
            state
                .elb
                .set_backend_policies(name, l.instance_port, policies)?;
        }
    }
    for (port, policies) in &lb.backend_policies {
        if !policies.is_empty() && !listeners.iter().any(|l| l.instance_port == *port) {
            state.elb.set_backend_policies(name, *port, &[])?;
        }
    }
    Ok(())
}

/// `k8s-SSLNegotiationPolicy-<value>` on every SSL/HTTPS listener (`current`: the
/// policies of each port as last described).
fn ssl_negotiation_policy(
    state: &Aws,
    name: &str,
    value: &str,
    listeners: &[Listener],
    current: &[(i32, Vec<String>)],
) -> Result<(), CloudError> {
    let policy = format!("k8s-SSLNegotiationPolicy-{value}");
    let in_use = current.iter().any(|(_, p)| p.contains(&policy));
    if !in_use && !state.elb.has_policy(name, &policy)? {
        state.elb.create_policy(
            name,
            &policy,
            "SSLNegotiationPolicyType",
            ("Reference-Security-Policy", value),
        )?;
    }
    for l in listeners
        .iter()
        .filter(|l| matches!(l.protocol.as_str(), "ssl" | "https"))
    {
        let set = current
            .iter()
            .any(|(port, policies)| *port == l.port && policies.contains(&policy));
        if !set {
            state.elb.set_listener_policies(name, l.port, &[&policy])?;
        }
    }
    Ok(())
}

/// Registers the nodes' instances and deregisters the others.
fn sync_instances(
    state: &Aws,
    lb: &LoadBalancer,
    instances: &[Instance],
) -> Result<(), CloudError> {
    let wanted: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
    let add: Vec<String> = wanted
        .iter()
        .filter(|id| !lb.instances.contains(id))
        .cloned()
        .collect();
    let remove: Vec<String> = lb
        .instances
        .iter()
        .filter(|id| !wanted.contains(id))
        .cloned()
        .collect();
    state.elb.change_instances(&lb.name, &add, true)?;
    state.elb.change_instances(&lb.name, &remove, false)?;
    if !add.is_empty() || !remove.is_empty() {
        wasm_ccm_guest::log::info(
            "updated classic load balancer instances",
            &[
                ("name", &lb.name),
                ("registered", &add.len().to_string()),
                ("deregistered", &remove.len().to_string()),
            ],
        );
    }
    Ok(())
}

pub fn delete(state: &Aws, service: &Service) -> Result<(), CloudError> {
    let name = default_name(service);
    let lb = state.elb.load_balancer(&name)?;
    let vpc = lb
        .as_ref()
        .map(|lb| lb.vpc_id.clone())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| state.config.vpc.clone());
    let own = own_group::find_own_group(state, &name, &vpc)?;
    if lb.is_some() {
        state.elb.delete_load_balancer(&name)?;
        wasm_ccm_guest::log::info("deleted classic load balancer", &[("name", &name)]);
    }
    // The nodes' rules after the load balancer: when two load balancers behind one
    // group go at once, the second to look finds the first gone and revokes the rule.
    // Its groups: what it had, its own, and what the Service and cloud config name
    // (for a delete retried after the load balancer went).
    let mut groups: Vec<String> = lb.map(|lb| lb.security_groups).unwrap_or_default();
    for group in own
        .iter()
        .map(|o| o.id.clone())
        .chain(group_list(service, "security-groups"))
        .chain(group_list(service, "extra-security-groups"))
        .chain(Some(state.config.elb_security_group.clone()))
    {
        if !group.is_empty() && !groups.contains(&group) {
            groups.push(group);
        }
    }
    if !state.config.disable_security_group_ingress && !groups.is_empty() {
        let rules = ClassicRules {
            lb: &name,
            source: None,
            groups: &groups,
            own_group: own.as_ref().map(|o| o.id.as_str()),
            releasing: true,
        };
        security_groups::sync_classic(state, &rules, &vpc, &[])?;
    }
    if let Some(own) = own {
        own_group::delete_own_group(state, &own)?;
    }
    Ok(())
}
