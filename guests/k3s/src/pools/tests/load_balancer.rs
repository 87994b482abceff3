//! kube-vip-cloud-provider's `pkg/provider/loadBalancer_test.go`, each case under its
//! Go test's name: finding the pool, an address in it, the addresses of each family.

use super::*;

/// Test_DiscoveryAddressCIDR, then Test_DiscoveryAddressRange: (pool, in use, answer)
#[rustfmt::skip]
const DISCOVERY_ADDRESS: &[(&str, &[&str], &str)] = &[
    ("10.10.10.8/29", &["10.10.10.8", "10.10.10.9", "10.10.10.10", "10.10.10.12"], "10.10.10.11"),
    ("192.168.1.1/24", &["10.10.10.8", "172.16.0.3", "192.168.1.1", "10.10.10.9", "10.10.10.10", "172.16.0.4", "192.168.1.2", "10.10.10.12"], "192.168.1.3"),
    ("fe80::10/126", &["fe80::10", "fe80::11", "fe80::12"], "fe80::13"),
    ("10.10.10.8-10.10.10.15", &["10.10.10.8", "10.10.10.9", "10.10.10.10", "10.10.10.12"], "10.10.10.11"),
    ("192.168.1.1-192.168.1.254", &["10.10.10.8", "172.16.0.3", "192.168.1.1", "10.10.10.9", "10.10.10.10", "172.16.0.4", "192.168.1.2", "10.10.10.12"], "192.168.1.3"),
    ("fe80::ffff-fe80::1:3", &["fe80::ffff", "fe80::1:0", "fe80::1:1"], "fe80::1:2"),
];

#[test]
fn discovery_address() {
    for (pool, existing, want) in DISCOVERY_ADDRESS {
        let got = find(pool, existing, false, false);
        assert_eq!(got.as_deref(), Some(*want), "{pool}");
    }
}

#[test]
fn discovery_pool() {
    // Test_DiscoveryPoolCIDR
    let cidrs = PoolConfig::from_config_map([
        ("cidr-dummystart", "172.16.0.1/24"),
        ("cidr-global", "192.168.1.1/24"),
        ("cidr-system", "10.10.10.8/29"),
        ("allow-share-system", "true"),
        ("cidr-dummyend", "172.16.0.2/24"),
        ("cidr-ipv6", "2001::10/127"),
    ]);
    // Test_DiscoveryPoolRange (`cidr-ipv6` holds a range: the value decides).
    let ranges = PoolConfig::from_config_map([
        ("range-dummystart", "172.16.0.1-172.16.0.254"),
        ("range-global", "192.168.1.1-192.168.1.254"),
        ("range-system", "10.10.10.8-10.10.10.15"),
        ("range-dummyend", "172.16.1.1-172.16.1.254"),
        ("cidr-ipv6", "2001::10-2001::20"),
    ]);
    // (config, namespace, key, pool, global, allow-share)
    #[rustfmt::skip]
    let cases = [
        (&cidrs, "system", "cidr-system", "10.10.10.8/29", false, true),
        (&cidrs, "ipv6", "cidr-ipv6", "2001::10/127", false, false),
        (&cidrs, "basic", "cidr-global", "192.168.1.1/24", true, false),
        (&ranges, "system", "range-system", "10.10.10.8-10.10.10.15", false, false),
        (&ranges, "ipv6", "cidr-ipv6", "2001::10-2001::20", false, false),
        (&ranges, "basic", "range-global", "192.168.1.1-192.168.1.254", true, false),
    ];
    for (config, namespace, key, pool, global, share) in cases {
        let selected = config.discover(namespace).unwrap();
        assert_eq!(selected.key, key, "{namespace}");
        assert_eq!(*selected.pool, Pool::parse(pool).unwrap(), "{namespace}");
        let flags = (selected.global, selected.allow_share);
        assert_eq!(flags, (global, share), "{namespace}");
    }
    assert!(!Pool::parse("2001::10-2001::20").unwrap().is_cidr());
}

