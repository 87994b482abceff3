//! The cloud config, in cloud-provider-aws's format: a gcfg (git-config style) file
//! with a `[Global]` section and `[ServiceOverride "N"]` sections.
//!
//! ```ini
//! [Global]
//! Zone = eu-west-1a
//! VPC = vpc-0123456789abcdef0
//! KubernetesClusterID = prod
//! RouteTableID = rtb-0123456789abcdef0
//!
//! [ServiceOverride "1"]
//! Service = ec2
//! Region = eu-west-1
//! URL = https://ec2.eu-west-1.amazonaws.com
//! SigningRegion = eu-west-1
//! ```
//!
//! The region comes from `Zone` (`eu-west-1a` → `eu-west-1`) or `Region`: the sandbox
//! has no instance metadata service to ask. `ServiceOverride.Service` accepts both the
//! SDK service IDs upstream matches today (`EC2`, `Elastic Load Balancing`, `Elastic
//! Load Balancing v2`) and the endpoint prefixes older configs use (`ec2`,
//! `elasticloadbalancing` for both load balancing APIs); two overrides for one service
//! and region are refused. Signing is
//! the host's: `SigningRegion`/`SigningName` must agree with the policy's `aws` rule.
//! Variables the provider does not use are logged and ignored, as gcfg does.

use wasm_ccm_guest::gcfg;

/// The services the provider calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// EC2 (instances, subnets, route tables).
    Ec2,
    /// Elastic Load Balancing (Classic Load Balancers).
    Elb,
    /// Elastic Load Balancing v2 (Network Load Balancers).
    Elbv2,
}

impl Service {
    /// Every service the provider calls.
    const ALL: [Service; 3] = [Service::Ec2, Service::Elb, Service::Elbv2];

    /// The endpoint prefix (`<prefix>.<region>.amazonaws.com`): both load balancing
    /// APIs share one.
    fn prefix(self) -> &'static str {
        match self {
            Service::Ec2 => "ec2",
            Service::Elb | Service::Elbv2 => "elasticloadbalancing",
        }
    }

    /// The SDK service ID upstream's `ServiceOverride` matches.
    fn sdk_id(self) -> &'static str {
        match self {
            Service::Ec2 => "EC2",
            Service::Elb => "Elastic Load Balancing",
            Service::Elbv2 => "Elastic Load Balancing v2",
        }
    }

    /// Whether a `ServiceOverride`'s `Service` names this service: its SDK service ID
    /// (upstream today), or the endpoint prefix older configs use (`elasticloadbalancing`
    /// names both load balancing APIs, as it did for the SDK v1).
    fn is_named(self, name: &str) -> bool {
        let name = name.trim();
        name.eq_ignore_ascii_case(self.sdk_id())
            || name.eq_ignore_ascii_case(self.prefix())
            || (self == Service::Elbv2 && name.eq_ignore_ascii_case("elbv2"))
            || (self == Service::Elb && name.eq_ignore_ascii_case("elb"))
    }
}

/// A `[ServiceOverride "N"]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceOverride {
    /// The section's name (`N`).
    pub key: String,
    pub service: String,
    pub region: String,
    pub url: String,
    pub signing_region: String,
    pub signing_name: String,
}

/// The parsed configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// `Zone`, when set.
    pub zone: String,
    /// The region (from `Zone` or `Region`).
    pub region: String,
    /// `VPC`: the cluster's VPC (else the target instances' VPC).
    pub vpc: String,
    /// `SubnetID`: used for load balancers when no subnet is tagged for them.
    pub subnet_id: String,
    /// `RouteTableID`: the route table for pod routes (else found by cluster tag).
    pub route_table_id: String,
    /// `KubernetesClusterID` (or the legacy `KubernetesClusterTag`); may be empty.
    pub cluster_id: String,
    /// Whether the legacy `KubernetesCluster=<id>` tag is in use.
    pub legacy_cluster_tag: bool,
    /// `NodeIPFamilies`: `ipv4` and/or `ipv6`, in order.
    pub node_ip_families: Vec<String>,
    /// `ElbSecurityGroup`: the security group of every Classic load balancer, instead
    /// of one made per Service (the provider neither changes nor deletes it).
    pub elb_security_group: String,
    /// `DisableSecurityGroupIngress`: leave the nodes' security groups alone.
    pub disable_security_group_ingress: bool,
    /// `ClusterServiceLoadBalancerHealthProbeMode = Shared`: the port and path
    /// (`ClusterServiceSharedLoadBalancerHealthProbePort`, `…Path`; kube-proxy's 10256
    /// and `/healthz` by default) every `externalTrafficPolicy: Cluster` load balancer
    /// checks, instead of its node ports.
    pub shared_health_probe: Option<(u16, String)>,
    /// The `ServiceOverride` sections.
    pub overrides: Vec<ServiceOverride>,
}

