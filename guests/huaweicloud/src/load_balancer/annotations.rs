//! Every annotation upstream reads for a shared ELB, read up front into [`Settings`]
//! (before anything is made or changed), falling back to the cloud config's load
//! balancer options (upstream's `loadbalancer-config` `loadBalancerOption`) as
//! upstream's `getStringFromSvsAnnotation` / `getBoolFromSvsAnnotation` /
//! `getIntFromSvsAnnotation` do.
//!
//! Upstream logs a value it cannot read and goes on with the default; here such a value
//! is an error naming the annotation (or the option), so a typo is seen rather than
//! silently replaced.

use wasm_ccm_guest::cloud_error;
use wasm_ccm_guest::types::{CloudError, Service};

use crate::config::Config;

mod options;

pub(super) use options::{EipOptions, HealthCheck, Persistence};
use options::{eip_options, health_check, persistence};

/// Upstream's `ElbClass`: which kind of load balancer serves the Service.
pub(super) const CLASS: &str = "kubernetes.io/elb.class";
/// Upstream's `ElbID`: an existing ELB to use (adopted: never deleted here).
pub(super) const ID: &str = "kubernetes.io/elb.id";
/// Upstream's `ElbSubnetID`.
pub(super) const SUBNET_ID: &str = "kubernetes.io/elb.subnet-id";
/// Upstream's `ElbEipID`.
pub(super) const EIP_ID: &str = "kubernetes.io/elb.eip-id";
/// Upstream's `ELBKeepEip`.
pub(super) const KEEP_EIP: &str = "kubernetes.io/elb.keep-eip";
/// Upstream's `AutoCreateEipOptions`.
pub(super) const EIP_AUTO_CREATE: &str = "kubernetes.io/elb.eip-auto-create-option";
/// Upstream's `ElbAlgorithm`.
pub(super) const ALGORITHM: &str = "kubernetes.io/elb.lb-algorithm";
/// Upstream's `ElbSessionAffinityFlag`.
pub(super) const SESSION_FLAG: &str = "kubernetes.io/elb.session-affinity-flag";
/// Upstream's `ElbSessionAffinityOption`.
pub(super) const SESSION_OPTION: &str = "kubernetes.io/elb.session-affinity-option";
/// Upstream's `ElbHealthCheckFlag`.
pub(super) const HEALTH_FLAG: &str = "kubernetes.io/elb.health-check-flag";
/// Upstream's `ElbHealthCheckOptions`.
pub(super) const HEALTH_OPTION: &str = "kubernetes.io/elb.health-check-option";
/// Upstream's `ElbXForwardedHost`.
pub(super) const X_FORWARDED_HOST: &str = "kubernetes.io/elb.x-forwarded-host";
/// Upstream's `DefaultTLSContainerRef`.
pub(super) const TLS_CONTAINER: &str = "kubernetes.io/elb.default-tls-container-ref";
/// Upstream's `ElbIdleTimeout`.
pub(super) const IDLE_TIMEOUT: &str = "kubernetes.io/elb.idle-timeout";
/// Upstream's `ElbRequestTimeout`.
pub(super) const REQUEST_TIMEOUT: &str = "kubernetes.io/elb.request-timeout";
/// Upstream's `ElbResponseTimeout`.
pub(super) const RESPONSE_TIMEOUT: &str = "kubernetes.io/elb.response-timeout";
/// Upstream's `ElbEnableTransparentClientIP` (declared in `dedicatedloadbalancer.go`,
/// read by the shared listeners too).
pub(super) const TRANSPARENT_CLIENT_IP: &str = "kubernetes.io/elb.enable-transparent-client-ip";
/// Documented by upstream's usage guide for shared ELBs (no code of upstream reads it).
pub(super) const CONNECTION_LIMIT: &str = "kubernetes.io/elb.connection-limit";
/// Every annotation read here (the README's table, `crate::settings`, is these).
#[cfg(test)]
pub(crate) const READ: [&str; 18] = [
    CLASS,
    ID,
    SUBNET_ID,
    EIP_ID,
    KEEP_EIP,
    EIP_AUTO_CREATE,
    ALGORITHM,
    SESSION_FLAG,
    SESSION_OPTION,
    HEALTH_FLAG,
    HEALTH_OPTION,
    X_FORWARDED_HOST,
    TLS_CONTAINER,
    IDLE_TIMEOUT,
    REQUEST_TIMEOUT,
    RESPONSE_TIMEOUT,
    TRANSPARENT_CLIENT_IP,
    CONNECTION_LIMIT,
];
/// Upstream's `LoadBalancerClass` (`spec.loadBalancerClass`).
pub(super) const LOAD_BALANCER_CLASS: &str = "huaweicloud.com/elb";

