//! The Elastic Load Balancing v2 calls the provider makes (Network Load Balancers).

use crate::api::{Api, ApiError, Params};
use crate::xml::{self, Node};

/// The ELBv2 API version.
const VERSION: &str = "2015-12-01";

/// Tags as key/value pairs.
pub type Tags = Vec<(String, String)>;

/// A load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadBalancer {
    pub arn: String,
    pub name: String,
    pub dns_name: String,
    /// `provisioning`, `active`, `active_impaired` or `failed`.
    pub state: String,
    pub lb_type: String,
    pub vpc_id: String,
    /// The subnets it is in.
    pub subnets: Vec<String>,
}

/// A target group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetGroup {
    pub arn: String,
    pub name: String,
    pub port: i32,
    pub protocol: String,
    pub health_check_protocol: String,
    pub health_check_port: String,
    pub health_check_path: String,
    pub health_check_interval: String,
    pub healthy_threshold: String,
    pub unhealthy_threshold: String,
}

/// A subnet of a new load balancer, with the Elastic IP or private address it gets
/// there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubnetMapping {
    pub subnet: String,
    pub allocation_id: Option<String>,
    pub private_ipv4_address: Option<String>,
}

/// Attributes (of a load balancer or a target group) as key/value pairs.
pub type Attributes = Vec<(String, String)>;

/// A listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listener {
    pub arn: String,
    pub port: i32,
    /// `TCP`, `UDP` or `TLS`.
    pub protocol: String,
    /// The target group of its first `forward` action.
    pub target_group_arn: String,
    /// A TLS listener's (first) certificate ARN.
    pub certificate: String,
    /// A TLS listener's security policy; "" for AWS's default.
    pub ssl_policy: String,
}

impl Listener {
    /// The TLS parameters of a new listener, or of a change to `current`.
    fn tls_params(&self, mut params: Params, current: Option<&Listener>) -> Params {
        if self.protocol != "TLS" {
            return params;
        }
        if current.is_none_or(|c| c.certificate != self.certificate) {
            params = params.set("Certificates.member.1.CertificateArn", &self.certificate);
        }
        if !self.ssl_policy.is_empty() && current.is_none_or(|c| c.ssl_policy != self.ssl_policy) {
            params = params.set("SslPolicy", &self.ssl_policy);
        }
        params
    }

    /// Whether `current` needs a `ModifyListener` to become this listener.
    pub fn differs_from(&self, current: &Listener) -> bool {
        self.protocol != current.protocol
            || self.target_group_arn != current.target_group_arn
            || (self.protocol == "TLS"
                && (self.certificate != current.certificate
                    || (!self.ssl_policy.is_empty() && self.ssl_policy != current.ssl_policy)))
    }
}

/// A registered target.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub id: String,
    pub port: i32,
}

/// A health check, as sent to `CreateTargetGroup`/`ModifyTargetGroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// `TCP`, `HTTP` or `HTTPS`.
    pub protocol: String,
    /// `traffic-port` or a port number.
    pub port: String,
    /// For HTTP(S) only.
    pub path: String,
    pub interval: i32,
    pub timeout: i32,
    pub healthy_threshold: i32,
    pub unhealthy_threshold: i32,
}

impl HealthCheck {
    fn params(&self, mut params: Params) -> Params {
        params = params
            .set("HealthCheckProtocol", self.protocol.clone())
            .set("HealthCheckPort", self.port.clone())
            .set("HealthCheckIntervalSeconds", self.interval.to_string())
            .set("HealthyThresholdCount", self.healthy_threshold.to_string())
            .set(
                "UnhealthyThresholdCount",
                self.unhealthy_threshold.to_string(),
            );
        if self.protocol != "TCP" {
            params = params.set("HealthCheckPath", self.path.clone());
        }
        params
    }

    /// Whether `group`'s health check differs from this one in what can be modified.
    pub fn differs_from(&self, group: &TargetGroup) -> bool {
        group.health_check_port != self.port
            || group.healthy_threshold != self.healthy_threshold.to_string()
            || group.unhealthy_threshold != self.unhealthy_threshold.to_string()
            || (self.protocol != "TCP" && group.health_check_path != self.path)
    }
}

