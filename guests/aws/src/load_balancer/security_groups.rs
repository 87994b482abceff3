//! The nodes' security group rules for load balancer traffic, as cloud-provider-aws
//! manages them (`updateInstanceSecurityGroupsForNLB`,
//! `updateInstanceSecurityGroupsForLoadBalancer`).
//!
//! - A node's group is the one of its instance's groups tagged for the cluster
//!   (`kubernetes.io/cluster/<ID>`, any value, or the legacy `KubernetesCluster`),
//!   else its only group; more than one tagged group (or several untagged ones) is an
//!   error naming them (upstream's `findSecurityGroupForInstance`).
//! - Network Load Balancers: client rules on each node port from the source ranges
//!   (described `kubernetes.io/rule/nlb/client=<lb>`), health check rules from the load
//!   balancer's subnets (`kubernetes.io/rule/nlb/health=<lb>`), and ICMP
//!   "fragmentation needed" (type 3, code 4) from every client range of the group
//!   (`kubernetes.io/rule/nlb/mtu`, shared by the group's load balancers).
//! - Classic Load Balancers: every protocol from the load balancer's group
//!   (described `kubernetes.io/rule/elb=<lb>`; one rule for every load balancer behind
//!   that group, kept while one of them is left and then described for it); the load
//!   balancer's own group `k8s-elb-<lb>` admits the source ranges on the Service's ports.
//!
//! A rule is this load balancer's by its description, or by its source being the load
//! balancer's own group: rules anyone else wrote are never revoked. Groups of the VPC that hold no
//! node any more lose this load balancer's rules; deleting removes them everywhere.

use crate::Aws;
use crate::api::Params;
use crate::config::Config;
use crate::ec2::{Instance, Rule, SecurityGroup, Source};
use wasm_ccm_guest::types::CloudError;

/// Descriptions of the NLB rules.
pub const NLB_CLIENT: &str = "kubernetes.io/rule/nlb/client";
pub const NLB_HEALTH: &str = "kubernetes.io/rule/nlb/health";
pub const NLB_MTU: &str = "kubernetes.io/rule/nlb/mtu";

/// What an NLB needs from the nodes' groups.
#[derive(Debug, Clone, Default)]
pub struct NlbTraffic {
    /// (`tcp` or `udp`, node port) of each listener.
    pub ports: Vec<(String, i32)>,
    /// Client ranges (IPv4 CIDRs).
    pub sources: Vec<String>,
    /// The health checks' ports (`tcp`).
    pub health_ports: Vec<i32>,
    /// The load balancer's subnets' CIDRs, where health checks come from.
    pub health_sources: Vec<String>,
}

impl NlbTraffic {
    /// The rules, described for load balancer `lb`.
    fn rules(&self, lb: &str) -> Vec<Rule> {
        let client = format!("{NLB_CLIENT}={lb}");
        let health = format!("{NLB_HEALTH}={lb}");
        let mut rules: Vec<Rule> = Vec::new();
        let mut add = |rule: Rule| {
            if !rules.iter().any(|r| r.same_permission(&rule)) {
                rules.push(rule);
            }
        };
        for (protocol, port) in &self.ports {
            for cidr in &self.sources {
                add(Rule::new(
                    protocol,
                    *port,
                    *port,
                    Source::Cidr(cidr.clone()),
                    &client,
                ));
            }
        }
        for port in &self.health_ports {
            for cidr in &self.health_sources {
                add(Rule::new(
                    "tcp",
                    *port,
                    *port,
                    Source::Cidr(cidr.clone()),
                    &health,
                ));
            }
        }
        rules
    }
}

/// Whether the group is tagged for the cluster (any value), as upstream's
/// `getTaggedSecurityGroups`.
fn tagged(config: &Config, group: &SecurityGroup) -> bool {
    config.has_cluster_tag(&group.tags)
}

/// The group carrying load balancer traffic for each instance (deduplicated).
fn node_groups(
    config: &Config,
    instances: &[Instance],
    groups: &[SecurityGroup],
) -> Result<Vec<String>, CloudError> {
    let mut chosen = Vec::new();
    for instance in instances {
        let (tagged_ids, untagged): (Vec<&String>, Vec<&String>) = instance
            .security_groups
            .iter()
            .partition(|id| groups.iter().any(|g| g.id == **id && tagged(config, g)));
        let group = match (tagged_ids.as_slice(), untagged.as_slice()) {
            ([one], _) | ([], [one]) => (*one).clone(),
            ([], []) => {
                wasm_ccm_guest::log::warn(
                    "no security group found for instance",
                    &[("instance", &instance.id)],
                );
                continue;
            }
            ([], many) => {
                return Err(CloudError::Other(format!(
                    "multiple untagged security groups found for instance {} ({}); tag the \
                     Kubernetes security group {}",
                    instance.id,
                    join(many),
                    config.cluster_tag_key()
                )));
            }
            (many, _) => {
                return Err(CloudError::Other(format!(
                    "multiple tagged security groups found for instance {} ({}); only the \
                     Kubernetes security group may carry {}",
                    instance.id,
                    join(many),
                    config.cluster_tag_key()
                )));
            }
        };
        if !chosen.contains(&group) {
            chosen.push(group);
        }
    }
    Ok(chosen)
}

