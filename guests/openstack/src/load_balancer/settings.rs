//! What a Service and the cloud config ask of its load balancer: occm's annotations,
//! read into [`Wanted`].

use wasm_ccm_guest::types::{CloudError, IpFamily, Service, SessionAffinity, TrafficPolicy};
use wasm_ccm_guest::{cloud_error, events};

use super::floating_subnet::FloatingSubnet;
use super::load_balancer_name;
use super::networks::networks;
use crate::OpenStack;

/// The annotations' prefix.
pub(super) const PREFIX: &str = "loadbalancer.openstack.org/";
/// The legacy source ranges annotation (before `spec.loadBalancerSourceRanges`).
const SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
/// occm's (and the in-tree provider's) internal load balancer annotation.
const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";
/// The Warning's reason for a boolean annotation occm would ignore.
const ANNOTATION_IGNORED: &str = "LoadBalancerAnnotationIgnored";

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

/// Boolean annotation `key` (in full) as occm's `getBoolFromServiceAnnotation` reads
/// it: exactly `true` or `false`, else (`True`, `yes`, `1`, ` true`) ignored and the
/// default applies (occm logs it; here a Warning names it). Absent or ignored: `None`.
pub(super) fn boolean(service: &Service, key: &str) -> Option<bool> {
    match annotation(service, key)? {
        "true" => Some(true),
        "false" => Some(false),
        other => {
            let _ = events::warning(
                ANNOTATION_IGNORED,
                &format!(
                    "annotation {key} `{other}` is ignored and the default applies: occm \
                     reads only \"true\" and \"false\""
                ),
                None,
            );
            None
        }
    }
}

