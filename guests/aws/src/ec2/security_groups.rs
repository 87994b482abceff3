//! Security groups: reading them with their ingress rules, authorizing and revoking
//! rules and changing their descriptions, creating and deleting groups.
//!
//! A rule is kept flat ([`Rule`]: one protocol, one port range, one source), the form
//! the load balancer code compares and diffs; EC2's grouped `IpPermissions` are built
//! and read here only.

use super::Ec2;
use crate::api::{ApiError, Params};
use crate::xml::{self, Node};

/// Where a rule lets traffic in from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// An IPv4 CIDR (`IpRanges`).
    Cidr(String),
    /// An IPv6 CIDR (`Ipv6Ranges`).
    Ipv6Cidr(String),
    /// Another security group (`Groups`, user-ID/group pairs).
    Group(String),
}

/// One ingress rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// `tcp`, `udp`, `icmp` or `-1` (every protocol).
    pub protocol: String,
    /// The first port (the ICMP type for `icmp`); -1 for every protocol.
    pub from_port: i32,
    /// The last port (the ICMP code for `icmp`); -1 for every protocol.
    pub to_port: i32,
    pub source: Source,
    pub description: String,
}

impl Rule {
    /// A rule for `protocol` (`tcp`, `udp`, `icmp`, `-1`) on `from..=to` from `source`.
    pub fn new(protocol: &str, from: i32, to: i32, source: Source, description: &str) -> Self {
        let all = protocol == "-1";
        Self {
            protocol: protocol.to_ascii_lowercase(),
            from_port: if all { -1 } else { from },
            to_port: if all { -1 } else { to },
            source,
            description: description.to_owned(),
        }
    }

    /// The same permission (EC2 tells rules apart without their descriptions).
    pub fn same_permission(&self, other: &Rule) -> bool {
        self.protocol == other.protocol
            && self.from_port == other.from_port
            && self.to_port == other.to_port
            && self.source == other.source
    }
}

/// A security group with its ingress rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub vpc_id: String,
    pub tags: Vec<(String, String)>,
    pub ingress: Vec<Rule>,
}

impl SecurityGroup {
    fn read(group: Node<'_, '_>) -> Self {
        let mut ingress = Vec::new();
        for permission in xml::items(group, "ipPermissions") {
            let protocol = xml::text(permission, "ipProtocol");
            let port = |name: &str| xml::text(permission, name).parse().unwrap_or(-1);
            let (from, to) = (port("fromPort"), port("toPort"));
            let sources = xml::items(permission, "ipRanges")
                .map(|r| (Source::Cidr(xml::text(r, "cidrIp")), r))
                .chain(
                    xml::items(permission, "ipv6Ranges")
                        .map(|r| (Source::Ipv6Cidr(xml::text(r, "cidrIpv6")), r)),
                )
                .chain(
                    xml::items(permission, "groups")
                        .map(|r| (Source::Group(xml::text(r, "groupId")), r)),
                );
            for (source, node) in sources {
                let description = xml::text(node, "description");
                ingress.push(Rule::new(&protocol, from, to, source, &description));
            }
        }
        Self {
            id: xml::text(group, "groupId"),
            name: xml::text(group, "groupName"),
            vpc_id: xml::text(group, "vpcId"),
            tags: xml::tags(group, "tagSet"),
            ingress,
        }
    }
}

/// `IpPermissions.N`, one permission per rule.
fn permissions(rules: &[Rule]) -> Params {
    let mut params = Params::new();
    for (i, rule) in rules.iter().enumerate() {
        let p = format!("IpPermissions.{}", i + 1);
        params = params.set(format!("{p}.IpProtocol"), &rule.protocol);
        if rule.protocol != "-1" {
            params = params
                .set(format!("{p}.FromPort"), rule.from_port.to_string())
                .set(format!("{p}.ToPort"), rule.to_port.to_string());
        }
        let (list, field, value) = match &rule.source {
            Source::Cidr(cidr) => ("IpRanges", "CidrIp", cidr),
            Source::Ipv6Cidr(cidr) => ("Ipv6Ranges", "CidrIpv6", cidr),
            Source::Group(id) => ("Groups", "GroupId", id),
        };
        params = params.set(format!("{p}.{list}.1.{field}"), value);
        if !rule.description.is_empty() {
            params = params.set(format!("{p}.{list}.1.Description"), &rule.description);
        }
    }
    params
}

