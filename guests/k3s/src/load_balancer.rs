//! `load-balancer`: addresses for LoadBalancer Services from the pools of the cloud
//! config, as kube-vip-cloud-provider's `syncLoadBalancer`
//! (`pkg/provider/loadBalancer.go`) hands them out, with the rules of [`crate::pools`].
//!
//! Nothing is made in a cloud: the address is recorded on the Service in
//! `kube-vip.io/loadbalancerIPs` (the annotations import; the policy allows
//! `kube-vip.io/`) and returned as its status. The data plane that announces it
//! (kube-vip, MetalLB) is the operator's.
//!
//! Which addresses are taken comes from the host's `services` import (every
//! LoadBalancer Service: its ingress and its `kube-vip.io/loadbalancerIPs`), so after
//! a restart nothing is given twice, plus the addresses this provider handed out in the
//! last minutes (kept in the shared cache), which the host's view of the Services may
//! not show yet.
//!
//! - A Service keeps what it holds: its `kube-vip.io/loadbalancerIPs`, else
//!   `spec.loadBalancerIP`, else its ingress addresses are asked for again, and granted
//!   while they are in the pool and not held by another Service (unless shareable).
//! - A requested address that cannot be granted, an exhausted pool or a namespace
//!   without a pool is a Warning event on the Service (`NoAddressAvailable`,
//!   `RequestedAddressInUse`, ...) and an error, retried by the controller.
//! - Deleting frees the address: the Service is no longer listed.

use std::net::IpAddr;
use std::time::Duration;

use wasm_ccm_guest::types::{
    CloudError, IpMode, LoadBalancerIngress, LoadBalancerStatus, Node, Service,
};
use wasm_ccm_guest::{annotations, cache, events, services};

use crate::K3s;
use crate::pools::{Allocation, Holder, Request, parse_address_list};

/// kube-vip's annotation holding a Service's addresses, comma-separated.
pub const LOADBALANCER_IPS: &str = "kube-vip.io/loadbalancerIPs";
/// kube-vip's annotation naming the interface the address is advertised on.
pub const SERVICE_INTERFACE: &str = "kube-vip.io/serviceInterface";
/// The shared cache's key for the addresses handed out lately.
const RECENT_KEY: &str = "k3s/recent-allocations";
/// How long a handed-out address counts as taken without the host listing it.
const RECENT_TTL: Duration = Duration::from_secs(300);

/// One address assignment made lately: `uid namespace name ports addresses`.
#[derive(Debug, Clone, PartialEq)]
struct Recent {
    uid: String,
    holder: Holder,
}

impl Recent {
    fn encode(&self) -> String {
        let ports: Vec<String> = self.holder.ports.iter().map(i32::to_string).collect();
        let addresses: Vec<String> = self
            .holder
            .addresses
            .iter()
            .map(IpAddr::to_string)
            .collect();
        format!(
            "{} {} {} {} {}",
            self.uid,
            self.holder.namespace,
            self.holder.name,
            if ports.is_empty() {
                "-".into()
            } else {
                ports.join(",")
            },
            addresses.join(",")
        )
    }

    fn decode(line: &str) -> Option<Recent> {
        let mut fields = line.split(' ');
        let (uid, namespace, name, ports, addresses) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let ports = if ports == "-" {
            Vec::new()
        } else {
            ports
                .split(',')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?
        };
        Some(Recent {
            uid: uid.into(),
            holder: Holder {
                namespace: namespace.into(),
                name: name.into(),
                ports,
                addresses: parse_address_list(addresses).ok()?,
            },
        })
    }
}

fn recent() -> Vec<Recent> {
    cache::get(RECENT_KEY)
        .map(|bytes| {
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter_map(Recent::decode)
                .collect()
        })
        .unwrap_or_default()
}

fn store_recent(entries: &[Recent]) {
    let text: Vec<String> = entries.iter().map(Recent::encode).collect();
    if let Err(e) = cache::set(RECENT_KEY, text.join("\n").as_bytes(), RECENT_TTL) {
        wasm_ccm_guest::log::warn(
            "cannot keep the addresses handed out lately",
            &[("error", &format!("{e:?}"))],
        );
    }
}