/// `discoverVIPs` with `preferred` the IPv4 address the Service may share.
fn vips(
    policy: Option<IpFamilyPolicy>,
    families: &[IpFamily],
    pool: &str,
    preferred: Option<&str>,
    existing: &[&str],
) -> Result<String, String> {
    let pool = Pool::parse(pool)?;
    let in_use = in_use(existing);
    let search = Search {
        namespace: "discover-vips-test-ns",
        key: "cidr-global",
        pool: &pool,
        descending: false,
        skip_end: false,
        in_use: &in_use,
    };
    let preferred = preferred.map(|p| p.parse().unwrap());
    let (addresses, _) = search
        .vips(preferred, policy, families)
        .map_err(|e| e.to_string())?;
    Ok(joined(&addresses))
}

const V4_POOL: &str = "10.10.10.8-10.10.10.15";
const V4_USED: &[&str] = &["10.10.10.8", "10.10.10.9", "10.10.10.10", "10.10.10.12"];
const V6_POOL: &str = "fd00::1-fd00::10";
const V6_USED: &[&str] = &["fd00::1", "fd00::2", "fd00::4"];
const DUAL: &str = "10.10.10.8-10.10.10.15,fd00::1-fd00::10";
const SMALL: &str = "10.10.10.8-10.10.10.9,fd00::1-fd00::2";
const SMALL_V4: &[&str] = &["10.10.10.8", "10.10.10.9"];
const SMALL_V6: &[&str] = &["fd00::1", "fd00::2"];
const SMALL_ALL: &[&str] = &["10.10.10.8", "10.10.10.9", "fd00::1", "fd00::2"];

/// (name, policy, families, pool, preferred IPv4, in use, answer)
type VipsCase = (
    &'static str,
    Option<IpFamilyPolicy>,
    &'static [IpFamily],
    &'static str,
    Option<&'static str>,
    &'static [&'static str],
    Option<&'static str>,
);

/// Test_discoverVIPs
#[rustfmt::skip]
const DISCOVER_VIPS: &[VipsCase] = &[
    ("IPv4 pool", None, NO_FAMILY, V4_POOL, None, V4_USED, Some("10.10.10.11")),
    ("IPv4 pool with IPv4 service", SINGLE, IPV4, V4_POOL, None, V4_USED, Some("10.10.10.11")),
    ("IPv4 pool with preferred IP", SINGLE, IPV4, V4_POOL, Some("10.10.10.9"), V4_USED, Some("10.10.10.9")),
    ("IPv6 pool", None, NO_FAMILY, V6_POOL, None, V6_USED, Some("fd00::3")),
    ("IPv6 pool with IPv6 service", SINGLE, IPV6, V6_POOL, None, V6_USED, Some("fd00::3")),
    ("IPv6 pool with IPv4 service", SINGLE, IPV4, V6_POOL, None, &[], None),
    ("IPv4 pool with IPv6 service", SINGLE, IPV6, V4_POOL, None, &[], None),
    ("IPv4 pool with PreferDualStack service", PREFER, IPV4_IPV6, V4_POOL, None, V4_USED, Some("10.10.10.11")),
    ("IPv4 pool with PreferDualStack service and preferred IPv4 service IP", PREFER, IPV4_IPV6, V4_POOL, Some("10.10.10.10"), V4_USED, Some("10.10.10.10")),
    ("IPv6 pool with PreferDualStack service", PREFER, IPV4_IPV6, V6_POOL, None, V6_USED, Some("fd00::3")),
    ("dualstack pool with PreferDualStack service with no IP families explicitly specified", PREFER, NO_FAMILY, DUAL, None, &[], Some("10.10.10.8,fd00::1")),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service", PREFER, IPV4_IPV6, DUAL, None, &[], Some("10.10.10.8,fd00::1")),
    ("dualstack pool with PreferDualStack IPv6,IPv4 service", PREFER, IPV6_IPV4, DUAL, None, &[], Some("fd00::1,10.10.10.8")),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service and preferred IPv4 service IP", PREFER, IPV4_IPV6, DUAL, Some("10.10.10.8"), V4_USED, Some("10.10.10.8,fd00::1")),
    ("dualstack pool with PreferDualStack IPv6,IPv4 service and preferred IPv4 service IP", PREFER, IPV6_IPV4, DUAL, Some("10.10.10.8"), V4_USED, Some("fd00::1,10.10.10.8")),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service, but the IPv6 pool has no available addresses", PREFER, IPV4_IPV6, SMALL, None, SMALL_V6, Some("10.10.10.8")),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service, but the IPv4 pool has no available addresses", PREFER, IPV4_IPV6, SMALL, None, SMALL_V4, Some("fd00::1")),
    ("dualstack pool with PreferDualStack IPv6,IPv4 service, but the IPv6 pool has no available addresses", PREFER, IPV4_IPV6, SMALL, None, SMALL_V6, Some("10.10.10.8")),
    ("dualstack pool with PreferDualStack IPv6,IPv4 service, but the IPv4 pool has no available addresses", PREFER, IPV4_IPV6, SMALL, None, SMALL_V4, Some("fd00::1")),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service, but no pools have available addresses", PREFER, IPV4_IPV6, SMALL, None, SMALL_ALL, None),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service, but there is an invalid pool", PREFER, IPV4_IPV6, "10.10.10.8-10.10.10.9,fd00::1-fd00::2,invalid-pool", None, &[], None),
    ("IPv4 pool with RequireDualStack service", REQUIRE, IPV4_IPV6, V4_POOL, None, &[], None),
    ("IPv6 pool with RequireDualStack service", REQUIRE, IPV4_IPV6, V6_POOL, None, &[], None),
    ("empty pool with RequireDualStack service", REQUIRE, IPV4_IPV6, "", None, &[], None),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service", REQUIRE, IPV4_IPV6, DUAL, None, &[], Some("10.10.10.8,fd00::1")),
    ("dualstack pool with RequireDualStack IPv6,IPv4 service", REQUIRE, IPV6_IPV4, DUAL, None, &[], Some("fd00::1,10.10.10.8")),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service, but the IPv6 pool has no available addresses", REQUIRE, IPV4_IPV6, SMALL, None, SMALL_V6, None),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service, but the IPv4 pool has no available addresses", REQUIRE, IPV4_IPV6, SMALL, None, SMALL_V4, None),
    ("dualstack pool with RequireDualStack IPv6,IPv4 service, but the IPv6 pool has no available addresses", REQUIRE, IPV4_IPV6, SMALL, None, SMALL_V6, None),
    ("dualstack pool with RequireDualStack IPv6,IPv4 service, but the IPv4 pool has no available addresses", REQUIRE, IPV4_IPV6, SMALL, None, SMALL_V4, None),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service, but no pools have available addresses", REQUIRE, IPV4_IPV6, SMALL, None, SMALL_ALL, None),
];

