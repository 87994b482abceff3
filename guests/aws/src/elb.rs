//! The Classic Elastic Load Balancing calls the provider makes (API 2012-06-01, the
//! same endpoint and IAM prefix, `elasticloadbalancing`, as ELBv2).

use crate::api::{Api, ApiError, Params};
use crate::xml::{self, Node};

/// The Classic ELB API version.
const VERSION: &str = "2012-06-01";

/// A listener: protocols are compared without case (AWS answers upper case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listener {
    /// `tcp`, `ssl`, `http` or `https`.
    pub protocol: String,
    pub port: i32,
    pub instance_protocol: String,
    pub instance_port: i32,
    /// The certificate ARN of an `ssl`/`https` listener, else "".
    pub certificate: String,
}

impl Listener {
    /// Upstream's `elbListenersAreEqual`.
    pub fn same_as(&self, other: &Listener) -> bool {
        self.protocol.eq_ignore_ascii_case(&other.protocol)
            && self
                .instance_protocol
                .eq_ignore_ascii_case(&other.instance_protocol)
            && self.port == other.port
            && self.instance_port == other.instance_port
            && self.certificate.eq_ignore_ascii_case(&other.certificate)
    }
}

/// A health check (`Target` is `PROTOCOL:port[path]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthCheck {
    pub target: String,
    pub healthy_threshold: i32,
    pub unhealthy_threshold: i32,
    pub timeout: i32,
    pub interval: i32,
}

/// The attributes the provider sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub cross_zone: bool,
    pub idle_timeout: i32,
    pub draining_enabled: bool,
    /// `None`: AWS's (300 s).
    pub draining_timeout: Option<i32>,
    pub access_log_enabled: bool,
    pub access_log_bucket: String,
    pub access_log_prefix: String,
    /// `None`: AWS's (60 min).
    pub access_log_emit_interval: Option<i32>,
}

/// A Classic Load Balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadBalancer {
    pub name: String,
    pub dns_name: String,
    /// `internet-facing` or `internal`.
    pub scheme: String,
    pub vpc_id: String,
    pub subnets: Vec<String>,
    pub security_groups: Vec<String>,
    pub listeners: Vec<Listener>,
    /// Policies of each load balancer port.
    pub listener_policies: Vec<(i32, Vec<String>)>,
    /// Policies of each instance port that has some.
    pub backend_policies: Vec<(i32, Vec<String>)>,
    /// `None` until one is configured.
    pub health_check: Option<HealthCheck>,
    pub instances: Vec<String>,
}

fn members(node: Node<'_, '_>, list: &str) -> Vec<String> {
    xml::items(node, list)
        .filter_map(|m| m.text().map(|t| t.trim().to_owned()))
        .filter(|t| !t.is_empty())
        .collect()
}

fn int(node: Node<'_, '_>, path: &str) -> i32 {
    xml::text(node, path).parse().unwrap_or_default()
}

impl LoadBalancer {
    fn read(node: Node<'_, '_>) -> Self {
        let mut listeners = Vec::new();
        let mut listener_policies = Vec::new();
        for d in xml::items(node, "ListenerDescriptions") {
            let l = xml::child(d, "Listener");
            let field = |name: &str| l.map(|l| xml::text(l, name)).unwrap_or_default();
            let listener = Listener {
                protocol: field("Protocol").to_ascii_lowercase(),
                port: field("LoadBalancerPort").parse().unwrap_or_default(),
                instance_protocol: field("InstanceProtocol").to_ascii_lowercase(),
                instance_port: field("InstancePort").parse().unwrap_or_default(),
                certificate: field("SSLCertificateId"),
            };
            listener_policies.push((listener.port, members(d, "PolicyNames")));
            listeners.push(listener);
        }
        let health_check = xml::child(node, "HealthCheck").map(|h| HealthCheck {
            target: xml::text(h, "Target"),
            healthy_threshold: int(h, "HealthyThreshold"),
            unhealthy_threshold: int(h, "UnhealthyThreshold"),
            timeout: int(h, "Timeout"),
            interval: int(h, "Interval"),
        });
        Self {
            name: xml::text(node, "LoadBalancerName"),
            dns_name: xml::text(node, "DNSName"),
            scheme: xml::text(node, "Scheme"),
            vpc_id: xml::text(node, "VPCId"),
            subnets: members(node, "Subnets"),
            security_groups: members(node, "SecurityGroups"),
            listeners,
            listener_policies,
            backend_policies: xml::items(node, "BackendServerDescriptions")
                .map(|b| (int(b, "InstancePort"), members(b, "PolicyNames")))
                .collect(),
            health_check,
            instances: xml::items(node, "Instances")
                .map(|i| xml::text(i, "InstanceId"))
                .filter(|i| !i.is_empty())
                .collect(),
        }
    }
}

