//! What a Classic Load Balancer is made of, read from the Service as cloud-provider-aws
//! reads it: listeners (`buildListener`, with `ssl-cert`, `ssl-ports` and
//! `backend-protocol`), the health check (`ensureLoadBalancerHealthCheck`) and the
//! attributes (connection draining and idle timeout, cross-zone, access logs). Pure
//! functions of the Service, checked before anything is created.

use super::{ANNOTATION, annotation};
use crate::elb::{Attributes, HealthCheck, Listener};
use wasm_ccm_guest::types::{Protocol, Service, TrafficPolicy};

/// The policy that turns the proxy protocol on for the nodes' ports.
pub const PROXY_PROTOCOL_POLICY: &str = "k8s-proxyprotocol-enabled";

/// Upstream's `getPortSets`: `ssl-ports` as numbers and names; `None` (every port)
/// when absent, empty or `*`.
fn ssl_ports(value: Option<&str>) -> Option<(Vec<i32>, Vec<String>)> {
    let value = value?.trim();
    if value.is_empty() || value == "*" {
        return None;
    }
    let (mut numbers, mut names) = (Vec::new(), Vec::new());
    for item in value.split(',').map(str::trim) {
        match item.parse::<i32>() {
            Ok(n) => numbers.push(n),
            Err(_) => names.push(item.to_ascii_lowercase()),
        }
    }
    Some((numbers, names))
}

/// Whether `ssl-ports` selects the port (by number or name).
pub fn is_ssl_port(service: &Service, port: i32, name: &str) -> bool {
    match ssl_ports(annotation(service, "ssl-ports")) {
        None => true,
        Some((numbers, names)) => {
            numbers.contains(&port) || names.contains(&name.to_ascii_lowercase())
        }
    }
}

/// The listeners: one per port with a node port, TCP only (upstream's `checkProtocol`).
pub fn listeners(service: &Service) -> Result<Vec<Listener>, String> {
    let cert = annotation(service, "ssl-cert").unwrap_or_default().trim();
    let backend = annotation(service, "backend-protocol")
        .unwrap_or_default()
        .trim();
    let mut listeners = Vec::new();
    for port in &service.ports {
        if port.protocol != Protocol::Tcp {
            return Err(format!(
                "Protocol {} not supported by LoadBalancer (Classic Load Balancers serve TCP \
                 only; use {ANNOTATION}type: nlb for UDP)",
                match port.protocol {
                    Protocol::Udp => "UDP",
                    _ => "SCTP",
                }
            ));
        }
        if port.node_port == 0 {
            continue;
        }
        let mut listener = Listener {
            protocol: "tcp".into(),
            port: port.port,
            instance_protocol: "tcp".into(),
            instance_port: port.node_port,
            certificate: String::new(),
        };
        if !cert.is_empty() && is_ssl_port(service, port.port, &port.name) {
            let protocol = match backend {
                "" => "ssl",
                "https" | "http" => "https",
                "ssl" | "tcp" => "ssl",
                other => {
                    return Err(format!(
                        "Invalid backend protocol {other} for {cert} in {ANNOTATION}backend-protocol \
                         (http, https, ssl or tcp)"
                    ));
                }
            };
            listener.protocol = protocol.into();
            listener.instance_protocol = if backend.is_empty() { "tcp" } else { backend }.into();
            listener.certificate = cert.to_owned();
        } else if backend == "http" {
            listener.protocol = "http".into();
            listener.instance_protocol = "http".into();
        }
        listeners.push(listener);
    }
    Ok(listeners)
}

