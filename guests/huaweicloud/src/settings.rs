//! Every setting of the cloud config (`config.rs`) and every Service annotation
//! the load balancer reads, with what this provider does with each. The tables in
//! `guests/huaweicloud/README.md` ("Settings", "Annotations") are these lists; the tests
//! below keep the two equal, check the cloud config parser against [`SETTINGS`], and
//! check that [`ANNOTATIONS`] names exactly the annotation constants of
//! `load_balancer/annotations.rs`.

/// What this provider does with a cloud config setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Read and used as cloud-provider-huaweicloud uses it.
    Served,
    /// Refused: an error at start naming it. `access-key` and `secret-key` are the
    /// keys, which only the host holds (the policy's `huaweicloud` rule reads them from
    /// the credentials Secret); the error says to put them there.
    Refused,
    /// Accepted (its value checked), with no effect on this provider.
    NotUsed,
    /// This provider's own, not upstream's.
    Extension,
}

impl Status {
    /// The word in the README table.
    pub fn word(self) -> &'static str {
        match self {
            Status::Served => "served",
            Status::Refused => "refused",
            Status::NotUsed => "not used",
            Status::Extension => "extension",
        }
    }
}

/// (section, key, a value that exercises it, status), in the parser's order.
pub const SETTINGS: [(&str, &str, &str, Status); 33] = [
    ("Global", "cloud", "example.com", Status::Served),
    ("Global", "region", "cn-north-4", Status::Served),
    ("Global", "project-id", "abc123", Status::Served),
    (
        "Global",
        "auth-url",
        "https://iam.example.com/v3",
        Status::NotUsed,
    ),
    ("Global", "access-key", "AKEXAMPLE0123", Status::Refused),
    ("Global", "secret-key", "SKEXAMPLE0123", Status::Refused),
    ("Vpc", "id", "vpc-1", Status::Served),
    ("Vpc", "subnet-id", "subnet-1", Status::Served),
    ("Vpc", "security-group-id", "sg-1", Status::NotUsed),
    (
        "LoadBalancer",
        "lb-algorithm",
        "LEAST_CONNECTIONS",
        Status::Served,
    ),
    ("LoadBalancer", "lb-provider", "vlb", Status::NotUsed),
    ("LoadBalancer", "keep-eip", "true", Status::Served),
    ("LoadBalancer", "enable-cross-vpc", "true", Status::NotUsed),
    ("LoadBalancer", "l4-flavor-id", "fl4", Status::NotUsed),
    ("LoadBalancer", "l7-flavor-id", "fl7", Status::NotUsed),
    (
        "LoadBalancer",
        "session-affinity-flag",
        "on",
        Status::Served,
    ),
    (
        "LoadBalancer",
        "session-affinity-option",
        r#"{"type": "SOURCE_IP", "persistence_timeout": 15}"#,
        Status::Served,
    ),
    (
        "LoadBalancer",
        "enable-transparent-client-ip",
        "true",
        Status::Served,
    ),
    ("LoadBalancer", "idle-timeout", "60", Status::Served),
    ("LoadBalancer", "request-timeout", "30", Status::Served),
    ("LoadBalancer", "response-timeout", "30", Status::Served),
    ("LoadBalancer", "health-check-flag", "off", Status::Served),
    (
        "LoadBalancer",
        "health-check-option",
        r#"{"delay": 10, "timeout": 5}"#,
        Status::Served,
    ),
    (
        "LoadBalancer",
        "disable-create-security-group",
        "true",
        Status::NotUsed,
    ),
    (
        "LoadBalancer",
        "loadbalancer-class",
        "huaweicloud.com/elb",
        Status::Served,
    ),
    ("LoadBalancer", "business-name", "shop", Status::Served),
    ("LoadBalancer", "primary-nic", "force", Status::NotUsed),
    (
        "Networking",
        "public-network-name",
        "vpc-public",
        Status::Served,
    ),
    (
        "Networking",
        "internal-network-name",
        "vpc-1",
        Status::Served,
    ),
    ("Metadata", "search-order", "configDrive", Status::NotUsed),
    (
        "Endpoints",
        "ecs",
        "https://ecs.example.internal",
        Status::Extension,
    ),
    (
        "Endpoints",
        "elb",
        "https://elb.example.internal:8443",
        Status::Extension,
    ),
    (
        "Endpoints",
        "vpc",
        "http://127.0.0.1:8080/vpc",
        Status::Extension,
    ),
];

/// What this provider does with a Service annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnotationStatus {
    /// Read and served (an invalid value is an error naming the annotation).
    Served,
    /// Refused: the Service's sync fails naming it, with a Warning.
    Refused,
}

impl AnnotationStatus {
    /// The word in the README table.
    pub fn word(self) -> &'static str {
        match self {
            AnnotationStatus::Served => "served",
            AnnotationStatus::Refused => "refused",
        }
    }
}