impl Ec2 {
    /// Security groups matching `params`' filters, every page.
    pub fn security_groups(&self, params: Params) -> Result<Vec<SecurityGroup>, ApiError> {
        let mut groups = Vec::new();
        self.api.pages(
            "DescribeSecurityGroups",
            &params.set("MaxResults", "1000"),
            "NextToken",
            "nextToken",
            |root| {
                groups.extend(xml::items(root, "securityGroupInfo").map(SecurityGroup::read));
                Ok(())
            },
        )?;
        Ok(groups)
    }

    /// Adds `rules` to `group`'s ingress; a rule there already (another load balancer
    /// syncing the same group at once) is fine.
    pub fn authorize_ingress(&self, group: &str, rules: &[Rule]) -> Result<(), ApiError> {
        self.change_ingress(
            "AuthorizeSecurityGroupIngress",
            "InvalidPermission.Duplicate",
            group,
            rules,
        )
    }

    /// Removes `rules` from `group`'s ingress; a rule gone already is fine.
    pub fn revoke_ingress(&self, group: &str, rules: &[Rule]) -> Result<(), ApiError> {
        self.change_ingress(
            "RevokeSecurityGroupIngress",
            "InvalidPermission.NotFound",
            group,
            rules,
        )
    }

    /// Sets the descriptions of rules in `group`'s ingress to those of `rules` (EC2
    /// finds each by its permission, whatever it is described as now); a rule gone
    /// meanwhile (another sync revoked it) is fine.
    pub fn set_ingress_descriptions(&self, group: &str, rules: &[Rule]) -> Result<(), ApiError> {
        if rules.is_empty() {
            return Ok(());
        }
        match self.api.call(
            "UpdateSecurityGroupRuleDescriptionsIngress",
            &permissions(rules).set("GroupId", group),
        ) {
            Err(e) if e.code() == "InvalidPermission.NotFound" => Ok(()),
            other => other.map(drop),
        }
    }

    /// One call for all `rules`; when EC2 refuses it for one rule already as wanted
    /// (`settled`, which fails the whole call), the rules one by one.
    fn change_ingress(
        &self,
        action: &str,
        settled: &str,
        group: &str,
        rules: &[Rule],
    ) -> Result<(), ApiError> {
        if rules.is_empty() {
            return Ok(());
        }
        let call = |rules: &[Rule]| {
            self.api
                .call(action, &permissions(rules).set("GroupId", group))
                .map(drop)
        };
        match call(rules) {
            Err(e) if e.code() == settled && rules.len() > 1 => {
                for rule in rules {
                    match call(std::slice::from_ref(rule)) {
                        Err(e) if e.code() == settled => {}
                        other => other?,
                    }
                }
                Ok(())
            }
            Err(e) if e.code() == settled => Ok(()),
            other => other,
        }
    }

    /// Creates a security group in `vpc`, tagged; its ID.
    pub fn create_security_group(
        &self,
        name: &str,
        description: &str,
        vpc: &str,
        tags: &[(String, String)],
    ) -> Result<String, ApiError> {
        let params = Params::new()
            .set("GroupName", name)
            .set("GroupDescription", description)
            .set("VpcId", vpc)
            .set("TagSpecification.1.ResourceType", "security-group")
            .tags("TagSpecification.1.Tag", tags);
        self.api.call_read("CreateSecurityGroup", &params, |root| {
            Ok(xml::text(root, "groupId"))
        })
    }

