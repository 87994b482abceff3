//! kube-vip-cloud-provider's `pkg/ipam/ipam_test.go`, each case under its Go test's
//! name: the address sets pools make, their split by family, the free-address search.

use super::*;

/// Every host of `pool`, IPv4 then IPv6 (`buildHostsFromCidr`, `buildAddressesFromRange`).
fn hosts(pool: &str, skip_end: bool) -> Vec<String> {
    let pool = Pool::parse(pool).unwrap();
    let mut all = pool.hosts(Family::V4, skip_end).addresses(Family::V4);
    all.extend(pool.hosts(Family::V6, skip_end).addresses(Family::V6));
    all.iter().map(ToString::to_string).collect()
}

/// Test_buildHostsFromRange: (name, range, hosts)
#[rustfmt::skip]
const BUILD_HOSTS_FROM_RANGE: &[(&str, &str, &[&str])] = &[
    ("single address", "192.168.0.10-192.168.0.10", &["192.168.0.10"]),
    ("single range, three addresses", "192.168.0.10-192.168.0.12", &["192.168.0.10", "192.168.0.11", "192.168.0.12"]),
    ("single range, across third octet", "192.168.0.253-192.168.1.2", &["192.168.0.253", "192.168.0.254", "192.168.0.255", "192.168.1.0", "192.168.1.1", "192.168.1.2"]),
    ("two ranges, four addresses", "192.168.0.10-192.168.0.11,192.168.1.20-192.168.1.21", &["192.168.0.10", "192.168.0.11", "192.168.1.20", "192.168.1.21"]),
    ("two ranges, four addresses w/overlap", "192.168.0.10-192.168.0.11,192.168.0.10-192.168.0.13", &["192.168.0.10", "192.168.0.11", "192.168.0.12", "192.168.0.13"]),
    ("ipv6, two ips", "fe80::13-fe80::14", &["fe80::13", "fe80::14"]),
    ("ipv6, single range, across third octet", "fe80::ffff-fe80::1:3", &["fe80::ffff", "fe80::1:0", "fe80::1:1", "fe80::1:2", "fe80::1:3"]),
    ("ipv6, two ranges, 5 addresses", "fe80::10-fe80::12,fe81::13-fe81::14", &["fe80::10", "fe80::11", "fe80::12", "fe81::13", "fe81::14"]),
    ("ipv6, two ranges, 5 addresses w/overlap", "fe80::10-fe80::12,fe80::10-fe80::14", &["fe80::10", "fe80::11", "fe80::12", "fe80::13", "fe80::14"]),
];

#[test]
fn build_hosts_from_range() {
    for (name, range, want) in BUILD_HOSTS_FROM_RANGE {
        assert_eq!(hosts(range, false), *want, "{name}");
    }
}

/// Test_buildHostsFromCidr: (name, cidr, skip-end-ips-in-cidr, hosts)
#[rustfmt::skip]
const BUILD_HOSTS_FROM_CIDR: &[(&str, &str, bool, &[&str])] = &[
    ("single entry, /32, 1 address", "192.168.0.200/32", false, &["192.168.0.200"]),
    ("single entry, /32, 1 address, if skipEndIPsInCIDR is set", "192.168.0.200/32", true, &["192.168.0.200"]),
    ("single entry, 4 address", "192.168.0.200/30", false, &["192.168.0.200", "192.168.0.201", "192.168.0.202", "192.168.0.203"]),
    ("single entry, 2 address, if skipEndIPsInCIDR is set", "192.168.0.200/30", true, &["192.168.0.201", "192.168.0.202"]),
    ("single entry, /31, 2 address, if skipEndIPsInCIDR is set", "192.168.0.200/31", true, &["192.168.0.200", "192.168.0.201"]),
    ("dual entry, overlap address, return 8 addresses", "192.168.0.200/30,192.168.0.200/29", false, &["192.168.0.200", "192.168.0.201", "192.168.0.202", "192.168.0.203", "192.168.0.204", "192.168.0.205", "192.168.0.206", "192.168.0.207"]),
    ("dual entry, overlap addressm return 6 addresses, if skipEndIPsInCIDR is set", "192.168.0.200/30,192.168.0.200/29", true, &["192.168.0.201", "192.168.0.202", "192.168.0.203", "192.168.0.204", "192.168.0.205", "192.168.0.206"]),
    ("ipv6, two ips", "fe80::10/127", false, &["fe80::10", "fe80::11"]),
    ("ipv6, two cidrs", "fe80::10/127,fe80::fe/127", false, &["fe80::10", "fe80::11", "fe80::fe", "fe80::ff"]),
    ("ipv6, two cidrs with overlap", "fe80::10/126,fe80::12/127", false, &["fe80::10", "fe80::11", "fe80::12", "fe80::13"]),
];

