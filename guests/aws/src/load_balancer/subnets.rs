//! The subnets of a new load balancer: the `…-subnets` annotation (IDs or `Name`
//! tags), else upstream's `findELBSubnets`: one subnet per zone of the VPC, tagged for
//! the cluster (or for no cluster), public ones for an internet-facing load balancer,
//! preferring the role tag (`kubernetes.io/role/elb`, `kubernetes.io/role/internal-elb`),
//! then the cluster tag, then the smallest ID; only zones of type `availability-zone`.

use super::{ANNOTATION, annotation, invalid};
use crate::Aws;
use crate::api::Params;
use crate::config::CLUSTER_TAG_PREFIX;
use crate::ec2::Subnet;
use wasm_ccm_guest::types::{CloudError, Service};

/// Role tags of subnets meant for load balancers.
const ROLE_ELB: &str = "kubernetes.io/role/elb";
const ROLE_INTERNAL_ELB: &str = "kubernetes.io/role/internal-elb";

/// The subnets for a new load balancer.
pub(super) fn subnets(
    state: &Aws,
    service: &Service,
    internal: bool,
    vpc: &str,
) -> Result<Vec<String>, CloudError> {
    if let Some(list) = annotation(service, "subnets") {
        let wanted: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if wanted.is_empty() {
            return Err(invalid(service, "the subnets annotation lists no subnet"));
        }
        let (ids, names): (Vec<&str>, Vec<&str>) =
            wanted.iter().partition(|s| s.starts_with("subnet-"));
        let mut found = Vec::new();
        if !ids.is_empty() {
            found.extend(state.ec2.subnets(Params::new().filter("subnet-id", &ids))?);
        }
        if !names.is_empty() {
            found.extend(
                state.ec2.subnets(
                    Params::new()
                        .filter("tag:Name", &names)
                        .filter("vpc-id", &[vpc]),
                )?,
            );
        }
        if found.len() != wanted.len() {
            return Err(invalid(
                service,
                format!(
                    "expected to find {} subnets, but found {}",
                    wanted.len(),
                    found.len()
                ),
            ));
        }
        return Ok(found.into_iter().map(|s| s.id).collect());
    }
    if vpc.is_empty() {
        return Err(invalid(
            service,
            "cannot tell the VPC: set VPC in the cloud config, or wait for nodes with provider IDs",
        ));
    }
    let config = &state.config;
    let candidates: Vec<Subnet> = state
        .ec2
        .subnets(Params::new().filter("vpc-id", &[vpc]))?
        .into_iter()
        .filter(|s| {
            config.has_cluster_tag(&s.tags)
                || !s
                    .tags
                    .iter()
                    .any(|(k, _)| k.starts_with(CLUSTER_TAG_PREFIX))
        })
        .collect();
    let candidates = if candidates.is_empty() && !config.subnet_id.is_empty() {
        state
            .ec2
            .subnets(Params::new().filter("subnet-id", &[config.subnet_id.as_str()]))?
    } else {
        candidates
    };
    let tables = state
        .ec2
        .route_tables(Params::new().filter("vpc-id", &[vpc]))?;
    let is_public = |subnet: &Subnet| {
        let table = tables
            .iter()
            .find(|t| t.subnets.contains(&subnet.id))
            .or_else(|| tables.iter().find(|t| t.main));
        table.is_some_and(|t| t.routes.iter().any(|r| r.gateway_id.starts_with("igw")))
    };
    let role = if internal {
        ROLE_INTERNAL_ELB
    } else {
        ROLE_ELB
    };
    let zone_types = zone_types(state);
    let mut best: Vec<Subnet> = Vec::new();
    for subnet in candidates {
        if !internal && !is_public(&subnet) {
            continue;
        }
        let zone_ok = zone_types
            .iter()
            .find(|(name, _)| *name == subnet.zone)
            .is_none_or(|(_, kind)| kind == "availability-zone");
        if !zone_ok {
            continue;
        }
        let rank = |s: &Subnet| {
            (
                !s.tags.iter().any(|(k, _)| k == role),
                !config.has_cluster_tag(&s.tags) || config.cluster_id.is_empty(),
                s.id.clone(),
            )
        };
        match best.iter_mut().find(|b| b.zone == subnet.zone) {
            Some(current) if rank(&subnet) < rank(current) => *current = subnet,
            Some(_) => {}
            None => best.push(subnet),
        }
    }
    best.sort_by(|a, b| a.zone.cmp(&b.zone));
    if best.is_empty() {
        return Err(invalid(
            service,
            format!(
                "could not find any suitable subnets for creating the load balancer in {vpc} \
                 (tag public subnets `{ROLE_ELB}`, private ones `{ROLE_INTERNAL_ELB}`, or use the \
                 {ANNOTATION}subnets annotation)"
            ),
        ));
    }
    Ok(best.into_iter().map(|s| s.id).collect())
}

/// Zone name → zone type, from the zones in the shared cache.
fn zone_types(state: &Aws) -> Vec<(String, String)> {
    crate::instances::zones(state, None)
        .unwrap_or_default()
        .into_iter()
        .map(|z| (z.name, z.zone_type))
        .collect()
}
