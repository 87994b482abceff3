//! What a Service and the cloud config ask of its load balancer: occm's annotations,
//! read into [`Wanted`].

use wasm_ccm_guest::types::{CloudError, IpFamily, Service, SessionAffinity, TrafficPolicy};
use wasm_ccm_guest::{cloud_error, events};

use super::floating_subnet::FloatingSubnet;
use super::load_balancer_name;
use crate::OpenStack;
use crate::config::LoadBalancerClass;

/// The annotations' prefix.
pub(super) const PREFIX: &str = "loadbalancer.openstack.org/";
/// The legacy source ranges annotation (before `spec.loadBalancerSourceRanges`).
const SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
/// occm's (and the in-tree provider's) internal load balancer annotation.
const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";

/// The annotations this provider reads (after [`PREFIX`]).
pub const SUPPORTED: [&str; 30] = [
    "node-selector",
    "port-id",
    "floating-subnet",
    "floating-subnet-tags",
    "x-forwarded-for",
    "default-tls-container-ref",
    "class",
    "hostname",
    "load-balancer-id",
    "load-balancer-address",
    "floating-network-id",
    "floating-subnet-id",
    "keep-floatingip",
    "subnet-id",
    "network-id",
    "member-subnet-id",
    "timeout-client-data",
    "timeout-member-connect",
    "timeout-member-data",
    "timeout-tcp-inspect",
    "proxy-protocol",
    "enable-health-monitor",
    "health-monitor-delay",
    "health-monitor-timeout",
    "health-monitor-max-retries",
    "health-monitor-max-retries-down",
    "flavor-id",
    "availability-zone",
    "lb-method",
    "connection-limit",
];

pub(super) fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

pub(super) fn ours<'a>(service: &'a Service, name: &str) -> Option<&'a str> {
    annotation(service, &format!("{PREFIX}{name}"))
}

pub(super) fn truthy(value: Option<&str>) -> Option<bool> {
    value.map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "yes" | "1"))
}

/// The source ranges as upstream's `GetLoadBalancerSourceRanges` reads them:
/// `spec.loadBalancerSourceRanges`, else the legacy annotation (comma-separated);
/// every entry a CIDR. Empty: open to all.
fn source_ranges(service: &Service) -> Result<Vec<String>, String> {
    let ranges: Vec<String> = if !service.load_balancer_source_ranges.is_empty() {
        service.load_balancer_source_ranges.clone()
    } else {
        annotation(service, SOURCE_RANGES)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .collect()
    };
    for range in &ranges {
        let valid = range.split_once('/').is_some_and(|(ip, bits)| {
            let max = match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => 32,
                Ok(std::net::IpAddr::V6(_)) => 128,
                Err(_) => return false,
            };
            bits.parse::<u8>().is_ok_and(|b| b <= max)
        });
        if !valid {
            return Err(format!("source range `{range}` is not a CIDR"));
        }
    }
    Ok(ranges)
}

/// The listener settings occm sets from annotations: (annotation, Octavia field,
/// default when the annotation is absent: Octavia's own).
pub(super) const LISTENER_SETTINGS: [(&str, &str, i64); 5] = [
    ("timeout-client-data", "timeout_client_data", 50_000),
    ("timeout-member-connect", "timeout_member_connect", 5_000),
    ("timeout-member-data", "timeout_member_data", 50_000),
    ("timeout-tcp-inspect", "timeout_tcp_inspect", 0),
    ("connection-limit", "connection_limit", -1),
];

