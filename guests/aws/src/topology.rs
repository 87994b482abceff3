//! Network topology labels (`topology.k8s.aws/network-node-layer-<n>`) from EC2
//! `DescribeInstanceTopology`, as cloud-provider-aws sets them (`topology.go`,
//! `getAdditionalLabels`).
//!
//! - Asked once per node: not when the node has `…-layer-1` already, nor for an
//!   instance without a type.
//! - What EC2 cannot answer is remembered for 24 hours in the host's shared cache, so
//!   the pooled instances do not ask again: a region without the API
//!   (`UnsupportedOperation`) or without the permission (`UnauthorizedOperation`), an
//!   instance type without topology, an instance of a supported type that has none yet.
//! - A failure blocks the node's metadata only for the instance types upstream expects
//!   an answer for (`hpc…`, `trn…`, `p…`: [`requires_response`]); otherwise the labels
//!   are left out and a warning logged.

use std::time::Duration;

use crate::Aws;
use crate::ec2::Instance;
use wasm_ccm_guest::cache;
use wasm_ccm_guest::types::CloudError;

/// The labels' prefix; the layers are numbered from 1 (the top of the hierarchy).
pub const NETWORK_NODE_LABEL_PREFIX: &str = "topology.k8s.aws/network-node-layer-";
/// How long an "unsupported" answer is remembered.
const UNSUPPORTED_TTL: Duration = Duration::from_secs(24 * 3600);

fn unsupported_key(kind: &str, value: &str) -> String {
    format!("aws/topology-unsupported/{kind}/{value}")
}

fn remember_unsupported(kind: &str, value: &str) {
    if let Err(e) = cache::set(&unsupported_key(kind, value), b"1", UNSUPPORTED_TTL) {
        wasm_ccm_guest::log::warn(
            "cannot remember an unsupported instance topology in the shared cache",
            &[("error", &format!("{e:?}"))],
        );
    }
}

/// Upstream's default `SupportedTopologyInstanceTypePattern`,
/// `^(hpc|trn|p)[0-9]+[a-z]*(-[a-z0-9]+)?(\.[0-9a-z]*)$`: the types whose topology
/// must be known.
pub fn requires_response(instance_type: &str) -> bool {
    let Some(rest) = ["hpc", "trn", "p"]
        .iter()
        .find_map(|prefix| instance_type.strip_prefix(prefix))
    else {
        return false;
    };
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return false;
    }
    let rest = rest[digits..].trim_start_matches(|c: char| c.is_ascii_lowercase());
    let rest = match rest.strip_prefix('-') {
        Some(suffix) => {
            let part = suffix.len()
                - suffix
                    .trim_start_matches(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    .len();
            if part == 0 {
                return false;
            }
            &suffix[part..]
        }
        None => rest,
    };
    rest.strip_prefix('.').is_some_and(|size| {
        size.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    })
}

/// The network node labels of `instance`; none when the node has them already
/// (`labels`), or EC2 has no topology for it.
pub fn labels(
    state: &Aws,
    instance: &Instance,
    labels: &[(String, String)],
) -> Result<Vec<(String, String)>, CloudError> {
    let layer_one = format!("{NETWORK_NODE_LABEL_PREFIX}1");
    if labels.iter().any(|(k, _)| *k == layer_one) || instance.instance_type.is_empty() {
        return Ok(Vec::new());
    }
    let known_unsupported = [
        ("region", state.config.region.as_str()),
        ("instance", instance.id.as_str()),
        ("type", instance.instance_type.as_str()),
    ]
    .iter()
    .any(|(kind, value)| cache::get(&unsupported_key(kind, value)).is_some());
    if known_unsupported {
        return Ok(Vec::new());
    }
    let required = requires_response(&instance.instance_type);
    let nodes = match state.ec2.instance_topology(&instance.id) {
        Ok(nodes) => nodes,
        Err(e) if matches!(e.code(), "UnsupportedOperation" | "UnauthorizedOperation") => {
            wasm_ccm_guest::log::warn(
                "ec2:DescribeInstanceTopology is not available (not offered in the region, or not \
                 in the IAM policy); the network node labels are left out",
                &[("region", &state.config.region), ("error", &e.to_string())],
            );
            remember_unsupported("region", &state.config.region);
            return Ok(Vec::new());
        }
        Err(e) if required => {
            return Err(CloudError::from(e));
        }
        Err(e) => {
            wasm_ccm_guest::log::warn(
                "cannot describe the instance topology; the network node labels are left out",
                &[("instance", &instance.id), ("error", &e.to_string())],
            );
            return Ok(Vec::new());
        }
    };
    match nodes {
        Some(nodes) if !nodes.is_empty() => Ok(nodes
            .into_iter()
            .enumerate()
            .map(|(i, node)| (format!("{NETWORK_NODE_LABEL_PREFIX}{}", i + 1), node))
            .collect()),
        _ if required => {
            wasm_ccm_guest::log::warn(
                "instance has no instance topology listed but may be a supported type",
                &[
                    ("instance", &instance.id),
                    ("type", &instance.instance_type),
                ],
            );
            remember_unsupported("instance", &instance.id);
            Ok(Vec::new())
        }
        _ => {
            wasm_ccm_guest::log::debug(
                "instance type unsupported for getting instance topology",
                &[("type", &instance.instance_type)],
            );
            remember_unsupported("type", &instance.instance_type);
            Ok(Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's TestDoesInstanceTypeRequireResponse.
    #[test]
    fn the_types_that_need_an_answer_as_upstream() {
        for yes in [
            "hpc6a.48xlarge",
            "hpc6id.32xlarge",
            "hpc7a.12xlarge",
            "hpc7a.96xlarge",
            "hpc7g.4xlarge",
            "p3dn.24xlarge",
            "p4d.24xlarge",
            "p4de.24xlarge",
            "p5.48xlarge",
            "p5e.48xlarge",
            "p5en.48xlarge",
            "p6e-gb200.36xlarge",
            "trn1.2xlarge",
            "trn1.32xlarge",
            "trn1n.32xlarge",
            "trn2.48xlarge",
            "trn2u.48xlarge",
            "p6-b200.48xlarge",
        ] {
            assert!(requires_response(yes), "{yes}");
        }
        for no in [
            "m6g.large",
            "t3.large",
            "c3.large",
            "m5.large",
            "inf2.48xlarge",
            "p.large",
            "trn1-.large",
            "",
        ] {
            assert!(!requires_response(no), "{no}");
        }
    }
}
