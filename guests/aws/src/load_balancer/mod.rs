//! `load-balancer`: a Classic Load Balancer (ELB) per Service, or a Network Load
//! Balancer (ELBv2) with `service.beta.kubernetes.io/aws-load-balancer-type: nlb`,
//! following cloud-provider-aws (`EnsureLoadBalancer`, `ensureLoadBalancerv2`).
//!
//! Where to look:
//! - this module: what both kinds share — the name (upstream's default: `a` + UID
//!   without dashes, 32 characters at most), the Service's checks, source ranges, tags,
//!   the nodes' instances — and the export, which also finds and deletes a load
//!   balancer of the kind the Service asked for before;
//! - [`subnets`]: the subnets of a new load balancer;
//! - [`classic`] (listeners, health check, attributes and policies in
//!   [`classic_options`]; its own security group in [`own_group`]);
//! - [`nlb`] (listeners; target groups in [`target_groups`]; annotation options in
//!   [`nlb_options`]);
//! - [`security_groups`]: the nodes' rules for load balancer traffic.
//!
//! `type: external` (or `nlb-ip`) is `implemented-elsewhere`: the AWS Load Balancer
//! Controller serves it. As upstream, a Service's load balancer keeps its kind: changing
//! the `type` annotation after creation is refused, never answered by creating a second
//! load balancer.

mod classic;
mod classic_options;
mod nlb;
mod nlb_options;
mod own_group;
mod security_groups;
mod subnets;
mod target_groups;

use crate::Aws;
use crate::config::LEGACY_CLUSTER_TAG;
use crate::ec2::Instance;
use crate::instances;
use subnets::subnets;
use wasm_ccm_guest::LoadBalancer as LoadBalancerExport;
use wasm_ccm_guest::default_load_balancer_name as default_name;
use wasm_ccm_guest::types::{
    CloudError, LoadBalancerIngress, LoadBalancerStatus, Node, Service, SessionAffinity,
};

/// The prefix of every annotation this module reads.
const ANNOTATION: &str = "service.beta.kubernetes.io/aws-load-balancer-";

/// Upstream's other way to restrict clients (besides `spec.loadBalancerSourceRanges`).
const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// The value of `service.beta.kubernetes.io/aws-load-balancer-<suffix>`.
fn annotation<'a>(service: &'a Service, suffix: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k.strip_prefix(ANNOTATION) == Some(suffix))
        .map(|(_, v)| v.as_str())
}

/// The kind of load balancer a Service gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `type` absent (or any value but the others): upstream's default.
    Classic,
    /// `type: nlb`.
    Network,
    /// `type: external` or `nlb-ip`: the AWS Load Balancer Controller's.
    Elsewhere,
}

fn kind(service: &Service) -> Kind {
    match annotation(service, "type") {
        Some("nlb") => Kind::Network,
        Some("external" | "nlb-ip") => Kind::Elsewhere,
        _ => Kind::Classic,
    }
}

fn invalid(service: &Service, reason: impl std::fmt::Display) -> CloudError {
    CloudError::Other(format!(
        "service {}/{}: {reason}",
        service.metadata.namespace, service.metadata.name
    ))
}

/// Whether `internal` asks for an internal load balancer (any value but `false`).
fn internal(service: &Service) -> bool {
    annotation(service, "internal").is_some_and(|v| !v.is_empty() && v != "false")
}

/// Upstream's refusal of a Service whose ports do not all have the first port's
/// protocol (`checkMixedProtocol`), word for word.
const MIXED_PROTOCOL: &str = "mixed protocol is not supported for LoadBalancer";