/// The health check: HTTP `/healthz` on the health check node port for
/// `externalTrafficPolicy: Local`, else TCP (SSL with an `https`/`ssl` backend) on the
/// first listener's node port (the cloud config's `shared` probe instead, when set);
/// then the `healthcheck-*` annotations. Defaults 2/6 thresholds, 5 s timeout, 10 s
/// interval.
pub fn health_check(
    service: &Service,
    listeners: &[Listener],
    shared: Option<&(u16, String)>,
) -> Result<HealthCheck, String> {
    let first_port = listeners.first().map_or(0, |l| l.instance_port);
    let backend = annotation(service, "backend-protocol")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let (mut protocol, mut port, mut path) = if service.external_traffic_policy
        == TrafficPolicy::Local
        && service.health_check_node_port != 0
    {
        let port = match annotation(service, "healthcheck-port") {
            Some("traffic-port") => first_port,
            _ => service.health_check_node_port,
        };
        ("HTTP".to_owned(), port, "/healthz".to_owned())
    } else if let Some((port, path)) = shared {
        // The cloud config's shared probe; the annotations still override it (upstream).
        ("HTTP".to_owned(), i32::from(*port), path.clone())
    } else {
        let protocol = if matches!(backend.as_str(), "https" | "ssl") {
            "SSL"
        } else {
            "TCP"
        };
        (protocol.to_owned(), first_port, String::new())
    };
    if let Some(value) = annotation(service, "healthcheck-protocol") {
        // Upper case, as AWS answers it (so an unchanged check is not sent again).
        protocol = value.trim().to_ascii_uppercase();
        if !matches!(protocol.as_str(), "TCP" | "HTTP" | "HTTPS" | "SSL") {
            return Err(format!(
                "unsupported health check protocol {value} in {ANNOTATION}healthcheck-protocol \
                 (TCP, HTTP, HTTPS or SSL)"
            ));
        }
    }
    if let Some(value) = annotation(service, "healthcheck-port")
        && value != "traffic-port"
    {
        port = value.trim().parse().map_err(|_| {
            format!(
                "failed parsing health check annotation value: {ANNOTATION}healthcheck-port={value}"
            )
        })?;
    }
    if matches!(protocol.as_str(), "HTTP" | "HTTPS") {
        if path.is_empty() {
            path = "/".into();
        }
        if let Some(value) = annotation(service, "healthcheck-path").filter(|v| !v.is_empty()) {
            path = value.to_owned();
        }
    } else {
        path.clear();
    }
    let mut hc = HealthCheck {
        target: format!("{protocol}:{port}{path}"),
        healthy_threshold: 2,
        unhealthy_threshold: 6,
        timeout: 5,
        interval: 10,
    };
    for (suffix, field) in [
        ("healthcheck-healthy-threshold", &mut hc.healthy_threshold),
        (
            "healthcheck-unhealthy-threshold",
            &mut hc.unhealthy_threshold,
        ),
        ("healthcheck-timeout", &mut hc.timeout),
        ("healthcheck-interval", &mut hc.interval),
    ] {
        if let Some(value) = annotation(service, suffix) {
            *field = value.trim().parse().map_err(|_| {
                format!(
                    "failed parsing health check annotation value: {ANNOTATION}{suffix}={value}"
                )
            })?;
        }
    }
    let mut errors = Vec::new();
    if hc.healthy_threshold < 2 {
        errors.push(format!(
            "healthy threshold {} is below 2",
            hc.healthy_threshold
        ));
    }
    if hc.unhealthy_threshold < 2 {
        errors.push(format!(
            "unhealthy threshold {} is below 2",
            hc.unhealthy_threshold
        ));
    }
    if hc.interval < 5 {
        errors.push(format!("interval {} is below 5", hc.interval));
    }
    if hc.timeout < 2 {
        errors.push(format!("timeout {} is below 2", hc.timeout));
    }
    if !errors.is_empty() {
        return Err(format!(
            "HealthCheck validation errors: {}",
            errors.join("; ")
        ));
    }
    Ok(hc)
}

/// Upstream's boolean spellings (Go's `strconv.ParseBool`).
fn parse_bool(suffix: &str, value: &str) -> Result<bool, String> {
    super::nlb_options::parse_bool(value)
        .ok_or_else(|| format!("error parsing service annotation: {ANNOTATION}{suffix}={value}"))
}

fn parse_int(suffix: &str, value: &str) -> Result<i32, String> {
    value
        .parse()
        .map_err(|_| format!("error parsing service annotation: {ANNOTATION}{suffix}={value}"))
}

/// The attributes: upstream's defaults (everything off, idle timeout 60 s), then the
/// annotations (empty values ignored).
pub fn attributes(service: &Service) -> Result<Attributes, String> {
    let mut a = Attributes {
        idle_timeout: 60,
        ..Default::default()
    };
    let get = |suffix: &str| annotation(service, suffix).filter(|v| !v.is_empty());
    if let Some(v) = get("access-log-emit-interval") {
        a.access_log_emit_interval = Some(parse_int("access-log-emit-interval", v)?);
    }
    if let Some(v) = get("access-log-enabled") {
        a.access_log_enabled = parse_bool("access-log-enabled", v)?;
    }
    if let Some(v) = get("access-log-s3-bucket-name") {
        a.access_log_bucket = v.to_owned();
    }
    if let Some(v) = get("access-log-s3-bucket-prefix") {
        a.access_log_prefix = v.to_owned();
    }
    if let Some(v) = get("connection-draining-enabled") {
        a.draining_enabled = parse_bool("connection-draining-enabled", v)?;
    }
    if let Some(v) = get("connection-draining-timeout") {
        a.draining_timeout = Some(parse_int("connection-draining-timeout", v)?);
    }
    if let Some(v) = get("connection-idle-timeout") {
        a.idle_timeout = parse_int("connection-idle-timeout", v)?;
    }
    if let Some(v) = get("cross-zone-load-balancing-enabled") {
        a.cross_zone = parse_bool("cross-zone-load-balancing-enabled", v)?;
    }
    Ok(a)
}

