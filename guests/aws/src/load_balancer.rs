//! `load-balancer`: one Network Load Balancer (ELBv2) per Service, following
//! cloud-provider-aws's NLB code (`ensureLoadBalancerv2`).
//!
//! - Name: upstream's default (`a` + UID without dashes, 32 characters at most).
//! - Subnets: the `…-subnets` annotation (IDs or `Name` tags), else one subnet per
//!   zone of the VPC, tagged for the cluster (or for no cluster), public ones for an
//!   internet-facing load balancer, preferring the role tag
//!   (`kubernetes.io/role/elb`, `kubernetes.io/role/internal-elb`), then the cluster
//!   tag, then the smallest ID (upstream's `findELBSubnets`).
//! - One target group per Service port (named as upstream's `buildTargetGroupName`:
//!   the name changes when the port, node port, protocol or health check protocol or
//!   interval change, and the listener is moved to the new group), the nodes'
//!   instances registered on the node port, and one listener per port.
//! - `service.beta.kubernetes.io/aws-load-balancer-type: external` (or `nlb-ip`) is
//!   `implemented-elsewhere`: the AWS Load Balancer Controller serves it.
//! - Deleting removes the load balancer (with its listeners) and its target groups,
//!   including groups an interrupted create or delete left behind, and succeeds when
//!   everything is gone already.

use crate::Aws;
use crate::api::Params;
use crate::config::{CLUSTER_TAG_PREFIX, LEGACY_CLUSTER_TAG};
use crate::ec2::Subnet;
use crate::elbv2::{HealthCheck, LoadBalancer, Target, TargetGroup};
use crate::instances;
use crate::nlb_options;
use wasm_ccm_guest::LoadBalancer as LoadBalancerExport;
use wasm_ccm_guest::default_load_balancer_name as default_name;
use wasm_ccm_guest::types::{
    CloudError, LoadBalancerIngress, LoadBalancerStatus, Node, Protocol, Service, SessionAffinity,
    TrafficPolicy,
};

/// The prefix of every annotation this module reads.
const ANNOTATION: &str = "service.beta.kubernetes.io/aws-load-balancer-";

/// Role tags of subnets meant for load balancers.
const ROLE_ELB: &str = "kubernetes.io/role/elb";
const ROLE_INTERNAL_ELB: &str = "kubernetes.io/role/internal-elb";

/// The value of `service.beta.kubernetes.io/aws-load-balancer-<suffix>`.
fn annotation<'a>(service: &'a Service, suffix: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k.strip_prefix(ANNOTATION) == Some(suffix))
        .map(|(_, v)| v.as_str())
}

/// The load balancer is another controller's (`type: external` or `nlb-ip`).
fn implemented_elsewhere(service: &Service) -> bool {
    matches!(annotation(service, "type"), Some("external" | "nlb-ip"))
}

/// One Service port: a listener and its target group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    port: i32,
    /// `TCP` or `UDP`.
    protocol: &'static str,
    node_port: i32,
}

fn invalid(service: &Service, reason: impl std::fmt::Display) -> CloudError {
    CloudError::Other(format!(
        "service {}/{}: {reason}",
        service.metadata.namespace, service.metadata.name
    ))
}

/// Annotations that restrict or secure traffic (TLS, proxy protocol, security
/// groups) which this provider does not implement yet: a Service asking for one is
/// refused, never served by a plain TCP listener open to everyone.
const NOT_YET_SUPPORTED: [&str; 7] = [
    "ssl-cert",
    "ssl-ports",
    "backend-protocol",
    "ssl-negotiation-policy",
    "proxy-protocol",
    "security-groups",
    "extra-security-groups",
];