fn join(ids: &[&String]) -> String {
    ids.iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The VPC's security groups (every group when the VPC is unknown).
fn vpc_groups(state: &Aws, vpc: &str) -> Result<Vec<SecurityGroup>, CloudError> {
    let params = if vpc.is_empty() {
        Params::new()
    } else {
        Params::new().filter("vpc-id", &[vpc])
    };
    Ok(state.ec2.security_groups(params)?)
}

/// A group's rule changes.
pub(super) struct Change {
    add: Vec<Rule>,
    revoke: Vec<Rule>,
}

/// What makes `group`'s rules that `owned` selects equal to `desired`.
pub(super) fn diff(
    group: &SecurityGroup,
    desired: &[Rule],
    owned: &dyn Fn(&Rule) -> bool,
) -> Change {
    let add = desired
        .iter()
        .filter(|d| !group.ingress.iter().any(|r| r.same_permission(d)))
        .cloned()
        .collect();
    let revoke = group
        .ingress
        .iter()
        .filter(|r| owned(r) && !desired.iter().any(|d| d.same_permission(r)))
        .cloned()
        .collect();
    Change { add, revoke }
}

/// Applies `change` to `group`; its ingress afterwards.
pub(super) fn apply(
    state: &Aws,
    group: &SecurityGroup,
    change: &Change,
    lb: &str,
) -> Result<Vec<Rule>, CloudError> {
    state.ec2.revoke_ingress(&group.id, &change.revoke)?;
    state.ec2.authorize_ingress(&group.id, &change.add)?;
    if !change.add.is_empty() || !change.revoke.is_empty() {
        wasm_ccm_guest::log::info(
            "updated node security group rules for load balancer",
            &[
                ("securityGroup", &group.id),
                ("loadBalancer", lb),
                ("added", &change.add.len().to_string()),
                ("revoked", &change.revoke.len().to_string()),
            ],
        );
    }
    let mut ingress: Vec<Rule> = group
        .ingress
        .iter()
        .filter(|r| !change.revoke.contains(r))
        .cloned()
        .collect();
    ingress.extend(change.add.iter().cloned());
    Ok(ingress)
}

/// The MTU rules a group needs: ICMP type 3 code 4 from every IPv4 range a client
/// rule (of any NLB) admits.
fn mtu_rules(ingress: &[Rule]) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for rule in ingress {
        if let (true, Source::Cidr(cidr)) = (rule.description.starts_with(NLB_CLIENT), &rule.source)
        {
            let mtu = Rule::new("icmp", 3, 4, Source::Cidr(cidr.clone()), NLB_MTU);
            if !rules.iter().any(|r| r.same_permission(&mtu)) {
                rules.push(mtu);
            }
        }
    }
    rules
}

/// Brings every group of the VPC to `traffic`'s rules for NLB `lb` (none in groups
/// without nodes; `None` removes them everywhere, for a delete).
pub fn sync_nlb(
    state: &Aws,
    lb: &str,
    vpc: &str,
    instances: &[Instance],
    traffic: Option<&NlbTraffic>,
) -> Result<(), CloudError> {
    let groups = vpc_groups(state, vpc)?;
    let nodes = node_groups(&state.config, instances, &groups)?;
    let desired = traffic.map(|t| t.rules(lb)).unwrap_or_default();
    let ours = [format!("{NLB_CLIENT}={lb}"), format!("{NLB_HEALTH}={lb}")];
    let owned = |r: &Rule| ours.contains(&r.description);
    for group in &groups {
        let wanted: &[Rule] = if nodes.contains(&group.id) {
            &desired
        } else {
            &[]
        };
        // The MTU rules follow the group's client rules, also when this load balancer's
        // rules are in place already (a delete interrupted between the two steps); in
        // the groups it touches, the nodes' and the cluster's, not other clusters'.
        let change = diff(group, wanted, &owned);
        let touched = !change.add.is_empty() || !change.revoke.is_empty();
        if !(touched || nodes.contains(&group.id) || tagged(&state.config, group)) {
            continue;
        }
        let ingress = apply(state, group, &change, lb)?;
        let after = SecurityGroup {
            ingress,
            ..group.clone()
        };
        let mtu = diff(&after, &mtu_rules(&after.ingress), &|r: &Rule| {
            r.description == NLB_MTU
        });
        apply(state, &after, &mtu, lb)?;
    }
    Ok(())
}