#[test]
fn build_hosts_from_cidr() {
    for (name, cidr, skip, want) in BUILD_HOSTS_FROM_CIDR {
        assert_eq!(hosts(cidr, *skip), *want, "{name}");
    }
}

/// TestSplitCIDRsByIPFamily, then TestSplitRangesByIPFamily: (name, pool, IPv4, IPv6)
#[rustfmt::skip]
const SPLIT_BY_IP_FAMILY: &[(&str, &str, &str, &str)] = &[
    ("single ipv4 cidr", "192.168.0.200/30", "192.168.0.200/30", ""),
    ("multiple ipv4 cidrs", "192.168.0.200/30,192.168.1.200/30", "192.168.0.200/30,192.168.1.200/30", ""),
    ("single ipv6 cidr", "fe80::10/127", "", "fe80::10/127"),
    ("multiple ipv6 cidrs", "fe80::10/127,fe80::fe/127", "", "fe80::10/127,fe80::fe/127"),
    ("one ipv4 cidr and one ipv6 cidr", "192.168.0.200/30,fe80::10/127", "192.168.0.200/30", "fe80::10/127"),
    ("multiple ipv4 cidrs and multiple ipv6 cidrs", "192.168.0.200/30,192.168.1.200/30,fe80::10/127,fe80::fe/127", "192.168.0.200/30,192.168.1.200/30", "fe80::10/127,fe80::fe/127"),
    ("single ipv4 range", "192.168.0.10-192.168.0.12", "192.168.0.10-192.168.0.12", ""),
    ("multiple ipv4 ranges", "192.168.0.10-192.168.0.12,192.168.0.100-192.168.0.120", "192.168.0.10-192.168.0.12,192.168.0.100-192.168.0.120", ""),
    ("single ipv6 range", "fe80::13-fe80::14", "", "fe80::13-fe80::14"),
    ("multiple ipv6 ranges", "fe80::13-fe80::14,fe80::130-fe80::140", "", "fe80::13-fe80::14,fe80::130-fe80::140"),
    ("one ipv4 range and one ipv6 range", "192.168.0.10-192.168.0.12,fe80::13-fe80::14", "192.168.0.10-192.168.0.12", "fe80::13-fe80::14"),
    ("multiple ipv4 ranges and multiple ipv6 ranges", "192.168.0.10-192.168.0.12,192.168.0.100-192.168.0.120,fe80::13-fe80::14,fe80::130-fe80::140", "192.168.0.10-192.168.0.12,192.168.0.100-192.168.0.120", "fe80::13-fe80::14,fe80::130-fe80::140"),
];

#[test]
fn split_by_ip_family() {
    for (name, pool, v4, v6) in SPLIT_BY_IP_FAMILY {
        let pool = Pool::parse(pool).unwrap();
        assert_eq!(pool.family_text(Family::V4), *v4, "{name}");
        assert_eq!(pool.family_text(Family::V6), *v6, "{name}");
    }
    // Overlapping CIDRs are written as the prefixes of their union.
    let merged = Pool::parse("192.168.0.200/30,192.168.0.200/29,10.0.0.0/31,10.0.0.2/31");
    assert_eq!(
        merged.unwrap().family_text(Family::V4),
        "10.0.0.0/30,192.168.0.200/29"
    );
}

/// (name, pool, addresses in use, search-order desc, skip-end-ips-in-cidr, answer)
type FindCase = (
    &'static str,
    &'static str,
    &'static [&'static str],
    bool,
    bool,
    Option<&'static str>,
);

/// TestFindAvailableHostFromRange
#[rustfmt::skip]
const FIND_AVAILABLE_HOST_FROM_RANGE: &[FindCase] = &[
    ("simple range", "192.168.0.10-192.168.0.10", &[], false, false, Some("192.168.0.10")),
    ("simple range, reverse order", "192.168.0.10-192.168.0.10", &[], true, false, Some("192.168.0.10")),
    ("single range, three addresses", "192.168.0.10-192.168.0.12", &[], false, false, Some("192.168.0.10")),
    ("single range, three addresses, reverse order", "192.168.0.10-192.168.0.12", &[], true, false, Some("192.168.0.12")),
    ("single range, across third octet", "192.168.0.253-192.168.1.2", &["192.168.0.253", "192.168.0.254"], false, false, Some("192.168.1.1")),
    ("single range, across third octet, reverse order", "192.168.0.253-192.168.1.2", &["192.168.1.1", "192.168.1.2"], true, false, Some("192.168.0.254")),
    ("two ranges, four addresses", "192.168.0.10-192.168.0.11,192.168.1.20-192.168.1.21", &["192.168.0.9", "192.168.0.10"], false, false, Some("192.168.0.11")),
    ("two ranges, four addresses, reverse order", "192.168.0.10-192.168.0.11,192.168.1.20-192.168.1.22", &["192.168.1.21", "192.168.1.22"], true, false, Some("192.168.1.20")),
    ("ipv6, simple range", "fe80::13-fe80::14", &[], false, false, Some("fe80::13")),
    ("ipv6, simple range, reverse order", "fe80::13-fe80::14", &[], true, false, Some("fe80::14")),
    ("ipv6, single range, three addresses", "fe80::13-fe80::15", &[], false, false, Some("fe80::13")),
    ("ipv6, single range, three addresses, reverse order", "fe80::13-fe80::15", &[], true, false, Some("fe80::15")),
    ("ipv6, single range, across third octet", "fe80::ffff-fe80::1:3", &["fe80::ffff"], false, false, Some("fe80::1:0")),
    ("ipv6, single range, across third octet, reverse order", "fe80::ffff-fe80::1:3", &["fe80::1:3", "fe80::1:2", "fe80::1:1", "fe80::1:0"], true, false, Some("fe80::ffff")),
    ("ipv6, two ranges, 5 addresses", "fe80::10-fe80::12,fe81::20-fe81::21", &["fe80::10", "fe80::11", "fe80::12"], false, false, Some("fe81::20")),
    ("ipv6, two ranges, 5 addresses, reverse order", "fe80::10-fe80::12,fe81::20-fe81::21", &["fe81::21", "fe81::20"], true, false, Some("fe80::12")),
];