/// The cluster tag key: `kubernetes.io/cluster/<id>`.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// The legacy cluster tag key, whose value is the cluster ID.
pub const LEGACY_CLUSTER_TAG: &str = "KubernetesCluster";

impl Config {
    /// Parses and checks the file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut config = Config::default();
        let mut region = String::new();
        let mut cluster_tag = String::new();
        let (mut probe_mode, mut probe_port, mut probe_path) =
            (String::new(), 10256u16, "/healthz".to_owned());
        for entry in gcfg::parse(text)? {
            let gcfg::Entry {
                line,
                section,
                subsection,
                name,
                value,
            } = entry;
            match (section.as_str(), subsection.as_deref()) {
                ("global", None) => match name.as_str() {
                    "zone" => config.zone = value,
                    "region" => region = value,
                    "vpc" => config.vpc = value,
                    "subnetid" => config.subnet_id = value,
                    "routetableid" => config.route_table_id = value,
                    "kubernetesclusterid" => config.cluster_id = value,
                    "kubernetesclustertag" => cluster_tag = value,
                    "nodeipfamilies" => config.node_ip_families.push(value),
                    "elbsecuritygroup" => config.elb_security_group = value,
                    "clusterserviceloadbalancerhealthprobemode" => probe_mode = value,
                    "clusterservicesharedloadbalancerhealthprobeport" => {
                        probe_port = value.parse().map_err(|_| {
                            format!(
                                "cloud config line {line}: ClusterServiceSharedLoadBalancerHealthProbePort = \
                                 {value} is not a port"
                            )
                        })?;
                    }
                    "clusterservicesharedloadbalancerhealthprobepath" => {
                        if !value.starts_with('/') {
                            return Err(format!(
                                "cloud config line {line}: ClusterServiceSharedLoadBalancerHealthProbePath = \
                                 {value} does not start with /"
                            ));
                        }
                        probe_path = value;
                    }
                    "disablesecuritygroupingress" => {
                        config.disable_security_group_ingress =
                            gcfg::boolean(&value, line, "DisableSecurityGroupIngress")?;
                    }
                    _ => wasm_ccm_guest::log::warn(
                        "cloud config: [Global] variable not used by this provider; ignored",
                        &[("variable", &name), ("line", &line.to_string())],
                    ),
                },
                ("serviceoverride", Some(key)) => {
                    let index = match config.overrides.iter().position(|o| o.key == key) {
                        Some(i) => i,
                        None => {
                            config.overrides.push(ServiceOverride {
                                key: key.to_owned(),
                                ..Default::default()
                            });
                            config.overrides.len() - 1
                        }
                    };
                    let o = &mut config.overrides[index];
                    match name.as_str() {
                        "service" => o.service = value,
                        "region" => o.region = value,
                        "url" => o.url = value,
                        "signingregion" => o.signing_region = value,
                        "signingname" => o.signing_name = value,
                        "signingmethod" => {}
                        _ => wasm_ccm_guest::log::warn(
                            "cloud config: [ServiceOverride] variable not known; ignored",
                            &[("variable", &name), ("line", &line.to_string())],
                        ),
                    }
                }
                _ => {
                    return Err(format!(
                        "cloud config line {line}: section [{section}{}] is not known \
                         (expected [Global] or [ServiceOverride \"N\"])",
                        subsection.map(|s| format!(" \"{s}\"")).unwrap_or_default()
                    ));
                }
            }
        }
        if !cluster_tag.is_empty() {
            if !config.cluster_id.is_empty() && config.cluster_id != cluster_tag {
                return Err(format!(
                    "cloud config: KubernetesClusterID `{}` and KubernetesClusterTag `{cluster_tag}` \
                     do not match",
                    config.cluster_id
                ));
            }
            config.cluster_id = cluster_tag;
            config.legacy_cluster_tag = true;
        }
        config.region = if !config.zone.is_empty() {
            zone_to_region(&config.zone)?
        } else if !region.is_empty() {
            region
        } else {
            return Err("cloud config: set `Zone` or `Region` in [Global] \
                        (the provider cannot ask the instance metadata service)"
                .into());
        };
        config.shared_health_probe = match probe_mode.as_str() {
            "" | "ServiceNodePort" => None,
            "Shared" => Some((probe_port, probe_path)),
            other => {
                return Err(format!(
                    "cloud config: ClusterServiceLoadBalancerHealthProbeMode `{other}` is not \
                     `ServiceNodePort` or `Shared`"
                ));
            }
        };
        if config.node_ip_families.is_empty() {
            config.node_ip_families.push("ipv4".into());
        }
        for family in &config.node_ip_families {
            if family != "ipv4" && family != "ipv6" {
                return Err(format!(
                    "cloud config: NodeIPFamilies `{family}` is not `ipv4` or `ipv6`"
                ));
            }
        }
        for o in &config.overrides {
            for (field, value) in [
                ("Service", &o.service),
                ("Region", &o.region),
                ("URL", &o.url),
                ("SigningRegion", &o.signing_region),
            ] {
                if value.is_empty() {
                    return Err(format!(
                        "cloud config: [ServiceOverride \"{}\"] has no {field}",
                        o.key
                    ));
                }
            }
            wasm_ccm_guest::url::Url::parse(&o.url)
                .map_err(|e| format!("cloud config: [ServiceOverride \"{}\"] URL: {e}", o.key))?;
            if !Service::ALL.iter().any(|s| s.is_named(&o.service)) {
                // Upstream also reads KMS and ec2imds overrides; this provider calls
                // neither.
                wasm_ccm_guest::log::warn(
                    "cloud config: [ServiceOverride] for a service this provider does not call; ignored",
                    &[("section", &o.key), ("service", &o.service)],
                );
            }
        }
        for service in Service::ALL {
            for (i, a) in config.overrides.iter().enumerate() {
                let twice = config.overrides[i + 1..].iter().find(|b| {
                    a.region == b.region
                        && service.is_named(&a.service)
                        && service.is_named(&b.service)
                });
                if let Some(b) = twice {
                    return Err(format!(
                        "cloud config: [ServiceOverride \"{}\"] and [ServiceOverride \"{}\"] both \
                         set the {} endpoint in {}",
                        a.key,
                        b.key,
                        service.sdk_id(),
                        a.region
                    ));
                }
            }
        }
        Ok(config)
    }

    /// The endpoint for `service` in the configured region: a `ServiceOverride`'s URL
    /// when one matches, else the public regional endpoint.
    pub fn endpoint(&self, service: Service) -> String {
        if let Some(o) = self
            .overrides
            .iter()
            .find(|o| service.is_named(&o.service) && o.region == self.region)
        {
            return o.url.trim_end_matches('/').to_owned();
        }
        let domain = if self.region.starts_with("cn-") {
            "amazonaws.com.cn"
        } else {
            "amazonaws.com"
        };
        format!("https://{}.{}.{domain}", service.prefix(), self.region)
    }

    /// Whether resources with these tags belong to the cluster (true when no cluster
    /// ID is configured), as upstream's `hasClusterTag`.
    pub fn has_cluster_tag(&self, tags: &[(String, String)]) -> bool {
        if self.cluster_id.is_empty() {
            return true;
        }
        let key = self.cluster_tag_key();
        tags.iter()
            .any(|(k, v)| *k == key || (k == LEGACY_CLUSTER_TAG && *v == self.cluster_id))
    }

    /// Whether resources with these tags were made by this cluster
    /// (`kubernetes.io/cluster/<id>=owned`, or the legacy tag), as upstream's
    /// `isOwnedSecurityGroup`; false without a cluster ID.
    pub fn owns(&self, tags: &[(String, String)]) -> bool {
        let key = self.cluster_tag_key();
        !self.cluster_id.is_empty()
            && tags.iter().any(|(k, v)| {
                (*k == key && v == "owned") || (k == LEGACY_CLUSTER_TAG && *v == self.cluster_id)
            })
    }

    /// `kubernetes.io/cluster/<id>`.
    pub fn cluster_tag_key(&self) -> String {
        format!("{CLUSTER_TAG_PREFIX}{}", self.cluster_id)
    }
}