/// The addresses `service` asks for: kube-vip's annotation, else
/// `spec.loadBalancerIP`, else what its status holds.
fn requested(service: &Service) -> Result<Vec<IpAddr>, String> {
    if let Some((_, value)) = service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k == LOADBALANCER_IPS)
        .filter(|(_, v)| !v.is_empty())
    {
        return parse_address_list(value).map_err(|e| format!("{LOADBALANCER_IPS}: {e}"));
    }
    if let Some(ip) = service
        .load_balancer_ip
        .as_deref()
        .filter(|ip| !ip.is_empty())
    {
        return ip
            .parse()
            .map(|ip| vec![ip])
            .map_err(|_| format!("spec.loadBalancerIP: `{ip}` is not an IP address"));
    }
    Ok(service
        .status
        .ingress
        .iter()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect())
}

fn status(addresses: &[IpAddr]) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: addresses
            .iter()
            .map(|ip| LoadBalancerIngress {
                ip: Some(ip.to_string()),
                hostname: None,
                // What the API server writes for an address without a mode: said here,
                // a status read back equals the one returned and is not written again.
                ip_mode: Some(IpMode::Vip),
                ports: Vec::new(),
            })
            .collect(),
    }
}

fn service_name(service: &Service) -> String {
    format!("{}/{}", service.metadata.namespace, service.metadata.name)
}

/// The Services holding addresses: those the host lists (but `service`) and those
/// handed out lately that it does not list yet.
fn holders(service: &Service, lately: &[Recent]) -> Result<Vec<Holder>, CloudError> {
    let listed = services::list().map_err(services::not_ready)?;
    let mut holders: Vec<Holder> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for s in &listed {
        if s.uid == service.metadata.uid {
            continue;
        }
        seen.push(&s.uid);
        let mut addresses: Vec<IpAddr> = s
            .ingress
            .iter()
            .filter_map(|i| i.ip.as_deref()?.parse().ok())
            .collect();
        if let Some((_, value)) = s.annotations.iter().find(|(k, _)| k == LOADBALANCER_IPS) {
            addresses.extend(parse_address_list(value).unwrap_or_default());
        }
        addresses.sort();
        addresses.dedup();
        holders.push(Holder {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            ports: s.ports.iter().map(|p| p.port).collect(),
            addresses,
        });
    }
    holders.extend(
        lately
            .iter()
            .filter(|r| r.uid != service.metadata.uid && !seen.contains(&r.uid.as_str()))
            .map(|r| r.holder.clone()),
    );
    Ok(holders)
}

impl K3s {
    /// kube-vip's `syncLoadBalancer` for one Service.
    fn assign(&self, service: &Service) -> Result<Allocation, CloudError> {
        let name = service_name(service);
        let refuse = |reason: &str, message: String| {
            let _ = events::warning(reason, &message, None);
            CloudError::Other(format!("service {name}: {message}"))
        };
        let requested = requested(service).map_err(|m| refuse("InvalidRequestedAddress", m))?;
        let mut lately = recent();
        let holders = holders(service, &lately)?;
        let request = Request::for_service(service, requested);
        let allocation = self
            .pools()
            .allocate(&request, &holders)
            .map_err(|e| refuse(e.reason(), e.to_string()))?;
        if let Some(warning) = &allocation.warning {
            let _ = events::warning("PartialDualStack", warning, None);
        }
        lately.retain(|r| r.uid != service.metadata.uid);
        lately.push(Recent {
            uid: service.metadata.uid.clone(),
            holder: Holder {
                namespace: service.metadata.namespace.clone(),
                name: service.metadata.name.clone(),
                ports: request.ports.clone(),
                addresses: allocation.addresses.clone(),
            },
        });
        store_recent(&lately);
        Ok(allocation)
    }
}

impl wasm_ccm_guest::LoadBalancer for K3s {
    /// The addresses the Service holds (its annotation, else what this provider handed
    /// it lately and the Service does not show yet), or none.
    fn get_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError> {
        let held = service
            .metadata
            .annotations
            .iter()
            .find(|(k, _)| k == LOADBALANCER_IPS)
            .and_then(|(_, v)| parse_address_list(v).ok())
            .filter(|a| !a.is_empty())
            .or_else(|| {
                recent()
                    .into_iter()
                    .find(|r| r.uid == service.metadata.uid)
                    .map(|r| r.holder.addresses)
            });
        Ok(held.map(|addresses| status(&addresses)))
    }

