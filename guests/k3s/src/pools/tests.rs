//! The pools' tests: kube-vip-cloud-provider's test tables, each case under its Go
//! name ([`ipam`]: `pkg/ipam/ipam_test.go`; [`load_balancer`]:
//! `pkg/provider/loadBalancer_test.go`), then here the rules kube-vip tests elsewhere
//! or not at all (lookup order, scope, sharing) and this port's own (requested
//! addresses).

mod ipam;
mod load_balancer;

use std::collections::BTreeSet;
use std::net::IpAddr;

use wasm_ccm_guest::types::{IpFamily, IpFamilyPolicy, Protocol, ServicePort};

use super::*;

const NO_FAMILY: &[IpFamily] = &[];
const IPV4: &[IpFamily] = &[IpFamily::Ipv4];
const IPV6: &[IpFamily] = &[IpFamily::Ipv6];
const IPV4_IPV6: &[IpFamily] = &[IpFamily::Ipv4, IpFamily::Ipv6];
const IPV6_IPV4: &[IpFamily] = &[IpFamily::Ipv6, IpFamily::Ipv4];
const SINGLE: Option<IpFamilyPolicy> = Some(IpFamilyPolicy::SingleStack);
const PREFER: Option<IpFamilyPolicy> = Some(IpFamilyPolicy::PreferDualStack);
const REQUIRE: Option<IpFamilyPolicy> = Some(IpFamilyPolicy::RequireDualStack);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn in_use(addresses: &[&str]) -> BTreeSet<IpAddr> {
    addresses.iter().map(|a| ip(a)).collect()
}

fn joined(addresses: &[IpAddr]) -> String {
    let addresses: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    addresses.join(",")
}

/// `discoverAddress` (`FindAvailableHostFromCidr`, `...FromRange`) on a one-family
/// pool.
fn find(pool: &str, existing: &[&str], descending: bool, skip_end: bool) -> Option<String> {
    let pool = Pool::parse(pool).unwrap();
    let family = if pool.has(Family::V4) {
        Family::V4
    } else {
        Family::V6
    };
    let in_use = in_use(existing);
    let search = Search {
        namespace: "default",
        key: "cidr-default",
        pool: &pool,
        descending,
        skip_end,
        in_use: &in_use,
    };
    search.find(family).ok().map(|a| a.to_string())
}

fn request(namespace: &str, name: &str, ports: &[i32]) -> Request {
    Request {
        namespace: namespace.into(),
        name: name.into(),
        ports: ports.to_vec(),
        ..Request::default()
    }
}

fn holder(namespace: &str, name: &str, ports: &[i32], addresses: &[&str]) -> Holder {
    Holder {
        namespace: namespace.into(),
        name: name.into(),
        ports: ports.to_vec(),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
    }
}

/// The addresses `request` gets, joined.
fn allocate(
    config: &PoolConfig,
    request: &Request,
    holders: &[Holder],
) -> Result<String, AllocError> {
    let got = config.allocate(request, holders)?;
    Ok(joined(&got.addresses))
}

#[test]
fn pools_are_looked_up_namespace_first_cidr_before_range() {
    let config = PoolConfig::from_config_map([
        ("range-default", "10.0.1.10-10.0.1.20"),
        ("range-global", "10.0.2.10-10.0.2.20"),
        ("cidr-other", "10.0.3.0/29"),
    ]);
    let got = config
        .allocate(&request("default", "web", &[80]), &[])
        .unwrap();
    assert_eq!(
        (got.pool.as_str(), got.addresses[0]),
        ("range-default", ip("10.0.1.10"))
    );
    let got = config
        .allocate(&request("other", "web", &[80]), &[])
        .unwrap();
    assert_eq!(
        (got.pool.as_str(), got.addresses[0]),
        ("cidr-other", ip("10.0.3.1"))
    );
    let got = config
        .allocate(&request("third", "web", &[80]), &[])
        .unwrap();
    assert_eq!(got.pool, "range-global");
    // cidr-global wins over range-<namespace>, as kube-vip's discoverPool looks up.
    let config = PoolConfig::from_config_map([
        ("range-default", "10.0.1.10-10.0.1.20"),
        ("cidr-global", "10.0.2.0/29"),
    ]);
    let got = config
        .allocate(&request("default", "web", &[80]), &[])
        .unwrap();
    assert_eq!(got.pool, "cidr-global");
    // None: an error, with its event reason.
    let error = PoolConfig::default()
        .allocate(&request("default", "web", &[80]), &[])
        .unwrap_err();
    assert_eq!(
        error,
        AllocError::NoPool {
            namespace: "default".into()
        }
    );
    assert_eq!(error.reason(), "NoAddressPool");
}

