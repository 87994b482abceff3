//! The cloud config: cloud-provider-openstack's (occm's) `cloud.conf`, without its
//! secrets.
//!
//! ```ini
//! [Global]
//! auth-url = https://keystone.example.com:5000/v3
//! region = RegionOne
//!
//! [LoadBalancer]
//! subnet-id = 0b7e1c3a-...
//! floating-network-id = 5f0c...
//! create-monitor = true
//!
//! [Networking]
//! internal-network-name = private
//!
//! [Route]
//! router-id = 8d7e...
//! ```
//!
//! The host logs in to Keystone (the policy's `keystone` rule), so a password or an
//! application credential's secret here is refused with an error saying where it
//! goes; the identity names and IDs occm reads from `[Global]` are the policy's too and
//! are ignored here, as are the TLS files (the policy's `tls`). As occm reads the file
//! (`ReadConfig`: `gcfg.FatalOnly(gcfg.ReadInto(...))`, which drops gcfg's "can't store
//! data" errors), a section, subsection or variable it has no place for is ignored:
//! here with a warning naming its line. Variables this provider does not use are
//! logged and ignored too.

use occm_config::policy_keys;
use wasm_ccm_guest::gcfg;

/// `[LoadBalancer]`, with occm's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancerConfig {
    /// `subnet-id`: where VIPs (and, without `member-subnet-id`, members) are.
    pub subnet_id: String,
    /// `network-id`: the VIP network when no subnet is given.
    pub network_id: String,
    /// `member-subnet-id`.
    pub member_subnet_id: String,
    /// `floating-network-id`: floating IPs for external load balancers.
    pub floating_network_id: String,
    /// `floating-subnet-id`.
    pub floating_subnet_id: String,
    /// `floating-subnet`: a name pattern of the floating network's subnets (a glob,
    /// `~regexp`, `!` negating), used when no subnet ID is given.
    pub floating_subnet: String,
    /// `floating-subnet-tags`: tags of the floating network's subnets (`a,b` any,
    /// `&a,b` all, `!` negating), used when no subnet ID is given.
    pub floating_subnet_tags: String,
    /// `lb-method` (default `ROUND_ROBIN`).
    pub lb_method: String,
    /// `lb-provider` (default `amphora`, as occm's `ReadConfig`; set empty: Octavia's
    /// default provider).
    pub lb_provider: String,
    /// `create-monitor` (default false).
    pub create_monitor: bool,
    /// `monitor-delay`, seconds (default 5).
    pub monitor_delay: u64,
    /// `monitor-timeout`, seconds (default 3).
    pub monitor_timeout: u64,
    /// `monitor-max-retries` (default 1).
    pub monitor_max_retries: u64,
    /// `monitor-max-retries-down` (default 3).
    pub monitor_max_retries_down: u64,
    /// `internal-lb` (default false): no floating IP unless the Service asks.
    pub internal_lb: bool,
    /// `flavor-id`.
    pub flavor_id: String,
    /// `availability-zone`.
    pub availability_zone: String,
    /// `enabled` (default true): false refuses load balancers.
    pub enabled: bool,
    /// `enable-ingress-hostname` (default false): a PROXY protocol Service's status is
    /// the hostname `<address>.<ingress-hostname-suffix>`.
    pub enable_ingress_hostname: bool,
    /// `ingress-hostname-suffix` (default `nip.io`).
    pub ingress_hostname_suffix: String,
    /// `max-shared-lb` (default 2): the most Services sharing one load balancer.
    pub max_shared_lb: usize,
    /// `node-selector`: `key=value` pairs the member Nodes must have (occm's format).
    pub node_selector: String,
    /// `default-tls-container-ref`: TERMINATED_HTTPS listeners with this certificate.
    pub default_tls_container_ref: String,
    /// `provider-requires-serial-api-calls` (default false): the Octavia provider has no
    /// batch member update, so members are created and deleted one call at a time
    /// (occm's `SeriallyReconcilePoolMembers`).
    pub provider_requires_serial_api_calls: bool,
    /// `manage-security-groups` (default false): each Service gets occm's security
    /// group `lb-sg-<uid>-<namespace>-<name>`, opening its node ports, on its member
    /// Nodes' ports (occm's `ensureAndUpdateOctaviaSecurityGroup`); the group goes with
    /// the Service either way (occm's `ensureSecurityGroupDeleted`).
    pub manage_security_groups: bool,
}

