//! The address rules: what no provider may ever reach, whatever its policy says, and
//! what it reaches only when its policy names it.
//!
//! Every layer applies the same rules: the policy parser to the hosts of patterns, the
//! broker to the destination of each request (parsed once), the resolver to each DNS
//! answer, and the connector to the address a connection actually reaches. An address
//! is checked in every spelling that reaches it: IPv4 in IPv6 (mapped `::ffff:a.b.c.d`,
//! compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`) is
//! checked as the IPv4 address it embeds.
//!
//! - **Never**: link-local `169.254.0.0/16` and `fe80::/10` (the instance-metadata
//!   service of AWS, GCP, Azure, OpenStack, Oracle, IBM, Huawei, DigitalOcean, Hetzner
//!   and others, ECS task metadata, EKS Pod Identity, cloud DNS and time services);
//!   the clouds' metadata and host endpoints outside it: AWS's `fd00:ec2::/32` (IPv6
//!   metadata, DNS, time, EKS Pod Identity), Azure's WireServer `168.63.129.16`,
//!   Alibaba Cloud's `100.100.100.200`, GCP's `fd20:ce::254`, Akamai's
//!   `fd00:a9fe:a9fe::1`, Scaleway's `fd00:42::42`, Oracle Cloud Classic's
//!   `192.0.0.192`; the unspecified addresses `0.0.0.0/8` and `::` (a connection to
//!   them reaches this host); Teredo `2001::/32` (an IPv4 address in disguise); and
//!   multicast, broadcast and reserved addresses, never an HTTP server.
//! - **Only when named**: loopback (`127.0.0.0/8`, `::1`, the name `localhost`). The
//!   controller manager runs with `hostNetwork`, so loopback is the node's kubelet and
//!   etcd; a pattern must name a loopback address or `localhost` itself (no wildcard
//!   reaches it, and no other name may resolve to it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is never reachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Never {
    /// A short label for metrics: `link_local`, `metadata` or `unspecified`.
    pub label: &'static str,
    /// What lives there, for messages.
    pub what: &'static str,
}

const LINK_LOCAL: Never = Never {
    label: "link_local",
    what: "a link-local address (where clouds serve instance metadata)",
};

const NOT_UNICAST: Never = Never {
    label: "not_unicast",
    what: "a multicast, broadcast or reserved address",
};

/// GCP `fd20:ce::254`, Akamai `fd00:a9fe:a9fe::1`, Scaleway `fd00:42::42`.
const METADATA_V6: [[u16; 8]; 3] = [
    [0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254],
    [0xfd00, 0xa9fe, 0xa9fe, 0, 0, 0, 0, 1],
    [0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42],
];

const UNSPECIFIED: Never = Never {
    label: "unspecified",
    what: "an unspecified address (a connection to it reaches this host)",
};

/// The IPv4 address `ip` reaches, when it is IPv4 or embeds one.
pub fn as_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => embedded_ipv4(v6),
    }
}

fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible; not ::1 and ::).
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low()),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low()),
        // SIIT ::ffff:0:a.b.c.d and the NAT64 well-known prefix 64:ff9b::/96.
        [0, 0, 0, 0, 0xffff, 0, _, _] | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low()),
        // 6to4 2002:aabb:ccdd::/48.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// Why `ip` may never be reached, or `None` when the policy decides.
pub fn never_reachable(ip: IpAddr) -> Option<Never> {
    if let Some(v4) = as_ipv4(ip) {
        return match v4.octets() {
            _ if v4.is_link_local() => Some(LINK_LOCAL),
            [168, 63, 129, 16] => Some(Never {
                label: "metadata",
                what: "Azure's WireServer",
            }),
            [100, 100, 100, 200] => Some(Never {
                label: "metadata",
                what: "Alibaba Cloud's instance metadata",
            }),
            [192, 0, 0, 192] => Some(Never {
                label: "metadata",
                what: "Oracle Cloud Classic's instance metadata",
            }),
            [0, ..] => Some(UNSPECIFIED),
            _ if v4.is_multicast() || v4.is_broadcast() || v4.octets()[0] >= 240 => {
                Some(NOT_UNICAST)
            }
            _ => None,
        };
    }
    let IpAddr::V6(v6) = ip else { return None };
    let s = v6.segments();
    if s[0] & 0xffc0 == 0xfe80 {
        Some(LINK_LOCAL)
    } else if s[0] == 0xfd00 && s[1] == 0x0ec2 {
        Some(Never {
            label: "metadata",
            what: "AWS's fd00:ec2::/32 (instance metadata, DNS, time, EKS Pod Identity)",
        })
    } else if METADATA_V6.contains(&s) {
        Some(Never {
            label: "metadata",
            what: "a cloud's IPv6 instance-metadata address",
        })
    } else if s[0] == 0x2001 && s[1] == 0 {
        Some(Never {
            label: "tunnel",
            what: "a Teredo address (it embeds an IPv4 address)",
        })
    } else if v6.is_multicast() {
        Some(NOT_UNICAST)
    } else if v6.is_unspecified() {
        Some(UNSPECIFIED)
    } else {
        None
    }
}

/// Whether `ip` is this host's loopback: `127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`
/// (the only IPv6 spelling that reaches IPv4 loopback; NAT64 or 6to4 forms of
/// `127.0.0.1` go out to the network, so they are not loopback).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.is_loopback(),
            None => v6.is_loopback(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(text: &str) -> Option<&'static str> {
        never_reachable(text.parse().unwrap()).map(|n| n.label)
    }

    #[test]
    fn metadata_and_host_local_addresses_are_never_reachable() {
        for (ip, label) in [
            ("169.254.169.254", "link_local"),
            ("169.254.170.2", "link_local"),
            ("169.254.0.23", "link_local"),
            ("fe80::1", "link_local"),
            ("febf::1", "link_local"),
            ("fd00:ec2::254", "metadata"),
            ("fd00:ec2::23", "metadata"),
            ("168.63.129.16", "metadata"),
            ("100.100.100.200", "metadata"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            // The same addresses embedded in IPv6.
            ("::ffff:169.254.169.254", "link_local"),
            ("::169.254.169.254", "link_local"),
            ("64:ff9b::a9fe:a9fe", "link_local"),
            ("2002:a9fe:a9fe::1", "link_local"),
            ("::ffff:168.63.129.16", "metadata"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("::ffff:0:a9fe:a9fe", "link_local"),
            ("fd20:ce::254", "metadata"),
            ("fd00:a9fe:a9fe::1", "metadata"),
            ("fd00:42::42", "metadata"),
            ("192.0.0.192", "metadata"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "tunnel"),
            ("224.0.0.1", "not_unicast"),
            ("255.255.255.255", "not_unicast"),
            ("ff02::1", "not_unicast"),
        ] {
            assert_eq!(never(ip), Some(label), "{ip}");
        }
        for ip in [
            "10.0.0.1",
            "192.168.1.1",
            "100.100.2.136",
            "203.0.113.7",
            "2001:db8::1",
            "fd20:ce::1",
            "127.0.0.1",
            "::1",
        ] {
            assert_eq!(never(ip), None, "{ip}");
        }
    }

    #[test]
    fn loopback_in_every_spelling() {
        for ip in ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        // These embed 127.0.0.1 but are routed off this host.
        for ip in ["10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "::7f00:1"] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }
}