/// (annotation, or `annotation: value` where the value decides, status, default as the
/// README writes it).
pub const ANNOTATIONS: [(&str, AnnotationStatus, &str); 21] = [
    (
        "kubernetes.io/elb.class: shared",
        AnnotationStatus::Served,
        "none: required",
    ),
    (
        "kubernetes.io/elb.class: dedicated",
        AnnotationStatus::Refused,
        "",
    ),
    (
        "kubernetes.io/elb.class: elasticity",
        AnnotationStatus::Refused,
        "",
    ),
    (
        "kubernetes.io/elb.class: dnat",
        AnnotationStatus::Refused,
        "",
    ),
    (
        "kubernetes.io/elb.id",
        AnnotationStatus::Served,
        "none: an ELB is made",
    ),
    (
        "kubernetes.io/elb.subnet-id",
        AnnotationStatus::Served,
        "`[Vpc] subnet-id`",
    ),
    ("kubernetes.io/elb.eip-id", AnnotationStatus::Served, "none"),
    (
        "kubernetes.io/elb.eip-auto-create-option",
        AnnotationStatus::Served,
        "none: no EIP",
    ),
    (
        "kubernetes.io/elb.keep-eip",
        AnnotationStatus::Served,
        "`[LoadBalancer] keep-eip` (false)",
    ),
    (
        "kubernetes.io/elb.lb-algorithm",
        AnnotationStatus::Served,
        "`[LoadBalancer] lb-algorithm`, else `ROUND_ROBIN`",
    ),
    (
        "kubernetes.io/elb.session-affinity-flag",
        AnnotationStatus::Served,
        "`[LoadBalancer] session-affinity-flag` (off)",
    ),
    (
        "kubernetes.io/elb.session-affinity-option",
        AnnotationStatus::Served,
        "`[LoadBalancer] session-affinity-option`",
    ),
    (
        "kubernetes.io/elb.health-check-flag",
        AnnotationStatus::Served,
        "`[LoadBalancer] health-check-flag` (on)",
    ),
    (
        "kubernetes.io/elb.health-check-option",
        AnnotationStatus::Served,
        "`[LoadBalancer] health-check-option` (delay 5, timeout 3, max_retries 3)",
    ),
    (
        "kubernetes.io/elb.x-forwarded-host",
        AnnotationStatus::Served,
        "false",
    ),
    (
        "kubernetes.io/elb.default-tls-container-ref",
        AnnotationStatus::Served,
        "none",
    ),
    (
        "kubernetes.io/elb.idle-timeout",
        AnnotationStatus::Served,
        "`[LoadBalancer] idle-timeout` (0: the API's)",
    ),
    (
        "kubernetes.io/elb.request-timeout",
        AnnotationStatus::Served,
        "`[LoadBalancer] request-timeout` (0: the API's)",
    ),
    (
        "kubernetes.io/elb.response-timeout",
        AnnotationStatus::Served,
        "`[LoadBalancer] response-timeout` (0: the API's)",
    ),
    (
        "kubernetes.io/elb.enable-transparent-client-ip",
        AnnotationStatus::Served,
        "`[LoadBalancer] enable-transparent-client-ip` (false)",
    ),
    (
        "kubernetes.io/elb.connection-limit",
        AnnotationStatus::Served,
        "none: left as it is",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Service};

    /// The `[Global]` every cloud config needs (config.rs: region and project-id are
    /// required).
    const GLOBAL: [(&str, &str); 2] = [("region", "ap-southeast-1"), ("project-id", "p0123")];

    /// The minimal cloud config with `key = value` in `section` (a required `[Global]`
    /// key replaced rather than repeated).
    fn with(section: &str, key: &str, value: &str) -> String {
        let mut text = String::from("[Global]\n");
        for (k, v) in GLOBAL {
            if !(section == "Global" && k == key) {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        if section == "Global" {
            text.push_str(&format!("{key} = {value}\n"));
        } else {
            text.push_str(&format!("[{section}]\n{key} = {value}\n"));
        }
        text
    }

    fn minimal() -> Config {
        let text: String = std::iter::once("[Global]\n".to_owned())
            .chain(GLOBAL.iter().map(|(k, v)| format!("{k} = {v}\n")))
            .collect();
        Config::parse(&text).unwrap()
    }

    /// What the provider's code reads of a config: the endpoints and project
    /// (`api::Client::new`), the region and `[Vpc] id` and `[Networking]` (instances),
    /// `[Vpc] subnet-id` and the load balancer options
    /// `load_balancer::annotations::Defaults::from_config` takes. A setting that changes
    /// none of these has no effect.
    fn used(config: &Config) -> String {
        let lb = &config.load_balancer;
        format!(
            "{:?}",
            (
                Service::ALL.map(|s| config.endpoint(s)),
                (&config.region, &config.project_id),
                (&config.vpc.id, &config.vpc.subnet_id),
                (
                    &lb.lb_algorithm,
                    lb.keep_eip,
                    &lb.session_affinity_flag,
                    &lb.session_affinity_option,
                    lb.enable_transparent_client_ip,
                    (lb.idle_timeout, lb.request_timeout, lb.response_timeout),
                    &lb.health_check_flag,
                    &lb.health_check_option,
                    &lb.load_balancer_class,
                    &lb.business_name,
                ),
                &config.networking,
            )
        )
    }

    #[test]
    fn the_parser_does_what_the_table_says() {
        let minimal = minimal();
        for (section, key, value, status) in SETTINGS {
            let parsed = Config::parse(&with(section, key, value));
            match status {
                Status::Served => {
                    let config = parsed.unwrap_or_else(|e| panic!("[{section}] {key}: {e}"));
                    assert_ne!(
                        used(&config),
                        used(&minimal),
                        "[{section}] {key}: no effect"
                    );
                }
                Status::Refused => match parsed {
                    Err(e) => {
                        assert!(e.contains(key), "[{section}] {key}: {e}");
                        // A key is never quoted back.
                        assert!(!e.contains(value), "[{section}] {key}: {e}");
                    }
                    Ok(_) => panic!("[{section}] {key}: not refused"),
                },
                Status::NotUsed => {
                    let config = parsed.unwrap_or_else(|e| panic!("[{section}] {key}: {e}"));
                    assert_eq!(used(&config), used(&minimal), "[{section}] {key}: used");
                }
                Status::Extension => {
                    let config = parsed.unwrap_or_else(|e| panic!("[{section}] {key}: {e}"));
                    let service = Service::ALL
                        .into_iter()
                        .find(|s| s.name() == key)
                        .unwrap_or_else(|| panic!("[{section}] {key}: no such service"));
                    assert_eq!(config.endpoint(service), value, "[{section}] {key}");
                }
            }
        }
    }

    /// The keys the parser's own error lists for `section` (an unknown key there).
    fn known_keys(section: &str) -> (Vec<String>, String) {
        let error = Config::parse(&with(section, "no-such-key", "x")).unwrap_err();
        let listed = error
            .split_once("(its keys: ")
            .and_then(|(_, rest)| rest.rsplit_once(')'))
            .map(|(keys, _)| keys.to_owned())
            .unwrap_or_else(|| panic!("[{section}]: {error}"));
        let (keys, rest) = listed.split_once(';').unwrap_or((listed.as_str(), ""));
        let mut keys: Vec<String> = keys.split(',').map(|k| k.trim().to_owned()).collect();
        keys.sort();
        (keys, rest.to_owned())
    }

    /// The table holds every section and key the parser knows, and no other.
    #[test]
    fn the_table_is_every_setting_the_parser_knows() {
        let mut sections: Vec<&str> = SETTINGS.iter().map(|(s, ..)| *s).collect();
        sections.dedup();
        let error =
            Config::parse(&format!("{}[Nope]\n", with("Global", "cloud", "x.com"))).unwrap_err();
        let listed: Vec<String> = sections.iter().map(|s| format!("[{s}]")).collect();
        assert!(
            error.contains(&format!("the sections are {})", listed.join(", "))),
            "{error}"
        );
        for section in sections {
            let (known, rest) = known_keys(section);
            let mut accepted: Vec<String> = SETTINGS
                .iter()
                .filter(|(s, _, _, status)| *s == section && *status != Status::Refused)
                .map(|(_, key, ..)| (*key).to_owned())
                .collect();
            accepted.sort();
            assert_eq!(known, accepted, "[{section}]");
            // The refused keys are named where the parser lists the keys, too.
            for (_, key, ..) in SETTINGS
                .iter()
                .filter(|(s, _, _, status)| *s == section && *status == Status::Refused)
            {
                assert!(rest.contains(*key), "[{section}] {key}: {rest}");
            }
        }
    }

    /// Every annotation the load balancer reads, written out.
    const READ: [&str; 18] = [
        "kubernetes.io/elb.class",
        "kubernetes.io/elb.id",
        "kubernetes.io/elb.subnet-id",
        "kubernetes.io/elb.eip-id",
        "kubernetes.io/elb.keep-eip",
        "kubernetes.io/elb.eip-auto-create-option",
        "kubernetes.io/elb.lb-algorithm",
        "kubernetes.io/elb.session-affinity-flag",
        "kubernetes.io/elb.session-affinity-option",
        "kubernetes.io/elb.health-check-flag",
        "kubernetes.io/elb.health-check-option",
        "kubernetes.io/elb.x-forwarded-host",
        "kubernetes.io/elb.default-tls-container-ref",
        "kubernetes.io/elb.idle-timeout",
        "kubernetes.io/elb.request-timeout",
        "kubernetes.io/elb.response-timeout",
        "kubernetes.io/elb.enable-transparent-client-ip",
        "kubernetes.io/elb.connection-limit",
    ];

    #[test]
    fn the_annotations_table_names_the_annotations_read() {
        let mut read: Vec<String> = READ.iter().map(|a| (*a).to_owned()).collect();
        read.sort();
        let mut constants: Vec<String> = crate::load_balancer::annotations::READ
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        constants.sort();
        assert_eq!(constants, read, "load_balancer/annotations.rs");
        let mut named: Vec<String> = ANNOTATIONS
            .iter()
            .map(|(a, ..)| a.split(": ").next().unwrap_or(*a).to_owned())
            .collect();
        named.dedup();
        named.sort();
        assert_eq!(named, read, "ANNOTATIONS");
    }

    /// The `elb.class` rows are what an ensure does: a refused class fails naming it
    /// with a Warning, before any request; `shared` goes on to look for the ELB.
    #[test]
    fn the_class_rows_are_what_ensure_does() {
        use wasm_ccm_guest::events;
        use wasm_ccm_guest::testing::{MockTransport, node, service};
        use wasm_ccm_guest::types::{
            CloudError, NodeAddress, NodeAddressType, Protocol, ServicePort,
        };

        let provider = crate::HuaweiCloud::new(minimal());
        let nodes = [wasm_ccm_guest::types::Node {
            addresses: vec![NodeAddress {
                address_type: NodeAddressType::InternalIp,
                address: "10.0.0.1".into(),
            }],
            ..node("n1")
        }];
        for (annotation, status, _) in ANNOTATIONS {
            let Some(class) = annotation.strip_prefix("kubernetes.io/elb.class: ") else {
                continue;
            };
            let cloud = MockTransport::new();
            let _installed = cloud.install();
            let _ = events::recorded();
            let mut web = service("default", "web");
            web.metadata.annotations = vec![("kubernetes.io/elb.class".into(), class.into())];
            web.ports = vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                target_port: "8080".into(),
                node_port: 30080,
                app_protocol: None,
            }];
            let result = crate::load_balancer::ensure(&provider, "kubernetes", &web, &nodes);
            let reasons: Vec<String> = events::recorded().into_iter().map(|e| e.1).collect();
            match status {
                AnnotationStatus::Refused => {
                    let error = match result {
                        Err(CloudError::Other(message)) => message,
                        other => panic!("{class}: {other:?}"),
                    };
                    assert!(error.contains(&format!("\"{class}\"")), "{class}: {error}");
                    assert_eq!(reasons, ["UnsupportedELBClass"], "{class}");
                    assert!(cloud.requests().is_empty(), "{class}");
                }
                AnnotationStatus::Served => {
                    // No answers are set: the ELB lookup fails, after the class passed.
                    assert!(result.is_err(), "{class}");
                    assert!(
                        !reasons.iter().any(|r| r.ends_with("ELBClass")),
                        "{class}: {reasons:?}"
                    );
                    assert!(!cloud.requests().is_empty(), "{class}");
                }
            }
        }
    }

    /// The rows of the README table under `heading` starting `| `<prefix>`, as their
    /// first `cells` cells (the first without its backquotes).
    fn readme_rows(heading: &str, prefix: &str, cells: usize) -> Vec<Vec<String>> {
        let readme = include_str!("../README.md");
        let start = readme
            .find(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("README section {heading}"));
        readme[start..]
            .lines()
            .skip_while(|l| !l.starts_with(&format!("| `{prefix}")))
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let found: Vec<&str> = l.split('|').map(str::trim).collect();
                assert!(found.len() > cells + 1, "{l}");
                (1..=cells)
                    .map(|i| {
                        let cell = found[i];
                        if i == 1 {
                            cell.trim_matches('`').to_owned()
                        } else {
                            cell.to_owned()
                        }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_readme_tables_are_these_tables() {
        let settings: Vec<Vec<String>> = SETTINGS
            .iter()
            .map(|(section, key, _, status)| {
                vec![format!("[{section}] {key}"), status.word().to_owned()]
            })
            .collect();
        assert_eq!(readme_rows("## Settings", "[", 2), settings);
        let annotations: Vec<Vec<String>> = ANNOTATIONS
            .iter()
            .map(|(annotation, status, default)| {
                vec![
                    (*annotation).to_owned(),
                    status.word().to_owned(),
                    (*default).to_owned(),
                ]
            })
            .collect();
        assert_eq!(
            readme_rows("## Annotations", "kubernetes.io/", 3),
            annotations
        );
    }
}