impl Default for LoadBalancerConfig {
    fn default() -> Self {
        Self {
            subnet_id: String::new(),
            network_id: String::new(),
            member_subnet_id: String::new(),
            floating_network_id: String::new(),
            floating_subnet_id: String::new(),
            floating_subnet: String::new(),
            floating_subnet_tags: String::new(),
            lb_method: "ROUND_ROBIN".into(),
            lb_provider: "amphora".into(),
            create_monitor: false,
            monitor_delay: 5,
            monitor_timeout: 3,
            monitor_max_retries: 1,
            monitor_max_retries_down: 3,
            internal_lb: false,
            flavor_id: String::new(),
            availability_zone: String::new(),
            enabled: true,
            enable_ingress_hostname: false,
            ingress_hostname_suffix: "nip.io".into(),
            max_shared_lb: 2,
            node_selector: String::new(),
            default_tls_container_ref: String::new(),
            provider_requires_serial_api_calls: false,
            manage_security_groups: false,
        }
    }
}

/// A `[LoadBalancerClass "name"]` section: networks a Service picks with the
/// `loadbalancer.openstack.org/class` annotation (occm's `LBClass`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadBalancerClass {
    /// `floating-network-id`.
    pub floating_network_id: String,
    /// `floating-subnet-id`.
    pub floating_subnet_id: String,
    /// `floating-subnet` (as `[LoadBalancer]`'s).
    pub floating_subnet: String,
    /// `floating-subnet-tags` (as `[LoadBalancer]`'s).
    pub floating_subnet_tags: String,
    /// `network-id`.
    pub network_id: String,
    /// `subnet-id`.
    pub subnet_id: String,
    /// `member-subnet-id`.
    pub member_subnet_id: String,
}

/// `[Networking]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkingConfig {
    /// `public-network-name` (repeatable): addresses on these networks are external.
    pub public_network_names: Vec<String>,
    /// `internal-network-name` (repeatable): when set, only these networks' addresses
    /// are internal.
    pub internal_network_names: Vec<String>,
    /// `ipv6-support-disabled`.
    pub ipv6_support_disabled: bool,
    /// `address-sort-order`: CIDRs, addresses in them first, in this order.
    pub address_sort_order: Vec<String>,
}

/// The provider's configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `[Global] auth-url`, the identity endpoint (the host logs in there; the
    /// provider reads the catalog there).
    pub auth_url: String,
    /// `[Global] region`: endpoints of this region; nodes' `topology.kubernetes.io/region`.
    pub region: String,
    /// `[Global] os-endpoint-type` (occm's key; `interface` and `endpoint-type` are
    /// read too): the catalog interface (default public).
    pub interface: String,
    /// `[Global] regional-provider-ids` (default false): new Nodes get occm's regional
    /// provider ID `openstack://<region>/<server-id>`, as occm with `OS_CCM_REGIONAL=true`
    /// (an environment variable there; a provider reads no environment). Nodes keep the
    /// form they have either way.
    pub regional_provider_ids: bool,
    pub load_balancer: LoadBalancerConfig,
    pub networking: NetworkingConfig,
    /// `[Route] router-id`: the router whose extra routes are the cluster's routes.
    pub router_id: String,
    /// The variables read but not used (`section/name`, gcfg spelling), each logged.
    pub ignored: Vec<String>,
    /// `[LoadBalancerClass "name"]` sections, by name.
    pub load_balancer_classes: std::collections::BTreeMap<String, LoadBalancerClass>,
}

/// Logs a variable that is ignored (`why`) with where it is, and notes it in `ignored`
/// as `section/name` (`section` as read: lowercase, a subsection quoted after it).
fn ignore(ignored: &mut Vec<String>, why: &str, section: &str, name: &str, line: usize) {
    wasm_ccm_guest::log::warn(
        why,
        &[
            ("section", section),
            ("variable", name),
            ("line", &line.to_string()),
        ],
    );
    ignored.push(format!("{section}/{name}"));
}