/// Upstream's other way to restrict clients (besides `spec.loadBalancerSourceRanges`).
const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// What the Service asks for that would restrict or secure its traffic and this
/// provider cannot honour yet: the field or annotation, for the error and the event.
fn unsupported(service: &Service) -> Option<String> {
    let open = |range: &str| matches!(range.trim(), "" | "0.0.0.0/0" | "::/0");
    if !service.load_balancer_source_ranges.iter().all(|r| open(r)) {
        return Some("spec.loadBalancerSourceRanges".into());
    }
    if let Some((key, _)) = service
        .metadata
        .annotations
        .iter()
        .find(|(k, v)| k == SOURCE_RANGES_ANNOTATION && !v.split(',').all(open))
    {
        return Some(format!("annotation {key}"));
    }
    NOT_YET_SUPPORTED
        .iter()
        .find(|suffix| annotation(service, suffix).is_some())
        .map(|suffix| format!("annotation {ANNOTATION}{suffix}"))
}

/// The listeners the Service asks for.
fn mappings(service: &Service) -> Result<Vec<Mapping>, CloudError> {
    if service.ports.is_empty() {
        return Err(invalid(service, "requested load balancer with no ports"));
    }
    if let Some(what) = unsupported(service) {
        let message = format!(
            "{what} is not supported yet by the aws provider (it needs security groups and TLS \
             listeners); no load balancer is created rather than one that ignores it"
        );
        // The event names what was refused on the Service itself.
        let _ = wasm_ccm_guest::events::warning("UnsupportedLoadBalancerSetting", &message, None);
        return Err(invalid(service, message));
    }
    if service.session_affinity != SessionAffinity::None {
        return Err(invalid(
            service,
            "session affinity ClientIP is not supported by Network Load Balancers",
        ));
    }
    if service
        .load_balancer_ip
        .as_deref()
        .is_some_and(|ip| !ip.is_empty())
    {
        return Err(invalid(
            service,
            "spec.loadBalancerIP is not supported on AWS",
        ));
    }
    let mut mappings = Vec::new();
    for port in &service.ports {
        let protocol = match port.protocol {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => {
                return Err(invalid(
                    service,
                    format!(
                        "port {}: SCTP is not supported by Network Load Balancers",
                        port.port
                    ),
                ));
            }
        };
        if port.node_port == 0 {
            continue;
        }
        mappings.push(Mapping {
            port: port.port,
            protocol,
            node_port: port.node_port,
        });
    }
    Ok(mappings)
}

/// The health check: upstream's defaults (TCP on the traffic port; HTTP `/healthz` on
/// the health check node port for `externalTrafficPolicy: Local`), then the
/// `…-healthcheck-*` annotations.
fn health_check(service: &Service) -> Result<HealthCheck, CloudError> {
    let mut hc = if service.external_traffic_policy == TrafficPolicy::Local
        && service.health_check_node_port != 0
    {
        HealthCheck {
            protocol: "HTTP".into(),
            port: service.health_check_node_port.to_string(),
            path: "/healthz".into(),
            interval: 10,
            timeout: 10,
            healthy_threshold: 2,
            unhealthy_threshold: 2,
        }
    } else {
        HealthCheck {
            protocol: "TCP".into(),
            port: "traffic-port".into(),
            path: "/".into(),
            interval: 30,
            timeout: 10,
            healthy_threshold: 3,
            unhealthy_threshold: 3,
        }
    };
    if let Some(protocol) = annotation(service, "healthcheck-protocol") {
        let protocol = protocol.trim().to_ascii_uppercase();
        if !matches!(protocol.as_str(), "TCP" | "HTTP" | "HTTPS") {
            return Err(invalid(
                service,
                format!("unsupported health check protocol {protocol} (TCP, HTTP or HTTPS)"),
            ));
        }
        hc.protocol = protocol;
    }
    if let Some(path) = annotation(service, "healthcheck-path") {
        hc.path = path.trim().to_owned();
    }
    if let Some(port) = annotation(service, "healthcheck-port") {
        let port = port.trim();
        if port != "traffic-port" && port.parse::<u16>().is_err() {
            return Err(invalid(
                service,
                format!("invalid health check port '{port}'"),
            ));
        }
        hc.port = port.to_owned();
    }
    for (suffix, field) in [
        ("healthcheck-interval", &mut hc.interval),
        ("healthcheck-timeout", &mut hc.timeout),
        ("healthcheck-healthy-threshold", &mut hc.healthy_threshold),
        (
            "healthcheck-unhealthy-threshold",
            &mut hc.unhealthy_threshold,
        ),
    ] {
        if let Some(value) = annotation(service, suffix) {
            *field = value.trim().parse().map_err(|_| {
                invalid(
                    service,
                    format!("failed to parse annotation {ANNOTATION}{suffix}={value}"),
                )
            })?;
        }
    }
    Ok(hc)
}