fn listener_params(mut params: Params, listeners: &[Listener]) -> Params {
    for (i, l) in listeners.iter().enumerate() {
        let p = format!("Listeners.member.{}", i + 1);
        params = params
            .set(format!("{p}.Protocol"), &l.protocol)
            .set(format!("{p}.LoadBalancerPort"), l.port.to_string())
            .set(format!("{p}.InstanceProtocol"), &l.instance_protocol)
            .set(format!("{p}.InstancePort"), l.instance_port.to_string());
        if !l.certificate.is_empty() {
            params = params.set(format!("{p}.SSLCertificateId"), &l.certificate);
        }
    }
    params
}

/// The load balancers of a `DescribeLoadBalancers` answer.
fn descriptions(root: Node<'_, '_>) -> Vec<LoadBalancer> {
    xml::find(root, "DescribeLoadBalancersResult")
        .into_iter()
        .flat_map(|result| xml::items(result, "LoadBalancerDescriptions"))
        .map(LoadBalancer::read)
        .collect()
}

/// The Classic ELB client.
#[derive(Debug, Clone)]
pub struct Elb {
    api: Api,
}

impl Elb {
    pub fn new(endpoint: String) -> Self {
        Self {
            api: Api::new(endpoint, "elasticloadbalancing", VERSION),
        }
    }

    /// The load balancer named `name`, if any.
    pub fn load_balancer(&self, name: &str) -> Result<Option<LoadBalancer>, ApiError> {
        let found = self.api.call_read(
            "DescribeLoadBalancers",
            &Params::new().list("LoadBalancerNames.member", &[name]),
            |root| Ok(descriptions(root).into_iter().next()),
        );
        match found {
            Err(e) if e.code() == "LoadBalancerNotFound" => Ok(None),
            other => other,
        }
    }

    /// Every Classic load balancer of the account in the region.
    pub fn all_load_balancers(&self) -> Result<Vec<LoadBalancer>, ApiError> {
        let mut found = Vec::new();
        self.api.pages(
            "DescribeLoadBalancers",
            &Params::new().set("PageSize", "400"),
            "Marker",
            "NextMarker",
            |root| {
                found.extend(descriptions(root));
                Ok(())
            },
        )?;
        Ok(found)
    }

    /// Creates a load balancer; its DNS name.
    pub fn create_load_balancer(
        &self,
        name: &str,
        internal: bool,
        listeners: &[Listener],
        subnets: &[String],
        security_groups: &[String],
        tags: &[(String, String)],
    ) -> Result<String, ApiError> {
        let mut params = Params::new().set("LoadBalancerName", name);
        if internal {
            params = params.set("Scheme", "internal");
        }
        let params = listener_params(params, listeners)
            .list("Subnets.member", subnets)
            .list("SecurityGroups.member", security_groups)
            .tags("Tags.member", tags);
        self.api.call_read("CreateLoadBalancer", &params, |root| {
            Ok(xml::find(root, "DNSName")
                .and_then(|n| n.text())
                .unwrap_or_default()
                .trim()
                .to_owned())
        })
    }

    /// Deletes the load balancer (AWS succeeds when it is gone).
    pub fn delete_load_balancer(&self, name: &str) -> Result<(), ApiError> {
        self.api
            .call(
                "DeleteLoadBalancer",
                &Params::new().set("LoadBalancerName", name),
            )
            .map(drop)
    }

    pub fn create_listeners(&self, name: &str, listeners: &[Listener]) -> Result<(), ApiError> {
        let params = listener_params(Params::new().set("LoadBalancerName", name), listeners);
        self.api
            .call("CreateLoadBalancerListeners", &params)
            .map(drop)
    }

    /// Deletes the listener on load balancer port `port`.
    pub fn delete_listener(&self, name: &str, port: i32) -> Result<(), ApiError> {
        let params = Params::new()
            .set("LoadBalancerName", name)
            .list("LoadBalancerPorts.member", &[port.to_string()]);
        self.api
            .call("DeleteLoadBalancerListeners", &params)
            .map(drop)
    }

    pub fn configure_health_check(&self, name: &str, hc: &HealthCheck) -> Result<(), ApiError> {
        let params = Params::new()
            .set("LoadBalancerName", name)
            .set("HealthCheck.Target", &hc.target)
            .set("HealthCheck.Interval", hc.interval.to_string())
            .set("HealthCheck.Timeout", hc.timeout.to_string())
            .set(
                "HealthCheck.HealthyThreshold",
                hc.healthy_threshold.to_string(),
            )
            .set(
                "HealthCheck.UnhealthyThreshold",
                hc.unhealthy_threshold.to_string(),
            );
        self.api.call("ConfigureHealthCheck", &params).map(drop)
    }