/// Checks both kinds make first (upstream's order): the kind did not change since the
/// load balancer was made (`validateServiceAnnotations`: the first ingress's hostname is
/// a Classic one, ending `.elb.amazonaws.com`, or not), ports, affinity, one protocol
/// for every port and `loadBalancerIP`.
fn check_service(service: &Service, kind: Kind) -> Result<(), CloudError> {
    if let Some(ingress) = service.status.ingress.first() {
        // Classic: `<name>-<n>.<region>.elb.amazonaws.com` (`….elb.amazonaws.com.cn` in
        // the China regions, which upstream's check misses); NLB:
        // `…elb.<region>.amazonaws.com`.
        let hostname = ingress.hostname.as_deref().unwrap_or_default();
        let classic =
            hostname.ends_with(".elb.amazonaws.com") || hostname.ends_with(".elb.amazonaws.com.cn");
        let refused = match kind {
            Kind::Network if classic => Some("NLB"),
            Kind::Classic if !classic => Some("Classic Load Balancer"),
            _ => None,
        };
        if let Some(what) = refused {
            return Err(invalid(
                service,
                format!(
                    "cannot update Load Balancer Type annotation \"{ANNOTATION}type\" after \
                     creation for {what} (the Service's load balancer is {hostname}): delete and \
                     recreate the Service to change its kind"
                ),
            ));
        }
    }
    if service.ports.is_empty() {
        return Err(invalid(service, "requested load balancer with no ports"));
    }
    if service.session_affinity != SessionAffinity::None {
        return Err(invalid(
            service,
            "unsupported load balancer affinity: ClientIP (AWS load balancers do not offer it)",
        ));
    }
    // Upstream's `EnsureLoadBalancer` calls `checkMixedProtocol` for both kinds before
    // any port's own protocol is looked at: TCP 53 with UDP 53 is refused on an NLB
    // (rather than made as two listeners, or one TCP_UDP listener), and on a Classic
    // load balancer with this message rather than "Protocol UDP not supported".
    if let Some(first) = service.ports.first()
        && service.ports.iter().any(|p| p.protocol != first.protocol)
    {
        return Err(CloudError::Other(MIXED_PROTOCOL.into()));
    }
    if service
        .load_balancer_ip
        .as_deref()
        .is_some_and(|ip| !ip.is_empty())
    {
        return Err(invalid(
            service,
            "LoadBalancerIP cannot be specified for AWS ELB",
        ));
    }
    Ok(())
}

/// The client ranges: `spec.loadBalancerSourceRanges`, else the
/// `service.beta.kubernetes.io/load-balancer-source-ranges` annotation, else
/// `0.0.0.0/0` (upstream's `GetLoadBalancerSourceRanges`), as IPv4 networks
/// (`10.1.2.3/8` is `10.0.0.0/8`).
fn source_ranges(service: &Service) -> Result<Vec<String>, CloudError> {
    let (what, values): (&str, Vec<&str>) = if !service.load_balancer_source_ranges.is_empty() {
        (
            "spec.loadBalancerSourceRanges",
            service
                .load_balancer_source_ranges
                .iter()
                .map(|s| s.as_str())
                .collect(),
        )
    } else if let Some((_, value)) = service
        .metadata
        .annotations
        .iter()
        .find(|(k, v)| k == SOURCE_RANGES_ANNOTATION && !v.trim().is_empty())
    {
        (SOURCE_RANGES_ANNOTATION, value.trim().split(',').collect())
    } else {
        return Ok(vec!["0.0.0.0/0".into()]);
    };
    let mut ranges: Vec<String> = Vec::new();
    for value in values {
        let network = ipv4_network(value.trim()).ok_or_else(|| {
            invalid(
                service,
                format!(
                    "{what}: {value} is not valid. Expecting a comma-separated list of IPv4 source \
                     ranges. For example, 10.0.0.0/24,192.168.2.0/24"
                ),
            )
        })?;
        if !ranges.contains(&network) {
            ranges.push(network);
        }
    }
    Ok(ranges)
}

/// `a.b.c.d/n` as its network, or `None`.
fn ipv4_network(value: &str) -> Option<String> {
    let (address, prefix) = value.split_once('/')?;
    let address: std::net::Ipv4Addr = address.parse().ok()?;
    let prefix: u32 = prefix.parse().ok().filter(|p| *p <= 32)?;
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    let network = std::net::Ipv4Addr::from(u32::from(address) & mask);
    Some(format!("{network}/{prefix}"))
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

/// Tags for everything the provider creates for the Service: [`owned_tags`] and the
/// Service's name, as upstream tags load balancers and target groups.
fn tags(state: &Aws, service: &Service) -> Vec<(String, String)> {
    let mut tags = owned_tags(state, service);
    set_tag(
        &mut tags,
        "kubernetes.io/service-name".into(),
        format!("{}/{}", service.metadata.namespace, service.metadata.name),
    );
    tags
}

/// The Service's `additional-resource-tags` and the cluster's ownership tags, as
/// upstream's `buildTags(ResourceLifecycleOwned, ...)` (a Classic load balancer's own
/// security group has only these).
fn owned_tags(state: &Aws, service: &Service) -> Vec<(String, String)> {
    let mut tags = annotation(service, "additional-resource-tags")
        .map(key_values)
        .unwrap_or_default();
    let config = &state.config;
    if !config.cluster_id.is_empty() {
        set_tag(&mut tags, config.cluster_tag_key(), "owned".into());
        if config.legacy_cluster_tag {
            set_tag(
                &mut tags,
                LEGACY_CLUSTER_TAG.into(),
                config.cluster_id.clone(),
            );
        }
    }
    tags
}

/// Sets `key` to `value`, replacing an earlier value.
fn set_tag(tags: &mut Vec<(String, String)>, key: String, value: String) {
    tags.retain(|(k, _)| *k != key);
    tags.push((key, value));
}

/// The nodes' instances that can serve (running or pending; `target-node-labels`
/// selects among the nodes), and the VPC they are in (the cloud config's first).
fn targets(
    state: &Aws,
    service: &Service,
    nodes: &[Node],
) -> Result<(Vec<Instance>, String), CloudError> {
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
            Some(i) if matches!(i.state.as_str(), "pending" | "running") => alive.push(i.clone()),
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

/// A load balancer's status: its DNS name, once it has one.
fn status(dns_name: &str) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: if dns_name.is_empty() {
            Vec::new()
        } else {
            vec![LoadBalancerIngress {
                ip: None,
                hostname: Some(dns_name.to_owned()),
                ip_mode: None,
                ports: Vec::new(),
            }]
        },
    }
}

