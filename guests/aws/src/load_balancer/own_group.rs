//! A Classic load balancer's own security group, `k8s-elb-<name>` (upstream's
//! `ensureSecurityGroup`): made and tagged like the load balancer, admitting exactly the
//! source ranges on the Service's ports, deleted after the load balancer, and removed
//! when named groups replace it.

use super::security_groups::{
    CLASSIC_RULE, Change, apply, diff, groups_of_other_load_balancers, vpc_groups,
};
use crate::Aws;
use crate::api::Params;
use crate::ec2::{Rule, SecurityGroup, Source};
use wasm_ccm_guest::types::{CloudError, Service};

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
    if !state.config.disable_security_group_ingress {
        revoke_released(state, lb, id, vpc)?;
    }
    delete_own_group(state, &group)
}

/// Revokes the nodes' rules admitting `released`, a group load balancer `lb` gave up
/// (every protocol, undescribed or described for a Classic load balancer), unless
/// another Classic load balancer uses it; the rules for its other groups stay.
fn revoke_released(state: &Aws, lb: &str, released: &str, vpc: &str) -> Result<(), CloudError> {
    if groups_of_other_load_balancers(state, lb)?
        .iter()
        .any(|g| g == released)
    {
        return Ok(());
    }
    let source = Source::Group(released.to_owned());
    for group in vpc_groups(state, vpc)?.iter().filter(|g| g.id != released) {
        let revoke: Vec<Rule> = group
            .ingress
            .iter()
            .filter(|r| {
                r.source == source
                    && r.protocol == "-1"
                    && (r.description.starts_with(CLASSIC_RULE) || r.description.is_empty())
            })
            .cloned()
            .collect();
        let change = Change {
            add: Vec::new(),
            revoke,
        };
        apply(state, group, &change, lb)?;
    }
    Ok(())
}