/// What the Service and the cloud config ask for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Wanted {
    pub(super) name: String,
    pub(super) internal: bool,
    pub(super) vip_subnet: String,
    pub(super) vip_network: String,
    pub(super) member_subnet: String,
    pub(super) floating_network: String,
    pub(super) floating_subnet: FloatingSubnet,
    /// `port-id`: an existing Neutron port to be the VIP (occm's `VipPortID`).
    pub(super) vip_port: String,
    pub(super) lb_method: String,
    pub(super) proxy: Option<&'static str>,
    pub(super) monitor: Option<(u64, u64, u64, u64)>,
    pub(super) listener_settings: Vec<(&'static str, i64)>,
    /// The listeners' `allowed_cidrs`: the source ranges, else everyone of the
    /// Service's first IP family (occm's `GetLoadBalancerSourceRanges` default).
    pub(super) allowed_cidrs: Vec<String>,
    /// Whether the Service names source ranges (a Warning when they cannot be
    /// enforced; the default needs none).
    pub(super) source_ranges_given: bool,
    pub(super) flavor: String,
    pub(super) zone: String,
    pub(super) keep_floating_ip: bool,
    /// `sessionAffinity: ClientIP`: the pools' `SOURCE_IP` persistence.
    pub(super) source_ip_persistence: bool,
    /// `node-selector` (annotation, else the cloud config): labels a Node must have to
    /// be a member (an empty value: the key only).
    pub(super) node_selector: Vec<(String, String)>,
    /// With `externalTrafficPolicy: Local` and a monitor: the health check node port,
    /// probed with HTTP `GET /healthz` (occm's `buildMonitorCreateOpts`).
    pub(super) health_check_node_port: Option<i32>,
    /// `x-forwarded-for`: HTTP listeners adding the header.
    pub(super) x_forwarded_for: bool,
    /// `default-tls-container-ref` (annotation, else the cloud config): TERMINATED_HTTPS
    /// listeners with this certificate.
    pub(super) tls_container_ref: String,
    /// The Service's first IP family is IPv6: members take the Nodes' IPv6 addresses.
    pub(super) ipv6: bool,
    /// Octavia takes HTTP monitors on UDP pools (2.16; not the OVN provider): else a
    /// UDP port's monitor stays UDP-CONNECT with `externalTrafficPolicy: Local`.
    pub(super) http_monitors_on_udp: bool,
}

/// What Octavia's OVN provider does not do, left out as occm leaves it out
/// (`IsOctaviaFeatureSupported` is false for OVN, `canUseHTTPMonitor` too): listener
/// timeouts and flavors silently, source ranges and an availability zone with a
/// Warning; `externalTrafficPolicy: Local` keeps a monitor of the port's protocol.
fn without_ovn_features(wanted: &mut Wanted) {
    wanted
        .listener_settings
        .retain(|(field, _)| !field.starts_with("timeout_"));
    wanted.flavor.clear();
    wanted.health_check_node_port = None;
    wanted.allowed_cidrs.clear();
    if wanted.source_ranges_given {
        let _ = events::warning(
            "LoadBalancerSourceRangesIgnored",
            "LoadBalancerSourceRanges are ignored because the Octavia provider (ovn) does not \
             support them",
            None,
        );
    }
    if !wanted.zone.is_empty() {
        wanted.zone.clear();
        let _ = events::warning(
            "LoadBalancerAvailabilityZonesIgnored",
            "LoadBalancer Availability Zones aren't supported by the Octavia provider (ovn)",
            None,
        );
    }
}

/// occm's `StringToMap`: `key=value` pairs split on `,`; `key` and `key=` ask only
/// for the key.
pub(super) fn node_selector(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .map(str::trim)
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_owned(), v.trim().to_owned()))
        })
        .collect()
}