impl LoadBalancer {
    fn read(node: Node<'_, '_>) -> Self {
        Self {
            arn: xml::text(node, "LoadBalancerArn"),
            name: xml::text(node, "LoadBalancerName"),
            dns_name: xml::text(node, "DNSName"),
            state: xml::text(node, "State/Code"),
            lb_type: xml::text(node, "Type"),
            vpc_id: xml::text(node, "VpcId"),
            subnets: xml::items(node, "AvailabilityZones")
                .map(|z| xml::text(z, "SubnetId"))
                .filter(|s| !s.is_empty())
                .collect(),
        }
    }
}

impl TargetGroup {
    fn read(node: Node<'_, '_>) -> Self {
        Self {
            arn: xml::text(node, "TargetGroupArn"),
            name: xml::text(node, "TargetGroupName"),
            port: xml::text(node, "Port").parse().unwrap_or_default(),
            protocol: xml::text(node, "Protocol"),
            health_check_protocol: xml::text(node, "HealthCheckProtocol"),
            health_check_port: xml::text(node, "HealthCheckPort"),
            health_check_path: xml::text(node, "HealthCheckPath"),
            health_check_interval: xml::text(node, "HealthCheckIntervalSeconds"),
            healthy_threshold: xml::text(node, "HealthyThresholdCount"),
            unhealthy_threshold: xml::text(node, "UnhealthyThresholdCount"),
        }
    }
}

/// Where the result of an ELBv2 answer is: `<ActionResult>` under the root.
fn result<'a, 'i>(root: Node<'a, 'i>, action: &str) -> Option<Node<'a, 'i>> {
    xml::child(root, &format!("{action}Result"))
}

/// The ELBv2 client.
#[derive(Debug, Clone)]
pub struct Elbv2 {
    api: Api,
}

impl Elbv2 {
    pub fn new(endpoint: String) -> Self {
        Self {
            api: Api::new(endpoint, "elasticloadbalancing", VERSION),
        }
    }

    pub fn endpoint(&self) -> &str {
        self.api.endpoint()
    }

    /// The load balancer named `name`, if any.
    pub fn load_balancer(&self, name: &str) -> Result<Option<LoadBalancer>, ApiError> {
        let found = self.api.call_read(
            "DescribeLoadBalancers",
            &Params::new().list("Names.member", &[name]),
            |root| {
                Ok(result(root, "DescribeLoadBalancers")
                    .and_then(|r| xml::items(r, "LoadBalancers").next())
                    .map(LoadBalancer::read))
            },
        );
        match found {
            Err(e) if e.code() == "LoadBalancerNotFound" => Ok(None),
            other => other,
        }
    }

    /// Creates a Network Load Balancer in the subnets of `subnets` (with an Elastic IP
    /// or a private address each, when given).
    pub fn create_load_balancer(
        &self,
        name: &str,
        internal: bool,
        subnets: &[SubnetMapping],
        tags: &[(String, String)],
    ) -> Result<LoadBalancer, ApiError> {
        let mut params = Params::new().set("Name", name).set("Type", "network").set(
            "Scheme",
            if internal {
                "internal"
            } else {
                "internet-facing"
            },
        );
        for (i, mapping) in subnets.iter().enumerate() {
            let prefix = format!("SubnetMappings.member.{}", i + 1);
            params = params.set(format!("{prefix}.SubnetId"), &mapping.subnet);
            if let Some(allocation) = &mapping.allocation_id {
                params = params.set(format!("{prefix}.AllocationId"), allocation);
            }
            if let Some(address) = &mapping.private_ipv4_address {
                params = params.set(format!("{prefix}.PrivateIPv4Address"), address);
            }
        }
        let params = params.tags("Tags.member", tags);
        self.api.call_read("CreateLoadBalancer", &params, |root| {
            result(root, "CreateLoadBalancer")
                .and_then(|r| xml::items(r, "LoadBalancers").next())
                .map(LoadBalancer::read)
                .ok_or_else(|| "the answer names no load balancer".to_owned())
        })
    }

    /// A load balancer's attributes.
    pub fn load_balancer_attributes(&self, arn: &str) -> Result<Attributes, ApiError> {
        self.attributes("LoadBalancer", arn)
    }