#[test]
fn discover_vips() {
    for (name, policy, families, pool, preferred, existing, want) in DISCOVER_VIPS {
        let got = vips(*policy, families, pool, *preferred, existing);
        match want {
            Some(want) => assert_eq!(got.as_deref(), Ok(*want), "{name}"),
            None => assert!(got.is_err(), "{name}: {got:?}"),
        }
    }
}

#[test]
fn sync_load_balancer() {
    // Test_syncLoadBalancer, the cases that allocate (the others are the export's:
    // labels, annotations, the legacy spec.loadBalancerIP).
    let global = |pool: &'static str| PoolConfig::from_config_map([("cidr-global", pool)]);
    let new = request("test", "name", &[]);
    // "add new annotation and loadbalancerIP to new service", and "create config map
    // with different name and namespace"
    let got = allocate(&global("192.168.1.1/24"), &new, &[]);
    assert_eq!(got.unwrap(), "192.168.1.1");
    // "ipv6, add new annotation and loadbalancerIP to new service"
    let got = allocate(&global("fe80::10/126"), &new, &[]);
    assert_eq!(got.unwrap(), "fe80::10");
    // "dualstack loadbalancer"
    let dual = Request {
        ip_family_policy: REQUIRE,
        ip_families: IPV6_IPV4.to_vec(),
        ..new.clone()
    };
    let got = allocate(&global("10.120.120.1/24,fe80::10/126"), &dual, &[]);
    assert_eq!(got.unwrap(), "fe80::10,10.120.120.1");
    // "service interface defined in global", "... defined in service's namespace",
    // "... not defined in service's namespace"
    for (key, want) in [
        ("interface-global", Some("eth0")),
        ("interface-test", Some("eth0")),
        ("interface-what", None),
    ] {
        let config =
            PoolConfig::from_config_map([("cidr-global", "192.168.1.1/24"), (key, "eth0")]);
        let got = config.allocate(&new, &[]).unwrap();
        assert_eq!(got.interface.as_deref(), want, "{key}");
        assert_eq!(got.pool, "cidr-global");
    }
}
