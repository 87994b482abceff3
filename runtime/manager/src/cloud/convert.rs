//! Kubernetes objects (k8s-openapi) to the typed views providers receive, and provider
//! answers back to Kubernetes types. Every conversion between the two lives here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use wasm_ccm_host::contract::types as wit;

use super::Route;

fn pairs(map: &Option<BTreeMap<String, String>>) -> Vec<(String, String)> {
    map.iter()
        .flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())))
        .collect()
}

fn meta(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> wit::ObjectMeta {
    wit::ObjectMeta {
        name: m.name.clone().unwrap_or_default(),
        namespace: m.namespace.clone().unwrap_or_default(),
        uid: m.uid.clone().unwrap_or_default(),
        labels: pairs(&m.labels),
        annotations: pairs(&m.annotations),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
    }
}

/// The NodeAddressType of a Kubernetes address, if it is a known one.
fn address_type(kind: &str) -> Option<wit::NodeAddressType> {
    Some(match kind {
        "Hostname" => wit::NodeAddressType::Hostname,
        "InternalIP" => wit::NodeAddressType::InternalIp,
        "ExternalIP" => wit::NodeAddressType::ExternalIp,
        "InternalDNS" => wit::NodeAddressType::InternalDns,
        "ExternalDNS" => wit::NodeAddressType::ExternalDns,
        _ => return None,
    })
}

/// The Kubernetes name of an address type.
fn address_type_name(kind: wit::NodeAddressType) -> &'static str {
    match kind {
        wit::NodeAddressType::Hostname => "Hostname",
        wit::NodeAddressType::InternalIp => "InternalIP",
        wit::NodeAddressType::ExternalIp => "ExternalIP",
        wit::NodeAddressType::InternalDns => "InternalDNS",
        wit::NodeAddressType::ExternalDns => "ExternalDNS",
    }
}

/// A provider address as a Kubernetes NodeAddress.
pub fn to_k8s_address(a: &wit::NodeAddress) -> k8s::NodeAddress {
    k8s::NodeAddress {
        type_: address_type_name(a.address_type).into(),
        address: a.address.clone(),
    }
}

/// Provider addresses as Kubernetes NodeAddresses.
pub fn to_k8s_addresses(addresses: &[wit::NodeAddress]) -> Vec<k8s::NodeAddress> {
    addresses.iter().map(to_k8s_address).collect()
}

/// The Kubernetes addresses of the types providers know.
pub fn known_addresses(addresses: &[k8s::NodeAddress]) -> Vec<k8s::NodeAddress> {
    addresses
        .iter()
        .filter(|a| address_type(&a.type_).is_some())
        .cloned()
        .collect()
}

/// Kubernetes addresses of the known types as provider addresses.
fn addresses(addresses: &[k8s::NodeAddress]) -> Vec<wit::NodeAddress> {
    addresses
        .iter()
        .filter_map(|a| {
            Some(wit::NodeAddress {
                address_type: address_type(&a.type_)?,
                address: a.address.clone(),
            })
        })
        .collect()
}

/// The view of a Node given to providers.
pub fn node(n: &k8s::Node) -> wit::Node {
    let spec = n.spec.clone().unwrap_or_default();
    let status = n.status.clone().unwrap_or_default();
    wit::Node {
        metadata: meta(&n.metadata),
        provider_id: spec.provider_id.filter(|p| !p.is_empty()),
        pod_cidrs: spec.pod_cidrs.unwrap_or_default(),
        taints: spec
            .taints
            .unwrap_or_default()
            .into_iter()
            .map(|t| wit::Taint {
                key: t.key,
                value: t.value.unwrap_or_default(),
                effect: t.effect,
            })
            .collect(),
        addresses: addresses(&status.addresses.unwrap_or_default()),
        conditions: status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| wit::NodeCondition {
                condition_type: c.type_,
                status: c.status,
                reason: c.reason.unwrap_or_default(),
                message: c.message.unwrap_or_default(),
            })
            .collect(),
        unschedulable: spec.unschedulable.unwrap_or(false),
    }
}

fn protocol(p: Option<&str>) -> wit::Protocol {
    match p {
        Some("UDP") => wit::Protocol::Udp,
        Some("SCTP") => wit::Protocol::Sctp,
        _ => wit::Protocol::Tcp,
    }
}