/// `classic::get` or `nlb::get`.
type GetFn = fn(&Aws, &Service) -> Result<Option<LoadBalancerStatus>, CloudError>;

impl LoadBalancerExport for Aws {
    fn get_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError> {
        // The kind asked for first; then the other, which the Service may have asked
        // for before (its annotation changed) or left things of: reported, so deleting
        // the Service removes them.
        let (first, second): (GetFn, GetFn) = match kind(&service) {
            Kind::Network => (nlb::get, classic::get),
            _ => (classic::get, nlb::get),
        };
        match first(self, &service)? {
            Some(found) => Ok(Some(found)),
            None => second(self, &service),
        }
    }

    fn ensure_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError> {
        let kind = kind(&service);
        if kind == Kind::Elsewhere {
            return Err(CloudError::ImplementedElsewhere);
        }
        check_service(&service, kind)?;
        match kind {
            Kind::Classic => classic::ensure(self, &service, &nodes),
            _ => nlb::ensure(self, &service, &nodes),
        }
    }

    fn update_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<(), CloudError> {
        let kind = kind(&service);
        if kind == Kind::Elsewhere {
            return Err(CloudError::ImplementedElsewhere);
        }
        // Upstream's UpdateLoadBalancer validates only what it ensures again: an NLB
        // (through EnsureLoadBalancer); a Classic one's instances are updated as they are.
        if kind == Kind::Network {
            check_service(&service, kind)?;
        }
        match kind {
            Kind::Classic => classic::update(self, &service, &nodes),
            _ => nlb::update(self, &service, &nodes),
        }
    }