    fn ensure_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
        _nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError> {
        let allocation = self.assign(&service)?;
        let joined: Vec<String> = allocation.addresses.iter().map(IpAddr::to_string).collect();
        let written = annotations::ensure(&service, LOADBALANCER_IPS, &joined.join(","));
        if let Some(interface) = &allocation.interface {
            let _ = annotations::ensure(&service, SERVICE_INTERFACE, interface);
        }
        if let Err(e) = written {
            // Without the annotation the address is still the Service's status, which
            // the host lists too; say why it is missing.
            wasm_ccm_guest::log::warn(
                "cannot record the address on the Service",
                &[
                    ("service", &service_name(&service)),
                    ("error", &format!("{e:?}")),
                ],
            );
        }
        wasm_ccm_guest::log::info(
            "address assigned",
            &[
                ("service", &service_name(&service)),
                ("addresses", &joined.join(",")),
                ("pool", &allocation.pool),
            ],
        );
        Ok(status(&allocation.addresses))
    }

    /// The Nodes do not matter: the address is announced by the data plane.
    fn update_load_balancer(
        &self,
        _cluster_name: String,
        _service: Service,
        _nodes: Vec<Node>,
    ) -> Result<(), CloudError> {
        Ok(())
    }

    /// Frees the address: the Service stops counting as a holder (the host no longer
    /// lists it once gone, and it leaves the addresses handed out lately now).
    fn ensure_load_balancer_deleted(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        let mut lately = recent();
        let before = lately.len();
        lately.retain(|r| r.uid != service.metadata.uid);
        if lately.len() != before {
            store_recent(&lately);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ccm_guest::LoadBalancer;
    use wasm_ccm_guest::Provider;
    use wasm_ccm_guest::services::LoadBalancerService;
    use wasm_ccm_guest::types::{ObjectMeta, Protocol, ServicePort, ServiceType};

    fn k3s() -> K3s {
        K3s::initialize(
            b"[Pools \"default\"]\ncidr = 10.0.0.0/29\nallow-share = true\n[Pools]\nrange-global = 192.168.1.10-192.168.1.11\n",
        )
        .unwrap()
    }

    fn service(namespace: &str, name: &str, ports: &[i32]) -> Service {
        let mut s = Service {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: namespace.into(),
                uid: format!("uid-{namespace}-{name}"),
                labels: Vec::new(),
                annotations: Vec::new(),
                deletion_timestamp: None,
            },
            service_type: ServiceType::LoadBalancer,
            ports: Vec::new(),
            session_affinity: wasm_ccm_guest::types::SessionAffinity::None,
            load_balancer_source_ranges: Vec::new(),
            external_traffic_policy: wasm_ccm_guest::types::TrafficPolicy::Cluster,
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
        };
        s.ports = ports
            .iter()
            .map(|p| ServicePort {
                name: String::new(),
                protocol: Protocol::Tcp,
                port: *p,
                target_port: p.to_string(),
                node_port: 0,
                app_protocol: None,
            })
            .collect();
        s
    }

    /// The host's listing of `s` holding `ip`.
    fn listed(s: &Service, ip: &str) -> LoadBalancerService {
        LoadBalancerService {
            namespace: s.metadata.namespace.clone(),
            name: s.metadata.name.clone(),
            uid: s.metadata.uid.clone(),
            load_balancer_class: None,
            ports: s.ports.clone(),
            load_balancer_ip: None,
            ingress: status(&[ip.parse().unwrap()]).ingress,
            annotations: vec![(LOADBALANCER_IPS.into(), ip.into())],
            deleting: false,
        }
    }

    fn ensure(k3s: &K3s, s: &Service) -> Result<String, CloudError> {
        k3s.ensure_load_balancer("kubernetes".into(), s.clone(), Vec::new())
            .map(|st| st.ingress[0].ip.clone().unwrap())
    }

    #[test]
    fn addresses_are_distinct_and_remembered_before_the_host_lists_them() {
        cache_reset();
        services::set_for_test(Some(Vec::new()));
        let k3s = k3s();
        let a = ensure(&k3s, &service("default", "a", &[80])).unwrap();
        // Not listed by the host yet: the recent allocation still counts.
        let b = ensure(&k3s, &service("default", "b", &[80])).unwrap();
        assert_eq!(a, "10.0.0.1");
        assert_eq!(b, "10.0.0.2");
        // Disjoint ports share (allow-share in default).
        let c = ensure(&k3s, &service("default", "c", &[443])).unwrap();
        assert_eq!(c, "10.0.0.1");
        assert_eq!(
            annotations::recorded()
                .last()
                .map(|(k, v)| (k.as_str(), v.as_str())),
            Some((LOADBALANCER_IPS, "10.0.0.1"))
        );
    }

    #[test]
    fn after_a_restart_the_listed_services_hold_their_addresses() {
        cache_reset();
        let k3s = k3s();
        let a = service("default", "a", &[80]);
        let b = service("default", "b", &[80]);
        services::set_for_test(Some(vec![listed(&a, "10.0.0.1"), listed(&b, "10.0.0.2")]));
        assert_eq!(
            ensure(&k3s, &service("default", "d", &[80])).unwrap(),
            "10.0.0.3"
        );
        // `a` asks again (its annotation) and keeps its address.
        let mut again = a.clone();
        again.metadata.annotations = vec![(LOADBALANCER_IPS.into(), "10.0.0.1".into())];
        assert_eq!(ensure(&k3s, &again).unwrap(), "10.0.0.1");
    }

    #[test]
    fn a_taken_request_and_an_exhausted_pool_are_warnings() {
        cache_reset();
        let k3s = k3s();
        let a = service("other", "a", &[80]);
        services::set_for_test(Some(vec![listed(&a, "192.168.1.10")]));
        let mut wants = service("other", "b", &[80]);
        wants.load_balancer_ip = Some("192.168.1.10".into());
        let err = ensure(&k3s, &wants).unwrap_err();
        assert!(format!("{err:?}").contains("192.168.1.10"), "{err:?}");
        assert_eq!(
            ensure(&k3s, &service("other", "c", &[80])).unwrap(),
            "192.168.1.11"
        );
        let err = ensure(&k3s, &service("other", "d", &[80])).unwrap_err();
        assert!(
            format!("{err:?}").contains("192.168.1.10-192.168.1.11"),
            "{err:?}"
        );
        let reasons: Vec<String> = events::recorded().into_iter().map(|(_, r, _)| r).collect();
        assert!(
            reasons.contains(&"RequestedAddressInUse".to_string()),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&"NoAddressAvailable".to_string()),
            "{reasons:?}"
        );
    }