impl OpenStack {
    /// Checks the Service against what the provider supports, and reads its settings.
    pub(super) fn wanted(&self, cluster: &str, service: &Service) -> Result<Wanted, CloudError> {
        let refuse = |message: String| {
            let _ = events::warning("UnsupportedLoadBalancerSetting", &message, None);
            Err(cloud_error::other(format!(
                "service {}/{}: {message}",
                service.metadata.namespace, service.metadata.name
            )))
        };
        if !self.config.load_balancer.enabled {
            return refuse("load balancers are disabled ([LoadBalancer] enabled = false)".into());
        }
        for (key, _) in &service.metadata.annotations {
            let Some(name) = key.strip_prefix(PREFIX) else {
                continue;
            };
            if !SUPPORTED.contains(&name) {
                wasm_ccm_guest::log::warn(
                    "annotation not known to occm or this provider (a typo?); ignored",
                    &[("annotation", key.as_str())],
                );
            }
        }
        let config = &self.config.load_balancer;
        // occm: the class's networks stand in for the cloud config's; an annotation
        // naming one itself still wins.
        let class = match ours(service, "class").filter(|c| !c.is_empty()) {
            None => None,
            Some(name) => match self.config.load_balancer_classes.get(name) {
                None => {
                    return refuse(format!(
                        "annotation {PREFIX}class names `{name}`, which is no \
                         [LoadBalancerClass] section of the cloud config"
                    ));
                }
                Some(class) => Some(class),
            },
        };
        let from_class = |pick: fn(&LoadBalancerClass) -> &String, default: &str| -> String {
            class
                .map(pick)
                .filter(|v| !v.is_empty())
                .map_or_else(|| default.to_owned(), |v| v.clone())
        };
        let subnet_id = from_class(|c| &c.subnet_id, &config.subnet_id);
        let network_id = from_class(|c| &c.network_id, &config.network_id);
        let member_subnet_id = from_class(|c| &c.member_subnet_id, &config.member_subnet_id);
        let floating_network_id =
            from_class(|c| &c.floating_network_id, &config.floating_network_id);
        // occm's makeSvcConf: the class's floating subnet, else the annotations', else
        // the cloud config's (each an ID, else a name pattern and tags).
        let floating_subnet = class
            .map(|c| {
                FloatingSubnet::new(
                    &c.floating_subnet_id,
                    &c.floating_subnet,
                    &c.floating_subnet_tags,
                )
            })
            .filter(FloatingSubnet::configured)
            .or_else(|| {
                let annotation = |name| ours(service, name).unwrap_or_default();
                Some(FloatingSubnet::new(
                    annotation("floating-subnet-id"),
                    annotation("floating-subnet"),
                    annotation("floating-subnet-tags"),
                ))
                .filter(FloatingSubnet::configured)
            })
            .unwrap_or_else(|| {
                FloatingSubnet::new(
                    &config.floating_subnet_id,
                    &config.floating_subnet,
                    &config.floating_subnet_tags,
                )
            });
        if let Err(e) = floating_subnet.name_matcher() {
            return refuse(e);
        }
        let text = |name: &str, default: &str| ours(service, name).unwrap_or(default).to_owned();
        let number = |name: &str, default: u64| -> Result<u64, CloudError> {
            match ours(service, name) {
                None => Ok(default),
                Some(v) => v.trim().trim_end_matches('s').parse().map_err(|_| {
                    cloud_error::other(format!("annotation {PREFIX}{name} `{v}` is not a number"))
                }),
            }
        };
        let proxy = match ours(service, "proxy-protocol").map(str::trim) {
            None | Some("false") | Some("") => None,
            Some("true") | Some("v1") => Some("PROXY"),
            Some("v2") => Some("PROXYV2"),
            Some(other) => {
                return refuse(format!(
                    "annotation {PREFIX}proxy-protocol `{other}` is not true, v1 or v2"
                ));
            }
        };
        let x_forwarded_for = match ours(service, "x-forwarded-for").map(str::trim) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return refuse(format!(
                    "annotation {PREFIX}x-forwarded-for `{other}` is not true or false"
                ));
            }
        };
        if x_forwarded_for && proxy.is_some() {
            return refuse(format!(
                "annotation {PREFIX}x-forwarded-for and {PREFIX}proxy-protocol cannot be used \
                 together"
            ));
        }
        let monitor = truthy(ours(service, "enable-health-monitor"))
            .unwrap_or(config.create_monitor)
            .then(|| -> Result<_, CloudError> {
                Ok((
                    number("health-monitor-delay", config.monitor_delay)?,
                    number("health-monitor-timeout", config.monitor_timeout)?,
                    number("health-monitor-max-retries", config.monitor_max_retries)?,
                    number(
                        "health-monitor-max-retries-down",
                        config.monitor_max_retries_down,
                    )?,
                ))
            })
            .transpose()?;
        let mut listener_settings = Vec::new();
        // occm sends every one, an absent annotation as Octavia's default, so removing
        // the annotation restores the default.
        for (annotation, field, default) in LISTENER_SETTINGS {
            let n = match ours(service, annotation) {
                None => default,
                Some(v) => v.trim().parse::<i64>().map_err(|_| {
                    cloud_error::other(format!(
                        "annotation {PREFIX}{annotation} `{v}` is not a number"
                    ))
                })?,
            };
            listener_settings.push((field, n));
        }
        // occm: `internal-lb = true` in the cloud config cannot be undone per Service.
        let asked = truthy(annotation(service, INTERNAL));
        if config.internal_lb && asked == Some(false) {
            let _ = events::warning(
                "InternalLoadBalancerEnforced",
                &format!(
                    "{INTERNAL} is false, but the cloud config's internal-lb = true makes \
                     every load balancer internal"
                ),
                None,
            );
        }
        let internal = config.internal_lb || asked.unwrap_or(false);
        let ipv6 = service.ip_families.first() == Some(&IpFamily::Ipv6);
        let source_ranges = source_ranges(service).map_err(|e| {
            let _ = events::warning("UnsupportedLoadBalancerSetting", &e, None);
            cloud_error::other(format!(
                "service {}/{}: {e}",
                service.metadata.namespace, service.metadata.name
            ))
        })?;
        let source_ranges_given = !source_ranges.is_empty();
        let mut wanted = Wanted {
            name: load_balancer_name(cluster, service),
            internal,
            vip_subnet: text("subnet-id", &subnet_id),
            vip_network: text("network-id", &network_id),
            member_subnet: text(
                "member-subnet-id",
                if member_subnet_id.is_empty() {
                    &subnet_id
                } else {
                    &member_subnet_id
                },
            ),
            floating_network: text("floating-network-id", &floating_network_id),
            floating_subnet,
            vip_port: text("port-id", "").trim().to_owned(),
            lb_method: text("lb-method", &config.lb_method),
            proxy,
            monitor,
            listener_settings,
            allowed_cidrs: if source_ranges_given {
                source_ranges
            } else {
                vec![if ipv6 { "::/0" } else { "0.0.0.0/0" }.into()]
            },
            source_ranges_given,
            flavor: text("flavor-id", &config.flavor_id),
            zone: text("availability-zone", &config.availability_zone),
            keep_floating_ip: truthy(ours(service, "keep-floatingip")).unwrap_or(false),
            source_ip_persistence: service.session_affinity == SessionAffinity::ClientIp,
            // The annotation, when present (even empty), replaces the config's.
            node_selector: node_selector(
                ours(service, "node-selector").unwrap_or(&config.node_selector),
            ),
            health_check_node_port: (monitor.is_some()
                && service.external_traffic_policy == TrafficPolicy::Local
                && service.health_check_node_port > 0)
                .then_some(service.health_check_node_port),
            x_forwarded_for,
            tls_container_ref: ours(service, "default-tls-container-ref")
                .unwrap_or(&config.default_tls_container_ref)
                .trim()
                .to_owned(),
            ipv6,
            http_monitors_on_udp: true,
        };
        if config.lb_provider.eq_ignore_ascii_case("ovn") {
            without_ovn_features(&mut wanted);
        }
        Ok(wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_selectors_as_occms_string_to_map() {
        assert_eq!(
            node_selector(" pool=web, zone ,tier=,a=b=c,,=x"),
            [
                ("pool".to_string(), "web".to_string()),
                ("zone".to_string(), String::new()),
                ("tier".to_string(), String::new()),
                ("a".to_string(), "b=c".to_string()),
            ]
        );
        assert!(node_selector("").is_empty());
    }
}
