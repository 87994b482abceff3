//! Address arithmetic for the pools, with `std::net` only: kube-vip-cloud-provider's
//! `pkg/ipam/addressbuilder.go` (a pool's value to a set of addresses, split by IP
//! family) and `FindFreeAddress` (`pkg/ipam/ipam.go`), over the semantics of the
//! go4.org/netipx `IPSet` kube-vip builds them with: a set is its merged ranges, and
//! its prefixes are the fewest CIDRs covering it.
//!
//! Addresses are `u128` within a [`Family`] (IPv4 in the low 32 bits), so one range
//! type serves both.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 or IPv6. An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) is IPv6, as Go's
/// `netip.Addr.Is6` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    fn bits(self) -> u32 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

fn to_u128(ip: IpAddr) -> (Family, u128) {
    match ip {
        IpAddr::V4(a) => (Family::V4, u128::from(u32::from(a))),
        IpAddr::V6(a) => (Family::V6, u128::from(a)),
    }
}

fn from_u128(family: Family, value: u128) -> IpAddr {
    match family {
        // IPv4 values are below 2^32 by construction.
        Family::V4 => IpAddr::V4(Ipv4Addr::from(value as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// A set of addresses of one family: sorted, merged, inclusive ranges (netipx's
/// `IPSet`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet(Vec<(u128, u128)>);

impl RangeSet {
    fn from_ranges(mut ranges: Vec<(u128, u128)>) -> Self {
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (from, to) in ranges {
            match merged.last_mut() {
                Some(last) if from <= last.1.saturating_add(1) => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        RangeSet(merged)
    }

    /// True when the set holds no address.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn contains(&self, value: u128) -> bool {
        self.0
            .iter()
            .any(|&(from, to)| (from..=to).contains(&value))
    }

    /// netipx's `IPSet.Prefixes`: the fewest prefixes covering the set, in order, as
    /// (first address, prefix length).
    fn prefixes(&self, family: Family) -> Vec<(u128, u32)> {
        let bits = family.bits();
        let mut out = Vec::new();
        for &(start, to) in &self.0 {
            let mut from = start;
            loop {
                // The largest block aligned at `from` that ends at or before `to`.
                let aligned = from.trailing_zeros().min(bits);
                let span = to - from;
                let fits = if span == u128::MAX {
                    128
                } else {
                    127 - (span + 1).leading_zeros()
                };
                let k = aligned.min(fits);
                out.push((from, bits - k));
                let last = if k == 128 {
                    u128::MAX
                } else {
                    from + ((1u128 << k) - 1)
                };
                if last >= to {
                    break;
                }
                from = last + 1;
            }
        }
        out
    }

    /// The addresses, in order (tests only: a set may hold 2^128 of them).
    #[cfg(test)]
    pub fn addresses(&self, family: Family) -> Vec<IpAddr> {
        self.0
            .iter()
            .flat_map(|&(from, to)| (from..=to).map(move |v| from_u128(family, v)))
            .collect()
    }
}

/// The range of the prefix `value/len` (Go's `netip.ParsePrefix` keeps host bits;
/// netipx's builder masks them, so `192.168.0.255/30` is `.252`-`.255`).
fn prefix_range(family: Family, value: u128, len: u32) -> (u128, u128) {
    let host_bits = family.bits() - len;
    let host_mask = if host_bits == 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    let from = value & !host_mask;
    (from, from | host_mask)
}

fn parse_addr(text: &str) -> Result<IpAddr, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not an IP address"))
}

/// `address/bits`, as Go's `netip.ParsePrefix` reads it.
fn parse_prefix(text: &str) -> Result<(Family, u128, u128), String> {
    let (addr, bits) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not a CIDR (address/bits)"))?;
    let (family, value) = to_u128(parse_addr(addr)?);
    let len = Some(bits)
        .filter(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()))
        .and_then(|b| b.parse::<u32>().ok())
        .filter(|len| *len <= family.bits())
        .ok_or_else(|| format!("`{text}`: bad prefix length `{bits}`"))?;
    let (from, to) = prefix_range(family, value, len);
    Ok((family, from, to))
}

/// `first-last`, both ends included (kube-vip's `buildAddressesFromRange`).
fn parse_range(text: &str) -> Result<(Family, u128, u128), String> {
    let parts: Vec<&str> = text.split('-').collect();
    let [first, last] = parts[..] else {
        return Err(format!("unable to parse IP range [{text}] (first-last)"));
    };
    let (family, from) = to_u128(parse_addr(first)?);
    let (last_family, to) = to_u128(parse_addr(last)?);
    if family != last_family {
        return Err(format!("IP range [{text}] mixes IPv4 and IPv6"));
    }
    if from > to {
        return Err(format!("IP range [{text}] ends before it starts"));
    }
    Ok((family, from, to))
}

/// One pool: the value of a `cidr-<namespace>` or `range-<namespace>` key, parsed.
/// Whether it is CIDRs or ranges is read from the value, as kube-vip does (a value
/// with a `/` is CIDRs, whatever its key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pool {
    /// Exactly `0.0.0.0/32`: kube-vip's DHCP pool, every Service gets `0.0.0.0`.
    Dhcp,
    /// Comma-separated CIDRs; per family, their union.
    Cidr {
        /// The IPv4 addresses.
        v4: RangeSet,
        /// The IPv6 addresses.
        v6: RangeSet,
    },
    /// Comma-separated `first-last` ranges (overlaps allowed); per family, their union.
    Range {
        /// The IPv4 addresses.
        v4: RangeSet,
        /// The IPv6 addresses.
        v6: RangeSet,
    },
}

/// The value that makes every Service's address `0.0.0.0` (kube-vip's DHCP mode).
const DHCP: &str = "0.0.0.0/32";

impl Pool {
    /// Parses a pool's value: CIDRs (`10.0.0.0/29,fd00::/125`) or ranges
    /// (`10.0.0.10-10.0.0.20,fd00::10-fd00::1f`), IPv4 and IPv6 mixed. Items are
    /// trimmed (kube-vip does not trim: `a, b` fails there).
    pub fn parse(value: &str) -> Result<Pool, String> {
        let value = value.trim();
        if value.is_empty() {
            return Err("could not discover address: pool is not specified".into());
        }
        if value == DHCP {
            return Ok(Pool::Dhcp);
        }
        let cidr = value.contains('/');
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for item in value.split(',').map(str::trim) {
            let (family, from, to) = if cidr {
                parse_prefix(item)?
            } else {
                parse_range(item)?
            };
            match family {
                Family::V4 => v4.push((from, to)),
                Family::V6 => v6.push((from, to)),
            }
        }
        let (v4, v6) = (RangeSet::from_ranges(v4), RangeSet::from_ranges(v6));
        Ok(if cidr {
            Pool::Cidr { v4, v6 }
        } else {
            Pool::Range { v4, v6 }
        })
    }

    /// True for CIDRs (and the DHCP pool, a CIDR), false for ranges.
    pub fn is_cidr(&self) -> bool {
        !matches!(self, Pool::Range { .. })
    }

    fn set(&self, family: Family) -> Option<&RangeSet> {
        match (self, family) {
            (Pool::Dhcp, _) => None,
            (Pool::Cidr { v4, .. } | Pool::Range { v4, .. }, Family::V4) => Some(v4),
            (Pool::Cidr { v6, .. } | Pool::Range { v6, .. }, Family::V6) => Some(v6),
        }
    }

    /// True when the pool has addresses of `family`.
    pub fn has(&self, family: Family) -> bool {
        match self {
            Pool::Dhcp => family == Family::V4,
            _ => self.set(family).is_some_and(|s| !s.is_empty()),
        }
    }

    /// The pool's part of one family as kube-vip writes it
    /// (`SplitCIDRsByIPFamily`, `SplitRangesByIPFamily`): canonical prefixes or
    /// merged ranges, comma-separated; empty when it has none.
    pub fn family_text(&self, family: Family) -> String {
        match self {
            Pool::Dhcp if family == Family::V4 => DHCP.to_owned(),
            Pool::Dhcp => String::new(),
            Pool::Cidr { .. } => self.set(family).map_or_else(String::new, |set| {
                set.prefixes(family)
                    .iter()
                    .map(|&(v, len)| format!("{}/{len}", from_u128(family, v)))
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            Pool::Range { .. } => self.set(family).map_or_else(String::new, |set| {
                set.0
                    .iter()
                    .map(|&(from, to)| {
                        format!("{}-{}", from_u128(family, from), from_u128(family, to))
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }),
        }
    }

    /// The addresses of `family` Services may get (`buildHostsFromCidr`,
    /// `buildAddressesFromRange`): a range's every address; a CIDR's, but with
    /// `skip_end` (`skip-end-ips-in-cidr`) an IPv4 prefix loses its first and last
    /// address unless it is a /31 or /32. The prefixes are the union's, so two
    /// overlapping CIDRs lose the ends of the CIDR they make together.
    pub fn hosts(&self, family: Family, skip_end: bool) -> RangeSet {
        match (self, family) {
            (Pool::Dhcp, Family::V4) => RangeSet(vec![(0, 0)]),
            (Pool::Dhcp, Family::V6) => RangeSet::default(),
            (Pool::Range { .. }, _) | (Pool::Cidr { .. }, Family::V6) => {
                self.set(family).cloned().unwrap_or_default()
            }
            (Pool::Cidr { v4, .. }, Family::V4) => RangeSet::from_ranges(
                v4.prefixes(Family::V4)
                    .into_iter()
                    .map(|(value, len)| {
                        let (from, to) = prefix_range(Family::V4, value, len);
                        if skip_end && len < 31 {
                            (from + 1, to - 1)
                        } else {
                            (from, to)
                        }
                    })
                    .collect(),
            ),
        }
    }

    /// True when `ip` is one of [`Pool::hosts`].
    pub fn admits(&self, ip: IpAddr, skip_end: bool) -> bool {
        let (family, value) = to_u128(ip);
        self.hosts(family, skip_end).contains(value)
    }
}

/// kube-vip's `FindFreeAddress`: the first address of `hosts` (the last with
/// `descending`, `search-order: desc`) not in `in_use` and, for IPv4, not ending in
/// `.0` or `.255` (its `isNetworkIDOrBroadcastIP`, whatever the prefix length: in a
/// /16, `10.1.1.0` is skipped too; in ranges as in CIDRs).
pub fn find_free(
    hosts: &RangeSet,
    family: Family,
    in_use: &BTreeSet<IpAddr>,
    descending: bool,
) -> Option<IpAddr> {
    let usable = |value: u128| {
        let ends_badly = family == Family::V4 && matches!(value & 0xff, 0 | 255);
        !ends_badly && !in_use.contains(&from_u128(family, value))
    };
    // Each step passes an address in use or a .0/.255 one: bounded by the
    // addresses in use, not by the size of the pool.
    if descending {
        for &(from, to) in hosts.0.iter().rev() {
            let mut value = to;
            loop {
                if usable(value) {
                    return Some(from_u128(family, value));
                }
                if value == from {
                    break;
                }
                value -= 1;
            }
        }
    } else {
        for &(from, to) in &hosts.0 {
            let mut value = from;
            loop {
                if usable(value) {
                    return Some(from_u128(family, value));
                }
                if value == to {
                    break;
                }
                value += 1;
            }
        }
    }
    None
}
