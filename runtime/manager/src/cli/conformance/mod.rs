//! `wasm-ccm conformance FILE.wasm --cloud-config C [--policy P] [--credentials-dir D]
//! [--node NAME...] [--service FILE] [--elsewhere-service FILE] [--route-cidr CIDR]`:
//! drives a provider against its (real or emulated) cloud, under the real sandbox and
//! its policy (credential files only inside `--credentials-dir`, none without it), and
//! checks the contract's rules, printing a pass/fail table.
//!
//! - `initialize` refuses a cloud config that is not one (an error, not a trap).
//! - For each `--node` (an existing instance, by name) and `--node-json` (a Kubernetes
//!   Node, for a provider that reads its annotations or labels): `instance-exists` is
//!   true, `instance-metadata` gives a provider ID `<provider-name>://...`,
//!   `instance-exists` by that provider ID is true too, and `instance-shutdown`
//!   answers; a node that does not exist is `false` or `instance-not-found`, never
//!   `true`, and has no metadata (legacy `instances` when there is no `instances-v2`).
//!   With `--every-node-exists` (a provider whose instances are the Node objects
//!   themselves, as K3s's) that rule is not checked: every Node it is asked about
//!   exists.
//! - With `--service` (a Kubernetes Service of type LoadBalancer): `ensure` twice gives
//!   the same status, `get` finds it, `update` to all nodes but one and back works and
//!   keeps the status, one `ensure-load-balancer-deleted` leaves `get` with none (the
//!   second ensure made no second load balancer), and deleting again succeeds. The
//!   Service gets a UID of its own when it has none, so only the load balancer the
//!   check creates is touched.
//! - Throttling: the host answers one request `429` with `Retry-After: 7` itself
//!   (nothing reaches the cloud); the provider must answer `retry-after` of at least
//!   7 s (upstream `api.RetryError`), not another error, nor retry on its own. A
//!   provider whose policy allows no host (and names no credential) is not checked
//!   when it sends nothing.
//! - With `--elsewhere-service` (a Service another controller serves, by the
//!   provider's own convention): `ensure` answers `implemented-elsewhere` and nothing
//!   is created.
//! - With `--route-cidr`: a route to the first node is created, listed, deleted, and
//!   deleting it again succeeds.
//!
//! Mutating checks touch only what they create, and clean it up.

use std::fmt;
use std::path::PathBuf;

use serde_json::Value;
use wasm_ccm_host::provider::{LoadError, ProviderError};

use super::call::{CallError, cloud_error, node};
use super::sandboxed::Sandboxed;

mod instances;
mod services;
mod throttle;

use instances::{absent_node_check, batch_checks, instance_checks};
use services::{elsewhere_checks, load_balancer_checks, route_checks};
pub use throttle::Throttle;
use throttle::throttling_check;

/// What to check: `wasm-ccm conformance`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Conformance {
    /// The component, its policy and credentials directory.
    #[command(flatten)]
    pub provider: Sandboxed,
    /// The cloud config for `initialize`.
    #[arg(long)]
    pub cloud_config: PathBuf,
    /// A node whose instance exists in the cloud (repeatable).
    #[arg(long = "node")]
    pub nodes: Vec<String>,
    /// A file holding a Kubernetes Node (JSON) whose instance exists (repeatable): for
    /// a provider that reads the Node's annotations or labels.
    #[arg(long = "node-json")]
    pub node_files: Vec<PathBuf>,
    /// The provider's instances are the Node objects themselves (K3s): every Node it is
    /// asked about exists, so the rule for a node that does not exist is not checked.
    #[arg(long)]
    pub every_node_exists: bool,
    /// A Kubernetes Service of type LoadBalancer (JSON) to create, update and delete a
    /// load balancer for.
    #[arg(long)]
    pub service: Option<PathBuf>,
    /// A Kubernetes Service (JSON) that another controller serves: the provider must
    /// answer implemented-elsewhere and create nothing.
    #[arg(long)]
    pub elsewhere_service: Option<PathBuf>,
    /// A destination CIDR to create and delete a route to the first node for.
    #[arg(long)]
    pub route_cidr: Option<String>,
    /// The cluster name given to load balancer and route calls.
    #[arg(long, default_value = "kubernetes")]
    pub cluster_name: String,
}

/// Runs `wasm-ccm conformance`: the table on stdout, a failure when a check failed
/// or the checks could not run.
pub async fn main(request: Conformance) -> std::process::ExitCode {
    match run(&request).await {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(err) => super::exit::exit_code::<CallError>(Err(err)),
    }
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
pub(super) fn describe(err: &ProviderError) -> String {
    match err.cloud() {
        Some(cloud) => cloud_error(cloud).to_string(),
        None => err.to_string(),
    }
}

pub(super) fn check<T>(
    result: Result<T, ProviderError>,
    rule: impl FnOnce(&T) -> Option<String>,
) -> Outcome {
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
    let service_json = read_json(request.service.as_deref())?;
    let elsewhere_json = read_json(request.elsewhere_service.as_deref())?;
    let loader = request.provider.loader(2)?;
    let mut report = Report::default();

    let garbage = b"\x00 this is not a cloud config {[\x00".to_vec();
    report.record(
        "initialize refuses a bad cloud config",
        match loader.load(garbage).await {
            Err(LoadError::Initialize { .. }) => Outcome::Pass,
            Ok(_) => Outcome::Fail("a garbage cloud config was accepted".into()),
            Err(other) => Outcome::Fail(other.to_string()),
        },
    );
    let provider = loader.load(config).await?;
    let name = provider.name().to_owned();

    let mut given: Vec<Value> = request.nodes.iter().cloned().map(Value::String).collect();
    for file in &request.node_files {
        given.extend(read_json(Some(file))?);
    }
    let mut hosts = Vec::new();
    for value in &given {
        let mut host = node(value)?;
        let node_name = host.metadata.name.clone();
        instance_checks(&provider, &name, &node_name, &mut host, &mut report).await;
        hosts.push(host);
    }
    if request.every_node_exists {
        report.record(
            "a node that does not exist is false or instance-not-found",
            Outcome::Skip("--every-node-exists: the instances are the Nodes".into()),
        );
    } else {
        absent_node_check(&provider, &mut report).await;
    }
    batch_checks(&provider, &hosts, &mut report).await;
    throttling_check(
        loader.broker(),
        &provider,
        request.provider.reaches_nothing(),
        &mut report,
    )
    .await;

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
    match (&elsewhere_json, provider.load_balancer()) {
        (Some(svc), Some(_)) => {
            elsewhere_checks(&provider, request, svc, &hosts, &mut report).await?
        }
        (None, _) => report.record(
            "implemented-elsewhere",
            Outcome::Skip("no --elsewhere-service given".into()),
        ),
        (Some(_), None) => report.record(
            "implemented-elsewhere",
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

/// The JSON in `path`, when given.
fn read_json(path: Option<&std::path::Path>) -> Result<Option<Value>, CallError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let bytes = std::fs::read(path).map_err(|source| CallError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| CallError::Usage(format!("{}: not JSON: {e}", path.display())))
}