/// The view of a Service given to providers.
pub fn service(s: &k8s::Service) -> wit::Service {
    let spec = s.spec.clone().unwrap_or_default();
    let status = s
        .status
        .as_ref()
        .and_then(|st| st.load_balancer.clone())
        .unwrap_or_default();
    wit::Service {
        metadata: meta(&s.metadata),
        service_type: match spec.type_.as_deref() {
            Some("NodePort") => wit::ServiceType::NodePort,
            Some("LoadBalancer") => wit::ServiceType::LoadBalancer,
            Some("ExternalName") => wit::ServiceType::ExternalName,
            _ => wit::ServiceType::ClusterIp,
        },
        ports: spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| wit::ServicePort {
                name: p.name.unwrap_or_default(),
                protocol: protocol(p.protocol.as_deref()),
                port: p.port,
                target_port: match p.target_port {
                    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i)) => {
                        i.to_string()
                    }
                    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) => s,
                    None => p.port.to_string(),
                },
                node_port: p.node_port.unwrap_or(0),
                app_protocol: p.app_protocol,
            })
            .collect(),
        session_affinity: match spec.session_affinity.as_deref() {
            Some("ClientIP") => wit::SessionAffinity::ClientIp,
            _ => wit::SessionAffinity::None,
        },
        load_balancer_source_ranges: spec.load_balancer_source_ranges.unwrap_or_default(),
        external_traffic_policy: match spec.external_traffic_policy.as_deref() {
            Some("Local") => wit::TrafficPolicy::Local,
            _ => wit::TrafficPolicy::Cluster,
        },
        health_check_node_port: spec.health_check_node_port.unwrap_or(0),
        ip_families: spec
            .ip_families
            .unwrap_or_default()
            .iter()
            .map(|f| {
                if f == "IPv6" {
                    wit::IpFamily::Ipv6
                } else {
                    wit::IpFamily::Ipv4
                }
            })
            .collect(),
        load_balancer_class: spec.load_balancer_class,
        load_balancer_ip: spec.load_balancer_ip.filter(|ip| !ip.is_empty()),
        status: load_balancer_status(&status),
        external_ips: spec.external_ips.unwrap_or_default(),
        cluster_ips: spec.cluster_ips.unwrap_or_default(),
        ip_family_policy: spec.ip_family_policy.as_deref().and_then(|p| match p {
            "SingleStack" => Some(wit::IpFamilyPolicy::SingleStack),
            "PreferDualStack" => Some(wit::IpFamilyPolicy::PreferDualStack),
            "RequireDualStack" => Some(wit::IpFamilyPolicy::RequireDualStack),
            _ => None,
        }),
        session_affinity_timeout_seconds: spec
            .session_affinity_config
            .and_then(|c| c.client_ip)
            .and_then(|c| c.timeout_seconds),
        allocate_load_balancer_node_ports: spec.allocate_load_balancer_node_ports,
    }
}

/// A Service of type `LoadBalancer` as the `services` import shows it, with only the
/// annotations `annotation` accepts (the provider's policy prefixes).
pub fn load_balancer_service(
    s: &k8s::Service,
    annotation: &dyn Fn(&str) -> bool,
) -> wasm_ccm_host::capabilities::services::LoadBalancerService {
    // The view of the Service without its annotations and labels (copied only as
    // asked), so a large annotation (last-applied-configuration) is never cloned.
    let bare = service(&k8s::Service {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: s.metadata.name.clone(),
            namespace: s.metadata.namespace.clone(),
            uid: s.metadata.uid.clone(),
            deletion_timestamp: s.metadata.deletion_timestamp.clone(),
            ..Default::default()
        },
        spec: s.spec.clone(),
        status: s.status.clone(),
    });
    wasm_ccm_host::capabilities::services::LoadBalancerService {
        namespace: bare.metadata.namespace,
        name: bare.metadata.name,
        uid: bare.metadata.uid,
        load_balancer_class: bare.load_balancer_class,
        ports: bare.ports,
        load_balancer_ip: bare.load_balancer_ip,
        ingress: bare.status.ingress,
        annotations: s
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| annotation(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        deleting: bare.metadata.deletion_timestamp.is_some(),
    }
}

/// A Kubernetes LoadBalancerStatus as the provider view.
fn load_balancer_status(s: &k8s::LoadBalancerStatus) -> wit::LoadBalancerStatus {
    wit::LoadBalancerStatus {
        ingress: s
            .ingress
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|i| wit::LoadBalancerIngress {
                ip: i.ip,
                hostname: i.hostname,
                ip_mode: i.ip_mode.map(|m| {
                    if m == "Proxy" {
                        wit::IpMode::Proxy
                    } else {
                        wit::IpMode::Vip
                    }
                }),
                ports: i
                    .ports
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| wit::PortStatus {
                        port: p.port,
                        protocol: protocol(Some(&p.protocol)),
                        error: p.error,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn protocol_name(p: wit::Protocol) -> &'static str {
    match p {
        wit::Protocol::Tcp => "TCP",
        wit::Protocol::Udp => "UDP",
        wit::Protocol::Sctp => "SCTP",
    }
}

/// A provider's load balancer status as Kubernetes' `status.loadBalancer`.
pub fn to_k8s_status(s: &wit::LoadBalancerStatus) -> k8s::LoadBalancerStatus {
    k8s::LoadBalancerStatus {
        ingress: Some(
            s.ingress
                .iter()
                .map(|i| k8s::LoadBalancerIngress {
                    ip: i.ip.clone(),
                    hostname: i.hostname.clone(),
                    ip_mode: i.ip_mode.map(|m| match m {
                        wit::IpMode::Vip => "VIP".to_string(),
                        wit::IpMode::Proxy => "Proxy".to_string(),
                    }),
                    ports: (!i.ports.is_empty()).then(|| {
                        i.ports
                            .iter()
                            .map(|p| k8s::PortStatus {
                                port: p.port,
                                protocol: protocol_name(p.protocol).into(),
                                error: p.error.clone(),
                            })
                            .collect()
                    }),
                })
                .collect(),
        ),
    }
}

/// A provider's route in Kubernetes terms.
pub fn to_route(r: &wit::Route) -> Route {
    Route {
        name: r.name.clone(),
        target_node: r.target_node.clone(),
        target_node_addresses: to_k8s_addresses(&r.target_node_addresses),
        destination_cidr: r.destination_cidr.clone(),
        blackhole: r.blackhole,
        enable_node_addresses: r.enable_node_addresses,
        target_node_provider_id: r.target_node_provider_id.clone(),
    }
}

/// A route as the provider view.
pub fn route(r: &Route) -> wit::Route {
    wit::Route {
        name: r.name.clone(),
        target_node: r.target_node.clone(),
        target_node_addresses: addresses(&r.target_node_addresses),
        destination_cidr: r.destination_cidr.clone(),
        blackhole: r.blackhole,
        enable_node_addresses: r.enable_node_addresses,
        target_node_provider_id: r.target_node_provider_id.clone(),
    }
}
