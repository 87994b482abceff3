//! Network Load Balancers (`aws-load-balancer-type: nlb`), following
//! cloud-provider-aws's `ensureLoadBalancerv2`.
//!
//! - One target group per Service port (named as upstream's `buildTargetGroupName`:
//!   the name changes when the port, node port, target protocol or health check
//!   protocol or interval change, and the listener is moved to the new group), the
//!   nodes' instances registered on the node port, and one listener per port: TLS with
//!   `ssl-cert` on the `ssl-ports` (`ssl-negotiation-policy` as its policy, a TLS target
//!   group with `backend-protocol: ssl`), else TCP or UDP.
//! - `proxy-protocol: "*"` turns on `proxy_protocol_v2.enabled` on the target groups.
//! - The nodes' security groups admit the source ranges on the node ports and the
//!   load balancer's subnets on the health check ports ([`security_groups`]).
//! - Deleting removes the nodes' rules, the load balancer (with its listeners) and its
//!   target groups, including groups an interrupted create or delete left behind, and
//!   succeeds when everything is gone already.

use super::classic_options::{is_ssl_port, proxy_protocol};
use super::security_groups::{self, NlbTraffic};
use super::target_groups::{
    Mapping, owned_target_groups, sync_targets, target_group, target_group_name,
};
use super::{
    ANNOTATION, annotation, default_name, internal, invalid, key_values, nlb_options,
    source_ranges, status, subnets, tags, targets,
};
use crate::Aws;
use crate::api::Params;
use crate::ec2::Instance;
use crate::elbv2::{HealthCheck, Listener, LoadBalancer};
use wasm_ccm_guest::types::{
    CloudError, LoadBalancerStatus, Node, Protocol, Service, TrafficPolicy,
};

/// The listeners the Service asks for.
fn mappings(service: &Service) -> Result<Vec<Mapping>, CloudError> {
    let certificate = annotation(service, "ssl-cert").unwrap_or_default().trim();
    let backend = annotation(service, "backend-protocol")
        .unwrap_or_default()
        .trim();
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
        let mut m = Mapping {
            port: port.port,
            protocol,
            traffic_protocol: protocol,
            node_port: port.node_port,
            certificate: String::new(),
            ssl_policy: String::new(),
        };
        if protocol == "TCP"
            && !certificate.is_empty()
            && is_ssl_port(service, port.port, &port.name)
        {
            m.protocol = "TLS";
            m.certificate = certificate.to_owned();
            m.ssl_policy = annotation(service, "ssl-negotiation-policy")
                .unwrap_or_default()
                .trim()
                .to_owned();
            if backend == "ssl" {
                m.traffic_protocol = "TLS";
            }
        }
        mappings.push(m);
    }
    Ok(mappings)
}