/// The description of a node group's rule admitting a Classic load balancer.
const CLASSIC_RULE: &str = "kubernetes.io/rule/elb=";

/// The description of a node group's rule admitting Classic load balancer `lb`.
fn classic_description(lb: &str) -> String {
    format!("{CLASSIC_RULE}{lb}")
}

/// What a Classic load balancer asks of the nodes' groups.
pub struct ClassicRules<'a> {
    /// The load balancer's name.
    pub lb: &'a str,
    /// The group the nodes admit (the first of its groups); `None` when it goes.
    pub source: Option<&'a str>,
    /// Groups it has or had: rules from them may be its.
    pub groups: &'a [String],
    /// Its own group `k8s-elb-<name>`, if any.
    pub own_group: Option<&'a str>,
    /// Whether `groups` are being given up (a delete, or groups dropped): then rules
    /// from them made for any Classic load balancer are its to revoke.
    pub releasing: bool,
}

/// Brings every group of the VPC to admitting everything from `rules.source` where
/// `instances` have their groups, and nothing of this load balancer's elsewhere.
///
/// A rule (every protocol, from a group) is the load balancer's when described for
/// it; from one of its `groups` when undescribed (cloud-provider-aws made it) in a
/// cluster-tagged group, or when `releasing`, described for any Classic load balancer
/// or undescribed from its own group. EC2 keeps one rule per source for every load
/// balancer behind that group, so a rule whose source another Classic load balancer
/// uses is never revoked: the last one to go revokes it (cloud-provider-aws revokes it
/// with the first, and the others lose the nodes until their next sync). A rule kept so
/// whose description names a load balancer that does not use its source any more (this
/// one, or one gone) is described for one that does ([`kept_for`]), so the description
/// stays true.
pub fn sync_classic(
    state: &Aws,
    rules: &ClassicRules<'_>,
    vpc: &str,
    instances: &[Instance],
) -> Result<(), CloudError> {
    let groups = vpc_groups(state, vpc)?;
    let nodes = node_groups(&state.config, instances, &groups)?;
    let description = classic_description(rules.lb);
    let desired: Vec<Rule> = rules
        .source
        .map(|s| Rule::new("-1", -1, -1, Source::Group(s.to_owned()), &description))
        .into_iter()
        .collect();
    let mut others: Option<Vec<(String, Vec<String>)>> = None;
    for group in groups.iter().filter(|g| !rules.groups.contains(&g.id)) {
        let tagged = tagged(&state.config, group);
        let owned = |r: &Rule| {
            let Source::Group(from) = &r.source else {
                return false;
            };
            if r.protocol != "-1" {
                return false;
            }
            let ours = rules.groups.contains(from);
            r.description == description
                || (ours && r.description.is_empty() && tagged)
                || (ours
                    && rules.releasing
                    && (r.description.starts_with(CLASSIC_RULE)
                        || (r.description.is_empty() && rules.own_group == Some(from.as_str()))))
        };
        let wanted: &[Rule] = if nodes.contains(&group.id) {
            &desired
        } else {
            &[]
        };
        let mut change = diff(group, wanted, &owned);
        let mut redescribed = Vec::new();
        if !change.revoke.is_empty() {
            if others.is_none() {
                others = Some(other_load_balancers(state, rules.lb)?);
            }
            let others = others.as_deref().unwrap_or_default();
            change.revoke.retain(|r| match keep(r, others) {
                Keep::No => true,
                Keep::AsItIs => false,
                Keep::DescribedFor(survivor) => {
                    redescribed.push(Rule {
                        description: classic_description(survivor),
                        ..r.clone()
                    });
                    false
                }
            });
        }
        apply(state, group, &change, rules.lb)?;
        if !redescribed.is_empty() {
            state
                .ec2
                .set_ingress_descriptions(&group.id, &redescribed)?;
            wasm_ccm_guest::log::info(
                "kept node security group rules for other load balancers",
                &[
                    ("securityGroup", &group.id),
                    ("loadBalancer", rules.lb),
                    (
                        "describedFor",
                        &redescribed
                            .iter()
                            .map(|r| r.description.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                ],
            );
        }
    }
    Ok(())
}

/// Whether a group of the VPC but `groups` (those [`sync_classic`] leaves alone when
/// it releases them) holds a rule admitting Classic load balancer `lb`, described for
/// it: what a delete cut after the load balancer went leaves behind when it had no group
/// of its own. [`sync_classic`] releasing `lb` revokes every such rule, or describes it
/// for another load balancer it is kept for.
pub fn classic_rules_left(
    state: &Aws,
    lb: &str,
    vpc: &str,
    groups: &[String],
) -> Result<bool, CloudError> {
    let description = classic_description(lb);
    let admits = |r: &Rule| {
        r.protocol == "-1" && matches!(r.source, Source::Group(_)) && r.description == description
    };
    Ok(vpc_groups(state, vpc)?
        .iter()
        .filter(|g| !groups.contains(&g.id))
        .any(|g| g.ingress.iter().any(admits)))
}

/// Every Classic load balancer but `lb`: its name and groups.
fn other_load_balancers(state: &Aws, lb: &str) -> Result<Vec<(String, Vec<String>)>, CloudError> {
    Ok(state
        .elb
        .all_load_balancers()?
        .into_iter()
        .filter(|other| other.name != lb)
        .map(|other| (other.name, other.security_groups))
        .collect())
}

/// What becomes of a rule a Classic load balancer would revoke.
#[derive(Debug, PartialEq, Eq)]
enum Keep<'a> {
    /// Revoked: no other load balancer uses its source.
    No,
    /// Kept for another load balancer, described as it was (for one that uses its
    /// source, or not described at all).
    AsItIs,
    /// Kept, its description (naming a load balancer that no longer uses the source)
    /// replaced by one naming this load balancer, which does.
    DescribedFor(&'a str),
}

/// Whether `rule` is kept for one of `others` (name, groups), and how it is described
/// then.
fn keep<'a>(rule: &Rule, others: &'a [(String, Vec<String>)]) -> Keep<'a> {
    let Source::Group(from) = &rule.source else {
        return Keep::No;
    };
    let Some(survivor) = kept_for(from, others) else {
        return Keep::No;
    };
    match rule.description.strip_prefix(CLASSIC_RULE) {
        Some(named)
            if !others
                .iter()
                .any(|(name, groups)| name == named && groups.contains(from)) =>
        {
            Keep::DescribedFor(survivor)
        }
        _ => Keep::AsItIs,
    }
}

