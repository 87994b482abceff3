//! A Classic load balancer's own security group, `k8s-elb-<name>` (upstream's
//! `ensureSecurityGroup`): made and tagged like the load balancer, admitting exactly the
//! source ranges on the Service's ports, deleted after the load balancer, and removed
//! when named groups replace it.

use super::security_groups::{ClassicRules, apply, diff, sync_classic};
use crate::Aws;
use crate::api::Params;
use crate::ec2::{Instance, Rule, SecurityGroup, Source};
use wasm_ccm_guest::types::{CloudError, Service};

/// The name of a Classic load balancer's own group.
fn own_group_name(lb: &str) -> String {
    format!("k8s-elb-{lb}")
}

/// The group named as `lb`'s own group, whoever's it is.
fn named(state: &Aws, lb: &str, vpc: &str) -> Result<Option<SecurityGroup>, CloudError> {
    let mut params = Params::new().filter("group-name", &[own_group_name(lb)]);
    if !vpc.is_empty() {
        params = params.filter("vpc-id", &[vpc]);
    }
    Ok(state.ec2.security_groups(params)?.into_iter().next())
}

/// Whether the group was made by this cluster (any group without a cluster ID).
fn ours(state: &Aws, group: &SecurityGroup) -> bool {
    state.config.cluster_id.is_empty() || state.config.owns(&group.tags)
}

/// The load balancer's own group, when it exists and is this cluster's.
pub fn find_own_group(
    state: &Aws,
    lb: &str,
    vpc: &str,
) -> Result<Option<SecurityGroup>, CloudError> {
    Ok(named(state, lb, vpc)?.filter(|g| ours(state, g)))
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
    if let Some(group) = named(state, lb, vpc)? {
        if !ours(state, &group) {
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
    // Tagged as upstream's `ensureSecurityGroup` tags it: not with the Service's name.
    let tags = super::owned_tags(state, service);
    let id = state
        .ec2
        .create_security_group(&name, &description, vpc, &tags)?;
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

/// Deletes the own group, after the load balancer. While AWS still holds it (the load
/// balancer's network interfaces go a little later, or a rule elsewhere names it), an
/// error naming the groups whose rules refer to it: the controller retries with its
/// back-off.
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
            let referring: Vec<String> = state
                .ec2
                .security_groups(Params::new().filter("ip-permission.group-id", &[&group.id]))
                .map(|groups| groups.into_iter().map(|g| g.id).collect())
                .unwrap_or_default();
            let named = if referring.is_empty() {
                String::new()
            } else {
                format!(" (rules of {} refer to it)", referring.join(", "))
            };
            Err(CloudError::Other(format!(
                "security group {} ({}) is still in use{named}; deleting it again later: {e}",
                group.id, group.name
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// A group load balancer `lb` gave up (`rules.groups`, one): when it is `lb`'s own
/// group (of this cluster), the nodes' rules admitting it are revoked through
/// [`sync_classic`] (releasing it, `rules.source` still admitted) and it is deleted.
pub fn remove_if_owned(
    state: &Aws,
    rules: &ClassicRules<'_>,
    vpc: &str,
    instances: &[Instance],
) -> Result<(), CloudError> {
    let [id] = rules.groups else {
        return Ok(());
    };
    let group = state
        .ec2
        .security_groups(Params::new().filter("group-id", &[id]))?
        .into_iter()
        .next();
    let Some(group) = group else {
        return Ok(());
    };
    if group.name != own_group_name(rules.lb) || !state.config.owns(&group.tags) {
        return Ok(());
    }
    if !state.config.disable_security_group_ingress {
        sync_classic(state, rules, vpc, instances)?;
    }
    delete_own_group(state, &group)
}
