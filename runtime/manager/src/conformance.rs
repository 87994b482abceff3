//! `wasm-ccm conformance FILE.wasm --cloud-config C [--node NAME...] [--service FILE]
//! [--route-cidr CIDR]`: drives a provider against its (real or emulated) cloud, under
//! the real sandbox and the policy next to it, and checks the contract's rules, printing
//! a pass/fail table.
//!
//! - `initialize` refuses a cloud config that is not one (an error, not a trap).
//! - For each `--node` (an existing instance): `instance-exists` is true,
//!   `instance-metadata` gives a provider ID `<provider-name>://...`, and
//!   `instance-shutdown` answers; a node that does not exist is `false` or
//!   `instance-not-found`, never `true` (legacy `instances` when there is no
//!   `instances-v2`).
//! - With `--service` (a Kubernetes Service of type LoadBalancer): `ensure` twice gives
//!   the same status, `get` finds it, `update` works, `ensure-load-balancer-deleted`
//!   succeeds twice and `get` then says none. The Service gets a UID of its own when
//!   it has none, so only the load balancer the check creates is touched.
//! - With `--route-cidr`: a route to the first node is created, listed, deleted, and
//!   deleting it again succeeds.
//!
//! Mutating checks touch only what they create, and clean it up.

use std::fmt;
use std::path::PathBuf;

use serde_json::{Value, json};
use wasm_ccm_host::contract::types as wit;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::{CloudError, LoadError, Provider, ProviderError, ProviderLoader};

use crate::call::{CallError, cloud_error, node, service};

/// What to check.
#[derive(Debug, Clone)]
pub struct Conformance {
    /// The provider component; its policy is the `.yaml` next to it unless `policy`.
    pub file: PathBuf,
    /// The policy, when not the one next to the component.
    pub policy: Option<PathBuf>,
    /// The cloud config for `initialize`.
    pub cloud_config: PathBuf,
    /// Names of nodes whose instances exist in the cloud.
    pub nodes: Vec<String>,
    /// A Kubernetes Service (JSON) to create, update and delete a load balancer for.
    pub service: Option<PathBuf>,
    /// A destination CIDR to create and delete a route for (to the first node).
    pub route_cidr: Option<String>,
    /// The cluster name passed to load balancer and route calls.
    pub cluster_name: String,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The rule holds.
    Pass,
    /// The rule does not hold; why.
    Fail(String),
    /// Not checked; why.
    Skip(String),
}

/// The checks, in order.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// (check, outcome).
    pub checks: Vec<(String, Outcome)>,
}

impl Report {
    /// True when no check failed.
    pub fn passed(&self) -> bool {
        !self
            .checks
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Fail(_)))
    }

    fn record(&mut self, check: impl Into<String>, outcome: Outcome) {
        self.checks.push((check.into(), outcome));
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| check | result | detail |")?;
        writeln!(f, "| --- | --- | --- |")?;
        for (check, outcome) in &self.checks {
            let (result, detail) = match outcome {
                Outcome::Pass => ("pass", ""),
                Outcome::Fail(why) => ("FAIL", why.as_str()),
                Outcome::Skip(why) => ("skip", why.as_str()),
            };
            writeln!(f, "| {check} | {result} | {} |", detail.replace('|', "/"))?;
        }
        let failed = self
            .checks
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Fail(_)))
            .count();
        write!(f, "{} checks, {failed} failed", self.checks.len())
    }
}

/// What an error looks like in a detail: the contract's case, or the host's failure.
fn describe(err: &ProviderError) -> String {
    match err.cloud() {
        Some(cloud) => cloud_error(cloud).to_string(),
        None => err.to_string(),
    }
}

fn check<T>(result: Result<T, ProviderError>, rule: impl FnOnce(&T) -> Option<String>) -> Outcome {
    match result {
        Ok(value) => match rule(&value) {
            None => Outcome::Pass,
            Some(why) => Outcome::Fail(why),
        },
        Err(err) => Outcome::Fail(describe(&err)),
    }
}

