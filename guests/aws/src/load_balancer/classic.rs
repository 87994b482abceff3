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
    if let Some(lb) = state.elb.load_balancer(&name)? {
        return Ok(Some(status(&lb.dns_name)));
    }
    // A delete interrupted after the load balancer went leaves its group, or (with
    // named groups) the nodes' rules admitting it: the controller then calls
    // ensure-load-balancer-deleted again instead of releasing the Service.
    let vpc = &state.config.vpc;
    let left = own_group::find_own_group(state, &name, vpc)?.is_some()
        || (!state.config.disable_security_group_ingress
            && security_groups::classic_rules_left(
                state,
                &name,
                vpc,
                &released_groups(state, service, Vec::new(), None),
            )?);
    Ok(left.then(|| LoadBalancerStatus {
        ingress: Vec::new(),
    }))
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

/// The groups a delete gives up: what the load balancer had (`had`), its own group, and
/// what the Service and cloud config name (for a delete retried after the load balancer
/// went).
fn released_groups(
    state: &Aws,
    service: &Service,
    had: Vec<String>,
    own: Option<&SecurityGroup>,
) -> Vec<String> {
    let mut groups = had;
    for group in own
        .map(|o| o.id.clone())
        .into_iter()
        .chain(group_list(service, "security-groups"))
        .chain(group_list(service, "extra-security-groups"))
        .chain(Some(state.config.elb_security_group.clone()))
    {
        if !group.is_empty() && !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups
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
    // A delete cut here is called again: `get` finds its own group or these rules
    // (described for it, so found even when no group is known any more).
    let had = lb.map(|lb| lb.security_groups).unwrap_or_default();
    let groups = released_groups(state, service, had, own.as_ref());
    if !state.config.disable_security_group_ingress {
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

#[cfg(test)]
mod tests {
    use super::super::tests::{annotate, service};
    use super::*;
    use crate::config::Config;
    use crate::ec2::Ec2;
    use crate::elb::Elb;
    use crate::elbv2::Elbv2;
    use std::cell::Cell;
    use std::rc::Rc;
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;

    /// The provider of cluster `c1` in `vpc-1`, every API at one address.
    fn aws() -> Aws {
        let text = "[Global]\nZone = us-east-1a\nKubernetesClusterID = c1\nVPC = vpc-1\n";
        let endpoint = "https://aws.test".to_owned();
        Aws {
            config: Config::parse(text).unwrap(),
            ec2: Ec2::new(endpoint.clone()),
            elb: Elb::new(endpoint.clone()),
            elbv2: Elbv2::new(endpoint),
        }
    }

    fn xml(body: &str) -> Response {
        Response::new(200).with_body("text/xml", body.to_owned())
    }

    /// A group of `vpc-1` with an ingress rule of every protocol from `from`, described
    /// `description`.
    fn group(id: &str, from: &str, description: &str) -> String {
        format!(
            "<item><groupId>{id}</groupId><groupName>{id}</groupName><vpcId>vpc-1</vpcId>\
             <ipPermissions><item><ipProtocol>-1</ipProtocol><groups><item>\
             <groupId>{from}</groupId><userId>1</userId><description>{description}</description>\
             </item></groups></item></ipPermissions></item>"
        )
    }

    /// What the cloud answers `body`: no load balancer `a12345678` (and no other), no
    /// own group, and the groups of `vpc-1` (the nodes' one while `nodes_admit`);
    /// revoking the nodes' rule clears `nodes_admit`.
    fn answer(body: &str, nodes_admit: &Cell<bool>) -> Response {
        let rule = "kubernetes.io/rule/elb=a12345678";
        let action = |name: &str| body.contains(&format!("Action={name}&"));
        if action("DescribeLoadBalancers") && body.contains("LoadBalancerNames") {
            return Response::new(400).with_body(
                "text/xml",
                "<ErrorResponse><Error><Code>LoadBalancerNotFound</Code>\
                 <Message>gone</Message></Error></ErrorResponse>",
            );
        }
        if action("DescribeLoadBalancers") {
            return xml(
                "<DescribeLoadBalancersResponse><DescribeLoadBalancersResult>\
                 <LoadBalancerDescriptions/></DescribeLoadBalancersResult>\
                 </DescribeLoadBalancersResponse>",
            );
        }
        if action("DescribeSecurityGroups") && body.contains("=group-name&") {
            return xml("<DescribeSecurityGroupsResponse><securityGroupInfo/>\
                 </DescribeSecurityGroupsResponse>");
        }
        if action("DescribeSecurityGroups") {
            let mut groups = group("sg-users", "sg-other", rule);
            if nodes_admit.get() {
                groups.push_str(&group("sg-nodes", "sg-users", rule));
            }
            return xml(&format!(
                "<DescribeSecurityGroupsResponse><securityGroupInfo>{groups}\
                 </securityGroupInfo></DescribeSecurityGroupsResponse>"
            ));
        }
        if action("RevokeSecurityGroupIngress") && body.contains("GroupId=sg-nodes") {
            nodes_admit.set(false);
            return xml("<RevokeSecurityGroupIngressResponse><return>true</return>\
                 </RevokeSecurityGroupIngressResponse>");
        }
        Response::new(500).with_body("text/plain", format!("unexpected: {body}"))
    }

    /// A delete cut after a Classic load balancer behind the user's group went, before
    /// the nodes' rule admitting that group did: `get` still reports the load balancer
    /// (nothing else of it is left to find), so the controller deletes again instead of
    /// releasing the Service; that delete revokes the rule, and then `get` finds
    /// nothing. A rule in the user's group itself (which a delete leaves alone) does not
    /// count.
    #[test]
    fn a_delete_cut_before_the_nodes_rules_went_is_found_again() {
        let mut svc = service("default", "web");
        annotate(&mut svc, "security-groups", "sg-users");
        let nodes_admit = Rc::new(Cell::new(true));
        let cloud = MockTransport::new();
        let admitting = nodes_admit.clone();
        cloud.on_with("POST", "/", move |request| {
            let body = String::from_utf8_lossy(request.body_bytes()).into_owned();
            Ok(answer(&body, &admitting))
        });
        let _installed = cloud.install();
        let state = aws();
        assert_eq!(
            get(&state, &svc).unwrap(),
            Some(LoadBalancerStatus {
                ingress: Vec::new()
            }),
            "the nodes' rule is left"
        );
        delete(&state, &svc).unwrap();
        assert!(!nodes_admit.get(), "the delete revoked the nodes' rule");
        assert_eq!(get(&state, &svc).unwrap(), None);
    }
}