    /// Sets some of a load balancer's attributes.
    pub fn modify_load_balancer_attributes(
        &self,
        arn: &str,
        attributes: &[(String, String)],
    ) -> Result<(), ApiError> {
        self.modify_attributes("LoadBalancer", arn, attributes)
    }

    /// A target group's attributes.
    pub fn target_group_attributes(&self, arn: &str) -> Result<Attributes, ApiError> {
        self.attributes("TargetGroup", arn)
    }

    /// Sets some of a target group's attributes.
    pub fn modify_target_group_attributes(
        &self,
        arn: &str,
        attributes: &[(String, String)],
    ) -> Result<(), ApiError> {
        self.modify_attributes("TargetGroup", arn, attributes)
    }

    /// `Describe<kind>Attributes` of the `<kind>Arn` `arn` (`kind`: `LoadBalancer` or
    /// `TargetGroup`).
    fn attributes(&self, kind: &str, arn: &str) -> Result<Attributes, ApiError> {
        let action = format!("Describe{kind}Attributes");
        let params = Params::new().set(format!("{kind}Arn"), arn);
        self.api.call_read(&action, &params, |root| {
            Ok(result(root, &action)
                .map(|r| xml::tags(r, "Attributes"))
                .unwrap_or_default())
        })
    }

    /// `Modify<kind>Attributes` of the `<kind>Arn` `arn`.
    fn modify_attributes(
        &self,
        kind: &str,
        arn: &str,
        attributes: &[(String, String)],
    ) -> Result<(), ApiError> {
        let params = Params::new()
            .set(format!("{kind}Arn"), arn)
            .tags("Attributes.member", attributes);
        self.api
            .call(&format!("Modify{kind}Attributes"), &params)
            .map(|_| ())
    }

    /// Deletes a load balancer (and its listeners).
    pub fn delete_load_balancer(&self, arn: &str) -> Result<(), ApiError> {
        self.api
            .call(
                "DeleteLoadBalancer",
                &Params::new().set("LoadBalancerArn", arn),
            )
            .map(drop)
    }

    /// The load balancer's listeners.
    pub fn listeners(&self, lb_arn: &str) -> Result<Vec<Listener>, ApiError> {
        let mut listeners = Vec::new();
        self.api.pages(
            "DescribeListeners",
            &Params::new().set("LoadBalancerArn", lb_arn),
            "Marker",
            "NextMarker",
            |root| {
                if let Some(r) = result(root, "DescribeListeners") {
                    listeners.extend(xml::items(r, "Listeners").map(|l| {
                        Listener {
                            arn: xml::text(l, "ListenerArn"),
                            port: xml::text(l, "Port").parse().unwrap_or_default(),
                            protocol: xml::text(l, "Protocol"),
                            target_group_arn: xml::items(l, "DefaultActions")
                                .map(|a| xml::text(a, "TargetGroupArn"))
                                .find(|a| !a.is_empty())
                                .unwrap_or_default(),
                            certificate: xml::items(l, "Certificates")
                                .map(|c| xml::text(c, "CertificateArn"))
                                .find(|c| !c.is_empty())
                                .unwrap_or_default(),
                            ssl_policy: xml::text(l, "SslPolicy"),
                        }
                    }));
                }
                Ok(())
            },
        )?;
        Ok(listeners)
    }

    /// Creates `listener` (forwarding to its target group).
    pub fn create_listener(
        &self,
        lb_arn: &str,
        listener: &Listener,
        tags: &[(String, String)],
    ) -> Result<(), ApiError> {
        let params = Params::new()
            .set("LoadBalancerArn", lb_arn)
            .set("Port", listener.port.to_string())
            .set("Protocol", &listener.protocol)
            .set("DefaultActions.member.1.Type", "forward")
            .set(
                "DefaultActions.member.1.TargetGroupArn",
                &listener.target_group_arn,
            );
        let params = listener.tls_params(params, None).tags("Tags.member", tags);
        self.api.call("CreateListener", &params).map(drop)
    }