/// Whether `proxy-protocol` asks for the proxy protocol (`*`, the only value upstream
/// supports).
pub fn proxy_protocol(service: &Service) -> Result<bool, String> {
    match annotation(service, "proxy-protocol") {
        None | Some("") => Ok(false),
        Some("*") => Ok(true),
        Some(other) => Err(format!(
            "annotation {ANNOTATION}proxy-protocol={other} detected, but the only value \
             supported currently is '*'"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{annotate, port, service};
    use super::*;

    /// Upstream's TestBuildListener table: (port, name, node port, backend protocol,
    /// certificate, ssl ports) → error, or (protocol, instance protocol, certificate).
    #[test]
    fn listeners_as_upstream() {
        type Case<'a> = (
            i32,
            &'a str,
            &'a str,
            &'a str,
            &'a str,
            Option<(&'a str, &'a str, &'a str)>,
        );
        let cases: [Case; 14] = [
            (80, "", "", "", "", Some(("tcp", "tcp", ""))),
            (443, "", "", "cert", "", Some(("ssl", "tcp", "cert"))),
            (443, "", "https", "", "", Some(("tcp", "tcp", ""))),
            (443, "", "bacon", "cert", "", None),
            (443, "", "http=", "=", "", None),
            (
                443,
                "",
                "https",
                "cert",
                "",
                Some(("https", "https", "cert")),
            ),
            (443, "", "http", "cert", "", Some(("https", "http", "cert"))),
            (443, "", "ssl", "cert", "", Some(("ssl", "ssl", "cert"))),
            (443, "", "tcp", "cert", "", Some(("ssl", "tcp", "cert"))),
            (
                1234,
                "",
                "",
                "cert",
                "1234,5678",
                Some(("ssl", "tcp", "cert")),
            ),
            (443, "", "", "cert", "1234,5678", Some(("tcp", "tcp", ""))),
            (
                443,
                "bar",
                "",
                "cert",
                "foo,bar",
                Some(("ssl", "tcp", "cert")),
            ),
            (443, "baz", "", "cert", "foo,bar", Some(("tcp", "tcp", ""))),
            (80, "", "http", "", "", Some(("http", "http", ""))),
        ];
        for (lb_port, name, backend, cert, ssl, want) in cases {
            let mut svc = service("default", "web");
            svc.ports = vec![port(name, lb_port, 31000)];
            for (suffix, value) in [
                ("backend-protocol", backend),
                ("ssl-cert", cert),
                ("ssl-ports", ssl),
            ] {
                if !value.is_empty() {
                    annotate(&mut svc, suffix, value);
                }
            }
            let got = listeners(&svc);
            match want {
                None => assert!(got.is_err(), "{lb_port} {backend} {cert}: {got:?}"),
                Some((protocol, instance, certificate)) => {
                    let l = &got.unwrap()[0];
                    assert_eq!(
                        (
                            l.protocol.as_str(),
                            l.instance_protocol.as_str(),
                            l.certificate.as_str()
                        ),
                        (protocol, instance, certificate),
                        "{lb_port} {name} {backend} {cert} {ssl}"
                    );
                    assert_eq!((l.port, l.instance_port), (lb_port, 31000));
                }
            }
        }
        let mut udp = service("default", "dns");
        udp.ports = vec![port("dns", 53, 31053)];
        udp.ports[0].protocol = Protocol::Udp;
        assert!(
            listeners(&udp)
                .unwrap_err()
                .contains("Protocol UDP not supported")
        );
    }

    /// Upstream's TestEnsureLoadBalancerHealthCheck table (base: TCP, node port 8080).
    #[test]
    fn health_checks_as_upstream() {
        let check = |annotations: &[(&str, &str)]| {
            let mut svc = service("default", "web");
            svc.ports = vec![port("http", 80, 8080)];
            for (k, v) in annotations {
                annotate(&mut svc, k, v);
            }
            let l = listeners(&svc).unwrap();
            health_check(&svc, &l, None)
        };
        let hc = check(&[]).unwrap();
        assert_eq!(hc.target, "TCP:8080");
        assert_eq!(
            (
                hc.healthy_threshold,
                hc.unhealthy_threshold,
                hc.timeout,
                hc.interval
            ),
            (2, 6, 5, 10)
        );
        for suffix in [
            "healthcheck-healthy-threshold",
            "healthcheck-unhealthy-threshold",
            "healthcheck-timeout",
            "healthcheck-interval",
        ] {
            let hc = check(&[(suffix, "7")]).unwrap();
            let values = [
                hc.healthy_threshold,
                hc.unhealthy_threshold,
                hc.timeout,
                hc.interval,
            ];
            assert_eq!(values.iter().filter(|v| **v == 7).count(), 1, "{suffix}");
        }
        assert_eq!(
            check(&[("healthcheck-port", "2122")]).unwrap().target,
            "TCP:2122"
        );
        assert_eq!(
            check(&[("healthcheck-protocol", "HTTP")]).unwrap().target,
            "HTTP:8080/"
        );
        assert_eq!(
            check(&[("healthcheck-protocol", "http")]).unwrap().target,
            "HTTP:8080/"
        );
        assert!(
            check(&[("healthcheck-protocol", "UDP")])
                .unwrap_err()
                .contains("healthcheck-protocol")
        );
        assert_eq!(
            check(&[
                ("healthcheck-protocol", "HTTPS"),
                ("healthcheck-path", "/healthz"),
                ("healthcheck-port", "31224")
            ])
            .unwrap()
            .target,
            "HTTPS:31224/healthz"
        );
        assert_eq!(
            check(&[
                ("healthcheck-protocol", "SSL"),
                ("healthcheck-path", "/x"),
                ("healthcheck-port", "3124")
            ])
            .unwrap()
            .target,
            "SSL:3124"
        );
        assert_eq!(
            check(&[("healthcheck-port", "traffic-port")])
                .unwrap()
                .target,
            "TCP:8080"
        );
        assert!(
            check(&[("healthcheck-timeout", "1")])
                .unwrap_err()
                .contains("validation")
        );
        assert!(
            check(&[("healthcheck-timeout", "3.3")])
                .unwrap_err()
                .contains("failed parsing")
        );
        // The cloud config's shared probe replaces the node port; annotations still win.
        let shared = (10256, "/healthz".to_owned());
        let mut svc = service("default", "web");
        svc.ports = vec![port("http", 80, 8080)];
        let l = listeners(&svc).unwrap();
        assert_eq!(
            health_check(&svc, &l, Some(&shared)).unwrap().target,
            "HTTP:10256/healthz"
        );
        annotate(&mut svc, "healthcheck-port", "9000");
        assert_eq!(
            health_check(&svc, &l, Some(&shared)).unwrap().target,
            "HTTP:9000/healthz"
        );
        let mut local = service("default", "web");
        local.ports = vec![port("http", 80, 8080)];
        local.external_traffic_policy = TrafficPolicy::Local;
        local.health_check_node_port = 32000;
        let l = listeners(&local).unwrap();
        assert_eq!(
            health_check(&local, &l, None).unwrap().target,
            "HTTP:32000/healthz"
        );
    }

    #[test]
    fn attributes_and_proxy_protocol_as_upstream() {
        let mut svc = service("default", "web");
        let a = attributes(&svc).unwrap();
        assert_eq!(
            (
                a.idle_timeout,
                a.cross_zone,
                a.draining_enabled,
                a.access_log_enabled
            ),
            (60, false, false, false)
        );
        annotate(&mut svc, "connection-draining-enabled", "T");
        annotate(&mut svc, "connection-draining-timeout", "30");
        annotate(&mut svc, "connection-idle-timeout", "");
        annotate(&mut svc, "cross-zone-load-balancing-enabled", "1");
        let a = attributes(&svc).unwrap();
        assert_eq!(
            (
                a.draining_enabled,
                a.draining_timeout,
                a.idle_timeout,
                a.cross_zone
            ),
            (true, Some(30), 60, true)
        );
        annotate(&mut svc, "access-log-enabled", "yes");
        assert!(
            attributes(&svc)
                .unwrap_err()
                .contains("access-log-enabled=yes")
        );
        assert!(!proxy_protocol(&svc).unwrap());
        annotate(&mut svc, "proxy-protocol", "*");
        assert!(proxy_protocol(&svc).unwrap());
        let mut other = service("default", "web");
        annotate(&mut other, "proxy-protocol", "80");
        assert!(proxy_protocol(&other).is_err());
    }
}
