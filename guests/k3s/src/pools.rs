//! Address pools for LoadBalancer Services: kube-vip-cloud-provider's allocation rules
//! (kube-vip/kube-vip-cloud-provider `pkg/provider/loadBalancer.go`, `pkg/ipam/`),
//! pure. Its inputs are plain values, so the export ([`crate::load_balancer`]) only
//! feeds it:
//! [`PoolConfig`] (kube-vip's ConfigMap keys, from the cloud config's `[Pools]`
//! sections, see [`crate::config`]), a [`Request`] (the Service) and the [`Holder`]s
//! (the Services holding addresses); [`PoolConfig::allocate`] answers.
//!
//! # The ConfigMap's keys
//!
//! | key | what |
//! | --- | --- |
//! | `cidr-<namespace>`, `cidr-global` | CIDRs, comma-separated, IPv4 and IPv6 mixed (`10.0.0.0/29,fd00::/125`) |
//! | `range-<namespace>`, `range-global` | ranges `first-last`, comma-separated, mixed, overlaps allowed |
//! | `allow-share-<namespace>`, `allow-share-global` | Go `strconv.ParseBool`: Services with disjoint ports share one IPv4 address |
//! | `interface-<namespace>`, `interface-global` | the interface kube-vip advertises on (`kube-vip.io/serviceInterface`) |
//! | `search-order` | `desc`: search from the pool's end |
//! | `skip-end-ips-in-cidr` | `true`: an IPv4 CIDR's first and last address are never given |
//!
//! # The rules, as kube-vip's `syncLoadBalancer` applies them
//!
//! 1. **The pool** (`discoverPool`): `cidr-<namespace>`, else `cidr-global`, else
//!    `range-<namespace>`, else `range-global` (so `cidr-global` wins over
//!    `range-<namespace>`); none is an error. CIDRs or ranges is read from the value
//!    (a `/` means CIDRs). `0.0.0.0/32` gives every Service `0.0.0.0` (DHCP).
//! 2. **Addresses in use**: those of the holders in the Service's namespace, or in
//!    every namespace when the pool is a `global` one.
//! 3. **Sharing** (`allow-share-<namespace>`, else `allow-share-global`): the Service
//!    takes an IPv4 address already held when none of its ports is among the ports
//!    of the holders of that address (a holder without ports keeps its address). The
//!    address is any IPv4 address the holders in scope hold, in the pool or not, as
//!    kube-vip shares it.
//! 4. **Families** (`discoverVIPs`): with no policy or `SingleStack`, one address of
//!    the Service's first IP family (with none given, IPv4 when the pool has IPv4,
//!    else IPv6); `PreferDualStack` one per family the pool has, in the Service's
//!    family order, a family whose part of the pool is exhausted being left out;
//!    `RequireDualStack` one of each, or an error.
//! 5. **The address** (`FindFreeAddress`): the first (with `search-order: desc` the
//!    last) address of the pool not in use; IPv4 addresses ending in `.0` or `.255`
//!    are skipped, whatever the prefix length. None left is
//!    [`AllocError::NoAddressAvailable`], naming the pool.
//!
//! # Where this differs from kube-vip, on purpose
//!
//! - A **requested address** (kube-vip's `kube-vip.io/loadbalancerIPs` annotation or
//!   `spec.loadBalancerIP`, which kube-vip takes as it is) is honoured when it is in
//!   the pool and free (or shareable): else an error, which the caller turns into a
//!   Warning event.
//! - Among several addresses the Service could share, the lowest is taken (kube-vip
//!   takes the first of a Go map: any).
//! - A `PreferDualStack` Service whose pool has one family, exhausted, gets
//!   [`AllocError::NoAddressAvailable`] (kube-vip writes an empty address).
//! - A holder with the requesting Service's namespace and name is ignored: what the
//!   Service holds does not count against it (kube-vip returns before searching when
//!   the Service has an address; the export does that, keeping the address).
//! - No state: kube-vip caches each namespace's pool between calls (and misses a
//!   change from CIDRs to ranges and back, or of `skip-end-ips-in-cidr`).
//! - Items of a comma list are trimmed; a pool's value is checked when the cloud
//!   config is read (kube-vip reads it when a Service needs it).

mod addrs;
mod error;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use wasm_ccm_guest::types::{IpFamily, IpFamilyPolicy, Service};

pub use addrs::{Family, Pool, RangeSet};
pub use error::AllocError;

/// The namespace part of the keys that serve every namespace: `cidr-global`, ...
pub const GLOBAL: &str = "global";