/// The load balancer a rule from group `from` is kept for: of `others` (name, groups)
/// that have `from`, one whose first group it is (the group the nodes admit for it)
/// before one that has it among others, then the first by name.
fn kept_for<'a>(from: &str, others: &'a [(String, Vec<String>)]) -> Option<&'a str> {
    let mut best: Option<(bool, &'a str)> = None;
    for (name, groups) in others {
        if !groups.iter().any(|g| g == from) {
            continue;
        }
        let key = (
            groups.first().map(String::as_str) != Some(from),
            name.as_str(),
        );
        if best.is_none_or(|b| key < b) {
            best = Some(key);
        }
    }
    best.map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(id: &str, tags: &[(&str, &str)], ingress: Vec<Rule>) -> SecurityGroup {
        SecurityGroup {
            id: id.into(),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            ingress,
            ..Default::default()
        }
    }

    fn config() -> Config {
        Config::parse("[Global]\nZone = us-east-1a\nKubernetesClusterID = c1\n").unwrap()
    }

    /// Upstream's TestFindSecurityGroupForInstance cases.
    #[test]
    fn the_node_group_is_the_tagged_one_else_the_only_one() {
        let groups = [
            group(
                "sg-tagged",
                &[("kubernetes.io/cluster/c1", "shared")],
                vec![],
            ),
            group("sg-other-tagged", &[("KubernetesCluster", "c1")], vec![]),
            group("sg-a", &[], vec![]),
            group("sg-b", &[], vec![]),
        ];
        let instance = |groups: &[&str]| Instance {
            id: "i-1".into(),
            security_groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..Default::default()
        };
        let c = config();
        let pick = |groups_of: &[&str]| node_groups(&c, &[instance(groups_of)], &groups);
        assert_eq!(pick(&["sg-a", "sg-tagged"]).unwrap(), ["sg-tagged"]);
        assert_eq!(pick(&["sg-a"]).unwrap(), ["sg-a"]);
        assert!(pick(&[]).unwrap().is_empty());
        let err = format!("{:?}", pick(&["sg-a", "sg-b"]).unwrap_err());
        assert!(
            err.contains("multiple untagged") && err.contains("sg-b"),
            "{err}"
        );
        let err = format!("{:?}", pick(&["sg-tagged", "sg-other-tagged"]).unwrap_err());
        assert!(err.contains("multiple tagged"), "{err}");
    }

    /// A rule from a group another Classic load balancer still uses is kept; when its
    /// description names a load balancer that no longer uses the group (the one going,
    /// or one gone before), it is described for one that does, one admitted through
    /// that group (its first) before one that only has it, then by name.
    #[test]
    fn a_kept_classic_rule_names_a_load_balancer_that_uses_it() {
        let others = vec![
            (
                "b-extra".to_owned(),
                vec!["sg-own-b".to_owned(), "sg-shared".to_owned()],
            ),
            ("c-first".to_owned(), vec!["sg-shared".to_owned()]),
            ("d-first".to_owned(), vec!["sg-shared".to_owned()]),
            ("e-alone".to_owned(), vec!["sg-alone".to_owned()]),
        ];
        let rule = |from: &str, description: &str| {
            Rule::new("-1", -1, -1, Source::Group(from.into()), description)
        };
        assert_eq!(kept_for("sg-shared", &others), Some("c-first"));
        assert_eq!(kept_for("sg-own-b", &others), Some("b-extra"));
        assert_eq!(kept_for("sg-gone", &others), None);
        // Named for the load balancer going: described for a survivor.
        assert_eq!(
            keep(
                &rule("sg-shared", "kubernetes.io/rule/elb=a-going"),
                &others
            ),
            Keep::DescribedFor("c-first")
        );
        // Named for a survivor that uses it: as it is.
        assert_eq!(
            keep(
                &rule("sg-shared", "kubernetes.io/rule/elb=d-first"),
                &others
            ),
            Keep::AsItIs
        );
        assert_eq!(
            keep(
                &rule("sg-shared", "kubernetes.io/rule/elb=b-extra"),
                &others
            ),
            Keep::AsItIs
        );
        // Named for a load balancer that exists but no longer uses the group.
        assert_eq!(
            keep(
                &rule("sg-shared", "kubernetes.io/rule/elb=e-alone"),
                &others
            ),
            Keep::DescribedFor("c-first")
        );
        // Undescribed (cloud-provider-aws made it): kept, left undescribed.
        assert_eq!(keep(&rule("sg-shared", ""), &others), Keep::AsItIs);
        // Nobody else uses the group, or the rule is not from a group: revoked.
        assert_eq!(
            keep(&rule("sg-gone", "kubernetes.io/rule/elb=a-going"), &others),
            Keep::No
        );
        let cidr = Rule::new("-1", -1, -1, Source::Cidr("10.0.0.0/8".into()), "");
        assert_eq!(keep(&cidr, &others), Keep::No);
    }

    #[test]
    fn only_this_load_balancers_rules_change_and_mtu_follows_every_client_range() {
        let traffic = NlbTraffic {
            ports: vec![("tcp".into(), 30080)],
            sources: vec!["203.0.113.0/24".into()],
            health_ports: vec![30080],
            health_sources: vec!["10.0.0.0/20".into()],
        };
        let desired = traffic.rules("a1");
        assert_eq!(desired.len(), 2);
        let someone_elses = Rule::new("tcp", 22, 22, Source::Cidr("0.0.0.0/0".into()), "ssh");
        let stale = Rule::new(
            "tcp",
            30999,
            30999,
            Source::Cidr("0.0.0.0/0".into()),
            "kubernetes.io/rule/nlb/client=a1",
        );
        let other_lb = Rule::new(
            "udp",
            31000,
            31000,
            Source::Cidr("198.51.100.0/24".into()),
            "kubernetes.io/rule/nlb/client=a2",
        );
        let g = group(
            "sg-1",
            &[],
            vec![
                someone_elses,
                stale.clone(),
                other_lb.clone(),
                desired[1].clone(),
            ],
        );
        let ours = [
            "kubernetes.io/rule/nlb/client=a1".to_owned(),
            "kubernetes.io/rule/nlb/health=a1".to_owned(),
        ];
        let change = diff(&g, &desired, &|r: &Rule| ours.contains(&r.description));
        assert_eq!(change.add, [desired[0].clone()]);
        assert_eq!(change.revoke, [stale]);
        let ingress = [desired[0].clone(), other_lb];
        let mtu = mtu_rules(&ingress);
        let sources: Vec<&Source> = mtu.iter().map(|r| &r.source).collect();
        assert_eq!(
            sources,
            [
                &Source::Cidr("203.0.113.0/24".into()),
                &Source::Cidr("198.51.100.0/24".into())
            ]
        );
        assert!(
            mtu.iter()
                .all(|r| (r.protocol.as_str(), r.from_port, r.to_port) == ("icmp", 3, 4))
        );
    }
}
