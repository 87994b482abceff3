//! An NLB's target groups: named as upstream's `buildTargetGroupName` (the name
//! changes with what a group cannot change in place), found or created with the health
//! check kept up to date, their targets kept to the nodes' instances, and found by name
//! and tags when what attached them is gone.

use crate::Aws;
use crate::elbv2::{HealthCheck, Target, TargetGroup};
use wasm_ccm_guest::types::{CloudError, Service};

/// One Service port: a listener and its target group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mapping {
    pub port: i32,
    /// The listener's protocol: `TCP`, `UDP` or `TLS`.
    pub protocol: &'static str,
    /// The target group's protocol: `TCP`, `UDP` or `TLS`.
    pub traffic_protocol: &'static str,
    pub node_port: i32,
    /// A TLS listener's certificate ARN and policy.
    pub certificate: String,
    pub ssl_policy: String,
}

/// Upstream's `buildTargetGroupName`: `k8s-<ns>-<name>-<hash>`, the hash over what a
/// target group cannot change in place.
pub(super) fn target_group_name(
    cluster_id: &str,
    service: &Service,
    m: &Mapping,
    hc: &HealthCheck,
) -> String {
    let clean = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
    };
    let mut sha = sha1_smol::Sha1::new();
    for part in [
        cluster_id,
        &service.metadata.namespace,
        &service.metadata.name,
        &m.port.to_string(),
        &m.node_port.to_string(),
        m.traffic_protocol,
        "instance",
        &hc.protocol,
        &hc.interval.to_string(),
    ] {
        sha.update(part.as_bytes());
    }
    let hash = sha.digest().to_string();
    let (ns, name) = (
        clean(&service.metadata.namespace),
        clean(&service.metadata.name),
    );
    format!(
        "k8s-{}-{}-{}",
        &ns[..ns.len().min(8)],
        &name[..name.len().min(8)],
        &hash[..10]
    )
}

/// Registers `wanted` targets and deregisters the others.
pub(super) fn sync_targets(
    state: &Aws,
    group: &TargetGroup,
    instances: &[String],
    node_port: i32,
) -> Result<(), CloudError> {
    let wanted: Vec<Target> = instances
        .iter()
        .map(|id| Target {
            id: id.clone(),
            port: node_port,
        })
        .collect();
    let actual = state.elbv2.targets(&group.arn)?;
    let stale: Vec<Target> = actual
        .iter()
        .filter(|t| !wanted.contains(t))
        .cloned()
        .collect();
    let missing: Vec<Target> = wanted
        .iter()
        .filter(|t| !actual.contains(t))
        .cloned()
        .collect();
    if !stale.is_empty() {
        state.elbv2.change_targets(&group.arn, &stale, false)?;
    }
    if !missing.is_empty() {
        state.elbv2.change_targets(&group.arn, &missing, true)?;
    }
    if !stale.is_empty() || !missing.is_empty() {
        wasm_ccm_guest::log::info(
            "updated load balancer targets",
            &[
                ("targetGroup", &group.name),
                ("registered", &missing.len().to_string()),
                ("deregistered", &stale.len().to_string()),
            ],
        );
    }
    Ok(())
}

/// The target group named `name`: found (health check brought up to date) or created.
#[allow(clippy::too_many_arguments)]
pub(super) fn target_group(
    state: &Aws,
    name: &str,
    m: &Mapping,
    vpc: &str,
    hc: &HealthCheck,
    tags: &[(String, String)],
    known: &[TargetGroup],
) -> Result<TargetGroup, CloudError> {
    let existing = match known.iter().find(|g| g.name == name) {
        Some(g) => Some(g.clone()),
        None => state.elbv2.target_group(name)?,
    };
    match existing {
        Some(group) => {
            if hc.differs_from(&group) {
                state.elbv2.modify_target_group(&group.arn, hc)?;
            }
            Ok(group)
        }
        None => {
            if vpc.is_empty() {
                return Err(CloudError::Other(format!(
                    "cannot create target group {name}: the VPC is unknown (set VPC in the cloud config)"
                )));
            }
            Ok(state.elbv2.create_target_group(
                name,
                m.traffic_protocol,
                m.node_port,
                vpc,
                hc,
                tags,
            )?)
        }
    }
}

/// The target groups made for the Service: named `k8s-<ns>-<name>-…` and tagged
/// with its name (and the cluster), attached or not — so nothing is left behind when
/// a delete is retried after the load balancer went, or the Service's ports changed.
pub(super) fn owned_target_groups(
    state: &Aws,
    service: &Service,
) -> Result<Vec<TargetGroup>, CloudError> {
    let clean = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
    };
    let (ns, name) = (
        clean(&service.metadata.namespace),
        clean(&service.metadata.name),
    );
    let prefix = format!(
        "k8s-{}-{}-",
        &ns[..ns.len().min(8)],
        &name[..name.len().min(8)]
    );
    let candidates: Vec<TargetGroup> = state
        .elbv2
        .all_target_groups()?
        .into_iter()
        .filter(|g| g.name.starts_with(&prefix))
        .collect();
    let arns: Vec<String> = candidates.iter().map(|g| g.arn.clone()).collect();
    let tags = state.elbv2.tags(&arns)?;
    let owner = format!("{}/{}", service.metadata.namespace, service.metadata.name);
    Ok(candidates
        .into_iter()
        .filter(|g| {
            tags.iter().any(|(arn, tags)| {
                *arn == g.arn
                    && tags
                        .iter()
                        .any(|(k, v)| k == "kubernetes.io/service-name" && *v == owner)
                    && state.config.has_cluster_tag(tags)
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::super::tests::service;
    use super::*;

    #[test]
    fn target_group_names_as_upstream() {
        // Upstream's test vector: "cluster-a" + "default" + "service-a" + 80 + 8080 +
        // TCP + instance + hc protocol "" + interval 0.
        let svc = service("default", "service-a");
        let m = Mapping {
            port: 80,
            protocol: "TCP",
            traffic_protocol: "TCP",
            node_port: 8080,
            certificate: String::new(),
            ssl_policy: String::new(),
        };
        let hc = HealthCheck {
            protocol: String::new(),
            port: "traffic-port".into(),
            path: String::new(),
            interval: 0,
            timeout: 10,
            healthy_threshold: 3,
            unhealthy_threshold: 3,
        };
        assert_eq!(
            target_group_name("cluster-a", &svc, &m, &hc),
            "k8s-default-servicea-7fa2e07508"
        );
    }
}