/// `us-east-1a` → `us-east-1` (upstream's `azToRegion`: letters-and-dashes then digits).
pub fn zone_to_region(zone: &str) -> Result<String, String> {
    let bytes = zone.as_bytes();
    let mut end = 0;
    let mut i = 0;
    // ([a-zA-Z]+-)+
    let mut groups = 0;
    loop {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        if i > start && i < bytes.len() && bytes[i] == b'-' {
            i += 1;
            groups += 1;
            end = i;
        } else {
            i = end;
            break;
        }
    }
    let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    if groups == 0 || digits == 0 {
        return Err(format!(
            "cloud config: Zone `{zone}` is not an availability zone name"
        ));
    }
    Ok(zone[..i + digits].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_from_zones_as_upstream() {
        for (zone, region) in [
            ("us-east-1a", "us-east-1"),
            ("eu-west-2c", "eu-west-2"),
            ("us-gov-west-1b", "us-gov-west-1"),
            ("ap-northeast-1-wl1-nrt-wlz-1", "ap-northeast-1"),
            ("us-west-2-lax-1a", "us-west-2"),
        ] {
            assert_eq!(zone_to_region(zone).unwrap(), region, "{zone}");
        }
        for bad in ["", "us", "us-east", "1a", "-1"] {
            assert!(zone_to_region(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overrides_choose_endpoints() {
        let config = Config::parse(
            "[Global]\nZone = us-east-1a\nKubernetesClusterID = c1\n\
             [ServiceOverride \"1\"]\nService = ec2\nRegion = us-east-1\n\
             URL = http://127.0.0.1:5000\nSigningRegion = us-east-1\n\
             [ServiceOverride \"2\"]\nService = Elastic Load Balancing v2\nRegion = us-east-1\n\
             URL = http://localhost:5000/\nSigningRegion = us-east-1\n\
             [ServiceOverride \"3\"]\nService = ec2\nRegion = eu-west-1\n\
             URL = http://other\nSigningRegion = eu-west-1\n",
        )
        .unwrap();
        assert_eq!(config.region, "us-east-1");
        assert_eq!(config.cluster_id, "c1");
        assert_eq!(config.endpoint(Service::Ec2), "http://127.0.0.1:5000");
        assert_eq!(config.endpoint(Service::Elbv2), "http://localhost:5000");
        // No override for Classic: its public endpoint.
        assert_eq!(
            config.endpoint(Service::Elb),
            "https://elasticloadbalancing.us-east-1.amazonaws.com"
        );
        // Upstream's three SDK service IDs, each for its own API.
        let sdk = Config::parse(
            "[Global]\nZone = us-east-1a\n\
             [ServiceOverride \"1\"]\nService = EC2\nRegion = us-east-1\nURL = http://ec2\nSigningRegion = us-east-1\n\
             [ServiceOverride \"2\"]\nService = Elastic Load Balancing\nRegion = us-east-1\nURL = http://elb\nSigningRegion = us-east-1\n\
             [ServiceOverride \"3\"]\nService = Elastic Load Balancing v2\nRegion = us-east-1\nURL = http://elbv2\nSigningRegion = us-east-1\n\
             [ServiceOverride \"4\"]\nService = KMS\nRegion = us-east-1\nURL = http://kms\nSigningRegion = us-east-1\n",
        )
        .unwrap();
        assert_eq!(sdk.endpoint(Service::Ec2), "http://ec2");
        assert_eq!(sdk.endpoint(Service::Elb), "http://elb");
        assert_eq!(sdk.endpoint(Service::Elbv2), "http://elbv2");
        // The SDK v1 prefix names both load balancing APIs.
        let prefix = Config::parse(
            "[Global]\nZone = us-east-1a\n\
             [ServiceOverride \"1\"]\nService = elasticloadbalancing\nRegion = us-east-1\nURL = http://lb\nSigningRegion = us-east-1\n",
        )
        .unwrap();
        assert_eq!(prefix.endpoint(Service::Elb), "http://lb");
        assert_eq!(prefix.endpoint(Service::Elbv2), "http://lb");
        let plain = Config::parse("[Global]\nRegion = cn-north-1\n").unwrap();
        assert_eq!(
            plain.endpoint(Service::Ec2),
            "https://ec2.cn-north-1.amazonaws.com.cn"
        );
        assert_eq!(plain.node_ip_families, ["ipv4"]);
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        for (text, needle) in [
            ("", "Zone"),
            ("[Global]\nZone = nowhere\n", "Zone `nowhere`"),
            ("[Nope]\nx = 1\n", "[nope]"),
            (
                "[Global]\nRegion = r-1\nKubernetesClusterID = a\nKubernetesClusterTag = b\n",
                "do not match",
            ),
            (
                "[Global]\nRegion = r-1\n[ServiceOverride \"1\"]\nService = ec2\n",
                "has no Region",
            ),
            (
                "[Global]\nRegion = r-1\n[ServiceOverride \"1\"]\nService = ec2\nRegion = r-1\nURL = x\nSigningRegion = r-1\n",
                "URL",
            ),
            ("[Global]\nRegion = r-1\nNodeIPFamilies = ipv5\n", "ipv5"),
            (
                "[Global]\nRegion = r-1\n\
                 [ServiceOverride \"a\"]\nService = elasticloadbalancing\nRegion = r-1\nURL = http://x\nSigningRegion = r-1\n\
                 [ServiceOverride \"b\"]\nService = Elastic Load Balancing\nRegion = r-1\nURL = http://y\nSigningRegion = r-1\n",
                "[ServiceOverride \"a\"] and [ServiceOverride \"b\"] both set the Elastic Load Balancing endpoint in r-1",
            ),
            (
                "[Global]\nRegion = r-1\nClusterServiceLoadBalancerHealthProbeMode = Sometimes\n",
                "Sometimes",
            ),
            (
                "[Global]\nRegion = r-1\nClusterServiceSharedLoadBalancerHealthProbePort = x\n",
                "line 3",
            ),
            (
                "[Global]\nRegion = r-1\nDisableSecurityGroupIngress = maybe\n",
                "DisableSecurityGroupIngress",
            ),
        ] {
            let err = Config::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn load_balancer_options() {
        let config = Config::parse(
            "[Global]\nRegion = r-1\nElbSecurityGroup = sg-1\nDisableSecurityGroupIngress = true\n\
             ClusterServiceLoadBalancerHealthProbeMode = Shared\n\
             ClusterServiceSharedLoadBalancerHealthProbePath = /livez\n",
        )
        .unwrap();
        assert_eq!(config.elb_security_group, "sg-1");
        assert!(config.disable_security_group_ingress);
        assert_eq!(
            config.shared_health_probe,
            Some((10256, "/livez".to_owned()))
        );
        let default = Config::parse("[Global]\nRegion = r-1\n").unwrap();
        assert_eq!(default.shared_health_probe, None);
        assert!(!default.disable_security_group_ingress);
    }

    #[test]
    fn cluster_tags() {
        let config = Config::parse("[Global]\nRegion = r-1\nKubernetesClusterTag = c1\n").unwrap();
        assert!(config.legacy_cluster_tag);
        let tag = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert!(config.has_cluster_tag(&tag("kubernetes.io/cluster/c1", "shared")));
        assert!(config.has_cluster_tag(&tag("KubernetesCluster", "c1")));
        assert!(!config.has_cluster_tag(&tag("KubernetesCluster", "c2")));
        assert!(!config.has_cluster_tag(&tag("kubernetes.io/cluster/c2", "owned")));
    }
}