/// The address pools: kube-vip's ConfigMap, read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolConfig {
    /// `cidr-<namespace>`, by namespace (`global` included): the pool, or why its
    /// value does not parse (kube-vip fails only the Services that pool serves).
    cidr: BTreeMap<String, Result<Pool, String>>,
    /// `range-<namespace>`, the same way.
    range: BTreeMap<String, Result<Pool, String>>,
    /// `allow-share-<namespace>`, as written.
    allow_share: BTreeMap<String, String>,
    /// `interface-<namespace>`.
    interface: BTreeMap<String, String>,
    /// `search-order: desc`.
    pub descending: bool,
    /// `skip-end-ips-in-cidr: true`.
    pub skip_end_ips_in_cidr: bool,
}

/// A Service asking for addresses.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.ports[].port`.
    pub ports: Vec<i32>,
    /// `spec.ipFamilies`.
    pub ip_families: Vec<IpFamily>,
    /// `spec.ipFamilyPolicy`.
    pub ip_family_policy: Option<IpFamilyPolicy>,
    /// The addresses the Service asks for (empty: any).
    pub requested: Vec<IpAddr>,
}

impl Request {
    /// The request of `service`, asking for `requested`.
    pub fn for_service(service: &Service, requested: Vec<IpAddr>) -> Request {
        Request {
            namespace: service.metadata.namespace.clone(),
            name: service.metadata.name.clone(),
            ports: service.ports.iter().map(|p| p.port).collect(),
            ip_families: service.ip_families.clone(),
            ip_family_policy: service.ip_family_policy,
            requested,
        }
    }
}

/// A Service holding addresses (kube-vip's Services labelled `implementation:
/// kube-vip`, with their `kube-vip.io/loadbalancerIPs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holder {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.ports[].port`.
    pub ports: Vec<i32>,
    /// The addresses it holds.
    pub addresses: Vec<IpAddr>,
}

/// What a Service gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// One address, or one per family (in the Service's family order).
    pub addresses: Vec<IpAddr>,
    /// The key of the pool they came from: `cidr-default`, `range-global`, ...
    pub pool: String,
    /// `interface-<namespace>`, else `interface-global`.
    pub interface: Option<String>,
    /// Why a `PreferDualStack` Service got one family only.
    pub warning: Option<String>,
}

/// Go's `strconv.ParseBool`.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// kube-vip's `parseAddrList`: a `kube-vip.io/loadbalancerIPs` value, split on `,`
/// (no trimming); an error for any item that is not an address.
pub fn parse_address_list(value: &str) -> Result<Vec<IpAddr>, String> {
    value
        .split(',')
        .map(|a| {
            a.parse()
                .map_err(|_| format!("`{a}` in `{value}` is not an IP address"))
        })
        .collect()
}

/// `map[namespace]`, else `map["global"]` (kube-vip's `getConfig`), with whether it
/// was the global one.
fn lookup<'m, T>(map: &'m BTreeMap<String, T>, namespace: &str) -> Option<(&'m T, bool)> {
    map.get(namespace)
        .map(|v| (v, false))
        .or_else(|| map.get(GLOBAL).map(|v| (v, true)))
}

/// The pool serving a namespace (`discoverPool`).
struct Selected<'a> {
    key: String,
    pool: &'a Pool,
    global: bool,
    allow_share: bool,
}