/// Upstream's `buildTargetGroupName`: `k8s-<ns>-<name>-<hash>`, the hash over what a
/// target group cannot change in place.
fn target_group_name(cluster_id: &str, service: &Service, m: &Mapping, hc: &HealthCheck) -> String {
    let clean = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
    };
    let mut sha = sha1_smol::Sha1::new();
    for part in [
        cluster_id,
        &service.metadata.namespace,
        &service.metadata.name,
        &m.port.to_string(),
        &m.node_port.to_string(),
        m.protocol,
        "instance",
        &hc.protocol,
        &hc.interval.to_string(),
    ] {
        sha.update(part.as_bytes());
    }
    let hash = sha.digest().to_string();
    let (ns, name) = (
        clean(&service.metadata.namespace),
        clean(&service.metadata.name),
    );
    format!(
        "k8s-{}-{}-{}",
        &ns[..ns.len().min(8)],
        &name[..name.len().min(8)],
        &hash[..10]
    )
}

/// Upstream's `getKeyValuePropertiesFromAnnotation`: `k1=v1,k2=v2`, a bare `k` is "".
fn key_values(value: &str) -> Vec<(String, String)> {
    value
        .trim()
        .split(',')
        .filter_map(|item| {
            let mut parts = item.trim().split('=');
            let key = parts.next()?.trim();
            if key.is_empty() {
                return None;
            }
            let value = parts.next().unwrap_or("").trim();
            Some((key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Tags for everything the provider creates for the Service.
fn tags(state: &Aws, service: &Service) -> Vec<(String, String)> {
    let mut tags = annotation(service, "additional-resource-tags")
        .map(key_values)
        .unwrap_or_default();
    let mut set = |key: String, value: String| {
        tags.retain(|(k, _)| *k != key);
        tags.push((key, value));
    };
    set(
        "kubernetes.io/service-name".into(),
        format!("{}/{}", service.metadata.namespace, service.metadata.name),
    );
    let config = &state.config;
    if !config.cluster_id.is_empty() {
        set(config.cluster_tag_key(), "owned".into());
        if config.legacy_cluster_tag {
            set(LEGACY_CLUSTER_TAG.into(), config.cluster_id.clone());
        }
    }
    tags
}

/// The instances to register, and the VPC they are in.
fn targets(
    state: &Aws,
    service: &Service,
    nodes: &[Node],
) -> Result<(Vec<String>, String), CloudError> {
    let selector = annotation(service, "target-node-labels")
        .map(key_values)
        .unwrap_or_default();
    let mut ids = Vec::new();
    for node in nodes {
        let selected = selector.iter().all(|(key, value)| {
            node.metadata
                .labels
                .iter()
                .any(|(k, v)| k == key && (value.is_empty() || v == value))
        });
        if !selected {
            continue;
        }
        match node
            .provider_id
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(instances::instance_id)
        {
            Some(Ok(id)) => ids.push(id),
            _ => wasm_ccm_guest::log::debug(
                "node has no AWS provider ID yet; not a target",
                &[("node", &node.metadata.name)],
            ),
        }
    }
    ids.sort();
    ids.dedup();
    let found = state.ec2.instances_by_id(&ids)?;
    // Only instances that can serve: ELB refuses to register a stopped one.
    let mut alive = Vec::new();
    for id in ids {
        match found.iter().find(|i| i.id == id) {
            Some(i) if matches!(i.state.as_str(), "pending" | "running") => alive.push(id),
            Some(i) => wasm_ccm_guest::log::info(
                "node's instance is not running; not a target",
                &[("instance", &id), ("state", &i.state)],
            ),
            None => wasm_ccm_guest::log::warn(
                "node's instance no longer exists; not a target",
                &[("instance", &id)],
            ),
        }
    }
    let vpc = if !state.config.vpc.is_empty() {
        state.config.vpc.clone()
    } else {
        found
            .iter()
            .map(|i| i.vpc_id.clone())
            .find(|v| !v.is_empty())
            .unwrap_or_default()
    };
    Ok((alive, vpc))
}

/// The subnets for a new load balancer.
fn subnets(
    state: &Aws,
    service: &Service,
    internal: bool,
    vpc: &str,
) -> Result<Vec<String>, CloudError> {
    if let Some(list) = annotation(service, "subnets") {
        let wanted: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if wanted.is_empty() {
            return Err(invalid(service, "the subnets annotation lists no subnet"));
        }
        let (ids, names): (Vec<&str>, Vec<&str>) =
            wanted.iter().partition(|s| s.starts_with("subnet-"));
        let mut found = Vec::new();
        if !ids.is_empty() {
            found.extend(state.ec2.subnets(Params::new().filter("subnet-id", &ids))?);
        }
        if !names.is_empty() {
            found.extend(
                state.ec2.subnets(
                    Params::new()
                        .filter("tag:Name", &names)
                        .filter("vpc-id", &[vpc]),
                )?,
            );
        }
        if found.len() != wanted.len() {
            return Err(invalid(
                service,
                format!(
                    "expected to find {} subnets, but found {}",
                    wanted.len(),
                    found.len()
                ),
            ));
        }
        return Ok(found.into_iter().map(|s| s.id).collect());
    }
    if vpc.is_empty() {
        return Err(invalid(
            service,
            "cannot tell the VPC: set VPC in the cloud config, or wait for nodes with provider IDs",
        ));
    }
    let config = &state.config;
    let candidates: Vec<Subnet> = state
        .ec2
        .subnets(Params::new().filter("vpc-id", &[vpc]))?
        .into_iter()
        .filter(|s| {
            config.has_cluster_tag(&s.tags)
                || !s
                    .tags
                    .iter()
                    .any(|(k, _)| k.starts_with(CLUSTER_TAG_PREFIX))
        })
        .collect();
    let candidates = if candidates.is_empty() && !config.subnet_id.is_empty() {
        state
            .ec2
            .subnets(Params::new().filter("subnet-id", &[config.subnet_id.as_str()]))?
    } else {
        candidates
    };
    let tables = state
        .ec2
        .route_tables(Params::new().filter("vpc-id", &[vpc]))?;
    let is_public = |subnet: &Subnet| {
        let table = tables
            .iter()
            .find(|t| t.subnets.contains(&subnet.id))
            .or_else(|| tables.iter().find(|t| t.main));
        table.is_some_and(|t| t.routes.iter().any(|r| r.gateway_id.starts_with("igw")))
    };
    let role = if internal {
        ROLE_INTERNAL_ELB
    } else {
        ROLE_ELB
    };
    let zone_types = zone_types(state);
    let mut best: Vec<Subnet> = Vec::new();
    for subnet in candidates {
        if !internal && !is_public(&subnet) {
            continue;
        }
        let zone_ok = zone_types
            .iter()
            .find(|(name, _)| *name == subnet.zone)
            .is_none_or(|(_, kind)| kind == "availability-zone");
        if !zone_ok {
            continue;
        }
        let rank = |s: &Subnet| {
            (
                !s.tags.iter().any(|(k, _)| k == role),
                !config.has_cluster_tag(&s.tags) || config.cluster_id.is_empty(),
                s.id.clone(),
            )
        };
        match best.iter_mut().find(|b| b.zone == subnet.zone) {
            Some(current) if rank(&subnet) < rank(current) => *current = subnet,
            Some(_) => {}
            None => best.push(subnet),
        }
    }
    best.sort_by(|a, b| a.zone.cmp(&b.zone));
    if best.is_empty() {
        return Err(invalid(
            service,
            format!(
                "could not find any suitable subnets for creating the load balancer in {vpc} \
                 (tag public subnets `{ROLE_ELB}`, private ones `{ROLE_INTERNAL_ELB}`, or use the \
                 {ANNOTATION}subnets annotation)"
            ),
        ));
    }
    Ok(best.into_iter().map(|s| s.id).collect())
}

/// Zone name → zone type, from the zones in the shared cache.
fn zone_types(state: &Aws) -> Vec<(String, String)> {
    crate::instances::zones(state, None)
        .unwrap_or_default()
        .into_iter()
        .map(|z| (z.name, z.zone_type))
        .collect()
}

fn status(lb: &LoadBalancer) -> LoadBalancerStatus {
    let ready = matches!(lb.state.as_str(), "active" | "provisioning");
    LoadBalancerStatus {
        ingress: if ready && !lb.dns_name.is_empty() {
            vec![LoadBalancerIngress {
                ip: None,
                hostname: Some(lb.dns_name.clone()),
                ip_mode: None,
                ports: Vec::new(),
            }]
        } else {
            Vec::new()
        },
    }
}

/// Registers `wanted` targets and deregisters the others.
fn sync_targets(
    state: &Aws,
    group: &TargetGroup,
    instances: &[String],
    node_port: i32,
) -> Result<(), CloudError> {
    let wanted: Vec<Target> = instances
        .iter()
        .map(|id| Target {
            id: id.clone(),
            port: node_port,
        })
        .collect();
    let actual = state.elb.targets(&group.arn)?;
    let stale: Vec<Target> = actual
        .iter()
        .filter(|t| !wanted.contains(t))
        .cloned()
        .collect();
    let missing: Vec<Target> = wanted
        .iter()
        .filter(|t| !actual.contains(t))
        .cloned()
        .collect();
    if !stale.is_empty() {
        state.elb.change_targets(&group.arn, &stale, false)?;
    }
    if !missing.is_empty() {
        state.elb.change_targets(&group.arn, &missing, true)?;
    }
    if !stale.is_empty() || !missing.is_empty() {
        wasm_ccm_guest::log::info(
            "updated load balancer targets",
            &[
                ("targetGroup", &group.name),
                ("registered", &missing.len().to_string()),
                ("deregistered", &stale.len().to_string()),
            ],
        );
    }
    Ok(())
}

/// The target group named `name`: found (health check brought up to date) or created.
#[allow(clippy::too_many_arguments)]
fn target_group(
    state: &Aws,
    name: &str,
    m: &Mapping,
    vpc: &str,
    hc: &HealthCheck,
    tags: &[(String, String)],
    known: &[TargetGroup],
) -> Result<TargetGroup, CloudError> {
    let existing = match known.iter().find(|g| g.name == name) {
        Some(g) => Some(g.clone()),
        None => state.elb.target_group(name)?,
    };
    match existing {
        Some(group) => {
            if hc.differs_from(&group) {
                state.elb.modify_target_group(&group.arn, hc)?;
            }
            Ok(group)
        }
        None => {
            if vpc.is_empty() {
                return Err(CloudError::Other(format!(
                    "cannot create target group {name}: the VPC is unknown (set VPC in the cloud config)"
                )));
            }
            Ok(state
                .elb
                .create_target_group(name, m.protocol, m.node_port, vpc, hc, tags)?)
        }
    }
}

fn ensure(
    state: &Aws,
    service: &Service,
    nodes: &[Node],
) -> Result<LoadBalancerStatus, CloudError> {
    let mappings = mappings(service)?;
    let hc = health_check(service)?;
    let name = default_name(service);
    let internal = annotation(service, "internal").is_some_and(|v| !v.is_empty() && v != "false");
    let tags = tags(state, service);
    // Options are checked before anything is created (upstream checks the target
    // group attributes first too).
    let lb_attributes = nlb_options::load_balancer_attributes(|suffix| annotation(service, suffix))
        .map_err(|e| invalid(service, e))?;
    let group_attributes = annotation(service, "target-group-attributes")
        .map(|value| {
            let udp = mappings.iter().any(|m| m.protocol == "UDP");
            nlb_options::target_group_attributes(key_values(value), udp)
        })
        .transpose()
        .map_err(|e| invalid(service, e))?
        .unwrap_or_default();
    let (instances, vpc) = targets(state, service, nodes)?;
    let lb = match state.elb.load_balancer(&name)? {
        Some(lb) if lb.lb_type != "network" => {
            return Err(invalid(
                service,
                format!(
                    "load balancer {name} exists but is of type {:?}, not network",
                    lb.lb_type
                ),
            ));
        }
        Some(lb) => lb,
        None => {
            // A Classic ELB from the controller this one replaced: upstream's check.
            if let Some(hostname) = service
                .status
                .ingress
                .iter()
                .filter_map(|i| i.hostname.as_deref())
                .find(|h| h.ends_with(".elb.amazonaws.com"))
            {
                return Err(invalid(
                    service,
                    format!(
                        "the Service already has a Classic Load Balancer ({hostname}); this provider \
                         manages Network Load Balancers only: delete and recreate the Service, or \
                         set {ANNOTATION}type: external"
                    ),
                ));
            }
            let subnets = subnets(state, service, internal, &vpc)?;
            let subnet_mappings = nlb_options::subnet_mappings(
                annotation(service, "eip-allocations"),
                annotation(service, "private-ipv4-addresses"),
                &subnets,
            )
            .map_err(|e| invalid(service, e))?;
            let lb = state
                .elb
                .create_load_balancer(&name, internal, &subnet_mappings, &tags)?;
            wasm_ccm_guest::log::info(
                "created network load balancer",
                &[("name", &name), ("subnets", &subnets.join(","))],
            );
            lb
        }
    };
    let vpc = if vpc.is_empty() {
        lb.vpc_id.clone()
    } else {
        vpc
    };
    let listeners = state.elb.listeners(&lb.arn)?;
    let groups = state.elb.target_groups(&lb.arn)?;
    let cluster_id = &state.config.cluster_id;
    for m in &mappings {
        let group_name = target_group_name(cluster_id, service, m, &hc);
        let group = target_group(state, &group_name, m, &vpc, &hc, &tags, &groups)?;
        sync_targets(state, &group, &instances, m.node_port)?;
        if !group_attributes.is_empty() {
            let current = state.elb.target_group_attributes(&group.arn)?;
            let changes = nlb_options::changed(&group_attributes, &current);
            if !changes.is_empty() {
                state
                    .elb
                    .modify_target_group_attributes(&group.arn, &changes)?;
            }
        }
        match listeners
            .iter()
            .find(|l| l.port == m.port && l.protocol == m.protocol)
        {
            Some(listener) if listener.target_group_arn == group.arn => {}
            Some(listener) => {
                state
                    .elb
                    .modify_listener(&listener.arn, m.protocol, &group.arn)?;
                if !listener.target_group_arn.is_empty() {
                    state.elb.delete_target_group(&listener.target_group_arn)?;
                }
            }
            None => {
                state
                    .elb
                    .create_listener(&lb.arn, m.port, m.protocol, &group.arn, &tags)?;
            }
        }
    }
    for listener in &listeners {
        let wanted = mappings
            .iter()
            .any(|m| m.port == listener.port && m.protocol == listener.protocol);
        if !wanted {
            state.elb.delete_listener(&listener.arn)?;
            if !listener.target_group_arn.is_empty() {
                state.elb.delete_target_group(&listener.target_group_arn)?;
            }
        }
    }
    let changes = nlb_options::changed(
        &lb_attributes,
        &state.elb.load_balancer_attributes(&lb.arn)?,
    );
    if !changes.is_empty() {
        state
            .elb
            .modify_load_balancer_attributes(&lb.arn, &changes)?;
    }
    Ok(status(&lb))
}

/// The target groups made for the Service: named `k8s-<ns>-<name>-…` and tagged
/// with its name (and the cluster), attached or not — so nothing is left behind when
/// a delete is retried after the load balancer went, or the Service's ports changed.
fn owned_target_groups(state: &Aws, service: &Service) -> Result<Vec<TargetGroup>, CloudError> {
    let clean = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
    };
    let (ns, name) = (
        clean(&service.metadata.namespace),
        clean(&service.metadata.name),
    );
    let prefix = format!(
        "k8s-{}-{}-",
        &ns[..ns.len().min(8)],
        &name[..name.len().min(8)]
    );
    let candidates: Vec<TargetGroup> = state
        .elb
        .all_target_groups()?
        .into_iter()
        .filter(|g| g.name.starts_with(&prefix))
        .collect();
    let arns: Vec<String> = candidates.iter().map(|g| g.arn.clone()).collect();
    let tags = state.elb.tags(&arns)?;
    let owner = format!("{}/{}", service.metadata.namespace, service.metadata.name);
    Ok(candidates
        .into_iter()
        .filter(|g| {
            tags.iter().any(|(arn, tags)| {
                *arn == g.arn
                    && tags
                        .iter()
                        .any(|(k, v)| k == "kubernetes.io/service-name" && *v == owner)
                    && state.config.has_cluster_tag(tags)
            })
        })
        .collect())
}

fn delete(state: &Aws, service: &Service) -> Result<(), CloudError> {
    let name = default_name(service);
    let lb = state.elb.load_balancer(&name)?;
    let mut groups = match &lb {
        Some(lb) => state.elb.target_groups(&lb.arn)?,
        None => Vec::new(),
    };
    for group in owned_target_groups(state, service)? {
        if !groups.iter().any(|g| g.arn == group.arn) {
            groups.push(group);
        }
    }
    if let Some(lb) = &lb {
        state.elb.delete_load_balancer(&lb.arn)?;
        wasm_ccm_guest::log::info("deleted network load balancer", &[("name", &name)]);
    }
    for group in &groups {
        state.elb.delete_target_group(&group.arn)?;
    }
    Ok(())
}

impl LoadBalancerExport for Aws {
    fn get_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError> {
        if implemented_elsewhere(&service) {
            return Ok(None);
        }
        match self.elb.load_balancer(&default_name(&service))? {
            Some(lb) => Ok(Some(status(&lb))),
            // A delete interrupted after the load balancer went leaves its target
            // groups: they still exist, so the controller calls
            // ensure-load-balancer-deleted (which removes them) rather than releasing
            // the Service and leaking them.
            None if !owned_target_groups(self, &service)?.is_empty() => {
                Ok(Some(LoadBalancerStatus {
                    ingress: Vec::new(),
                }))
            }
            None => Ok(None),
        }
    }

    fn ensure_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError> {
        if implemented_elsewhere(&service) {
            return Err(CloudError::ImplementedElsewhere);
        }
        {
            let s = self;
            ensure(s, &service, &nodes)
        }
    }

    fn update_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<(), CloudError> {
        if implemented_elsewhere(&service) {
            return Err(CloudError::ImplementedElsewhere);
        }
        {
            let s = self;
            if s.elb.load_balancer(&default_name(&service))?.is_none() {
                return Err(invalid(&service, "load balancer not found"));
            }
            ensure(s, &service, &nodes).map(drop)
        }
    }

    fn ensure_load_balancer_deleted(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        if implemented_elsewhere(&service) {
            return Ok(());
        }
        {
            let s = self;
            delete(s, &service)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ccm_guest::types::{ObjectMeta, ServiceType};

    fn service(namespace: &str, name: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: namespace.into(),
                uid: "1234-5678".into(),
                labels: Vec::new(),
                annotations: Vec::new(),
                deletion_timestamp: None,
            },
            service_type: ServiceType::LoadBalancer,
            ports: Vec::new(),
            session_affinity: SessionAffinity::None,
            load_balancer_source_ranges: Vec::new(),
            external_traffic_policy: TrafficPolicy::Cluster,
            health_check_node_port: 0,
            ip_families: Vec::new(),
            load_balancer_class: None,
            load_balancer_ip: None,
            status: LoadBalancerStatus {
                ingress: Vec::new(),
            },
            external_ips: Vec::new(),
            cluster_ips: Vec::new(),
            ip_family_policy: None,
            session_affinity_timeout_seconds: None,
            allocate_load_balancer_node_ports: None,
        }
    }

    #[test]
    fn target_group_names_as_upstream() {
        // Upstream's test vector: "cluster-a" + "default" + "service-a" + 80 + 8080 +
        // TCP + instance + hc protocol "" + interval 0.
        let svc = service("default", "service-a");
        let m = Mapping {
            port: 80,
            protocol: "TCP",
            node_port: 8080,
        };
        let hc = HealthCheck {
            protocol: String::new(),
            port: "traffic-port".into(),
            path: String::new(),
            interval: 0,
            timeout: 10,
            healthy_threshold: 3,
            unhealthy_threshold: 3,
        };
        assert_eq!(
            target_group_name("cluster-a", &svc, &m, &hc),
            "k8s-default-servicea-7fa2e07508"
        );
    }

    #[test]
    fn annotations_as_upstream() {
        assert_eq!(
            key_values(" a=1, b ,c=,=d, e=x=y"),
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".into(), "".into()),
                ("c".into(), "".into()),
                ("e".into(), "x".into()),
            ]
        );
        let mut svc = service("default", "web");
        assert_eq!(health_check(&svc).unwrap().protocol, "TCP");
        svc.external_traffic_policy = TrafficPolicy::Local;
        svc.health_check_node_port = 31000;
        let hc = health_check(&svc).unwrap();
        assert_eq!(
            (hc.protocol.as_str(), hc.port.as_str(), hc.interval),
            ("HTTP", "31000", 10)
        );
        svc.metadata.annotations = vec![
            (format!("{ANNOTATION}healthcheck-protocol"), "tcp".into()),
            (format!("{ANNOTATION}healthcheck-interval"), "20".into()),
        ];
        let hc = health_check(&svc).unwrap();
        assert_eq!((hc.protocol.as_str(), hc.interval), ("TCP", 20));
        svc.metadata.annotations = vec![(format!("{ANNOTATION}healthcheck-port"), "x".into())];
        assert!(health_check(&svc).is_err());
        assert_eq!(default_name(&svc), "a12345678");
    }

    /// Anything that would restrict or secure traffic and is not implemented is
    /// refused before a load balancer exists, with a Warning event naming it.
    #[test]
    fn what_cannot_be_honoured_is_refused() {
        let mut svc = service("default", "web");
        svc.ports = vec![wasm_ccm_guest::types::ServicePort {
            name: "https".into(),
            protocol: Protocol::Tcp,
            port: 443,
            target_port: "8443".into(),
            node_port: 30443,
            app_protocol: None,
        }];
        assert!(mappings(&svc).is_ok());
        svc.load_balancer_source_ranges = vec!["0.0.0.0/0".into()];
        assert!(mappings(&svc).is_ok(), "open to all is what the NLB does");
        svc.load_balancer_source_ranges = vec!["203.0.113.0/24".into()];
        let err = format!("{:?}", mappings(&svc).unwrap_err());
        assert!(err.contains("spec.loadBalancerSourceRanges"), "{err}");
        svc.load_balancer_source_ranges = Vec::new();
        svc.metadata.annotations = vec![(SOURCE_RANGES_ANNOTATION.into(), "10.0.0.0/8".into())];
        let err = format!("{:?}", mappings(&svc).unwrap_err());
        assert!(err.contains(SOURCE_RANGES_ANNOTATION), "{err}");
        for suffix in NOT_YET_SUPPORTED {
            svc.metadata.annotations = vec![(format!("{ANNOTATION}{suffix}"), "x".into())];
            let err = format!("{:?}", mappings(&svc).unwrap_err());
            assert!(err.contains(&format!("{ANNOTATION}{suffix}")), "{err}");
        }
        let events = wasm_ccm_guest::events::recorded();
        assert_eq!(events.len(), 2 + NOT_YET_SUPPORTED.len());
        assert!(
            events
                .iter()
                .all(|(_, reason, _)| reason == "UnsupportedLoadBalancerSetting")
        );
    }
}
