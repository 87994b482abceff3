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
//!   (described `kubernetes.io/rule/elb=<lb>`); the load balancer's own group
//!   `k8s-elb-<lb>` admits the source ranges on the Service's ports.
//!
//! A rule is this load balancer's by its description, or by its source being the load
//! balancer's own group: rules anyone else wrote are never revoked. Groups of the VPC that hold no
//! node any more lose this load balancer's rules; deleting removes them everywhere.

use crate::Aws;
use crate::api::Params;
use crate::config::Config;
use crate::ec2::{Instance, Rule, SecurityGroup, Source};
use wasm_ccm_guest::types::{CloudError, Service};

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
struct Change {
    add: Vec<Rule>,
    revoke: Vec<Rule>,
}

/// What makes `group`'s rules that `owned` selects equal to `desired`.
fn diff(group: &SecurityGroup, desired: &[Rule], owned: &dyn Fn(&Rule) -> bool) -> Change {
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
fn apply(
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
        // The MTU rules follow the group's client rules even when this load balancer's
        // rules are in place already (a delete interrupted between the two steps).
        let ingress = apply(state, group, &diff(group, wanted, &owned), lb)?;
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

/// Brings every group of the VPC to admitting everything from `lb_group` (the Classic
/// load balancer's source group) when it holds nodes, nothing otherwise (`None`: a
/// delete). A rule is this load balancer's when described as such (whatever its
/// source: a group the load balancer no longer uses loses its rules too), or, from
/// `lb_group` and undescribed, made by cloud-provider-aws: in a group tagged for the
/// cluster, or anywhere when the load balancer's own group is being deleted.
/// A delete leaves the rules while another Classic load balancer uses `lb_group`; the
/// last one's delete revokes the rules from it that any Classic load balancer made.
pub fn sync_classic(
    state: &Aws,
    lb: &str,
    lb_group: &str,
    own_group: bool,
    vpc: &str,
    instances: Option<&[Instance]>,
) -> Result<(), CloudError> {
    let deleting = instances.is_none();
    if deleting && !own_group && shared_source(state, lb, lb_group)? {
        wasm_ccm_guest::log::info(
            "another load balancer uses the same security group; the nodes' rules admitting it stay",
            &[("loadBalancer", lb), ("securityGroup", lb_group)],
        );
        return Ok(());
    }
    let groups = vpc_groups(state, vpc)?;
    let nodes = match instances {
        Some(instances) => node_groups(&state.config, instances, &groups)?,
        None => Vec::new(),
    };
    let description = classic_description(lb);
    let source = Source::Group(lb_group.to_owned());
    let desired = [Rule::new("-1", -1, -1, source.clone(), &description)];
    for group in groups.iter().filter(|g| g.id != lb_group) {
        let tagged = tagged(&state.config, group);
        // Deleting the last load balancer behind `lb_group`: a rule from it described
        // for another Classic load balancer (which made it first) is the last one's.
        let owned = |r: &Rule| {
            r.description == description
                || (r.source == source
                    && ((r.description.is_empty() && (tagged || (own_group && deleting)))
                        || (deleting && r.description.starts_with(CLASSIC_RULE))))
        };
        let wanted: &[Rule] = if nodes.contains(&group.id) {
            &desired
        } else {
            &[]
        };
        apply(state, group, &diff(group, wanted, &owned), lb)?;
    }
    Ok(())
}

/// Whether a Classic load balancer other than `lb` uses group `id`.
fn shared_source(state: &Aws, lb: &str, id: &str) -> Result<bool, CloudError> {
    Ok(state
        .elb
        .all_load_balancers()?
        .iter()
        .any(|other| other.name != lb && other.security_groups.iter().any(|g| g == id)))
}

/// The name of a Classic load balancer's own group.
fn own_group_name(lb: &str) -> String {
    format!("k8s-elb-{lb}")
}

/// The load balancer's own group, when it exists and is this cluster's.
pub fn find_own_group(
    state: &Aws,
    lb: &str,
    vpc: &str,
) -> Result<Option<SecurityGroup>, CloudError> {
    let mut params = Params::new().filter("group-name", &[own_group_name(lb)]);
    if !vpc.is_empty() {
        params = params.filter("vpc-id", &[vpc]);
    }
    Ok(state
        .ec2
        .security_groups(params)?
        .into_iter()
        .find(|g| state.config.cluster_id.is_empty() || state.config.owns(&g.tags)))
}

/// The load balancer's own group, made when missing (upstream's `ensureSecurityGroup`):
/// `k8s-elb-<name>`, tagged as the load balancer.
pub fn ensure_own_group(
    state: &Aws,
    service: &Service,
    lb: &str,
    vpc: &str,
) -> Result<SecurityGroup, CloudError> {
    let name = own_group_name(lb);
    let mut params = Params::new().filter("group-name", &[&name]);
    if !vpc.is_empty() {
        params = params.filter("vpc-id", &[vpc]);
    }
    if let Some(group) = state.ec2.security_groups(params)?.into_iter().next() {
        if !state.config.cluster_id.is_empty() && !state.config.owns(&group.tags) {
            return Err(CloudError::Other(format!(
                "security group {} ({name}) exists but is not tagged {}=owned: it is not this \
                 cluster's, so the load balancer does not use it",
                group.id,
                state.config.cluster_tag_key()
            )));
        }
        return Ok(group);
    }
    if vpc.is_empty() {
        return Err(CloudError::Other(format!(
            "cannot create security group {name}: the VPC is unknown (set VPC in the cloud config)"
        )));
    }
    let description = format!(
        "Security group for Kubernetes ELB {lb} ({}/{})",
        service.metadata.namespace, service.metadata.name
    );
    let id =
        state
            .ec2
            .create_security_group(&name, &description, vpc, &super::tags(state, service))?;
    wasm_ccm_guest::log::info(
        "created security group for load balancer",
        &[("securityGroup", &id), ("name", &name)],
    );
    Ok(SecurityGroup {
        id,
        name,
        vpc_id: vpc.to_owned(),
        ..Default::default()
    })
}

/// The own group admits exactly the source ranges on each Service port, and ICMP
/// "fragmentation needed" from them (upstream's `createSecurityGroupRules`).
pub fn set_own_ingress(
    state: &Aws,
    group: &SecurityGroup,
    service: &Service,
    sources: &[String],
) -> Result<(), CloudError> {
    let mut desired = Vec::new();
    for cidr in sources {
        for port in &service.ports {
            desired.push(Rule::new(
                "tcp",
                port.port,
                port.port,
                Source::Cidr(cidr.clone()),
                "",
            ));
        }
        desired.push(Rule::new("icmp", 3, 4, Source::Cidr(cidr.clone()), ""));
    }
    apply(state, group, &diff(group, &desired, &|_| true), &group.name).map(drop)
}

/// Deletes the own group, after the load balancer; while AWS still holds it (the load
/// balancer's network interfaces go a little later), a retry.
pub fn delete_own_group(state: &Aws, group: &SecurityGroup) -> Result<(), CloudError> {
    match state.ec2.delete_security_group(&group.id) {
        Ok(_) => {
            wasm_ccm_guest::log::info(
                "deleted security group of load balancer",
                &[("securityGroup", &group.id), ("name", &group.name)],
            );
            Ok(())
        }
        Err(e) if e.code() == "DependencyViolation" => {
            Err(wasm_ccm_guest::cloud_error::retry_after(
                5_000,
                format!(
                    "security group {} is still in use; deleting it again: {e}",
                    group.id
                ),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

/// A group load balancer `lb` no longer uses: when it is `lb`'s own group (of this
/// cluster), the nodes' rules admitting it are revoked and it is deleted.
pub fn remove_if_owned(state: &Aws, lb: &str, id: &str, vpc: &str) -> Result<(), CloudError> {
    let group = state
        .ec2
        .security_groups(Params::new().filter("group-id", &[id]))?
        .into_iter()
        .next();
    let Some(group) = group else {
        return Ok(());
    };
    if group.name != own_group_name(lb) || !state.config.owns(&group.tags) {
        return Ok(());
    }
    sync_classic(state, lb, id, true, vpc, None)?;
    delete_own_group(state, &group)
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