    #[test]
    fn not_ready_is_retried_never_taken_for_none() {
        cache_reset();
        services::set_for_test(None);
        let err = ensure(&k3s(), &service("default", "a", &[80])).unwrap_err();
        assert!(matches!(err, CloudError::RetryAfter(_)), "{err:?}");
    }

    #[test]
    fn deletion_frees_the_address() {
        cache_reset();
        services::set_for_test(Some(Vec::new()));
        let k3s = k3s();
        let a = service("other", "a", &[80]);
        assert_eq!(ensure(&k3s, &a).unwrap(), "192.168.1.10");
        let found = k3s
            .get_load_balancer("kubernetes".into(), a.clone())
            .unwrap();
        assert_eq!(
            found.unwrap().ingress[0].ip.as_deref(),
            Some("192.168.1.10")
        );
        k3s.ensure_load_balancer_deleted("kubernetes".into(), a.clone())
            .unwrap();
        assert_eq!(k3s.get_load_balancer("kubernetes".into(), a).unwrap(), None);
        assert_eq!(
            ensure(&k3s, &service("other", "b", &[80])).unwrap(),
            "192.168.1.10"
        );
    }

    #[test]
    fn recent_entries_round_trip() {
        let r = Recent {
            uid: "u".into(),
            holder: Holder {
                namespace: "ns".into(),
                name: "n".into(),
                ports: vec![80, 443],
                addresses: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            },
        };
        assert_eq!(Recent::decode(&r.encode()), Some(r.clone()));
        let portless = Recent {
            holder: Holder {
                ports: Vec::new(),
                ..r.holder
            },
            ..r
        };
        assert_eq!(Recent::decode(&portless.encode()), Some(portless));
    }

    fn cache_reset() {
        cache::delete(RECENT_KEY);
    }
}