/// The Service's annotation `key`, empty counting as absent.
pub(super) fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// `kubernetes.io/elb.class`, as upstream's `getLoadBalancerVersion` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Class<'a> {
    /// `shared`: served here.
    Shared,
    /// A class upstream serves that this provider does not (yet): its value and what
    /// it is.
    Refused(&'static str, &'static str),
    /// Absent or no class upstream knows.
    Unknown(&'a str),
}

pub(super) fn class(service: &Service) -> Class<'_> {
    match annotation(service, CLASS).unwrap_or("") {
        "shared" => Class::Shared,
        "dedicated" => Class::Refused("dedicated", "dedicated load balancers (ELB v3)"),
        "elasticity" => Class::Refused("elasticity", "classic load balancers (ELB v1)"),
        "dnat" => Class::Refused("dnat", "DNAT rules of a NAT gateway"),
        other => Class::Unknown(other),
    }
}

/// The cloud config's load balancer options this module reads: the one place that
/// knows the config's field names.
#[derive(Debug, Clone)]
pub(super) struct Defaults {
    /// `[Vpc] subnet-id`.
    pub subnet_id: String,
    pub business_name: String,
    pub load_balancer_class: String,
    pub lb_algorithm: String,
    pub keep_eip: bool,
    pub session_flag: String,
    pub session: Persistence,
    pub health_flag: String,
    pub health: HealthCheck,
    pub transparent_client_ip: bool,
    pub idle_timeout: i64,
    pub request_timeout: i64,
    pub response_timeout: i64,
}

impl Defaults {
    pub(super) fn from_config(config: &Config) -> Self {
        let lb = &config.load_balancer;
        let session = &lb.session_affinity_option;
        let health = &lb.health_check_option;
        Defaults {
            subnet_id: config.vpc.subnet_id.clone(),
            business_name: lb.business_name.clone(),
            load_balancer_class: lb.load_balancer_class.clone(),
            lb_algorithm: lb.lb_algorithm.clone(),
            keep_eip: lb.keep_eip,
            session_flag: lb.session_affinity_flag.clone(),
            session: Persistence {
                kind: session.kind.clone(),
                cookie_name: session.cookie_name.clone().filter(|c| !c.is_empty()),
                timeout: session.persistence_timeout.map(i64::from),
            },
            health_flag: lb.health_check_flag.clone(),
            health: HealthCheck {
                enable: health.enable,
                delay: i64::from(health.delay),
                timeout: i64::from(health.timeout),
                max_retries: i64::from(health.max_retries),
            },
            transparent_client_ip: lb.enable_transparent_client_ip,
            idle_timeout: i64::from(lb.idle_timeout),
            request_timeout: i64::from(lb.request_timeout),
            response_timeout: i64::from(lb.response_timeout),
        }
    }
}

/// What the Service asks of its shared ELB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    pub elb_id: Option<String>,
    /// The annotation, else `[Vpc] subnet-id`; `None` when both are empty.
    pub subnet_id: Option<String>,
    pub eip_id: Option<String>,
    pub eip_auto_create: Option<EipOptions>,
    pub keep_eip: bool,
    pub lb_algorithm: String,
    /// `None`: session affinity off.
    pub persistence: Option<Persistence>,
    pub health: HealthCheck,
    pub x_forwarded_host: bool,
    pub tls_container: Option<String>,
    pub transparent_client_ip: bool,
    /// Seconds; 0 leaves the API's default (upstream sends none then).
    pub idle_timeout: i64,
    pub request_timeout: i64,
    pub response_timeout: i64,
    pub connection_limit: Option<i64>,
}