#[test]
fn addresses_in_use_are_the_pools_scope() {
    let other = holder("other", "db", &[5432], &["10.0.0.1"]);
    let namespaced = PoolConfig::from_config_map([("cidr-default", "10.0.0.0/29")]);
    let web = request("default", "web", &[80]);
    // Another namespace's Service does not count against a namespace's pool ...
    assert_eq!(
        allocate(&namespaced, &web, std::slice::from_ref(&other)).unwrap(),
        "10.0.0.1"
    );
    // ... but does against a global one.
    let global = PoolConfig::from_config_map([("cidr-global", "10.0.0.0/29")]);
    assert_eq!(
        allocate(&global, &web, std::slice::from_ref(&other)).unwrap(),
        "10.0.0.2"
    );
    // What the Service itself holds does not count against it.
    let itself = holder("default", "web", &[80], &["10.0.0.1"]);
    let api = holder("default", "api", &[8080], &["10.0.0.2"]);
    assert_eq!(
        allocate(&namespaced, &web, &[api, itself]).unwrap(),
        "10.0.0.1"
    );
    // search-order: desc
    let desc =
        PoolConfig::from_config_map([("cidr-default", "10.0.0.0/29"), ("search-order", "desc")]);
    assert_eq!(allocate(&desc, &web, &[]).unwrap(), "10.0.0.7");
}

#[test]
fn exhausted_pools_name_themselves() {
    let config = PoolConfig::from_config_map([("range-default", "10.0.0.1-10.0.0.2")]);
    let full = [
        holder("default", "a", &[80], &["10.0.0.1"]),
        holder("default", "b", &[80], &["10.0.0.2"]),
    ];
    let error = config
        .allocate(&request("default", "c", &[443]), &full)
        .unwrap_err();
    assert_eq!(error.reason(), "NoAddressAvailable");
    assert_eq!(
        error.to_string(),
        "no addresses available in [default] range [10.0.0.1-10.0.0.2]"
    );
    // A PreferDualStack Service whose pool has one family, exhausted: the same error
    // (kube-vip would write an empty address).
    let prefer = Request {
        ip_family_policy: PREFER,
        ..request("default", "c", &[443])
    };
    assert!(matches!(
        config.allocate(&prefer, &full),
        Err(AllocError::NoAddressAvailable { .. })
    ));
    // One family exhausted of two: a warning.
    let config =
        PoolConfig::from_config_map([("range-default", "10.0.0.1-10.0.0.2,fd00::1-fd00::2")]);
    let got = config.allocate(&prefer, &full).unwrap();
    assert_eq!(got.addresses, [ip("fd00::1")]);
    assert!(got.warning.unwrap().contains("[10.0.0.1-10.0.0.2]"));
}