    /// Deletes a security group; `Ok(false)` when it is gone already.
    pub fn delete_security_group(&self, id: &str) -> Result<bool, ApiError> {
        match self
            .api
            .call("DeleteSecurityGroup", &Params::new().set("GroupId", id))
        {
            Ok(_) => Ok(true),
            Err(e) if e.code() == "InvalidGroup.NotFound" => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_read_flat_and_written_one_permission_each() {
        let text = r#"<DescribeSecurityGroupsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <securityGroupInfo><item>
    <groupId>sg-1</groupId><groupName>nodes</groupName><vpcId>vpc-1</vpcId>
    <ipPermissions>
      <item><ipProtocol>tcp</ipProtocol><fromPort>30080</fromPort><toPort>30080</toPort>
        <groups/><ipRanges>
          <item><cidrIp>0.0.0.0/0</cidrIp><description>kubernetes.io/rule/nlb/client=a1</description></item>
          <item><cidrIp>10.0.0.0/20</cidrIp></item></ipRanges></item>
      <item><ipProtocol>-1</ipProtocol>
        <groups><item><groupId>sg-lb</groupId><userId>123</userId></item></groups></item>
    </ipPermissions>
    <tagSet><item><key>kubernetes.io/cluster/c1</key><value>owned</value></item></tagSet>
  </item></securityGroupInfo>
</DescribeSecurityGroupsResponse>"#;
        let doc = xml::parse(text).unwrap();
        let groups: Vec<SecurityGroup> = xml::items(doc.root_element(), "securityGroupInfo")
            .map(SecurityGroup::read)
            .collect();
        let rules = &groups[0].ingress;
        assert_eq!(rules.len(), 3);
        assert_eq!(
            rules[0],
            Rule::new(
                "tcp",
                30080,
                30080,
                Source::Cidr("0.0.0.0/0".into()),
                "kubernetes.io/rule/nlb/client=a1"
            )
        );
        assert_eq!(rules[1].description, "");
        assert_eq!(
            rules[2],
            Rule::new("-1", 0, 0, Source::Group("sg-lb".into()), "")
        );
        assert!(rules[2].same_permission(&Rule::new(
            "-1",
            -1,
            -1,
            Source::Group("sg-lb".into()),
            "other"
        )));
        let params = format!("{:?}", permissions(&rules[1..]));
        assert!(
            params.contains("IpPermissions.1.IpRanges.1.CidrIp"),
            "{params}"
        );
        assert!(
            params.contains("IpPermissions.2.Groups.1.GroupId"),
            "{params}"
        );
        assert!(!params.contains("IpPermissions.2.FromPort"), "{params}");
    }

    /// Descriptions are set by permission (`IpPermissions` as for authorizing), a rule
    /// gone meanwhile is no error, and no rules send nothing.
    #[test]
    fn descriptions_are_set_by_permission() {
        use wasm_ccm_guest::http::Response;
        use wasm_ccm_guest::testing::MockTransport;
        let cloud = MockTransport::new();
        cloud.on_sequence(
            "POST",
            "/",
            vec![
                Ok(Response::new(200).with_body(
                    "text/xml",
                    "<UpdateSecurityGroupRuleDescriptionsIngressResponse><return>true</return>\
                     </UpdateSecurityGroupRuleDescriptionsIngressResponse>",
                )),
                Ok(Response::new(400).with_body(
                    "text/xml",
                    "<Response><Errors><Error><Code>InvalidPermission.NotFound</Code>\
                     <Message>gone</Message></Error></Errors></Response>",
                )),
            ],
        );
        let _installed = cloud.install();
        let ec2 = Ec2::new("https://ec2.us-east-1.amazonaws.com".into());
        let rule = Rule::new(
            "-1",
            -1,
            -1,
            Source::Group("sg-shared".into()),
            "kubernetes.io/rule/elb=b",
        );
        let rules = std::slice::from_ref(&rule);
        ec2.set_ingress_descriptions("sg-nodes", rules).unwrap();
        ec2.set_ingress_descriptions("sg-nodes", rules).unwrap();
        ec2.set_ingress_descriptions("sg-nodes", &[]).unwrap();
        let requests = cloud.requests();
        assert_eq!(requests.len(), 2, "nothing sent for no rules");
        let body = String::from_utf8_lossy(requests[0].body_bytes()).into_owned();
        for field in [
            "Action=UpdateSecurityGroupRuleDescriptionsIngress",
            "IpPermissions.1.IpProtocol=-1",
            "IpPermissions.1.Groups.1.GroupId=sg-shared",
            "IpPermissions.1.Groups.1.Description=kubernetes.io",
            "GroupId=sg-nodes",
        ] {
            assert!(body.contains(field), "{field}: {body}");
        }
        assert!(!body.contains("FromPort"), "{body}");
    }
}