    fn ensure_load_balancer_deleted(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        // Both kinds: the Service may have asked for the other before (its annotation
        // changed, which ensure refuses but a delete must not leave behind). Each
        // delete succeeds when there is nothing of its kind.
        classic::delete(self, &service)?;
        nlb::delete(self, &service)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use wasm_ccm_guest::types::{Protocol, ServicePort};

    /// A Service of type LoadBalancer with no ports, UID `1234-5678`.
    pub fn service(namespace: &str, name: &str) -> Service {
        let mut service = wasm_ccm_guest::testing::service(namespace, name);
        service.metadata.uid = "1234-5678".into();
        service
    }

    /// A TCP port `port` on node port `node_port`.
    pub fn port(name: &str, port: i32, node_port: i32) -> ServicePort {
        ServicePort {
            name: name.into(),
            protocol: Protocol::Tcp,
            port,
            target_port: port.to_string(),
            node_port,
            app_protocol: None,
        }
    }

    /// Sets annotation `<ANNOTATION><suffix>`.
    pub fn annotate(service: &mut Service, suffix: &str, value: &str) {
        service
            .metadata
            .annotations
            .push((format!("{ANNOTATION}{suffix}"), value.into()));
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
        assert_eq!(default_name(&svc), "a12345678");
        assert_eq!(kind(&svc), Kind::Classic);
        annotate(&mut svc, "type", "nlb");
        assert_eq!(kind(&svc), Kind::Network);
    }

    /// Upstream's GetLoadBalancerSourceRanges cases: the field first, then the
    /// annotation, else everyone; errors name where the bad range is.
    #[test]
    fn source_ranges_as_upstream() {
        let mut svc = service("default", "web");
        assert_eq!(source_ranges(&svc).unwrap(), ["0.0.0.0/0"]);
        svc.metadata.annotations = vec![(
            SOURCE_RANGES_ANNOTATION.into(),
            " 10.1.2.3/8, 192.168.0.0/16".into(),
        )];
        assert_eq!(
            source_ranges(&svc).unwrap(),
            ["10.0.0.0/8", "192.168.0.0/16"]
        );
        svc.load_balancer_source_ranges = vec!["203.0.113.0/24".into()];
        assert_eq!(source_ranges(&svc).unwrap(), ["203.0.113.0/24"]);
        svc.load_balancer_source_ranges = vec!["203.0.113.0".into()];
        let err = format!("{:?}", source_ranges(&svc).unwrap_err());
        assert!(
            err.contains("spec.loadBalancerSourceRanges: 203.0.113.0 is not valid"),
            "{err}"
        );
        svc.load_balancer_source_ranges = Vec::new();
        svc.metadata.annotations = vec![(SOURCE_RANGES_ANNOTATION.into(), "::/0".into())];
        let err = format!("{:?}", source_ranges(&svc).unwrap_err());
        assert!(err.contains(SOURCE_RANGES_ANNOTATION), "{err}");
        assert_eq!(ipv4_network("0.0.0.0/0").as_deref(), Some("0.0.0.0/0"));
        assert_eq!(ipv4_network("10.0.0.1/33"), None);
    }

    /// Upstream's TestCheckMixedProtocol cases: one protocol is fine (TCP, UDP on an
    /// NLB), TCP 53 with UDP 53 is refused with upstream's message, on either kind.
    #[test]
    fn mixed_protocols_are_refused_as_upstream() {
        let mut svc = service("default", "dns");
        svc.ports = vec![port("dns-tcp", 53, 30053)];
        assert!(check_service(&svc, Kind::Classic).is_ok());
        let udp = || ServicePort {
            protocol: Protocol::Udp,
            ..port("dns-udp", 53, 30054)
        };
        svc.ports = vec![udp()];
        assert!(check_service(&svc, Kind::Network).is_ok());
        svc.ports = vec![udp(), port("dns-tcp", 53, 30053)];
        for kind_ in [Kind::Network, Kind::Classic] {
            let err = check_service(&svc, kind_).unwrap_err();
            assert!(
                matches!(&err, CloudError::Other(m) if m == MIXED_PROTOCOL),
                "{kind_:?}: {err:?}"
            );
        }
        assert_eq!(
            MIXED_PROTOCOL,
            "mixed protocol is not supported for LoadBalancer"
        );
    }

    /// Upstream's TestValidateServiceAnnotations: the kind is fixed once the Service
    /// has a load balancer.
    #[test]
    fn the_kind_cannot_change_after_creation() {
        let mut svc = service("default", "web");
        svc.ports = vec![port("http", 80, 30080)];
        let ingress = |host: &str| LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: None,
                hostname: Some(host.into()),
                ip_mode: None,
                ports: Vec::new(),
            }],
        };
        let classic_host = "a1234-1.us-east-1.elb.amazonaws.com";
        let internal_classic = "internal-my-lb-123.eu-west-1.elb.amazonaws.com";
        let nlb_host = "a1234-0123456789abcdef.elb.us-east-1.amazonaws.com";
        let other_region_nlb = "my-nlb-abc123.elb.ap-southeast-1.amazonaws.com";
        let china_classic = "a1234-1.cn-north-1.elb.amazonaws.com.cn";
        for (host, kind_, ok) in [
            (china_classic, Kind::Classic, true),
            (china_classic, Kind::Network, false),
            (other_region_nlb, Kind::Network, true),
            (other_region_nlb, Kind::Classic, false),
            (classic_host, Kind::Classic, true),
            (internal_classic, Kind::Classic, true),
            (nlb_host, Kind::Network, true),
            (classic_host, Kind::Network, false),
            (internal_classic, Kind::Network, false),
            (nlb_host, Kind::Classic, false),
        ] {
            svc.status = ingress(host);
            let result = check_service(&svc, kind_);
            assert_eq!(result.is_ok(), ok, "{host} {kind_:?}: {result:?}");
            if let Err(e) = result {
                assert!(format!("{e:?}").contains("cannot update Load Balancer Type"));
            }
        }
    }
}