    /// Registers (`register`) or deregisters instances.
    pub fn change_instances(
        &self,
        name: &str,
        instances: &[String],
        register: bool,
    ) -> Result<(), ApiError> {
        if instances.is_empty() {
            return Ok(());
        }
        let mut params = Params::new().set("LoadBalancerName", name);
        for (i, id) in instances.iter().enumerate() {
            params = params.set(format!("Instances.member.{}.InstanceId", i + 1), id);
        }
        let action = if register {
            "RegisterInstancesWithLoadBalancer"
        } else {
            "DeregisterInstancesFromLoadBalancer"
        };
        self.api.call(action, &params).map(drop)
    }

    pub fn attributes(&self, name: &str) -> Result<Attributes, ApiError> {
        self.api.call_read(
            "DescribeLoadBalancerAttributes",
            &Params::new().set("LoadBalancerName", name),
            |root| {
                let a = xml::find(root, "LoadBalancerAttributes")
                    .ok_or("the answer has no LoadBalancerAttributes")?;
                let some = |path: &str| xml::text(a, path).parse().ok();
                Ok(Attributes {
                    cross_zone: xml::text(a, "CrossZoneLoadBalancing/Enabled") == "true",
                    idle_timeout: int(a, "ConnectionSettings/IdleTimeout"),
                    draining_enabled: xml::text(a, "ConnectionDraining/Enabled") == "true",
                    draining_timeout: some("ConnectionDraining/Timeout"),
                    access_log_enabled: xml::text(a, "AccessLog/Enabled") == "true",
                    access_log_bucket: xml::text(a, "AccessLog/S3BucketName"),
                    access_log_prefix: xml::text(a, "AccessLog/S3BucketPrefix"),
                    access_log_emit_interval: some("AccessLog/EmitInterval"),
                })
            },
        )
    }

    pub fn modify_attributes(&self, name: &str, a: &Attributes) -> Result<(), ApiError> {
        let p = "LoadBalancerAttributes";
        let mut params = Params::new()
            .set("LoadBalancerName", name)
            .set(
                format!("{p}.CrossZoneLoadBalancing.Enabled"),
                a.cross_zone.to_string(),
            )
            .set(
                format!("{p}.ConnectionSettings.IdleTimeout"),
                a.idle_timeout.to_string(),
            )
            .set(
                format!("{p}.ConnectionDraining.Enabled"),
                a.draining_enabled.to_string(),
            )
            .set(
                format!("{p}.AccessLog.Enabled"),
                a.access_log_enabled.to_string(),
            );
        if let Some(timeout) = a.draining_timeout {
            params = params.set(
                format!("{p}.ConnectionDraining.Timeout"),
                timeout.to_string(),
            );
        }
        if a.access_log_enabled {
            params = params
                .set(format!("{p}.AccessLog.S3BucketName"), &a.access_log_bucket)
                .set(
                    format!("{p}.AccessLog.S3BucketPrefix"),
                    &a.access_log_prefix,
                );
            if let Some(interval) = a.access_log_emit_interval {
                params = params.set(format!("{p}.AccessLog.EmitInterval"), interval.to_string());
            }
        }
        self.api
            .call("ModifyLoadBalancerAttributes", &params)
            .map(drop)
    }