#[test]
fn sharing_joins_disjoint_ports_on_ipv4() {
    let web = holder("default", "web", &[80, 443], &["10.0.0.2", "fd00::"]);
    let shared = |extra: &[(&'static str, &'static str)]| {
        let mut data = vec![("cidr-default", "10.0.0.0/29,fd00::/126")];
        data.extend_from_slice(extra);
        PoolConfig::from_config_map(data)
    };
    let on = shared(&[("allow-share-default", "true")]);
    let api = request("default", "api", &[8080]);
    assert_eq!(
        allocate(&on, &api, std::slice::from_ref(&web)).unwrap(),
        "10.0.0.2"
    );
    // A port in common: a free address instead.
    let https = request("default", "https", &[443]);
    assert_eq!(
        allocate(&on, &https, std::slice::from_ref(&web)).unwrap(),
        "10.0.0.1"
    );
    // IPv6 is never shared.
    let v6 = Request {
        ip_families: IPV6.to_vec(),
        ..api.clone()
    };
    assert_eq!(
        allocate(&on, &v6, std::slice::from_ref(&web)).unwrap(),
        "fd00::1"
    );
    // A holder without ports keeps its address; the lowest shareable one is taken.
    let portless = holder("default", "headless", &[], &["10.0.0.1"]);
    let high = holder("default", "dns", &[53], &["10.0.0.5"]);
    let holders = [high, portless, web.clone()];
    assert_eq!(allocate(&on, &api, &holders).unwrap(), "10.0.0.2");
    // Off by default, and the namespace's key wins over the global one (Go's
    // strconv.ParseBool: `T` is true, `yes` is not).
    for (extra, shares) in [
        (vec![], false),
        (vec![("allow-share-global", "true")], true),
        (
            vec![
                ("allow-share-global", "true"),
                ("allow-share-default", "false"),
            ],
            false,
        ),
        (vec![("allow-share-default", "T")], true),
        (vec![("allow-share-default", "yes")], false),
    ] {
        let want = if shares { "10.0.0.2" } else { "10.0.0.1" };
        let got = allocate(&shared(&extra), &api, std::slice::from_ref(&web)).unwrap();
        assert_eq!(got, want, "{extra:?}");
    }
}

#[test]
fn requested_addresses_must_be_in_the_pool_and_free() {
    let config = PoolConfig::from_config_map([
        ("cidr-default", "10.0.0.0/29,fd00::/126"),
        ("allow-share-default", "true"),
    ]);
    let web = holder("default", "web", &[80], &["10.0.0.2"]);
    let asking = |ports: &[i32], requested: &[&str]| Request {
        requested: requested.iter().map(|a| ip(a)).collect(),
        ..request("default", "api", ports)
    };
    // Free, in order given (IPv6 first here).
    let got = allocate(
        &config,
        &asking(&[80], &["fd00::3", "10.0.0.6"]),
        std::slice::from_ref(&web),
    );
    assert_eq!(got.unwrap(), "fd00::3,10.0.0.6");
    // Not in the pool.
    let error = allocate(&config, &asking(&[80], &["10.0.1.1"]), &[]).unwrap_err();
    assert_eq!(error.reason(), "RequestedAddressNotInPool");
    assert_eq!(
        error.to_string(),
        "requested address 10.0.1.1 is not in pool cidr-default"
    );
    // Held, and a port in common.
    let error = allocate(
        &config,
        &asking(&[80], &["10.0.0.2"]),
        std::slice::from_ref(&web),
    )
    .unwrap_err();
    assert_eq!(
        error,
        AllocError::RequestedInUse {
            address: ip("10.0.0.2"),
            holder: "default/web".into()
        }
    );
    assert_eq!(error.reason(), "RequestedAddressInUse");
    // Held, ports disjoint and sharing on: shared.
    let got = allocate(
        &config,
        &asking(&[8080], &["10.0.0.2"]),
        std::slice::from_ref(&web),
    );
    assert_eq!(got.unwrap(), "10.0.0.2");
    // skip-end-ips-in-cidr: the ends are not in the pool.
    let skip = PoolConfig::from_config_map([
        ("cidr-default", "10.0.0.0/29"),
        ("skip-end-ips-in-cidr", "true"),
    ]);
    assert!(allocate(&skip, &asking(&[80], &["10.0.0.7"]), &[]).is_err());
    assert!(allocate(&skip, &asking(&[80], &["10.0.0.6"]), &[]).is_ok());
}