impl PoolConfig {
    /// Reads kube-vip's ConfigMap data. Keys it does not know are ignored, as kube-vip
    /// ignores them; a pool that does not parse is kept as its error (see
    /// [`PoolConfig::invalid`]).
    pub fn from_config_map<'a>(data: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut config = PoolConfig::default();
        for (key, value) in data {
            if let Some(ns) = key.strip_prefix("cidr-") {
                config.cidr.insert(ns.to_owned(), Pool::parse(value));
            } else if let Some(ns) = key.strip_prefix("range-") {
                config.range.insert(ns.to_owned(), Pool::parse(value));
            } else if let Some(ns) = key.strip_prefix("allow-share-") {
                config.allow_share.insert(ns.to_owned(), value.to_owned());
            } else if let Some(ns) = key.strip_prefix("interface-") {
                config.interface.insert(ns.to_owned(), value.to_owned());
            } else if key == "search-order" {
                config.descending = value == "desc";
            } else if key == "skip-end-ips-in-cidr" {
                config.skip_end_ips_in_cidr = value == "true";
            }
        }
        config
    }

    /// The pools that do not parse: (key, why).
    pub fn invalid(&self) -> Vec<(String, String)> {
        let mut invalid = Vec::new();
        for (kind, pools) in [("cidr", &self.cidr), ("range", &self.range)] {
            for (namespace, pool) in pools {
                if let Err(e) = pool {
                    invalid.push((format!("{kind}-{namespace}"), e.clone()));
                }
            }
        }
        invalid
    }

    /// The namespaces with a pool (`global` included), sorted.
    pub fn namespaces(&self) -> Vec<&str> {
        let all: BTreeSet<&str> = self
            .cidr
            .keys()
            .chain(self.range.keys())
            .map(String::as_str)
            .collect();
        all.into_iter().collect()
    }

    /// `interface-<namespace>`, else `interface-global` (`discoverInterface`).
    pub fn interface(&self, namespace: &str) -> Option<&str> {
        lookup(&self.interface, namespace).map(|(name, _)| name.as_str())
    }

    /// The pool serving `namespace` and whether it shares (`discoverPool`).
    fn discover(&self, namespace: &str) -> Result<Selected<'_>, AllocError> {
        let allow_share = lookup(&self.allow_share, namespace)
            .is_some_and(|(value, _)| parse_bool(value) == Some(true));
        let (kind, (pool, global)) = lookup(&self.cidr, namespace)
            .map(|found| ("cidr", found))
            .or_else(|| lookup(&self.range, namespace).map(|found| ("range", found)))
            .ok_or_else(|| AllocError::NoPool {
                namespace: namespace.to_owned(),
            })?;
        let key = format!("{kind}-{}", if global { GLOBAL } else { namespace });
        let pool = pool.as_ref().map_err(|message| AllocError::InvalidPool {
            key: key.clone(),
            message: message.clone(),
        })?;
        Ok(Selected {
            key,
            pool,
            global,
            allow_share,
        })
    }

    /// The addresses `request` gets, given the Services already holding addresses
    /// (a holder with the request's namespace and name is the Service itself, and
    /// ignored).
    pub fn allocate(
        &self,
        request: &Request,
        holders: &[Holder],
    ) -> Result<Allocation, AllocError> {
        let selected = self.discover(&request.namespace)?;
        let scoped: Vec<&Holder> = holders
            .iter()
            .filter(|h| selected.global || h.namespace == request.namespace)
            .filter(|h| !(h.namespace == request.namespace && h.name == request.name))
            .collect();
        let in_use: BTreeSet<IpAddr> = scoped
            .iter()
            .flat_map(|h| h.addresses.iter().copied())
            .collect();
        let ports = if selected.allow_share {
            port_map(&scoped)
        } else {
            BTreeMap::new()
        };
        let wanted: BTreeSet<i32> = request.ports.iter().copied().collect();
        let search = Search {
            namespace: &request.namespace,
            key: &selected.key,
            pool: selected.pool,
            descending: self.descending,
            skip_end: self.skip_end_ips_in_cidr,
            in_use: &in_use,
        };
        let (addresses, warning) = if request.requested.is_empty() {
            let shared = shareable(&ports, &wanted);
            search.vips(shared, request.ip_family_policy, &request.ip_families)?
        } else {
            let check = |address: &IpAddr| {
                if !selected.pool.admits(*address, self.skip_end_ips_in_cidr) {
                    return Err(AllocError::RequestedNotInPool {
                        address: *address,
                        key: selected.key.clone(),
                    });
                }
                let shares = match address {
                    IpAddr::V4(v4) => ports.get(v4).is_some_and(|p| shares_with(p, &wanted)),
                    IpAddr::V6(_) => false,
                };
                match scoped.iter().find(|h| h.addresses.contains(address)) {
                    Some(holder) if !shares => Err(AllocError::RequestedInUse {
                        address: *address,
                        holder: format!("{}/{}", holder.namespace, holder.name),
                    }),
                    _ => Ok(*address),
                }
            };
            let addresses: Vec<IpAddr> = request
                .requested
                .iter()
                .map(check)
                .collect::<Result<_, _>>()?;
            (addresses, None)
        };
        Ok(Allocation {
            addresses,
            pool: selected.key,
            interface: self.interface(&request.namespace).map(str::to_owned),
            warning,
        })
    }
}