    /// Whether the load balancer has policy `policy`.
    pub fn has_policy(&self, name: &str, policy: &str) -> Result<bool, ApiError> {
        let params = Params::new()
            .set("LoadBalancerName", name)
            .list("PolicyNames.member", &[policy]);
        match self.api.call("DescribeLoadBalancerPolicies", &params) {
            Ok(text) => Ok(text.contains(&format!("<PolicyName>{policy}</PolicyName>"))),
            Err(e) if matches!(e.code(), "PolicyNotFound" | "PolicyNotFoundException") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Creates policy `policy` of type `kind` with one attribute.
    pub fn create_policy(
        &self,
        name: &str,
        policy: &str,
        kind: &str,
        attribute: (&str, &str),
    ) -> Result<(), ApiError> {
        let params = Params::new()
            .set("LoadBalancerName", name)
            .set("PolicyName", policy)
            .set("PolicyTypeName", kind)
            .set("PolicyAttributes.member.1.AttributeName", attribute.0)
            .set("PolicyAttributes.member.1.AttributeValue", attribute.1);
        self.api.call("CreateLoadBalancerPolicy", &params).map(drop)
    }

    /// Sets the policies of the listener on `port` (replacing its others).
    pub fn set_listener_policies(
        &self,
        name: &str,
        port: i32,
        policies: &[&str],
    ) -> Result<(), ApiError> {
        self.set_policies(
            "SetLoadBalancerPoliciesOfListener",
            "LoadBalancerPort",
            name,
            port,
            policies,
        )
    }

    /// Sets the policies of the instance port `port` (replacing its others).
    pub fn set_backend_policies(
        &self,
        name: &str,
        port: i32,
        policies: &[&str],
    ) -> Result<(), ApiError> {
        self.set_policies(
            "SetLoadBalancerPoliciesForBackendServer",
            "InstancePort",
            name,
            port,
            policies,
        )
    }

    /// `action` with `PolicyNames` (empty: none) for the port named by `port_field`.
    fn set_policies(
        &self,
        action: &str,
        port_field: &str,
        name: &str,
        port: i32,
        policies: &[&str],
    ) -> Result<(), ApiError> {
        let params = Params::new()
            .set("LoadBalancerName", name)
            .set(port_field, port.to_string());
        let params = if policies.is_empty() {
            params.set("PolicyNames", "")
        } else {
            params.list("PolicyNames.member", policies)
        };
        self.api.call(action, &params).map(drop)
    }

    pub fn apply_security_groups(&self, name: &str, groups: &[String]) -> Result<(), ApiError> {
        let params = Params::new()
            .set("LoadBalancerName", name)
            .list("SecurityGroups.member", groups);
        self.api
            .call("ApplySecurityGroupsToLoadBalancer", &params)
            .map(drop)
    }

    /// Attaches (`attach`) or detaches subnets.
    pub fn change_subnets(
        &self,
        name: &str,
        subnets: &[String],
        attach: bool,
    ) -> Result<(), ApiError> {
        if subnets.is_empty() {
            return Ok(());
        }
        let params = Params::new()
            .set("LoadBalancerName", name)
            .list("Subnets.member", subnets);
        let action = if attach {
            "AttachLoadBalancerToSubnets"
        } else {
            "DetachLoadBalancerFromSubnets"
        };
        self.api.call(action, &params).map(drop)
    }

    pub fn add_tags(&self, name: &str, tags: &[(String, String)]) -> Result<(), ApiError> {
        if tags.is_empty() {
            return Ok(());
        }
        let params = Params::new()
            .list("LoadBalancerNames.member", &[name])
            .tags("Tags.member", tags);
        self.api.call("AddTags", &params).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_classic_load_balancer_is_read_from_describe_load_balancers() {
        let text = r#"<DescribeLoadBalancersResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/">
<DescribeLoadBalancersResult><LoadBalancerDescriptions><member>
  <LoadBalancerName>a1</LoadBalancerName><DNSName>a1-1.us-east-1.elb.amazonaws.com</DNSName>
  <ListenerDescriptions>
    <member><Listener><Protocol>SSL</Protocol><LoadBalancerPort>443</LoadBalancerPort>
      <InstanceProtocol>TCP</InstanceProtocol><InstancePort>30443</InstancePort>
      <SSLCertificateId>arn:aws:iam::1:server-certificate/x</SSLCertificateId></Listener>
      <PolicyNames><member>k8s-SSLNegotiationPolicy-P</member></PolicyNames></member>
  </ListenerDescriptions>
  <BackendServerDescriptions><member><InstancePort>30443</InstancePort>
    <PolicyNames><member>k8s-proxyprotocol-enabled</member></PolicyNames></member></BackendServerDescriptions>
  <Subnets><member>subnet-1</member></Subnets><VPCId>vpc-1</VPCId>
  <SecurityGroups><member>sg-1</member></SecurityGroups>
  <Instances><member><InstanceId>i-1</InstanceId></member></Instances>
  <HealthCheck><Target>TCP:30443</Target><Interval>10</Interval><Timeout>5</Timeout>
    <UnhealthyThreshold>6</UnhealthyThreshold><HealthyThreshold>2</HealthyThreshold></HealthCheck>
  <Scheme>internet-facing</Scheme>
</member></LoadBalancerDescriptions></DescribeLoadBalancersResult></DescribeLoadBalancersResponse>"#;
        let doc = xml::parse(text).unwrap();
        let node = xml::find(doc.root_element(), "member").unwrap();
        let lb = LoadBalancer::read(node);
        assert_eq!(lb.listeners[0].protocol, "ssl");
        assert!(lb.listeners[0].same_as(&Listener {
            protocol: "SSL".into(),
            port: 443,
            instance_protocol: "tcp".into(),
            instance_port: 30443,
            certificate: "arn:aws:iam::1:server-certificate/x".into(),
        }));
        assert_eq!(
            lb.listener_policies,
            [(443, vec!["k8s-SSLNegotiationPolicy-P".to_owned()])]
        );
        assert_eq!(
            lb.backend_policies,
            [(30443, vec!["k8s-proxyprotocol-enabled".to_owned()])]
        );
        assert_eq!(
            (lb.subnets.as_slice(), lb.security_groups.as_slice()),
            (&["subnet-1".to_owned()][..], &["sg-1".to_owned()][..])
        );
        assert_eq!(lb.instances, ["i-1"]);
        assert_eq!(lb.health_check.unwrap().unhealthy_threshold, 6);
    }
}