/// The health check: upstream's defaults (TCP on the traffic port; HTTP `/healthz` on
/// the health check node port for `externalTrafficPolicy: Local`), then the
/// `…-healthcheck-*` annotations.
fn health_check(
    service: &Service,
    shared: Option<&(u16, String)>,
) -> Result<HealthCheck, CloudError> {
    let local_policy = service.external_traffic_policy == TrafficPolicy::Local;
    let local = local_policy && service.health_check_node_port != 0;
    let mut hc = if local {
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
    // The cloud config's shared probe (kube-proxy's health port) for Cluster traffic,
    // over the annotations' protocol, port and path, as upstream orders it (never for
    // Local traffic, even without a health check node port).
    if let (false, Some((port, path))) = (local_policy, shared) {
        hc.protocol = "HTTP".into();
        hc.port = port.to_string();
        hc.path = path.clone();
    }
    Ok(hc)
}

pub fn get(state: &Aws, service: &Service) -> Result<Option<LoadBalancerStatus>, CloudError> {
    match state.elbv2.load_balancer(&default_name(service))? {
        Some(lb) => Ok(Some(lb_status(&lb))),
        // A delete interrupted after the load balancer went leaves its target groups:
        // they still exist, so the controller calls ensure-load-balancer-deleted (which
        // removes them) rather than releasing the Service and leaking them.
        None if !owned_target_groups(state, service)?.is_empty() => Ok(Some(LoadBalancerStatus {
            ingress: Vec::new(),
        })),
        None => Ok(None),
    }
}

fn lb_status(lb: &LoadBalancer) -> LoadBalancerStatus {
    if matches!(lb.state.as_str(), "active" | "provisioning") {
        status(&lb.dns_name)
    } else {
        status("")
    }
}

pub fn update(state: &Aws, service: &Service, nodes: &[Node]) -> Result<(), CloudError> {
    reconcile(state, service, nodes, false).map(drop)
}

/// What the nodes' groups must admit: the node ports from the source ranges, the
/// health check ports from the load balancer's subnets (unless the client rule admits
/// everyone there already).
fn traffic(
    state: &Aws,
    mappings: &[Mapping],
    hc: &HealthCheck,
    sources: Vec<String>,
    lb: &LoadBalancer,
) -> Result<NlbTraffic, CloudError> {
    let ports: Vec<(String, i32)> = mappings
        .iter()
        .map(|m| {
            let protocol = if m.protocol == "UDP" { "udp" } else { "tcp" };
            (protocol.to_owned(), m.node_port)
        })
        .collect();
    let mut health_ports = Vec::new();
    for m in mappings {
        let port = match hc.port.as_str() {
            "traffic-port" => m.node_port,
            number => number.parse().unwrap_or(m.node_port),
        };
        let covered = sources == ["0.0.0.0/0"] && ports.contains(&("tcp".to_owned(), port));
        if !covered && !health_ports.contains(&port) {
            health_ports.push(port);
        }
    }
    let health_sources: Vec<String> = if health_ports.is_empty() || lb.subnets.is_empty() {
        Vec::new()
    } else {
        let subnets = state
            .ec2
            .subnets(Params::new().filter("subnet-id", &lb.subnets))?;
        // Every subnet's range, or no change: a partial answer would revoke the health
        // rules of the subnets it left out.
        if subnets.len() != lb.subnets.len() || subnets.iter().any(|s| s.cidr.is_empty()) {
            return Err(CloudError::Other(format!(
                "load balancer {}: EC2 described {} of its {} subnets with a CIDR block; the \
                 health check rules are left as they are",
                lb.name,
                subnets.iter().filter(|s| !s.cidr.is_empty()).count(),
                lb.subnets.len()
            )));
        }
        subnets.into_iter().map(|s| s.cidr).collect()
    };
    Ok(NlbTraffic {
        ports,
        sources,
        health_ports,
        health_sources,
    })
}

pub fn ensure(
    state: &Aws,
    service: &Service,
    nodes: &[Node],
) -> Result<LoadBalancerStatus, CloudError> {
    reconcile(state, service, nodes, true)
}

/// Brings the NLB to what the Service asks; creates it when `create` (an ensure), else
/// (an update) finds it or fails before anything is made.
fn reconcile(
    state: &Aws,
    service: &Service,
    nodes: &[Node],
    create: bool,
) -> Result<LoadBalancerStatus, CloudError> {
    for suffix in ["security-groups", "extra-security-groups"] {
        if annotation(service, suffix).is_some_and(|v| !v.trim().is_empty()) {
            return Err(invalid(
                service,
                format!(
                    "BYO security group annotation {ANNOTATION}{suffix} is not supported by NLB \
                     (the nodes' security groups admit its traffic)"
                ),
            ));
        }
    }
    let mappings = mappings(service)?;
    if mappings.is_empty() {
        return Err(invalid(
            service,
            "no port has a node port (spec.allocateLoadBalancerNodePorts is false?): the NLB's \
             instance targets are node ports",
        ));
    }
    let hc = health_check(service, state.config.shared_health_probe.as_ref())?;
    let name = default_name(service);
    let internal = internal(service);
    let tags = tags(state, service);
    let sources = source_ranges(service)?;
    // Options are checked before anything is created (upstream checks the target
    // group attributes first too).
    let lb_attributes = nlb_options::load_balancer_attributes(|suffix| annotation(service, suffix))
        .map_err(|e| invalid(service, e))?;
    let udp = mappings.iter().any(|m| m.protocol == "UDP");
    let mut group_attributes = annotation(service, "target-group-attributes")
        .map(|value| nlb_options::target_group_attributes(key_values(value), udp))
        .transpose()
        .map_err(|e| invalid(service, e))?
        .unwrap_or_default();
    if proxy_protocol(service).map_err(|e| invalid(service, e))? {
        group_attributes.retain(|(k, _)| k != "proxy_protocol_v2.enabled");
        group_attributes.push(("proxy_protocol_v2.enabled".into(), "true".into()));
    }
    let (instances, vpc) = targets(state, service, nodes)?;
    let lb = match state.elbv2.load_balancer(&name)? {
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
        None if !create => return Err(invalid(service, "load balancer not found")),
        None => {
            let subnets = subnets(state, service, internal, &vpc)?;
            let subnet_mappings = nlb_options::subnet_mappings(
                annotation(service, "eip-allocations"),
                annotation(service, "private-ipv4-addresses"),
                &subnets,
            )
            .map_err(|e| invalid(service, e))?;
            let lb = state
                .elbv2
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
    if !state.config.disable_security_group_ingress {
        let traffic = traffic(state, &mappings, &hc, sources, &lb)?;
        security_groups::sync_nlb(state, &name, &vpc, &instances, Some(&traffic))?;
    }
    sync_listeners(
        state,
        service,
        &lb,
        &mappings,
        &hc,
        &vpc,
        &tags,
        &instances,
        &group_attributes,
    )?;
    let changes = nlb_options::changed(
        &lb_attributes,
        &state.elbv2.load_balancer_attributes(&lb.arn)?,
    );
    if !changes.is_empty() {
        state
            .elbv2
            .modify_load_balancer_attributes(&lb.arn, &changes)?;
    }
    Ok(lb_status(&lb))
}

/// Target groups (with their targets and attributes) and listeners, one per mapping;
/// listeners of ports no longer served go with their groups.
#[allow(clippy::too_many_arguments)]
fn sync_listeners(
    state: &Aws,
    service: &Service,
    lb: &LoadBalancer,
    mappings: &[Mapping],
    hc: &HealthCheck,
    vpc: &str,
    tags: &[(String, String)],
    instances: &[Instance],
    group_attributes: &[(String, String)],
) -> Result<(), CloudError> {
    let ids: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
    let listeners = state.elbv2.listeners(&lb.arn)?;
    let groups = state.elbv2.target_groups(&lb.arn)?;
    let cluster_id = &state.config.cluster_id;
    for m in mappings {
        let group_name = target_group_name(cluster_id, service, m, hc);
        let group = target_group(state, &group_name, m, vpc, hc, tags, &groups)?;
        sync_targets(state, &group, &ids, m.node_port)?;
        if !group_attributes.is_empty() {
            let current = state.elbv2.target_group_attributes(&group.arn)?;
            let changes = nlb_options::changed(group_attributes, &current);
            if !changes.is_empty() {
                state
                    .elbv2
                    .modify_target_group_attributes(&group.arn, &changes)?;
            }
        }
        let wanted = Listener {
            arn: String::new(),
            port: m.port,
            protocol: m.protocol.to_owned(),
            target_group_arn: group.arn.clone(),
            certificate: m.certificate.clone(),
            ssl_policy: m.ssl_policy.clone(),
        };
        // A load balancer port has one listener: a new protocol modifies it.
        match listeners.iter().find(|l| l.port == m.port) {
            Some(current) if !wanted.differs_from(current) => {}
            Some(current) => {
                state.elbv2.modify_listener(current, &wanted)?;
                if !current.target_group_arn.is_empty() && current.target_group_arn != group.arn {
                    state.elbv2.delete_target_group(&current.target_group_arn)?;
                }
            }
            None => state.elbv2.create_listener(&lb.arn, &wanted, tags)?,
        }
    }
    for listener in &listeners {
        if !mappings.iter().any(|m| m.port == listener.port) {
            state.elbv2.delete_listener(&listener.arn)?;
            if !listener.target_group_arn.is_empty() {
                state
                    .elbv2
                    .delete_target_group(&listener.target_group_arn)?;
            }
        }
    }
    Ok(())
}

pub fn delete(state: &Aws, service: &Service) -> Result<(), CloudError> {
    let name = default_name(service);
    let lb = state.elbv2.load_balancer(&name)?;
    if !state.config.disable_security_group_ingress {
        // The nodes' rules go first: a retried delete finds them by description even
        // after the load balancer went.
        let vpc = lb
            .as_ref()
            .map(|lb| lb.vpc_id.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| state.config.vpc.clone());
        security_groups::sync_nlb(state, &name, &vpc, &[], None)?;
    }
    let mut groups = match &lb {
        Some(lb) => state.elbv2.target_groups(&lb.arn)?,
        None => Vec::new(),
    };
    for group in owned_target_groups(state, service)? {
        if !groups.iter().any(|g| g.arn == group.arn) {
            groups.push(group);
        }
    }
    if let Some(lb) = &lb {
        state.elbv2.delete_load_balancer(&lb.arn)?;
        wasm_ccm_guest::log::info("deleted network load balancer", &[("name", &name)]);
    }
    for group in &groups {
        state.elbv2.delete_target_group(&group.arn)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{annotate, port, service};
    use super::*;

    #[test]
    fn health_checks_as_upstream() {
        let mut svc = service("default", "web");
        assert_eq!(health_check(&svc, None).unwrap().protocol, "TCP");
        svc.external_traffic_policy = TrafficPolicy::Local;
        svc.health_check_node_port = 31000;
        let hc = health_check(&svc, None).unwrap();
        assert_eq!(
            (hc.protocol.as_str(), hc.port.as_str(), hc.interval),
            ("HTTP", "31000", 10)
        );
        annotate(&mut svc, "healthcheck-protocol", "tcp");
        annotate(&mut svc, "healthcheck-interval", "20");
        let hc = health_check(&svc, None).unwrap();
        assert_eq!((hc.protocol.as_str(), hc.interval), ("TCP", 20));
        svc.metadata.annotations.clear();
        annotate(&mut svc, "healthcheck-port", "x");
        assert!(health_check(&svc, None).is_err());
        // The shared probe: Cluster traffic only, over the annotations.
        let shared = (10256, "/healthz".to_owned());
        svc.metadata.annotations.clear();
        let hc = health_check(&svc, Some(&shared)).unwrap();
        assert_eq!(
            (hc.protocol.as_str(), hc.port.as_str()),
            ("HTTP", "31000"),
            "Local keeps its own"
        );
        svc.health_check_node_port = 0;
        let hc = health_check(&svc, Some(&shared)).unwrap();
        assert_eq!(hc.port, "traffic-port", "Local, even without its port");
        svc.external_traffic_policy = TrafficPolicy::Cluster;
        annotate(&mut svc, "healthcheck-port", "8080");
        annotate(&mut svc, "healthcheck-interval", "20");
        let hc = health_check(&svc, Some(&shared)).unwrap();
        assert_eq!(
            (
                hc.protocol.as_str(),
                hc.port.as_str(),
                hc.path.as_str(),
                hc.interval
            ),
            ("HTTP", "10256", "/healthz", 20)
        );
    }

    /// Upstream's NLB port mappings: TLS on the `ssl-ports` with a certificate (a TLS
    /// target group with `backend-protocol: ssl`), never on UDP.
    #[test]
    fn tls_listeners_where_the_certificate_applies() {
        let mut svc = service("default", "web");
        let mut dns = port("dns", 53, 31053);
        dns.protocol = Protocol::Udp;
        svc.ports = vec![port("https", 443, 30443), port("http", 80, 30080), dns];
        annotate(
            &mut svc,
            "ssl-cert",
            "arn:aws:acm:us-east-1:1:certificate/c",
        );
        annotate(&mut svc, "ssl-ports", "https");
        annotate(
            &mut svc,
            "ssl-negotiation-policy",
            "ELBSecurityPolicy-TLS13-1-2-2021-06",
        );
        annotate(&mut svc, "backend-protocol", "ssl");
        let m = mappings(&svc).unwrap();
        let summary: Vec<(&str, &str, bool)> = m
            .iter()
            .map(|m| (m.protocol, m.traffic_protocol, !m.certificate.is_empty()))
            .collect();
        assert_eq!(
            summary,
            [
                ("TLS", "TLS", true),
                ("TCP", "TCP", false),
                ("UDP", "UDP", false)
            ]
        );
        assert_eq!(m[0].ssl_policy, "ELBSecurityPolicy-TLS13-1-2-2021-06");
    }
}