/// kube-vip's `mapImplementedServices` with sharing on: the ports on each IPv4
/// address held, `0` marking an address held by a Service without ports.
fn port_map(holders: &[&Holder]) -> BTreeMap<Ipv4Addr, BTreeSet<i32>> {
    let mut map: BTreeMap<Ipv4Addr, BTreeSet<i32>> = BTreeMap::new();
    for holder in holders {
        for address in &holder.addresses {
            let IpAddr::V4(v4) = address else { continue };
            if holder.ports.is_empty() {
                map.insert(*v4, BTreeSet::from([0]));
            } else {
                map.entry(*v4)
                    .or_default()
                    .extend(holder.ports.iter().copied());
            }
        }
    }
    map
}

/// Whether a Service with ports `wanted` may join the holders of ports `held`.
fn shares_with(held: &BTreeSet<i32>, wanted: &BTreeSet<i32>) -> bool {
    !held.contains(&0) && held.is_disjoint(wanted)
}

/// kube-vip's `discoverSharedVIPs`: the lowest held IPv4 address the Service can join.
fn shareable(
    ports: &BTreeMap<Ipv4Addr, BTreeSet<i32>>,
    wanted: &BTreeSet<i32>,
) -> Option<Ipv4Addr> {
    ports
        .iter()
        .find(|(_, held)| shares_with(held, wanted))
        .map(|(address, _)| *address)
}

/// One search of a pool for one Service.
struct Search<'a> {
    namespace: &'a str,
    key: &'a str,
    pool: &'a Pool,
    descending: bool,
    skip_end: bool,
    in_use: &'a BTreeSet<IpAddr>,
}

impl Search<'_> {
    /// kube-vip's `discoverAddress` for the pool's part of `family`.
    fn find(&self, family: Family) -> Result<IpAddr, AllocError> {
        let text = self.pool.family_text(family);
        if text == "0.0.0.0/32" {
            return Ok(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        }
        let hosts = self.pool.hosts(family, self.skip_end);
        addrs::find_free(&hosts, family, self.in_use, self.descending).ok_or_else(|| {
            AllocError::NoAddressAvailable {
                namespace: self.namespace.to_owned(),
                pool: text,
                cidr: self.pool.is_cidr(),
            }
        })
    }

    /// kube-vip's `discoverVIPs`: the addresses for the Service's families and policy,
    /// `shared` being the IPv4 address it may share; with a warning when a
    /// `PreferDualStack` Service gets one family only.
    fn vips(
        &self,
        shared: Option<Ipv4Addr>,
        policy: Option<IpFamilyPolicy>,
        families: &[IpFamily],
    ) -> Result<(Vec<IpAddr>, Option<String>), AllocError> {
        if *self.pool == Pool::Dhcp {
            return Ok((vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)], None));
        }
        let take = |family: Family| match (family, shared) {
            (Family::V4, Some(address)) => Ok(IpAddr::V4(address)),
            _ => self.find(family),
        };
        let ipv6_first = families.first() == Some(&IpFamily::Ipv6);
        let (has_v4, has_v6) = (self.pool.has(Family::V4), self.pool.has(Family::V6));
        let policy = match policy {
            None | Some(IpFamilyPolicy::SingleStack) => {
                let family = match families.first() {
                    None if !has_v4 => Family::V6,
                    Some(IpFamily::Ipv6) => Family::V6,
                    _ => Family::V4,
                };
                if !self.pool.has(family) {
                    return Err(AllocError::NoPoolForFamily {
                        key: self.key.to_owned(),
                    });
                }
                return Ok((vec![take(family)?], None));
            }
            Some(IpFamilyPolicy::PreferDualStack) => "PreferDualStack",
            Some(IpFamilyPolicy::RequireDualStack) => "RequireDualStack",
        };
        let require = policy == "RequireDualStack";
        if require && !(has_v4 && has_v6) {
            return Err(AllocError::DualStackPoolsMissing {
                key: self.key.to_owned(),
            });
        }
        let order = if ipv6_first {
            [Family::V6, Family::V4]
        } else {
            [Family::V4, Family::V6]
        };
        let (mut addresses, mut errors) = (Vec::new(), Vec::new());
        for family in order.into_iter().filter(|f| self.pool.has(*f)) {
            match take(family) {
                Ok(address) => addresses.push(address),
                Err(e @ AllocError::NoAddressAvailable { .. }) => errors.push(e),
                Err(other) => return Err(other),
            }
        }
        if errors.is_empty() {
            return Ok((addresses, None));
        }
        if require || addresses.is_empty() {
            if errors.len() == 1 && !require {
                return Err(errors.remove(0));
            }
            return Err(AllocError::DualStack { policy, errors });
        }
        let warning = format!(
            "PreferDualStack service will be single-stack because of error: {}",
            errors[0]
        );
        Ok((addresses, Some(warning)))
    }
}