/// Runs the checks; an error only when the provider cannot be loaded with the config.
pub async fn run(request: &Conformance) -> Result<Report, CallError> {
    let config = std::fs::read(&request.cloud_config).map_err(|source| CallError::Read {
        path: request.cloud_config.clone(),
        source,
    })?;
    let service_json: Option<Value> = match &request.service {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|source| CallError::Read {
                path: path.clone(),
                source,
            })?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| CallError::Usage(format!("{}: not JSON: {e}", path.display())))?,
            )
        }
        None => None,
    };
    let loader = ProviderLoader::new(&EngineSettings {
        max_instances: 2,
        ..EngineSettings::default()
    })?;
    let mut report = Report::default();

    let garbage = b"\x00 this is not a cloud config {[\x00".to_vec();
    report.record(
        "initialize refuses a bad cloud config",
        match loader
            .load_with_policy(&request.file, request.policy.as_deref(), garbage)
            .await
        {
            Err(LoadError::Initialize { .. }) => Outcome::Pass,
            Ok(_) => Outcome::Fail("a garbage cloud config was accepted".into()),
            Err(other) => Outcome::Fail(other.to_string()),
        },
    );
    let provider = loader
        .load_with_policy(&request.file, request.policy.as_deref(), config)
        .await?;
    let name = provider.name().to_owned();

    let mut hosts = Vec::new();
    for node_name in &request.nodes {
        let mut host = node(&Value::String(node_name.clone()))?;
        instance_checks(&provider, &name, node_name, &mut host, &mut report).await;
        hosts.push(host);
    }
    absent_node_check(&provider, &mut report).await;

    match (&service_json, provider.load_balancer()) {
        (Some(svc), Some(_)) => {
            load_balancer_checks(&provider, request, svc, &hosts, &mut report).await?
        }
        (None, _) => report.record("load balancer", Outcome::Skip("no --service given".into())),
        (Some(_), None) => report.record(
            "load balancer",
            Outcome::Skip("the provider does not export load-balancer".into()),
        ),
    }
    match (&request.route_cidr, provider.routes(), hosts.first()) {
        (Some(cidr), Some(_), Some(first)) => {
            route_checks(&provider, request, cidr, first, &mut report).await
        }
        (None, _, _) => report.record("routes", Outcome::Skip("no --route-cidr given".into())),
        (Some(_), None, _) => report.record(
            "routes",
            Outcome::Skip("the provider does not export routes".into()),
        ),
        (Some(_), Some(_), None) => {
            report.record("routes", Outcome::Skip("no --node to route to".into()))
        }
    }
    Ok(report)
}

async fn instance_checks(
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
async fn absent_node_check(provider: &Provider, report: &mut Report) {
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
}

async fn load_balancer_checks(
    provider: &Provider,
    request: &Conformance,
    svc: &Value,
    hosts: &[wit::Node],
    report: &mut Report,
) -> Result<(), CallError> {
    let mut svc = svc.clone();
    if svc
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        svc["metadata"]["uid"] = json!(format!("wasm-ccm-conformance-{}", std::process::id()));
    }
    let svc = service(&svc)?;
    let lb = provider.load_balancer().expect("checked by the caller");
    let cluster = &request.cluster_name;
    let first = lb.ensure_load_balancer(cluster, &svc, hosts).await;
    let second = lb.ensure_load_balancer(cluster, &svc, hosts).await;
    report.record(
        "ensure-load-balancer twice gives the same status",
        match (&first, &second) {
            (Ok(a), Ok(b)) if a == b => Outcome::Pass,
            (Ok(a), Ok(b)) => Outcome::Fail(format!("{a:?} then {b:?}")),
            (Err(err), _) | (_, Err(err)) => Outcome::Fail(describe(err)),
        },
    );
    report.record(
        "get-load-balancer finds it",
        check(lb.get_load_balancer(cluster, &svc).await, |found| {
            match (found, &first) {
                (Some(status), Ok(ensured)) if status == ensured => None,
                (Some(status), _) => {
                    Some(format!("status {status:?} differs from the ensured one"))
                }
                (None, _) => Some("none".into()),
            }
        }),
    );
    report.record(
        "update-load-balancer works",
        check(lb.update_load_balancer(cluster, &svc, hosts).await, |_| {
            None
        }),
    );
    report.record(
        "ensure-load-balancer-deleted succeeds",
        check(lb.ensure_load_balancer_deleted(cluster, &svc).await, |_| {
            None
        }),
    );
    report.record(
        "ensure-load-balancer-deleted succeeds again",
        check(lb.ensure_load_balancer_deleted(cluster, &svc).await, |_| {
            None
        }),
    );
    report.record(
        "get-load-balancer then says none",
        check(lb.get_load_balancer(cluster, &svc).await, |found| {
            found.as_ref().map(|s| format!("still {s:?}"))
        }),
    );
    Ok(())
}

async fn route_checks(
    provider: &Provider,
    request: &Conformance,
    cidr: &str,
    target: &wit::Node,
    report: &mut Report,
) {
    let routes = provider.routes().expect("checked by the caller");
    let cluster = &request.cluster_name;
    let route = wit::Route {
        name: String::new(),
        target_node: target.metadata.name.clone(),
        target_node_addresses: target.addresses.clone(),
        destination_cidr: cidr.to_owned(),
        blackhole: false,
    };
    let listed = |list: &[wit::Route]| -> Option<wit::Route> {
        list.iter()
            .find(|r| r.destination_cidr == cidr && r.target_node == route.target_node)
            .cloned()
    };
    report.record(
        format!("create-route({cidr} → {})", route.target_node),
        check(
            routes
                .create_route(cluster, "wasm-ccm-conformance", &route)
                .await,
            |_| None,
        ),
    );
    let created = routes.list_routes(cluster).await;
    let found = created.as_ref().ok().and_then(|l| listed(l));
    report.record(
        "list-routes has it",
        check(created, |l| {
            listed(l).is_none().then(|| "not listed".into())
        }),
    );
    let to_delete = found.unwrap_or(route.clone());
    report.record(
        "delete-route succeeds",
        check(routes.delete_route(cluster, &to_delete).await, |_| None),
    );
    report.record(
        "delete-route succeeds again",
        check(routes.delete_route(cluster, &to_delete).await, |_| None),
    );
    report.record(
        "list-routes no longer has it",
        check(routes.list_routes(cluster).await, |l| {
            listed(l).map(|r| format!("still listed: {r:?}"))
        }),
    );
}
