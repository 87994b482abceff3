//! What one side left: the cloud as moto describes it and the cluster as the API server
//! holds it, flattened to `path = value` lines with every ID that differs between two
//! fresh worlds (instances, subnets, security groups, load balancer names from Service
//! UIDs, DNS names, ARNs, node names and addresses) replaced by what it stands for.

use wasm_ccm_tests::moto::{self, Moto, World};
use wasm_ccm_tests::oracle::{Flat, Names};

/// Elements left out of every description: times and what moto makes up per run.
const IGNORED: &[&str] = &[
    "CreatedTime",
    "CreateTime",
    "requestId",
    "RequestId",
    "ResponseMetadata",
    "CanonicalHostedZoneNameID",
    "CanonicalHostedZoneId",
    "CanonicalHostedZoneName",
    "ownerId",
    "OwnerAlias",
    "SourceSecurityGroup",
    "State",
    "TargetHealth",
];

/// Answers read, flattened once every ID in them is known.
#[derive(Default)]
pub struct Answers(Vec<(String, String, String)>);

impl Answers {
    /// Keeps the part of an XML answer under `root` (an element name; the first one
    /// found), to be flattened as `prefix.path`.
    fn add(&mut self, xml: String, root: &str, prefix: String) {
        self.0.push((xml, root.to_owned(), prefix));
    }

    /// `prefix.path = text` for every answer, IDs replaced. A list (`member`/`item`
    /// children) is ordered by its elements' own flattening, so two sides listing
    /// alike in another order are equal; a security group rule's source groups are
    /// keyed by the group's ID (replaced) instead.
    pub fn flatten(&self, names: &Names) -> Flat {
        let mut out = Flat::new();
        for (xml, root, prefix) in &self.0 {
            let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
            let Some(node) = doc
                .descendants()
                .find(|n| n.is_element() && n.tag_name().name() == root.as_str())
            else {
                continue;
            };
            out.extend(flatten_node(node, &names.apply(prefix), names));
        }
        out
    }
}

fn flatten_node(node: roxmltree::Node<'_, '_>, prefix: &str, names: &Names) -> Flat {
    let mut out = Flat::new();
    let children: Vec<_> = node
        .children()
        .filter(|c| c.is_element() && !IGNORED.contains(&c.tag_name().name()))
        .collect();
    if children.is_empty() {
        let text = node.text().unwrap_or_default().trim();
        if !text.is_empty() {
            out.insert(prefix.to_owned(), names.apply(text));
        }
        return out;
    }
    let listed = children
        .iter()
        .all(|c| matches!(c.tag_name().name(), "member" | "item"));
    if listed {
        let mut members: Vec<Flat> = children
            .iter()
            .map(|c| flatten_node(*c, "", names))
            .collect();
        // Ordered by what identifies them, not by what a side may describe
        // differently (a listed difference stays one row).
        members.sort_by_key(|m| {
            let identity: Vec<_> = m
                .iter()
                .filter(|(k, _)| !k.to_ascii_lowercase().ends_with("description"))
                .collect();
            format!("{identity:?}")
        });
        // A rule's source groups (`groups`) by the group they name, not by position:
        // `ipPermissions[2].groups[<sg:user-shared>]`, so a group only one side admits
        // is one row that a listed difference can name, rather than a shift of every
        // later group's index.
        let by_group = node.tag_name().name() == "groups";
        for (i, member) in members.into_iter().enumerate() {
            let index = match member.get(".groupId") {
                Some(group) if by_group => group.clone(),
                _ => i.to_string(),
            };
            for (path, value) in member {
                out.insert(format!("{prefix}[{index}]{path}"), value);
            }
        }
    } else {
        for child in children {
            let path = format!("{prefix}.{}", child.tag_name().name());
            out.extend(flatten_node(child, &path, names));
        }
    }
    out
}