    /// Changes `current` into `wanted` (sending only what differs).
    pub fn modify_listener(&self, current: &Listener, wanted: &Listener) -> Result<(), ApiError> {
        let mut params = Params::new().set("ListenerArn", &current.arn);
        if wanted.protocol != current.protocol {
            params = params.set("Protocol", &wanted.protocol);
        }
        if wanted.target_group_arn != current.target_group_arn {
            params = params.set("DefaultActions.member.1.Type", "forward").set(
                "DefaultActions.member.1.TargetGroupArn",
                &wanted.target_group_arn,
            );
        }
        let params = wanted.tls_params(params, Some(current));
        self.api.call("ModifyListener", &params).map(drop)
    }

    /// Deletes a listener; gone already is fine.
    pub fn delete_listener(&self, arn: &str) -> Result<(), ApiError> {
        match self
            .api
            .call("DeleteListener", &Params::new().set("ListenerArn", arn))
        {
            Err(e) if e.code() == "ListenerNotFound" => Ok(()),
            other => other.map(drop),
        }
    }

    /// Target groups attached to the load balancer.
    pub fn target_groups(&self, lb_arn: &str) -> Result<Vec<TargetGroup>, ApiError> {
        match self.describe_target_groups(Params::new().set("LoadBalancerArn", lb_arn)) {
            // Some implementations answer "not found" for a load balancer without groups.
            Err(e) if e.code() == "TargetGroupNotFound" => Ok(Vec::new()),
            other => other,
        }
    }

    /// Every target group of the account in the region.
    pub fn all_target_groups(&self) -> Result<Vec<TargetGroup>, ApiError> {
        match self.describe_target_groups(Params::new()) {
            // Some implementations answer "not found" when there are none.
            Err(e) if e.code() == "TargetGroupNotFound" => Ok(Vec::new()),
            other => other,
        }
    }

    /// The tags of these resources (20 per call).
    pub fn tags(&self, arns: &[String]) -> Result<Vec<(String, Tags)>, ApiError> {
        let mut tags = Vec::new();
        for chunk in arns.chunks(20) {
            let params = Params::new().list("ResourceArns.member", chunk);
            tags.extend(self.api.call_read("DescribeTags", &params, |root| {
                Ok(result(root, "DescribeTags")
                    .into_iter()
                    .flat_map(|r| xml::items(r, "TagDescriptions"))
                    .map(|d| (xml::text(d, "ResourceArn"), xml::tags(d, "Tags")))
                    .collect::<Vec<_>>())
            })?);
        }
        Ok(tags)
    }