/// Where a value came from, for the error about it.
#[derive(Debug, Clone, Copy)]
enum Origin {
    Annotation(&'static str),
    Config(&'static str),
}

fn invalid(service: &Service, origin: Origin, why: impl std::fmt::Display) -> CloudError {
    let source = match origin {
        Origin::Annotation(key) => format!("annotation {key}"),
        Origin::Config(option) => format!("load balancer option {option}"),
    };
    cloud_error::other(format!(
        "service {}/{}: {source}: {why}",
        service.metadata.namespace, service.metadata.name
    ))
}

/// The annotation, else the option's value; and where it came from.
fn pick<'a>(
    service: &'a Service,
    key: &'static str,
    default: &'a str,
    option: &'static str,
) -> (&'a str, Origin) {
    match annotation(service, key) {
        Some(value) => (value, Origin::Annotation(key)),
        None => (default, Origin::Config(option)),
    }
}

/// `getBoolFromSvsAnnotation`'s values: exactly `true` or `false`.
fn boolean(service: &Service, key: &'static str, default: bool) -> Result<bool, CloudError> {
    match annotation(service, key) {
        None => Ok(default),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(invalid(
            service,
            Origin::Annotation(key),
            format!("`{other}` is neither \"true\" nor \"false\""),
        )),
    }
}

/// `getIntFromSvsAnnotation`, within `range` (0 always allowed when `zero_unset`).
fn integer(
    service: &Service,
    key: &'static str,
    (default, option): (i64, &'static str),
    range: std::ops::RangeInclusive<i64>,
    zero_unset: bool,
) -> Result<i64, CloudError> {
    let (value, origin) = match annotation(service, key) {
        Some(text) => match text.trim().parse::<i64>() {
            Ok(value) => (value, Origin::Annotation(key)),
            Err(_) => {
                return Err(invalid(
                    service,
                    Origin::Annotation(key),
                    format!("`{text}` is not an integer"),
                ));
            }
        },
        None => (default, Origin::Config(option)),
    };
    if (zero_unset && value == 0) || range.contains(&value) {
        Ok(value)
    } else {
        Err(invalid(
            service,
            origin,
            format!(
                "{value} is out of range {}..={}",
                range.start(),
                range.end()
            ),
        ))
    }
}

/// Reads every annotation of a shared ELB (see the module docs).
pub(super) fn parse(service: &Service, defaults: &Defaults) -> Result<Settings, CloudError> {
    let owned = |key: &str| annotation(service, key).map(str::to_owned);
    let (algorithm, origin) = pick(service, ALGORITHM, &defaults.lb_algorithm, "lb-algorithm");
    // Upstream sends an empty algorithm when neither sets one (the API refuses it):
    // here the API's usual one.
    let lb_algorithm = match algorithm {
        "" => "ROUND_ROBIN".to_owned(),
        "ROUND_ROBIN" | "LEAST_CONNECTIONS" | "SOURCE_IP" => algorithm.to_owned(),
        other => {
            return Err(invalid(
                service,
                origin,
                format!("`{other}` is not ROUND_ROBIN, LEAST_CONNECTIONS or SOURCE_IP"),
            ));
        }
    };
    Ok(Settings {
        elb_id: owned(ID),
        subnet_id: owned(SUBNET_ID)
            .or_else(|| Some(defaults.subnet_id.clone()).filter(|s| !s.is_empty())),
        eip_id: owned(EIP_ID),
        eip_auto_create: eip_options(service)?,
        keep_eip: boolean(service, KEEP_EIP, defaults.keep_eip)?,
        lb_algorithm,
        persistence: persistence(service, defaults)?,
        health: health_check(service, defaults)?,
        x_forwarded_host: boolean(service, X_FORWARDED_HOST, false)?,
        tls_container: owned(TLS_CONTAINER),
        transparent_client_ip: boolean(
            service,
            TRANSPARENT_CLIENT_IP,
            defaults.transparent_client_ip,
        )?,
        idle_timeout: integer(
            service,
            IDLE_TIMEOUT,
            (defaults.idle_timeout, "idle-timeout"),
            0..=4000,
            true,
        )?,
        request_timeout: integer(
            service,
            REQUEST_TIMEOUT,
            (defaults.request_timeout, "request-timeout"),
            1..=300,
            true,
        )?,
        response_timeout: integer(
            service,
            RESPONSE_TIMEOUT,
            (defaults.response_timeout, "response-timeout"),
            1..=300,
            true,
        )?,
        connection_limit: match annotation(service, CONNECTION_LIMIT) {
            None => None,
            Some(_) => Some(integer(
                service,
                CONNECTION_LIMIT,
                (-1, "connection-limit"),
                -1..=i64::from(i32::MAX),
                false,
            )?),
        },
    })
}

/// What a deletion reads: the Service's settings; or, when an annotation a deletion
/// does not need no longer reads, only what it needs: the ELB and EIP named, whether to
/// keep EIPs (strictly: a typo there stops the deletion rather than releasing an EIP
/// meant to be kept), and what gives the listeners their protocol.
pub(super) fn for_deletion(service: &Service, defaults: &Defaults) -> Result<Settings, CloudError> {
    if let Ok(settings) = parse(service, defaults) {
        return Ok(settings);
    }
    let owned = |key: &str| annotation(service, key).map(str::to_owned);
    Ok(Settings {
        elb_id: owned(ID),
        subnet_id: None,
        eip_id: owned(EIP_ID),
        eip_auto_create: None,
        keep_eip: boolean(service, KEEP_EIP, defaults.keep_eip)?,
        lb_algorithm: String::new(),
        persistence: None,
        health: defaults.health.clone(),
        x_forwarded_host: annotation(service, X_FORWARDED_HOST) == Some("true"),
        tls_container: owned(TLS_CONTAINER),
        transparent_client_ip: false,
        idle_timeout: 0,
        request_timeout: 0,
        response_timeout: 0,
        connection_limit: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{defaults, message, web};
    use super::{Persistence, parse};

    #[test]
    fn annotations_default_to_the_config_options() {
        let settings = parse(&web(&[]), &defaults()).unwrap();
        assert_eq!(settings.lb_algorithm, "ROUND_ROBIN");
        assert_eq!(settings.subnet_id.as_deref(), Some("vpc-subnet-1"));
        assert!(settings.health.enable, "upstream: an empty flag is on");
        assert_eq!(
            (
                settings.health.delay,
                settings.health.timeout,
                settings.health.max_retries
            ),
            (5, 3, 3)
        );
        assert_eq!(settings.persistence, None);
        assert!(
            !settings.keep_eip && !settings.x_forwarded_host && !settings.transparent_client_ip
        );
        assert_eq!(settings.elb_id, None);
        assert_eq!(settings.eip_auto_create, None);
    }

    #[test]
    fn json_annotations_overlay_the_config_with_keys_of_any_case() {
        let settings = parse(
            &web(&[
                ("kubernetes.io/elb.session-affinity-flag", "on"),
                (
                    "kubernetes.io/elb.session-affinity-option",
                    r#"{"Type": "SOURCE_IP", "persistence_timeout": 15}"#,
                ),
                ("kubernetes.io/elb.health-check-option", r#"{"delay": 10}"#),
                (
                    "kubernetes.io/elb.eip-auto-create-option",
                    r#"{"ip_type": "5_bgp", "bandwidth_size": 5, "share_type": "PER"}"#,
                ),
                ("kubernetes.io/elb.subnet-id", "annotated-subnet"),
            ]),
            &defaults(),
        )
        .unwrap();
        assert_eq!(
            settings.persistence,
            Some(Persistence {
                kind: "SOURCE_IP".into(),
                cookie_name: None,
                timeout: Some(15)
            })
        );
        assert_eq!((settings.health.delay, settings.health.timeout), (10, 3));
        let eip = settings.eip_auto_create.unwrap();
        assert_eq!(eip.charge_mode, "traffic", "upstream's default");
        assert_eq!((eip.bandwidth_size, eip.ip_type.as_str()), (5, "5_bgp"));
        assert_eq!(settings.subnet_id.as_deref(), Some("annotated-subnet"));
        let off = parse(
            &web(&[("kubernetes.io/elb.health-check-flag", "off")]),
            &defaults(),
        )
        .unwrap();
        assert!(!off.health.enable);
    }

    #[test]
    fn invalid_annotations_are_errors_naming_them() {
        for (key, value) in [
            ("kubernetes.io/elb.keep-eip", "yes"),
            ("kubernetes.io/elb.lb-algorithm", "RANDOM"),
            ("kubernetes.io/elb.health-check-flag", "maybe"),
            ("kubernetes.io/elb.health-check-option", r#"{"delay": 99}"#),
            ("kubernetes.io/elb.health-check-option", r#"{"dealy": 9}"#),
            (
                "kubernetes.io/elb.eip-auto-create-option",
                r#"{"share_type": "PER"}"#,
            ),
            (
                "kubernetes.io/elb.eip-auto-create-option",
                r#"{"share_type": "WHOLE"}"#,
            ),
            ("kubernetes.io/elb.eip-auto-create-option", "not json"),
            ("kubernetes.io/elb.idle-timeout", "abc"),
            ("kubernetes.io/elb.request-timeout", "301"),
            ("kubernetes.io/elb.connection-limit", "-2"),
            ("kubernetes.io/elb.x-forwarded-host", "True"),
        ] {
            let error = parse(&web(&[(key, value)]), &defaults()).unwrap_err();
            let text = message(error);
            assert!(
                text.contains(&format!("annotation {key}")),
                "{key}={value}: {text}"
            );
            assert!(text.starts_with("service default/web: "), "{text}");
        }
        // Session affinity on without a type (neither the annotation nor the config).
        let error = parse(
            &web(&[("kubernetes.io/elb.session-affinity-flag", "on")]),
            &defaults(),
        )
        .unwrap_err();
        assert!(message(error).contains("session-affinity-option"));
    }
}
