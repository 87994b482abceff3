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
//! a restart nothing is given twice, plus the addresses this provider handed out lately
//! ([`recent`]), which the host's view of the Services may not show yet. Allocating
//! runs under a lock in the shared cache, so concurrent syncs and the provider's
//! instances never give one address twice.
//!
//! - A Service keeps what it holds: its `kube-vip.io/loadbalancerIPs`, else
//!   `spec.loadBalancerIP`, else its ingress addresses are asked for again, and granted
//!   while they are in the pool and not held by another Service (unless shareable). An
//!   address it holds that a pool change left outside every pool is kept, with a
//!   Warning (`AddressOutsidePool`); ingress addresses from another implementation
//!   (ServiceLB's node addresses) are not asked for: the Service gets a pool address.
//! - A requested address that cannot be granted, an exhausted pool or a namespace
//!   without a pool is a Warning event on the Service (`NoAddressAvailable`,
//!   `RequestedAddressInUse`, ...) and an error, retried by the controller.
//! - Deleting (or a change of type) frees the address: the annotation is emptied and
//!   the Service is no longer listed.

mod recent;

use std::net::IpAddr;

use wasm_ccm_guest::types::{
    CloudError, IpMode, LoadBalancerIngress, LoadBalancerStatus, Node, Service,
};
use wasm_ccm_guest::{annotations, events, services};

use crate::K3s;
use crate::pools::{AllocError, Allocation, Holder, Request, parse_address_list};
use recent::Recent;

/// kube-vip's annotation holding a Service's addresses, comma-separated.
pub const LOADBALANCER_IPS: &str = "kube-vip.io/loadbalancerIPs";
/// kube-vip's annotation naming the interface the address is advertised on.
pub const SERVICE_INTERFACE: &str = "kube-vip.io/serviceInterface";

/// Where a Service's request comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// `kube-vip.io/loadbalancerIPs` (set by the user, or by this provider before).
    Annotation,
    /// `spec.loadBalancerIP`.
    Spec,
    /// Its status (what it was given, maybe by another implementation).
    Status,
    /// Nothing.
    Nothing,
}