/// TestFindAvailableHostFromCIDR
#[rustfmt::skip]
const FIND_AVAILABLE_HOST_FROM_CIDR: &[FindCase] = &[
    ("single entry, 4 addresses, allocate the first one", "192.168.0.200/30", &[], false, false, Some("192.168.0.200")),
    ("single entry, 4 addresses, allocate second address if SkipEndIPsInCIDR is set", "192.168.0.200/30", &[], false, true, Some("192.168.0.201")),
    ("single entry, two address, reverse ip order", "192.168.0.200/30", &[], true, false, Some("192.168.0.203")),
    ("single entry, two address, reverse ip order, allocate second last address if SkipEndIPsInCIDR is set", "192.168.0.200/30", &[], true, true, Some("192.168.0.202")),
    ("simple cidr, cidr contains .0 and .255", "192.168.0.10/24", &[], false, false, Some("192.168.0.1")),
    ("simple cidr, cidr contains .0 and .255, reverse order", "192.168.0.10/24", &[], true, false, Some("192.168.0.254")),
    ("no ip available", "192.168.0.255/30", &["192.168.0.254", "192.168.0.252", "192.168.0.253"], false, false, None),
    ("no ip available, reverse order", "192.168.0.255/30", &["192.168.0.254", "192.168.0.252", "192.168.0.253"], true, false, None),
    ("dual entry, overlap address", "192.168.0.200/30,192.168.0.200/29", &["192.168.0.201", "192.168.0.202"], false, false, Some("192.168.0.200")),
    ("dual entry, overlap address, set SkipEndIPsInCIDR, pick next available address after first one", "192.168.0.200/30,192.168.0.200/29", &["192.168.0.201", "192.168.0.202"], false, true, Some("192.168.0.203")),
    ("dual entry, overlap address, reverse order, pick next available address from last", "192.168.0.200/30,192.168.0.200/29", &["192.168.0.201", "192.168.0.202"], true, false, Some("192.168.0.207")),
    ("dual entry, overlap address, reverse order, set SkipEndIPsInCIDR, pick next available address before last", "192.168.0.200/30,192.168.0.200/29", &["192.168.0.201", "192.168.0.202"], true, true, Some("192.168.0.206")),
    ("ipv6, single entry, two address", "2001::49fe/127", &[], false, false, Some("2001::49fe")),
    ("ipv6, single entry, two address, set SkipEndIPsInCIDR no effect", "2001::49fe/127", &[], false, true, Some("2001::49fe")),
    ("ipv6, single entry, two address, reverse order", "2001::49fe/127", &[], true, false, Some("2001::49ff")),
    ("ipv6, no ip available", "2001::49fe/127", &["2001::49fe", "2001::49ff"], false, false, None),
    ("ipv6, no ip available, reverse order", "2001::49fe/127", &["2001::49fe", "2001::49ff"], true, false, None),
    ("ipv6, dual entry, overlap address", "2001::10/126,2001::12/127", &["2001::10", "2001::11"], false, false, Some("2001::12")),
    ("ipv6, dual entry, overlap address, reverse order", "2001::10/126,2001::12/127", &["2001::10", "2001::11"], true, false, Some("2001::13")),
];

#[test]
fn find_available_host() {
    let cases = FIND_AVAILABLE_HOST_FROM_RANGE
        .iter()
        .chain(FIND_AVAILABLE_HOST_FROM_CIDR);
    for (name, pool, existing, desc, skip, want) in cases {
        let got = find(pool, existing, *desc, *skip);
        assert_eq!(got.as_deref(), *want, "{name}");
    }
}
