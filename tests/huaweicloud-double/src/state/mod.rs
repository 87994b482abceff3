//! The double's world: ECS servers and their NICs (ports), VPC subnets, shared load
//! balancers with their listeners, pools, members and health monitors, and EIPs.
//! Everything a test sets up or inspects goes through [`State`] (see
//! [`crate::HuaweiCloudDouble::with_state`]).
//! This module holds [`State`] itself (its clock, IDs and addresses); each kind of
//! resource, and what a test does with it, is in a module below.

mod eips;
mod elb;
mod servers;

use std::collections::BTreeMap;

pub use eips::{Eip, Port};
pub use elb::{HealthMonitor, Listener, LoadBalancer, Member, Pool, SessionPersistence};
pub use servers::{IMAGE_ID, NewServer, NewSubnet, Nic, Server, Subnet};

/// Every resource of the double.
#[derive(Debug, Clone)]
pub struct State {
    pub(crate) project_id: String,
    pub(crate) region: String,
    /// How many reads of a load balancer that is `PENDING_CREATE` (or `PENDING_UPDATE`)
    /// still see it so before it is `ACTIVE`: each show, list or `statuses` answer that
    /// includes it is one read. 0: the first read sees it `ACTIVE` (the creation's answer
    /// is always `PENDING_CREATE`).
    pub pending_reads: u32,
    /// Whether a change under a load balancer (a listener, pool, member or health
    /// monitor created, updated or deleted; the load balancer updated) makes it
    /// `PENDING_UPDATE` for [`State::pending_reads`] reads, refusing further changes
    /// meanwhile. False by default: the shared ELB applies those at once.
    pub pending_on_change: bool,
    /// The double's clock, in seconds off the host's (positive: ahead).
    pub clock_offset: i64,
    pub(crate) servers: BTreeMap<String, Server>,
    pub(crate) subnets: BTreeMap<String, Subnet>,
    pub(crate) load_balancers: BTreeMap<String, LoadBalancer>,
    pub(crate) listeners: BTreeMap<String, Listener>,
    pub(crate) pools: BTreeMap<String, Pool>,
    pub(crate) members: BTreeMap<String, Member>,
    pub(crate) healthmonitors: BTreeMap<String, HealthMonitor>,
    pub(crate) eips: BTreeMap<String, Eip>,
    /// The VPC of subnets added without one.
    pub(crate) default_vpc: String,
    next: u64,
    next_public_ip: u32,
}

impl State {
    /// The world of `project_id` in `region`: one VPC with one subnet,
    /// `subnet-default` (192.168.0.0/24, in `<region>a`).
    pub fn new(project_id: &str, region: &str, pending_reads: u32) -> Self {
        let mut state = Self {
            project_id: project_id.to_owned(),
            region: region.to_owned(),
            pending_reads,
            pending_on_change: false,
            clock_offset: 0,
            servers: BTreeMap::new(),
            subnets: BTreeMap::new(),
            load_balancers: BTreeMap::new(),
            listeners: BTreeMap::new(),
            pools: BTreeMap::new(),
            members: BTreeMap::new(),
            healthmonitors: BTreeMap::new(),
            eips: BTreeMap::new(),
            default_vpc: String::new(),
            next: 0,
            next_public_ip: 0,
        };
        state.default_vpc = state.id();
        state.add_subnet(NewSubnet::new("subnet-default", "192.168.0.0/24"));
        state
    }

    /// The project every path names.
    pub fn project_id(&self) -> &str {
        &self.project_id
    }

    /// The region.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The ID of the VPC subnets are added to by default.
    pub fn default_vpc_id(&self) -> &str {
        &self.default_vpc
    }

    /// The double's clock: seconds since the epoch.
    pub fn now(&self) -> i64 {
        crate::clock::system_now() + self.clock_offset
    }

    /// A new UUID-shaped ID (a counter: IDs sort in creation order).
    pub fn id(&mut self) -> String {
        self.next += 1;
        format!("4a7c0000-0000-4000-8000-{:012x}", self.next)
    }

    /// A new MAC address.
    pub(crate) fn mac(&mut self) -> String {
        self.next += 1;
        format!(
            "fa:16:3e:{:02x}:{:02x}:{:02x}",
            (self.next >> 16) & 0xff,
            (self.next >> 8) & 0xff,
            self.next & 0xff
        )
    }

    /// A new public address: from 203.0.113.10 on, then 198.51.100.10 on, then
    /// 192.0.2.10 on (the documentation ranges).
    pub(crate) fn public_ip(&mut self) -> String {
        loop {
            let n = self.next_public_ip;
            self.next_public_ip += 1;
            let (range, host) = (n / 240, n % 240 + 10);
            let prefix = match range {
                0 => "203.0.113",
                1 => "198.51.100",
                _ => "192.0.2",
            };
            let ip = format!("{prefix}.{host}");
            if range > 2 || !self.eips.values().any(|e| e.public_ip_address == ip) {
                return ip;
            }
        }
    }

    /// Makes every load balancer that is `PENDING_*` `ACTIVE` now, whatever reads remain.
    pub fn settle(&mut self) {
        for lb in self.load_balancers.values_mut() {
            if lb.provisioning_status.starts_with("PENDING_") {
                lb.provisioning_status = "ACTIVE".into();
                lb.reads_left = 0;
            }
        }
    }
}

/// An IPv4 address as a number.
pub(crate) fn ipv4(text: &str) -> Option<u32> {
    text.parse::<std::net::Ipv4Addr>().ok().map(u32::from)
}

/// A CIDR's network address and prefix length (`192.168.0.0/24`).
pub(crate) fn cidr(text: &str) -> Option<(u32, u32)> {
    let (address, length) = text.split_once('/')?;
    let length: u32 = length.parse().ok().filter(|l| *l <= 32)?;
    let mask = if length == 0 {
        0
    } else {
        u32::MAX << (32 - length)
    };
    Some((ipv4(address)? & mask, length))
}

/// Whether `ip` is in the CIDR `range`.
pub(crate) fn in_cidr(ip: &str, range: &str) -> bool {
    match (ipv4(ip), cidr(range)) {
        (Some(ip), Some((network, length))) => {
            let mask = if length == 0 {
                0
            } else {
                u32::MAX << (32 - length)
            };
            ip & mask == network
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        assert_eq!(cidr("192.168.1.7/24"), Some((0xc0a8_0100, 24)));
        assert!(in_cidr("192.168.0.200", "192.168.0.0/24"));
        assert!(!in_cidr("192.168.1.1", "192.168.0.0/24"));
        assert!(in_cidr("10.1.2.3", "0.0.0.0/0"));
        assert_eq!(cidr("10.0.0.0/33"), None);
    }

    #[test]
    fn ids_sort_in_creation_order() {
        let mut state = State::new("p", "r", 1);
        let a = state.id();
        let b = state.id();
        assert!(a < b);
        assert_eq!(a.len(), 36);
    }
}
