//! The instance checks: each `--node` (exists, metadata, provider ID, shutdown), a node
//! that does not exist, and the batched calls against the single ones.

use serde_json::Value;
use wasm_ccm_host::contract::types as wit;
use wasm_ccm_host::provider::{CloudError, Provider, ProviderError};

use super::{Outcome, Report, check, describe};
use crate::cli::call::node;

pub(super) async fn instance_checks(
    provider: &Provider,
    name: &str,
    node_name: &str,
    host: &mut wit::Node,
    report: &mut Report,
) {
    if let Some(v2) = provider.instances_v2() {
        report.record(
            format!("instance-exists({node_name}) is true"),
            check(v2.instance_exists(host).await, |e| {
                (!e).then(|| "false".into())
            }),
        );
        let metadata = v2.instance_metadata(host).await;
        if let Ok(m) = &metadata {
            host.provider_id = Some(m.provider_id.clone());
            host.addresses = m.node_addresses.clone();
        }
        report.record(
            format!("instance-metadata({node_name}) has a provider ID {name}://..."),
            check(metadata, |m| {
                (!m.provider_id.starts_with(&format!("{name}://")))
                    .then(|| format!("provider ID {:?}", m.provider_id))
            }),
        );
        if host.provider_id.is_some() {
            // What the node controllers do once cloud-node set the provider ID: the
            // lookups by provider ID agree with the ones by name.
            report.record(
                format!("instance-exists({node_name}) by its provider ID is true"),
                check(v2.instance_exists(host).await, |e| {
                    (!e).then(|| "false for the provider ID instance-metadata gave".into())
                }),
            );
        }
        report.record(
            format!("instance-shutdown({node_name}) answers"),
            check(v2.instance_shutdown(host).await, |_| None),
        );
    } else if let Some(legacy) = provider.instances() {
        let id = legacy.instance_id(node_name).await;
        if let Ok(id) = &id {
            host.provider_id = Some(crate::cloud::provider_id(name, id));
        }
        report.record(
            format!("instances.instance-id({node_name}) answers"),
            check(id, |id| id.is_empty().then(|| "empty instance ID".into())),
        );
        let provider_id = host.provider_id.clone().unwrap_or_default();
        report.record(
            format!("instances.instance-exists-by-provider-id({node_name}) is true"),
            check(
                legacy.instance_exists_by_provider_id(&provider_id).await,
                |e| (!e).then(|| "false".into()),
            ),
        );
    } else {
        report.record(
            format!("instances({node_name})"),
            Outcome::Skip("the provider exports no instances interface".into()),
        );
    }
}

/// A node no cloud has: `false` or `instance-not-found`, never `true` (a Node would be
/// kept for a deleted instance) and never another error (the lifecycle controller
/// would never delete the Node of a deleted instance).
pub(super) async fn absent_node_check(provider: &Provider, report: &mut Report) {
    let absent = format!("wasm-ccm-conformance-absent-{}", std::process::id());
    let Ok(host) = node(&Value::String(absent.clone())) else {
        return;
    };
    let result = match (provider.instances_v2(), provider.instances()) {
        (Some(v2), _) => v2.instance_exists(&host).await,
        (None, Some(legacy)) => legacy.instance_id(&absent).await.map(|_| true),
        (None, None) => return,
    };
    report.record(
        "a node that does not exist is false or instance-not-found",
        match result {
            Ok(false) => Outcome::Pass,
            Err(err) if matches!(err.cloud(), Some(CloudError::InstanceNotFound)) => Outcome::Pass,
            Ok(true) => Outcome::Fail(format!("{absent} exists")),
            Err(err) => Outcome::Fail(describe(&err)),
        },
    );
    // Metadata agrees with instance-exists: none for an instance that does not exist
    // (cloud-node would initialize a Node with it).
    if let Some(v2) = provider.instances_v2() {
        report.record(
            "instance-metadata of a node that does not exist is an error",
            match v2.instance_metadata(&host).await {
                // The contract's error (instance-not-found, or the cloud's own); a trap or
                // a host failure is not an answer.
                Err(err) if err.cloud().is_some() => Outcome::Pass,
                Err(err) => Outcome::Fail(describe(&err)),
                Ok(m) => Outcome::Fail(format!("metadata {m:?} for {absent}")),
            },
        );
    }
}

/// `instances-batch` answers each node as the single `instances-v2` call does: the
/// given nodes by provider ID and by name, and a node no cloud has.
pub(super) async fn batch_checks(provider: &Provider, hosts: &[wit::Node], report: &mut Report) {
    let (Some(batch), Some(v2)) = (provider.instances_batch(), provider.instances_v2()) else {
        report.record(
            "instances-batch",
            Outcome::Skip("the provider does not export instances-batch".into()),
        );
        return;
    };
    let mut nodes: Vec<wit::Node> = hosts.to_vec();
    nodes.extend(hosts.iter().map(|h| wit::Node {
        provider_id: None,
        ..h.clone()
    }));
    if let Ok(absent) = node(&Value::String(format!(
        "wasm-ccm-conformance-absent-{}",
        std::process::id()
    ))) {
        nodes.push(absent);
    }
    /// The single call's answer as a batch entry (a trap or timeout is no answer).
    fn entry<T>(single: Result<T, ProviderError>) -> Result<Result<T, CloudError>, String> {
        match single {
            Ok(value) => Ok(Ok(value)),
            Err(err) => match err.cloud() {
                Some(cloud) => Ok(Err(cloud.clone())),
                None => Err(describe(&err)),
            },
        }
    }
    fn agree<T: PartialEq + std::fmt::Debug>(
        nodes: &[wit::Node],
        batch: Result<Vec<Result<T, wit::CloudError>>, ProviderError>,
        singles: Vec<Result<Result<T, CloudError>, String>>,
    ) -> Outcome {
        let answers = match batch {
            Ok(answers) => answers,
            Err(err) => return Outcome::Fail(describe(&err)),
        };
        for ((node, answer), single) in nodes.iter().zip(answers).zip(singles) {
            let single = match single {
                Ok(single) => single,
                Err(err) => return Outcome::Fail(err),
            };
            let answer = answer.map_err(CloudError::from);
            if answer != single {
                let by = if node.provider_id.is_some() {
                    "provider ID"
                } else {
                    "name"
                };
                return Outcome::Fail(format!(
                    "{} (by {by}): batch {answer:?}, single {single:?}",
                    node.metadata.name
                ));
            }
        }
        Outcome::Pass
    }
    let count = nodes.len();
    let mut singles = Vec::new();
    for n in &nodes {
        singles.push(entry(v2.instance_exists(n).await));
    }
    report.record(
        format!("instances-exist({count} nodes) agrees with instance-exists"),
        agree(&nodes, batch.instances_exist(&nodes).await, singles),
    );
    let mut singles = Vec::new();
    for n in &nodes {
        singles.push(entry(v2.instance_shutdown(n).await));
    }
    report.record(
        format!("instances-shutdown({count} nodes) agrees with instance-shutdown"),
        agree(&nodes, batch.instances_shutdown(&nodes).await, singles),
    );
    let mut singles = Vec::new();
    for n in &nodes {
        singles.push(entry(v2.instance_metadata(n).await));
    }
    report.record(
        format!("instances-metadata({count} nodes) agrees with instance-metadata"),
        agree(&nodes, batch.instances_metadata(&nodes).await, singles),
    );
}