/// The cloud: Classic and Network Load Balancers with everything under them, the
/// VPC's security groups with their rules, the cluster's route table, elastic IPs.
pub async fn cloud(moto: &Moto, world: &World, names: &mut Names) -> Answers {
    let mut answers = Answers::default();
    // Classic Load Balancers.
    let classic = moto
        .call(moto::Service::Elb, "DescribeLoadBalancers", &[])
        .await;
    for name in moto::texts(&classic, "LoadBalancerName") {
        let key = format!("clb/{name}");
        let one = moto
            .call(
                moto::Service::Elb,
                "DescribeLoadBalancers",
                &[("LoadBalancerNames.member.1", &name)],
            )
            .await;
        names.add(moto::text(&one, "DNSName"), format!("<dns of {name}>"));
        answers.add(one.clone(), "LoadBalancerDescriptions", key.clone());
        for (action, param, root, suffix) in [
            (
                "DescribeTags",
                "LoadBalancerNames.member.1",
                "TagDescriptions",
                "tags",
            ),
            (
                "DescribeLoadBalancerAttributes",
                "LoadBalancerName",
                "LoadBalancerAttributes",
                "attributes",
            ),
            (
                "DescribeLoadBalancerPolicies",
                "LoadBalancerName",
                "PolicyDescriptions",
                "policies",
            ),
        ] {
            let answer = moto
                .call(moto::Service::Elb, action, &[(param, &name)])
                .await;
            answers.add(answer, root, format!("{key}.{suffix}"));
        }
    }
    // Network Load Balancers.
    let nlbs = moto
        .call(moto::Service::Elbv2, "DescribeLoadBalancers", &[])
        .await;
    for arn in moto::texts(&nlbs, "LoadBalancerArn") {
        let one = moto
            .call(
                moto::Service::Elbv2,
                "DescribeLoadBalancers",
                &[("LoadBalancerArns.member.1", &arn)],
            )
            .await;
        let name = moto::text(&one, "LoadBalancerName");
        names.add(arn.clone(), format!("<arn:nlb/{name}>"));
        names.add(moto::text(&one, "DNSName"), format!("<dns of {name}>"));
        let key = format!("nlb/{name}");
        answers.add(one.clone(), "LoadBalancers", key.clone());
        for (action, param, root, suffix) in [
            (
                "DescribeTags",
                "ResourceArns.member.1",
                "TagDescriptions",
                "tags",
            ),
            (
                "DescribeLoadBalancerAttributes",
                "LoadBalancerArn",
                "Attributes",
                "attributes",
            ),
            (
                "DescribeListeners",
                "LoadBalancerArn",
                "Listeners",
                "listeners",
            ),
        ] {
            let answer = moto
                .call(moto::Service::Elbv2, action, &[(param, &arn)])
                .await;
            if action == "DescribeListeners" {
                let ports = moto::texts(&answer, "Port");
                for (listener, port) in moto::texts(&answer, "ListenerArn").into_iter().zip(ports) {
                    names.add(listener, format!("<arn:listener/{name}:{port}>"));
                }
            }
            answers.add(answer.clone(), root, format!("{key}.{suffix}"));
        }
        // moto answers TargetGroupNotFound for a load balancer without groups.
        let groups = moto
            .try_call(
                moto::Service::Elbv2,
                "DescribeTargetGroups",
                &[("LoadBalancerArn", &arn)],
            )
            .await;
        // Or, while a controller replaces them, none for a moment.
        let groups = groups.map_or_else(|_| Vec::new(), |g| moto::texts(&g, "TargetGroupArn"));
        // A group deleted meanwhile is left out (the next snapshot differs, so the
        // comparison waits for the controller to settle).
        for group in groups {
            let Ok(one) = moto
                .try_call(
                    moto::Service::Elbv2,
                    "DescribeTargetGroups",
                    &[("TargetGroupArns.member.1", &group)],
                )
                .await
            else {
                continue;
            };
            let group_name = moto::text(&one, "TargetGroupName");
            names.add(group.clone(), format!("<arn:tg/{group_name}>"));
            let key = format!("tg/{group_name}");
            answers.add(one.clone(), "TargetGroups", key.clone());
            for (action, root, suffix) in [
                ("DescribeTargetGroupAttributes", "Attributes", "attributes"),
                (
                    "DescribeTargetHealth",
                    "TargetHealthDescriptions",
                    "targets",
                ),
                ("DescribeTags", "TagDescriptions", "tags"),
            ] {
                let param = if action == "DescribeTags" {
                    "ResourceArns.member.1"
                } else {
                    "TargetGroupArn"
                };
                let Ok(answer) = moto
                    .try_call(moto::Service::Elbv2, action, &[(param, &group)])
                    .await
                else {
                    continue;
                };
                answers.add(answer.clone(), root, format!("{key}.{suffix}"));
            }
        }
    }
    // Security groups: each by its name (a load balancer's carries the load balancer's
    // name, replaced like every such name).
    let groups = moto
        .call(
            moto::Service::Ec2,
            "DescribeSecurityGroups",
            &[
                ("Filter.1.Name", "vpc-id"),
                ("Filter.1.Value.1", &world.vpc),
            ],
        )
        .await;
    let ids: Vec<(String, String)> = {
        let doc = roxmltree::Document::parse(&groups).unwrap();
        doc.descendants()
            .filter(|n| {
                n.has_tag_name("item")
                    && n.parent()
                        .is_some_and(|p| p.has_tag_name("securityGroupInfo"))
            })
            .map(|group| {
                let field = |name: &str| {
                    group
                        .children()
                        .find(|c| c.has_tag_name(name))
                        .and_then(|c| c.text())
                        .unwrap_or_default()
                        .to_owned()
                };
                (field("groupId"), field("groupName"))
            })
            .collect()
    };
    for (id, name) in ids {
        // A load balancer's group is named for it: `<sg:k8s-elb-<lb:web>>`.
        let meaning = format!("<sg:{}>", names.apply(&name));
        names.add(id.clone(), meaning);
        let one = moto
            .call(
                moto::Service::Ec2,
                "DescribeSecurityGroups",
                &[("GroupId.1", &id)],
            )
            .await;
        answers.add(one, "securityGroupInfo", format!("sg/{name}"));
    }
    let gateways = moto
        .call(moto::Service::Ec2, "DescribeInternetGateways", &[])
        .await;
    for gateway in moto::texts(&gateways, "internetGatewayId") {
        names.add(gateway, "<internet gateway>");
    }
    // The route table's routes.
    let tables = moto
        .call(
            moto::Service::Ec2,
            "DescribeRouteTables",
            &[("RouteTableId.1", &world.route_table)],
        )
        .await;
    answers.add(tables, "routeSet", "routes".into());
    // Elastic IPs (their associations).
    let addresses = moto
        .call(moto::Service::Ec2, "DescribeAddresses", &[])
        .await;
    answers.add(addresses, "addressesSet", "eips".into());
    answers
}