/// The source ranges as upstream's `GetLoadBalancerSourceRanges` reads them:
/// `spec.loadBalancerSourceRanges`, else the legacy annotation (comma-separated);
/// every entry a CIDR. Empty: open to all.
pub(super) fn source_ranges(service: &Service) -> Result<Vec<String>, String> {
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
/// With `manage-security-groups`, source ranges are the security group's rules instead
/// (occm's `checkService`), so they are not ignored and no Warning says they are.
fn without_ovn_features(wanted: &mut Wanted, manage_security_groups: bool) {
    wanted
        .listener_settings
        .retain(|(field, _)| !field.starts_with("timeout_"));
    wanted.flavor.clear();
    wanted.health_check_node_port = None;
    wanted.allowed_cidrs.clear();
    if wanted.source_ranges_given && !manage_security_groups {
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
        let flag = |name: &str| boolean(service, &format!("{PREFIX}{name}"));
        let x_forwarded_for = flag("x-forwarded-for").unwrap_or(false);
        if x_forwarded_for && proxy.is_some() {
            return refuse(format!(
                "annotation {PREFIX}x-forwarded-for and {PREFIX}proxy-protocol cannot be used \
                 together"
            ));
        }
        let monitor = flag("enable-health-monitor")
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
        let asked = boolean(service, INTERNAL);
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
        // occm's checkService order (networks.rs): the class before the annotations
        // for the floating network and subnet, and an external Service's VIP.
        let nets = networks(config, class, service, internal);
        if let Err(e) = nets.floating_subnet.name_matcher() {
            return refuse(e);
        }
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
            vip_subnet: nets.vip_subnet,
            vip_network: nets.vip_network,
            member_subnet: nets.member_subnet,
            floating_network: nets.floating_network,
            floating_subnet: nets.floating_subnet,
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
            keep_floating_ip: flag("keep-floatingip").unwrap_or(false),
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
        // occm compares the cloud config's `lb-provider` (default `amphora`) with "ovn".
        if config.lb_provider == "ovn" {
            without_ovn_features(&mut wanted, config.manage_security_groups);
        }
        Ok(wanted)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Service `default/web` with `annotations` (the load balancer tests' too).
    pub(in crate::load_balancer) fn service(annotations: &[(&str, &str)]) -> Service {
        let mut service = wasm_ccm_guest::testing::service("default", "web");
        service.metadata.uid = "1234-5678".into();
        service.metadata.annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        service
    }

    /// The provider with `extra` in the cloud config's `[LoadBalancer]`.
    fn provider(extra: &str) -> OpenStack {
        let text = format!("[Global]\nauth-url = https://k/v3\n[LoadBalancer]\n{extra}");
        OpenStack {
            config: crate::config::Config::parse(&text).unwrap(),
        }
    }

    /// What the Service asks of `provider(extra)`.
    fn wanted(extra: &str, annotations: &[(&str, &str)]) -> Wanted {
        provider(extra)
            .wanted("kubernetes", &service(annotations))
            .unwrap()
    }

    /// The Warnings recorded on this thread since the last call: (reason, message).
    fn warnings() -> Vec<(String, String)> {
        events::recorded()
            .into_iter()
            .filter(|(kind, _, _)| matches!(kind, events::EventType::Warning))
            .map(|(_, reason, message)| (reason, message))
            .collect()
    }

    #[test]
    fn booleans_as_occms_get_bool_from_service_annotation() {
        const KEY: &str = "loadbalancer.openstack.org/keep-floatingip";
        assert_eq!(boolean(&service(&[]), KEY), None);
        assert_eq!(boolean(&service(&[(KEY, "true")]), KEY), Some(true));
        assert_eq!(boolean(&service(&[(KEY, "false")]), KEY), Some(false));
        assert!(warnings().is_empty());
        // occm's switch takes these two exactly; anything else is its default.
        for value in ["True", "TRUE", "yes", "1", "on", " true", "false ", ""] {
            assert_eq!(boolean(&service(&[(KEY, value)]), KEY), None, "{value:?}");
            let warned = warnings();
            assert_eq!(warned.len(), 1, "{value:?}: {warned:?}");
            assert_eq!(warned[0].0, ANNOTATION_IGNORED);
            assert!(
                warned[0].1.contains(&format!("{KEY} `{value}`")),
                "{}",
                warned[0].1
            );
        }
    }

    #[test]
    fn the_boolean_annotations_are_read_as_occm() {
        // `True` is not occm's `true`: the Service stays external, with a Warning.
        assert!(!wanted("", &[(INTERNAL, "True")]).internal);
        assert_eq!(warnings().len(), 1);
        assert!(wanted("", &[(INTERNAL, "true")]).internal);
        assert!(warnings().is_empty());
        // The default is the cloud config's `internal-lb`, which nothing undoes.
        assert!(wanted("internal-lb = true\n", &[(INTERNAL, "True")]).internal);
        assert_eq!(warnings()[0].0, ANNOTATION_IGNORED);
        let ignored = wanted(
            "create-monitor = true\n",
            &[
                ("loadbalancer.openstack.org/enable-health-monitor", "False"),
                ("loadbalancer.openstack.org/x-forwarded-for", "yes"),
                ("loadbalancer.openstack.org/keep-floatingip", "1"),
            ],
        );
        assert!(ignored.monitor.is_some());
        assert!(!ignored.x_forwarded_for && !ignored.keep_floating_ip);
        assert_eq!(warnings().len(), 3);
        let read = wanted(
            "create-monitor = true\n",
            &[
                ("loadbalancer.openstack.org/enable-health-monitor", "false"),
                ("loadbalancer.openstack.org/x-forwarded-for", "true"),
                ("loadbalancer.openstack.org/keep-floatingip", "true"),
            ],
        );
        assert!(read.monitor.is_none());
        assert!(read.x_forwarded_for && read.keep_floating_ip);
        assert!(warnings().is_empty());
    }

    #[test]
    fn the_octavia_provider_is_amphora_unless_set_as_occm() {
        assert_eq!(provider("").config.load_balancer.lb_provider, "amphora");
        // Set empty, occm sends none: Octavia's default provider.
        assert_eq!(
            provider("lb-provider =\n").config.load_balancer.lb_provider,
            ""
        );
        let timeouts = |extra: &str| {
            wanted(extra, &[])
                .listener_settings
                .iter()
                .filter(|(field, _)| field.starts_with("timeout_"))
                .count()
        };
        assert_eq!(timeouts(""), 4);
        assert_eq!(timeouts("lb-provider = ovn\n"), 0);
        // occm compares the name with `ovn` as written.
        assert_eq!(timeouts("lb-provider = OVN\n"), 4);
    }

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