/// A duration in seconds: `5`, `5s`, `1m`, `1m30s`.
fn seconds(value: &str, line: usize, name: &str) -> Result<u64, String> {
    let bad = || format!("cloud config line {line}: {name} `{value}` is not a duration (e.g. 5s)");
    if let Ok(n) = value.parse::<u64>() {
        return Ok(n);
    }
    let mut total = 0u64;
    let mut digits = String::new();
    for c in value.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total += match c {
            'h' => n * 3600,
            'm' => n * 60,
            's' => n,
            _ => return Err(bad()),
        };
    }
    if !digits.is_empty() {
        return Err(bad());
    }
    Ok(total)
}

fn number(value: &str, line: usize, name: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("cloud config line {line}: {name} `{value}` is not a whole number"))
}

impl Config {
    /// Parses and checks the file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut config = Config {
            interface: "public".into(),
            ..Config::default()
        };
        let mut config_ignored = Vec::new();
        for entry in gcfg::parse(text)? {
            let gcfg::Entry {
                line,
                section,
                subsection,
                name,
                value,
            } = entry;
            if let Some(class) = subsection {
                // occm's gcfg keeps subsections only for [LoadBalancerClass "name"]; in
                // another section they are "can't store data", which its FatalOnly drops.
                if section != "loadbalancerclass" {
                    ignore(
                        &mut config_ignored,
                        "cloud config: only [LoadBalancerClass \"name\"] has subsections \
                         (occm ignores this one too); ignored",
                        &format!("{section} \"{class}\""),
                        &name,
                        line,
                    );
                    continue;
                }
                let entry = config
                    .load_balancer_classes
                    .entry(class.clone())
                    .or_default();
                match name.as_str() {
                    "floatingnetworkid" => entry.floating_network_id = value,
                    "floatingsubnetid" => entry.floating_subnet_id = value,
                    "networkid" => entry.network_id = value,
                    "subnetid" => entry.subnet_id = value,
                    "membersubnetid" => entry.member_subnet_id = value,
                    "floatingsubnet" => entry.floating_subnet = value,
                    "floatingsubnettags" => entry.floating_subnet_tags = value,
                    // occm's LBClass has no such field: ignored (FatalOnly), the class
                    // still serves with the variables it has.
                    _ => ignore(
                        &mut config_ignored,
                        "cloud config: [LoadBalancerClass] has no such variable (occm's are \
                         floating-network-id, floating-subnet-id, floating-subnet, \
                         floating-subnet-tags, network-id, subnet-id, member-subnet-id; occm \
                         ignores it too); ignored",
                        &format!("{section} \"{class}\""),
                        &name,
                        line,
                    ),
                }
                continue;
            }
            let mut ignored = |why: &str| ignore(&mut config_ignored, why, &section, &name, line);
            match section.as_str() {
                "global" => match name.as_str() {
                    "authurl" => config.auth_url = value,
                    "region" => config.region = value,
                    "osendpointtype" | "interface" | "endpointtype" => {
                        config.interface = value.to_ascii_lowercase()
                    }
                    "regionalproviderids" => {
                        config.regional_provider_ids = gcfg::boolean(&value, line, &name)?
                    }
                    // occm's keys the host holds (`policy_keys`): secrets refused, the
                    // rest of the login, TLS and clouds.yaml the policy's.
                    secret if policy_keys::refused(secret) => {
                        return Err(format!(
                            "cloud config line {line}: [Global] holds a secret ({name}): the host \
                             logs in to Keystone for the provider, so the secret goes in a file in \
                             the credentials directory (the mounted Secret) named by the policy's \
                             keystone rule (passwordFile or applicationCredentialSecretFile), and \
                             never in the cloud config"
                        ));
                    }
                    policy if policy_keys::held_by_policy(policy) => {}
                    _ => ignored("cloud config: variable not used by this provider; ignored"),
                },
                "loadbalancer" => {
                    let lb = &mut config.load_balancer;
                    match name.as_str() {
                        "subnetid" => lb.subnet_id = value,
                        "networkid" => lb.network_id = value,
                        "membersubnetid" => lb.member_subnet_id = value,
                        "floatingnetworkid" => lb.floating_network_id = value,
                        "floatingsubnetid" => lb.floating_subnet_id = value,
                        "lbmethod" => lb.lb_method = value,
                        "lbprovider" => lb.lb_provider = value,
                        "createmonitor" => lb.create_monitor = gcfg::boolean(&value, line, &name)?,
                        "monitordelay" => lb.monitor_delay = seconds(&value, line, &name)?,
                        "monitortimeout" => lb.monitor_timeout = seconds(&value, line, &name)?,
                        "monitormaxretries" => {
                            lb.monitor_max_retries = number(&value, line, &name)?
                        }
                        "monitormaxretriesdown" => {
                            lb.monitor_max_retries_down = number(&value, line, &name)?
                        }
                        "internallb" => lb.internal_lb = gcfg::boolean(&value, line, &name)?,
                        "flavorid" => lb.flavor_id = value,
                        "availabilityzone" => lb.availability_zone = value,
                        "enabled" => lb.enabled = gcfg::boolean(&value, line, &name)?,
                        "enableingresshostname" => {
                            lb.enable_ingress_hostname = gcfg::boolean(&value, line, &name)?
                        }
                        "ingresshostnamesuffix" => lb.ingress_hostname_suffix = value,
                        "maxsharedlb" => lb.max_shared_lb = number(&value, line, &name)? as usize,
                        "nodeselector" => lb.node_selector = value,
                        "defaulttlscontainerref" => lb.default_tls_container_ref = value,
                        "managesecuritygroups" => {
                            lb.manage_security_groups = gcfg::boolean(&value, line, &name)?
                        }
                        "floatingsubnet" => lb.floating_subnet = value,
                        "floatingsubnettags" => lb.floating_subnet_tags = value,
                        // Listeners, pools and monitors are made one call at a time
                        // whatever the value (occm's one-call creation ends in the same
                        // load balancer); true also makes members one call at a time.
                        "providerrequiresserialapicalls" => {
                            lb.provider_requires_serial_api_calls =
                                gcfg::boolean(&value, line, &name)?
                        }
                        // Served whatever the value: a load balancer's children go with
                        // it either way (a cascade delete, or occm's one by one).
                        "cascadedelete" => {
                            gcfg::boolean(&value, line, &name)?;
                        }
                        "lbversion" if !matches!(value.as_str(), "" | "v2") => {
                            return Err(format!(
                                "cloud config line {line}: lb-version `{value}`: only LBaaS v2 \
                                 (Octavia) is supported, as in occm"
                            ));
                        }
                        "containerstore" if !matches!(value.as_str(), "barbican" | "external") => {
                            return Err(format!(
                                "cloud config line {line}: container-store `{value}` is not \
                                 barbican or external"
                            ));
                        }
                        // Octavia checks a TLS reference when the listener is made.
                        "lbversion" | "containerstore" => {}
                        // Options occm no longer has.
                        "usetags" | "usevipport" => {}
                        _ => ignored("cloud config: variable not used by this provider; ignored"),
                    }
                }
                "networking" => {
                    let net = &mut config.networking;
                    match name.as_str() {
                        "publicnetworkname" => net.public_network_names.push(value),
                        "internalnetworkname" => net.internal_network_names.push(value),
                        "ipv6supportdisabled" => {
                            net.ipv6_support_disabled = gcfg::boolean(&value, line, &name)?
                        }
                        "addresssortorder" => {
                            net.address_sort_order = value
                                .split(',')
                                .map(|c| c.trim().to_owned())
                                .filter(|c| !c.is_empty())
                                .collect()
                        }
                        _ => ignored("cloud config: variable not used by this provider; ignored"),
                    }
                }
                "route" => match name.as_str() {
                    "routerid" => config.router_id = value,
                    _ => ignored("cloud config: variable not used by this provider; ignored"),
                },
                "metadata" => match name.as_str() {
                    "requesttimeout" => {
                        seconds(&value, line, &name)?;
                        ignored(
                            "cloud config: the host times requests: set the policy's \
                             limits.requestTimeout (import-occm-config does)",
                        )
                    }
                    "searchorder" => {}
                    _ => ignored("cloud config: variable not used by this provider; ignored"),
                },
                "blockstorage" => {
                    ignored("cloud config: section not used by this provider (the CSI driver's)")
                }
                // occm reads it into a class named "", which no Service can name.
                "loadbalancerclass" => ignored(
                    "cloud config: [LoadBalancerClass] without a name ([LoadBalancerClass \
                     \"name\"]) applies to no Service; ignored",
                ),
                // occm's Config has no such section: "can't store data", which its
                // FatalOnly drops.
                _ => ignored(
                    "cloud config: section not known (occm's are [Global], [LoadBalancer], \
                     [LoadBalancerClass \"name\"], [Networking], [Route], [Metadata]; occm \
                     ignores it too); ignored",
                ),
            }
        }
        if config.auth_url.is_empty() {
            return Err(
                "cloud config: [Global] auth-url is required (the identity endpoint, as in the \
                 policy's keystone rule)"
                    .into(),
            );
        }
        wasm_ccm_guest::url::Url::parse(&config.auth_url)
            .map_err(|e| format!("cloud config: [Global] auth-url: {e}"))?;
        if !["public", "internal", "admin"].contains(&config.interface.as_str()) {
            return Err(format!(
                "cloud config: [Global] os-endpoint-type `{}` is not public, internal or admin",
                config.interface
            ));
        }
        config.ignored = config_ignored;
        Ok(config)
    }

    /// The identity API's v3 root (`/v3` added when `auth-url` lacks it).
    pub fn identity_v3(&self) -> String {
        let url = self.auth_url.trim_end_matches('/');
        if url.ends_with("/v3") {
            url.to_owned()
        } else {
            format!("{url}/v3")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occm_names_and_defaults() {
        let config = Config::parse(
            "[Global]\nauth-url = https://keystone:5000\nregion = RegionOne\n\
             application-credential-id = abc\n\
             [LoadBalancer]\nsubnet-id = s1\nfloating-network-id = f1\ncreate-monitor = true\n\
             monitor-delay = 1m\n\
             [Networking]\npublic-network-name = public\npublic-network-name = ext\n\
             address-sort-order = 10.0.0.0/8, 192.168.0.0/16\n\
             [Route]\nrouter-id = r1\n",
        )
        .unwrap();
        assert_eq!(config.identity_v3(), "https://keystone:5000/v3");
        assert_eq!(config.region, "RegionOne");
        assert_eq!(config.interface, "public");
        assert_eq!(config.load_balancer.subnet_id, "s1");
        assert!(config.load_balancer.create_monitor);
        assert_eq!(config.load_balancer.monitor_delay, 60);
        assert_eq!(config.load_balancer.monitor_timeout, 3);
        assert_eq!(config.load_balancer.lb_method, "ROUND_ROBIN");
        assert_eq!(config.networking.public_network_names, ["public", "ext"]);
        assert_eq!(
            config.networking.address_sort_order,
            ["10.0.0.0/8", "192.168.0.0/16"]
        );
        assert_eq!(config.router_id, "r1");
        assert!(!config.regional_provider_ids);
    }

    #[test]
    fn load_balancer_classes_are_read() {
        let config = Config::parse(
            "[Global]\nauth-url = https://k/v3\n[LoadBalancerClass \"public\"]\n\
             floating-network-id = f2\nsubnet-id = s2\nfloating-subnet-tags = a\n",
        )
        .unwrap();
        let class = &config.load_balancer_classes["public"];
        assert_eq!(class.floating_network_id, "f2");
        assert_eq!(class.subnet_id, "s2");
        assert_eq!(class.floating_subnet_tags, "a");
    }

    /// occm's `ReadConfig` reads with `gcfg.FatalOnly`: a section, a subsection or a
    /// variable it has no place for is dropped, not an error. Here each is logged and
    /// noted, and the rest of the file serves.
    #[test]
    fn unknown_sections_and_variables_are_ignored_as_occm() {
        let config = Config::parse(
            "[Global]\nauth-url = https://k/v3\nnot-a-setting = 1\n\
             [LoadBalancerClass \"x\"]\nsubnet-id = s2\nbogus = 1\n\
             [Nope]\nx = 1\n\
             [Global \"other\"]\nregion = r9\n\
             [LoadBalancerClass]\nsubnet-id = s3\n\
             [LoadBalancer]\nsubnet-id = s1\nfloating_network-idd = f\n",
        )
        .unwrap();
        assert_eq!(
            config.ignored,
            [
                "global/notasetting",
                "loadbalancerclass \"x\"/bogus",
                "nope/x",
                "global \"other\"/region",
                "loadbalancerclass/subnetid",
                "loadbalancer/floatingnetworkidd",
            ]
        );
        // What is known is read as ever; the class keeps what it has.
        assert_eq!(config.load_balancer_classes["x"].subnet_id, "s2");
        assert_eq!(config.load_balancer_classes.len(), 1);
        assert_eq!(config.load_balancer.subnet_id, "s1");
        assert_eq!(config.region, "");
        // A known variable's bad value stays an error, as in occm (FatalOnly drops only
        // gcfg's "can't store data").
        let err = Config::parse(
            "[Global]\nauth-url = https://k\n[Nope]\nx = 1\n\
             [LoadBalancer]\ncreate-monitor = maybe\n",
        )
        .unwrap_err();
        assert!(err.contains("line 6"), "{err}");
    }

    #[test]
    fn occm_endpoint_type_key_picks_the_interface() {
        let config = Config::parse(
            "[Global]\nauth-url = https://k/v3\nos-endpoint-type = Internal\n\
             regional-provider-ids = true\n",
        )
        .unwrap();
        assert_eq!(config.interface, "internal");
        assert!(config.regional_provider_ids);
        let err = Config::parse("[Global]\nauth-url = https://k/v3\nos-endpoint-type = private\n")
            .unwrap_err();
        assert!(err.contains("os-endpoint-type `private`"), "{err}");
    }

    #[test]
    fn serial_api_calls_are_read() {
        let parse = |extra: &str| {
            Config::parse(&format!(
                "[Global]\nauth-url = https://k/v3\n[LoadBalancer]\n{extra}"
            ))
        };
        let config = parse("").unwrap();
        assert!(!config.load_balancer.provider_requires_serial_api_calls);
        let config = parse("provider-requires-serial-api-calls = true\n").unwrap();
        assert!(config.load_balancer.provider_requires_serial_api_calls);
        assert!(
            parse("provider-requires-serial-api-calls = maybe\n")
                .unwrap_err()
                .contains("line 4")
        );
    }

    /// occm's `manage-security-groups`: read (default false), served; a value that is
    /// not a boolean is an error naming its line, as every boolean.
    #[test]
    fn manage_security_groups_is_read() {
        let parse = |extra: &str| {
            Config::parse(&format!(
                "[Global]\nauth-url = https://k/v3\n[LoadBalancer]\n{extra}"
            ))
        };
        assert!(!parse("").unwrap().load_balancer.manage_security_groups);
        let config = parse("manage-security-groups = true\n").unwrap();
        assert!(config.load_balancer.manage_security_groups);
        assert!(config.ignored.is_empty());
        assert!(
            !parse("manage-security-groups = false\n")
                .unwrap()
                .load_balancer
                .manage_security_groups
        );
        assert!(
            parse("manage-security-groups = maybe\n")
                .unwrap_err()
                .contains("line 4")
        );
    }

    #[test]
    fn secrets_are_refused_with_where_they_go() {
        for secret in [
            "password = hunter2",
            "application-credential-secret = s3cr3t",
        ] {
            let err = Config::parse(&format!("[Global]\nauth-url = https://k/v3\n{secret}\n"))
                .unwrap_err();
            assert!(
                err.contains("line 3") && err.contains("credentials directory"),
                "{err}"
            );
            assert!(!err.contains("hunter2") && !err.contains("s3cr3t"), "{err}");
        }
        assert!(
            Config::parse("[Global]\nregion = r\n")
                .unwrap_err()
                .contains("auth-url")
        );
        assert!(
            Config::parse(
                "[Global]\nauth-url = https://k\n[LoadBalancer]\ncreate-monitor = maybe\n"
            )
            .unwrap_err()
            .contains("line 4")
        );
    }
}
