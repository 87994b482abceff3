//! Reading moto's state back for assertions: running instances, a security group's
//! ingress rules, and the names of load balancers and target groups.

use crate::xml::{child_items, child_text, texts};
use crate::{Moto, Service};

/// One ingress rule of a security group (one source).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IngressRule {
    pub protocol: String,
    /// "" for every protocol (`-1`).
    pub from: String,
    pub to: String,
    /// A CIDR or a security group ID.
    pub source: String,
    pub description: String,
}

impl Moto {
    /// The private DNS names (Nodes' names on AWS) of the running instances, in one
    /// `DescribeInstances`; `None` when moto cannot be asked.
    pub async fn running_instances(&self) -> Option<std::collections::HashSet<String>> {
        let xml = self
            .try_call(
                Service::Ec2,
                "DescribeInstances",
                &[
                    ("Filter.1.Name", "instance-state-name"),
                    ("Filter.1.Value.1", "running"),
                ],
            )
            .await
            .ok()?;
        let doc = roxmltree::Document::parse(&xml).ok()?;
        Some(
            doc.descendants()
                .filter(|n| n.is_element() && n.tag_name().name() == "privateDnsName")
                // The instance's own name, not one of its network interfaces'.
                .filter(|n| {
                    n.parent()
                        .and_then(|p| p.parent())
                        .is_some_and(|set| set.tag_name().name() == "instancesSet")
                })
                .filter_map(|n| n.text().map(str::to_owned))
                .collect(),
        )
    }

    /// The ingress rules of security group `group`, one per source, sorted; `None`
    /// when the group does not exist.
    pub async fn ingress(&self, group: &str) -> Option<Vec<IngressRule>> {
        let xml = match self
            .try_call(
                Service::Ec2,
                "DescribeSecurityGroups",
                &[("GroupId.1", group)],
            )
            .await
        {
            Ok(xml) => xml,
            Err(e) if e.contains("InvalidGroup.NotFound") => return None,
            Err(e) => panic!("{e}"),
        };
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let mut rules = Vec::new();
        let group_item = doc
            .descendants()
            .find(|n| n.is_element() && n.tag_name().name() == "securityGroupInfo")
            .and_then(|l| l.children().find(|c| c.is_element()))?;
        for permission in child_items(group_item, "ipPermissions") {
            let (protocol, from, to) = (
                child_text(permission, "ipProtocol"),
                child_text(permission, "fromPort"),
                child_text(permission, "toPort"),
            );
            for (list, field) in [("ipRanges", "cidrIp"), ("groups", "groupId")] {
                for source in child_items(permission, list) {
                    rules.push(IngressRule {
                        protocol: protocol.clone(),
                        from: from.clone(),
                        to: to.clone(),
                        source: child_text(source, field),
                        description: child_text(source, "description"),
                    });
                }
            }
        }
        rules.sort();
        Some(rules)
    }

    /// The names of every Network Load Balancer.
    pub async fn load_balancer_names(&self) -> Result<Vec<String>, String> {
        let xml = self
            .try_call(Service::Elbv2, "DescribeLoadBalancers", &[])
            .await?;
        Ok(texts(&xml, "LoadBalancerName"))
    }

    /// The names of every Classic Load Balancer.
    pub async fn classic_load_balancer_names(&self) -> Result<Vec<String>, String> {
        let xml = self
            .try_call(Service::Elb, "DescribeLoadBalancers", &[])
            .await?;
        Ok(texts(&xml, "LoadBalancerName"))
    }

    /// The names of every target group (moto answers `TargetGroupNotFound` when there
    /// are none).
    pub async fn target_group_names(&self) -> Result<Vec<String>, String> {
        match self
            .try_call(Service::Elbv2, "DescribeTargetGroups", &[])
            .await
        {
            Ok(xml) => Ok(texts(&xml, "TargetGroupName")),
            Err(e) if e.contains("TargetGroupNotFound") => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}