fn ingress_addresses(ingress: &[LoadBalancerIngress]) -> Vec<IpAddr> {
    ingress
        .iter()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

/// The addresses `service` asks for, and where from.
fn requested(service: &Service) -> Result<(Vec<IpAddr>, Asked), String> {
    if let Some((_, value)) = service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k == LOADBALANCER_IPS)
        .filter(|(_, v)| !v.is_empty())
    {
        return parse_address_list(value)
            .map(|a| (a, Asked::Annotation))
            .map_err(|e| format!("{LOADBALANCER_IPS}: {e}"));
    }
    if let Some(ip) = service
        .load_balancer_ip
        .as_deref()
        .filter(|ip| !ip.is_empty())
    {
        return ip
            .parse()
            .map(|ip| (vec![ip], Asked::Spec))
            .map_err(|_| format!("spec.loadBalancerIP: `{ip}` is not an IP address"));
    }
    let held = ingress_addresses(&service.status.ingress);
    if held.is_empty() {
        Ok((held, Asked::Nothing))
    } else {
        Ok((held, Asked::Status))
    }
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

/// The Services holding addresses but `service`: those the host lists, each with
/// what this provider handed it lately added (the listing may not show it yet), and
/// those handed addresses lately that the host does not list yet. Entries the
/// listing has caught up with are dropped from `lately`.
fn holders(service: &Service, lately: &mut Vec<Recent>) -> Result<Vec<Holder>, CloudError> {
    let listed = services::list().map_err(services::not_ready)?;
    let mut holders: Vec<Holder> = Vec::new();
    for s in &listed {
        let mut addresses = ingress_addresses(&s.ingress);
        if let Some((_, value)) = s.annotations.iter().find(|(k, _)| k == LOADBALANCER_IPS) {
            addresses.extend(parse_address_list(value).unwrap_or_default());
        }
        // Caught up: the listing shows what was handed out.
        lately.retain(|r| {
            r.uid != s.uid || !r.holder.addresses.iter().all(|a| addresses.contains(a))
        });
        if s.uid == service.metadata.uid {
            continue;
        }
        for r in lately.iter().filter(|r| r.uid == s.uid) {
            addresses.extend(r.holder.addresses.iter().copied());
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
            .filter(|r| r.uid != service.metadata.uid && !listed.iter().any(|s| s.uid == r.uid))
            .map(|r| r.holder.clone()),
    );
    Ok(holders)
}

impl K3s {
    /// kube-vip's `syncLoadBalancer` for one Service, under the allocation lock.
    fn assign(&self, service: &Service) -> Result<Allocation, CloudError> {
        let name = service_name(service);
        let refuse = |reason: &str, message: String| {
            let _ = events::warning(reason, &message, None);
            CloudError::Other(format!("service {name}: {message}"))
        };
        let (asked, from) = requested(service).map_err(|m| refuse("InvalidRequestedAddress", m))?;
        recent::locked(&service.metadata.uid, || {
            let mut lately = recent::load();
            let holders = holders(service, &mut lately)?;
            let allocate = |asked: Vec<IpAddr>| {
                self.pools()
                    .allocate(&Request::for_service(service, asked), &holders)
            };
            let allocation = match allocate(asked.clone()) {
                // Ingress from another implementation: a pool address instead.
                Err(AllocError::RequestedNotInPool { .. }) if from == Asked::Status => {
                    allocate(Vec::new())
                }
                // What it holds, left outside the pools by a change of the config: kept.
                Err(AllocError::RequestedNotInPool { key, .. })
                    if from == Asked::Annotation
                        && asked == ingress_addresses(&service.status.ingress) =>
                {
                    let _ = events::warning(
                        "AddressOutsidePool",
                        &format!("keeps {}, which pool {key} no longer holds", join(&asked)),
                        None,
                    );
                    Ok(Allocation {
                        addresses: asked.clone(),
                        pool: key,
                        interface: self
                            .pools()
                            .interface(&service.metadata.namespace)
                            .map(str::to_owned),
                        warning: None,
                    })
                }
                other => other,
            }
            .map_err(|e| refuse(e.reason(), e.to_string()))?;
            if let Some(warning) = &allocation.warning {
                let _ = events::warning("PartialDualStack", warning, None);
            }
            lately.retain(|r| r.uid != service.metadata.uid);
            lately.push(Recent {
                uid: service.metadata.uid.clone(),
                at: recent::now(),
                holder: Holder {
                    namespace: service.metadata.namespace.clone(),
                    name: service.metadata.name.clone(),
                    ports: service.ports.iter().map(|p| p.port).collect(),
                    addresses: allocation.addresses.clone(),
                },
            });
            recent::store(&lately);
            Ok(allocation)
        })
    }
}

fn join(addresses: &[IpAddr]) -> String {
    addresses
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(",")
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
                recent::load()
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
        let joined = join(&allocation.addresses);
        let written = annotations::ensure(&service, LOADBALANCER_IPS, &joined);
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
                ("addresses", &joined),
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

    /// Frees the address: the annotation is emptied (a Service made a LoadBalancer
    /// again asks for nothing), the Service leaves the addresses handed out lately, and
    /// the host no longer lists it once it is gone or of another type.
    fn ensure_load_balancer_deleted(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        recent::locked(&service.metadata.uid, || {
            let mut lately = recent::load();
            let before = lately.len();
            lately.retain(|r| r.uid != service.metadata.uid);
            if lately.len() != before {
                recent::store(&lately);
            }
            Ok(())
        })?;
        let annotated = service
            .metadata
            .annotations
            .iter()
            .any(|(k, v)| k == LOADBALANCER_IPS && !v.is_empty());
        if annotated && service.metadata.deletion_timestamp.is_none() {
            let _ = annotations::set(LOADBALANCER_IPS, "");
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
    use wasm_ccm_guest::types::{Protocol, ServicePort};

    fn k3s() -> K3s {
        K3s::initialize(
            b"[Pools \"default\"]\ncidr = 10.0.0.0/29\nallow-share = true\n[Pools]\nrange-global = 192.168.1.10-192.168.1.11\n",
        )
        .unwrap()
    }

    fn service(namespace: &str, name: &str, ports: &[i32]) -> Service {
        let mut s = wasm_ccm_guest::testing::service(namespace, name);
        s.metadata.uid = format!("uid-{namespace}-{name}");
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

    fn cache_reset() {
        wasm_ccm_guest::cache::clear();
        let _ = annotations::recorded();
        let _ = events::recorded();
    }

    #[test]
    fn an_address_handed_out_counts_until_the_listing_shows_it() {
        cache_reset();
        let k3s = k3s();
        let a = service("default", "a", &[80]);
        let b = service("default", "b", &[80]);
        // The host lists `a` before its status shows the address it was given.
        services::set_for_test(Some(vec![]));
        assert_eq!(ensure(&k3s, &a).unwrap(), "10.0.0.1");
        let mut unaddressed = listed(&a, "10.0.0.1");
        unaddressed.ingress.clear();
        unaddressed.annotations.clear();
        services::set_for_test(Some(vec![unaddressed]));
        assert_eq!(ensure(&k3s, &b).unwrap(), "10.0.0.2");
    }

    #[test]
    fn ingress_from_another_implementation_is_replaced_by_a_pool_address() {
        cache_reset();
        services::set_for_test(Some(Vec::new()));
        let mut migrated = service("default", "a", &[80]);
        // ServiceLB gave it the node's address.
        migrated.status = status(&["172.16.0.5".parse().unwrap()]);
        assert_eq!(ensure(&k3s(), &migrated).unwrap(), "10.0.0.1");
    }

    #[test]
    fn an_address_a_pool_change_left_outside_is_kept_with_a_warning() {
        cache_reset();
        services::set_for_test(Some(Vec::new()));
        let mut held = service("default", "a", &[80]);
        held.metadata.annotations = vec![(LOADBALANCER_IPS.into(), "10.9.9.9".into())];
        held.status = status(&["10.9.9.9".parse().unwrap()]);
        assert_eq!(ensure(&k3s(), &held).unwrap(), "10.9.9.9");
        let reasons: Vec<String> = events::recorded().into_iter().map(|(_, r, _)| r).collect();
        assert_eq!(reasons, ["AddressOutsidePool"]);
        // Asked for, not held: refused.
        held.status = LoadBalancerStatus {
            ingress: Vec::new(),
        };
        assert!(ensure(&k3s(), &held).is_err());
    }

    #[test]
    fn deletion_empties_the_annotation_of_a_service_that_stays() {
        cache_reset();
        services::set_for_test(Some(Vec::new()));
        let mut a = service("default", "a", &[80]);
        a.metadata.annotations = vec![(LOADBALANCER_IPS.into(), "10.0.0.1".into())];
        k3s()
            .ensure_load_balancer_deleted("kubernetes".into(), a.clone())
            .unwrap();
        assert_eq!(
            annotations::recorded(),
            [(LOADBALANCER_IPS.to_string(), String::new())]
        );
        a.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        k3s()
            .ensure_load_balancer_deleted("kubernetes".into(), a)
            .unwrap();
        assert!(
            annotations::recorded().is_empty(),
            "a Service going away is not patched"
        );
    }
}