    /// The target group named `name`, if any.
    pub fn target_group(&self, name: &str) -> Result<Option<TargetGroup>, ApiError> {
        match self.describe_target_groups(Params::new().list("Names.member", &[name])) {
            Ok(groups) => Ok(groups.into_iter().next()),
            Err(e) if e.code() == "TargetGroupNotFound" => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn describe_target_groups(&self, params: Params) -> Result<Vec<TargetGroup>, ApiError> {
        let mut groups = Vec::new();
        self.api.pages(
            "DescribeTargetGroups",
            &params,
            "Marker",
            "NextMarker",
            |root| {
                if let Some(r) = result(root, "DescribeTargetGroups") {
                    groups.extend(xml::items(r, "TargetGroups").map(TargetGroup::read));
                }
                Ok(())
            },
        )?;
        Ok(groups)
    }

    /// Creates an instance target group on `port` in `vpc`.
    pub fn create_target_group(
        &self,
        name: &str,
        protocol: &str,
        port: i32,
        vpc: &str,
        health: &HealthCheck,
        tags: &[(String, String)],
    ) -> Result<TargetGroup, ApiError> {
        let params = health.params(
            Params::new()
                .set("Name", name)
                .set("Protocol", protocol)
                .set("Port", port.to_string())
                .set("VpcId", vpc)
                .set("TargetType", "instance"),
        );
        let params = params.tags("Tags.member", tags);
        self.api.call_read("CreateTargetGroup", &params, |root| {
            result(root, "CreateTargetGroup")
                .and_then(|r| xml::items(r, "TargetGroups").next())
                .map(TargetGroup::read)
                .ok_or_else(|| "the answer names no target group".to_owned())
        })
    }

    /// Changes a target group's health check.
    pub fn modify_target_group(&self, arn: &str, health: &HealthCheck) -> Result<(), ApiError> {
        let params = health.params(Params::new().set("TargetGroupArn", arn));
        self.api.call("ModifyTargetGroup", &params).map(drop)
    }

    /// Deletes a target group; gone already is fine.
    pub fn delete_target_group(&self, arn: &str) -> Result<(), ApiError> {
        match self.api.call(
            "DeleteTargetGroup",
            &Params::new().set("TargetGroupArn", arn),
        ) {
            Err(e) if e.code() == "TargetGroupNotFound" => Ok(()),
            other => other.map(drop),
        }
    }

    /// The group's registered targets (those being deregistered left out).
    pub fn targets(&self, group_arn: &str) -> Result<Vec<Target>, ApiError> {
        self.api.call_read(
            "DescribeTargetHealth",
            &Params::new().set("TargetGroupArn", group_arn),
            |root| {
                Ok(result(root, "DescribeTargetHealth")
                    .into_iter()
                    .flat_map(|r| xml::items(r, "TargetHealthDescriptions"))
                    .filter(|d| {
                        xml::text(*d, "TargetHealth/Reason") != "Target.DeregistrationInProgress"
                    })
                    .map(|d| Target {
                        id: xml::text(d, "Target/Id"),
                        port: xml::text(d, "Target/Port").parse().unwrap_or_default(),
                    })
                    .collect())
            },
        )
    }

    /// Registers (`register`) or deregisters targets, 100 per call.
    pub fn change_targets(
        &self,
        group_arn: &str,
        targets: &[Target],
        register: bool,
    ) -> Result<(), ApiError> {
        let action = if register {
            "RegisterTargets"
        } else {
            "DeregisterTargets"
        };
        for chunk in targets.chunks(100) {
            let mut params = Params::new().set("TargetGroupArn", group_arn);
            for (i, target) in chunk.iter().enumerate() {
                params = params
                    .set(format!("Targets.member.{}.Id", i + 1), target.id.clone())
                    .set(
                        format!("Targets.member.{}.Port", i + 1),
                        target.port.to_string(),
                    );
            }
            self.api.call(action, &params)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;

    const CREATED: &str = r#"<CreateLoadBalancerResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/">
  <CreateLoadBalancerResult><LoadBalancers><member>
    <LoadBalancerArn>arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/net/a1/1</LoadBalancerArn>
    <LoadBalancerName>a1</LoadBalancerName><Type>network</Type>
  </member></LoadBalancers></CreateLoadBalancerResult>
</CreateLoadBalancerResponse>"#;

    /// moto drops `AllocationId` and `PrivateIPv4Address`: what is sent is checked
    /// here (upstream's `createSubnetMappings`).
    #[test]
    fn subnets_are_sent_as_mappings_with_their_addresses() {
        let cloud = MockTransport::new();
        cloud.on(
            "POST",
            "/",
            Response::new(200).with_body("text/xml", CREATED),
        );
        let _installed = cloud.install();
        let elb = Elbv2::new("https://elasticloadbalancing.us-east-1.amazonaws.com".into());
        let subnets = [
            SubnetMapping {
                subnet: "subnet-a".into(),
                allocation_id: Some("eipalloc-1".into()),
                private_ipv4_address: None,
            },
            SubnetMapping {
                subnet: "subnet-b".into(),
                allocation_id: None,
                private_ipv4_address: Some("10.0.1.5".into()),
            },
        ];
        let lb = elb
            .create_load_balancer("a1", false, &subnets, &[])
            .unwrap();
        assert_eq!(lb.name, "a1");
        let body = String::from_utf8_lossy(cloud.requests()[0].body_bytes()).into_owned();
        assert!(
            body.contains(
                "&SubnetMappings.member.1.SubnetId=subnet-a\
                 &SubnetMappings.member.1.AllocationId=eipalloc-1\
                 &SubnetMappings.member.2.SubnetId=subnet-b\
                 &SubnetMappings.member.2.PrivateIPv4Address=10.0.1.5"
            ),
            "{body}"
        );
        assert!(!body.contains("Subnets.member"), "{body}");
    }
}