#[test]
fn dhcp_gives_everyone_zero() {
    let config = PoolConfig::from_config_map([("cidr-global", "0.0.0.0/32")]);
    let taken = [holder("default", "web", &[80], &["0.0.0.0"])];
    assert_eq!(
        allocate(&config, &request("default", "api", &[80]), &taken).unwrap(),
        "0.0.0.0"
    );
}

#[test]
fn invalid_pools_fail_only_their_services() {
    let config = PoolConfig::from_config_map([
        ("cidr-default", "10.0.0.0/29,bogus/8"),
        ("range-global", "10.0.1.1-10.0.1.9"),
        ("unrelated-key", "ignored"),
    ]);
    assert_eq!(config.invalid().len(), 1);
    assert_eq!(config.invalid()[0].0, "cidr-default");
    let error = config
        .allocate(&request("default", "web", &[80]), &[])
        .unwrap_err();
    assert_eq!(error.reason(), "InvalidAddressPool");
    assert_eq!(
        allocate(&config, &request("other", "web", &[80]), &[]).unwrap(),
        "10.0.1.1"
    );
}

#[test]
fn pool_grammar() {
    // Items are trimmed; prefixes keep host bits as Go's ParsePrefix, masked.
    assert_eq!(
        Pool::parse(" 10.0.0.5/30 , fd00::1/127 ")
            .unwrap()
            .family_text(Family::V4),
        "10.0.0.4/30"
    );
    for bad in [
        "",
        "10.0.0.0/33",
        "fd00::/129",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "010.0.0.0/8",
        "10.0.0.0/8,",
        "10.0.0.1-10.0.0.2-10.0.0.3",
        "10.0.0.1",
        "10.0.0.1-fd00::1",
        "10.0.0.9-10.0.0.1",
    ] {
        assert!(Pool::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(Pool::parse("0.0.0.0/32"), Ok(Pool::Dhcp));
    // The whole IPv6 space is one prefix.
    assert_eq!(Pool::parse("::/0").unwrap().family_text(Family::V6), "::/0");
    assert_eq!(
        Pool::parse("0.0.0.0-255.255.255.255")
            .unwrap()
            .family_text(Family::V4),
        "0.0.0.0-255.255.255.255"
    );
    let all = Pool::parse("0.0.0.0/0").unwrap();
    assert_eq!(all.family_text(Family::V4), "0.0.0.0/0");
    assert!(all.admits(ip("255.255.255.255"), false));
    assert!(!all.admits(ip("255.255.255.255"), true));
}

#[test]
fn address_lists_and_requests_from_services() {
    assert_eq!(
        parse_address_list("10.0.0.1,fd00::1"),
        Ok(vec![ip("10.0.0.1"), ip("fd00::1")])
    );
    assert!(parse_address_list("10.0.0.1, fd00::1").is_err());
    assert!(parse_address_list("").is_err());

    let mut service = wasm_ccm_guest::testing::service("default", "web");
    service.ports = [80, 443]
        .into_iter()
        .map(|port| ServicePort {
            name: String::new(),
            protocol: Protocol::Tcp,
            port,
            target_port: port.to_string(),
            node_port: 0,
            app_protocol: None,
        })
        .collect();
    service.ip_families = IPV6_IPV4.to_vec();
    service.ip_family_policy = PREFER;
    let request = Request::for_service(&service, vec![ip("fd00::1")]);
    assert_eq!(
        (
            request.namespace.as_str(),
            request.name.as_str(),
            request.ports.as_slice()
        ),
        ("default", "web", &[80, 443][..])
    );
    assert_eq!(request.ip_families, IPV6_IPV4);
    assert_eq!(request.ip_family_policy, PREFER);
    assert_eq!(request.requested, [ip("fd00::1")]);
}
