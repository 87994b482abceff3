//! `wasm-ccm conformance FILE.wasm --cloud-config C [--policy P] [--node NAME...]
//! [--service FILE] [--elsewhere-service FILE] [--route-cidr CIDR]`: drives a provider
//! against its (real or emulated) cloud, under the real sandbox and its policy, and
//! checks the contract's rules, printing a pass/fail table.
//!
//! - `initialize` refuses a cloud config that is not one (an error, not a trap).
//! - For each `--node` (an existing instance): `instance-exists` is true,
//!   `instance-metadata` gives a provider ID `<provider-name>://...`, `instance-exists`
//!   by that provider ID is true too, and `instance-shutdown` answers; a node that
//!   does not exist is `false` or `instance-not-found`, never `true`, and has no
//!   metadata (legacy `instances` when there is no `instances-v2`).
//! - With `--service` (a Kubernetes Service of type LoadBalancer): `ensure` twice gives
//!   the same status, `get` finds it, `update` to all nodes but one and back works and
//!   keeps the status, one `ensure-load-balancer-deleted` leaves `get` with none (the
//!   second ensure made no second load balancer), and deleting again succeeds. The
//!   Service gets a UID of its own when it has none, so only the load balancer the
//!   check creates is touched.
//! - Throttling: the host answers one request `429` with `Retry-After: 7` itself
//!   (nothing reaches the cloud); the provider must answer `retry-after` of at least
//!   7 s (upstream `api.RetryError`), not another error, nor retry on its own.
//! - With `--elsewhere-service` (a Service another controller serves, by the
//!   provider's own convention): `ensure` answers `implemented-elsewhere` and nothing
//!   is created.
//! - With `--route-cidr`: a route to the first node is created, listed, deleted, and
//!   deleting it again succeeds.
//!
//! Mutating checks touch only what they create, and clean it up.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use wasm_ccm_host::capabilities::http_egress::EgressInterceptor;
use wasm_ccm_host::contract::types as wit;
use wasm_ccm_host::provider::{CloudError, LoadError, Provider, ProviderError, ProviderLoader};

use crate::call::{CallError, cloud_error, node, service};

/// What to check.
#[derive(Debug, Clone)]
pub struct Conformance {
    /// The provider component; its policy is the `.yaml` next to it unless `policy`.
    pub file: PathBuf,
    /// The policy, when not the one next to the component.
    pub policy: Option<PathBuf>,
    /// Where credential files must lie, as the daemon's `--credentials-dir`; the
    /// policy's directory when `None`.
    pub credentials_dir: Option<PathBuf>,
    /// The cloud config for `initialize`.
    pub cloud_config: PathBuf,
    /// Names of nodes whose instances exist in the cloud.
    pub nodes: Vec<String>,
    /// A Kubernetes Service (JSON) to create, update and delete a load balancer for.
    pub service: Option<PathBuf>,
    /// A Kubernetes Service (JSON) another controller serves: the provider must answer
    /// `implemented-elsewhere` and create nothing.
    pub elsewhere_service: Option<PathBuf>,
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
    let service_json = read_json(request.service.as_deref())?;
    let elsewhere_json = read_json(request.elsewhere_service.as_deref())?;
    let loader = crate::call::confined_loader(
        &request.file,
        request.policy.as_deref(),
        request.credentials_dir.as_deref(),
    )?;
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
    batch_checks(&provider, &hosts, &mut report).await;
    throttling_check(&loader, &provider, &mut report).await;

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
async fn batch_checks(provider: &Provider, hosts: &[wit::Node], report: &mut Report) {
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

/// The `Retry-After` the throttling check answers with.
const THROTTLE_RETRY_AFTER: Duration = Duration::from_secs(7);

/// An interceptor answering the next `n` allowed requests `429 Too Many Requests` with
/// `Retry-After` itself, without forwarding them: the cloud's throttling, made on
/// demand.
pub struct Throttle {
    left: std::sync::Mutex<u32>,
    retry_after: Duration,
}

impl Throttle {
    /// Throttles the next `requests` requests with `retry_after`.
    pub fn new(requests: u32, retry_after: Duration) -> Self {
        Self {
            left: std::sync::Mutex::new(requests),
            retry_after,
        }
    }
}

impl EgressInterceptor for Throttle {
    fn intercept(
        &self,
        _method: &http::Method,
        _url: &url::Url,
    ) -> Option<http::Response<bytes::Bytes>> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        if *left == 0 {
            return None;
        }
        *left -= 1;
        http::Response::builder()
            .status(http::StatusCode::TOO_MANY_REQUESTS)
            .header(http::header::CONTENT_TYPE, "text/plain")
            .header(http::header::RETRY_AFTER, self.retry_after.as_secs())
            .body(bytes::Bytes::from_static(
                b"throttled by the host (wasm-ccm conformance)",
            ))
            .ok()
    }
}

/// A cloud's throttling is the contract's `retry-after`, no sooner than the cloud
/// asked: the host answers the provider's next request `429` with `Retry-After: 7`
/// itself (nothing reaches the cloud), and the provider must say `retry-after` with at
/// least 7 s, not fail otherwise nor retry on its own.
async fn throttling_check(loader: &ProviderLoader, provider: &Provider, report: &mut Report) {
    let rule = format!(
        "a 429 with Retry-After: {} s is retry-after, no sooner",
        THROTTLE_RETRY_AFTER.as_secs()
    );
    let Some(v2) = provider.instances_v2() else {
        report.record(
            rule,
            Outcome::Skip("the provider does not export instances-v2".into()),
        );
        return;
    };
    let name = format!("wasm-ccm-conformance-throttled-{}", std::process::id());
    let Ok(host) = node(&Value::String(name)) else {
        return;
    };
    loader
        .broker()
        .set_interceptor(Some(Arc::new(Throttle::new(1, THROTTLE_RETRY_AFTER))));
    let result = v2.instance_exists(&host).await;
    // Whether or not the provider sent anything, nothing else is throttled.
    loader.broker().set_interceptor(None);
    let wanted = THROTTLE_RETRY_AFTER.as_millis();
    report.record(
        rule,
        match result {
            Err(err) => match err.cloud() {
                Some(CloudError::RetryAfter { delay, .. }) if delay.as_millis() >= wanted => {
                    Outcome::Pass
                }
                Some(CloudError::RetryAfter { delay, .. }) => Outcome::Fail(format!(
                    "retry-after {} ms, sooner than the cloud's {wanted} ms",
                    delay.as_millis()
                )),
                _ => Outcome::Fail(format!("answered {}", describe(&err))),
            },
            Ok(answer) => Outcome::Fail(format!(
                "answered {answer} despite the 429: throttling must reach the host as \
                 retry-after, which schedules the next attempt"
            )),
        },
    );
}

/// A Service another controller serves: `ensure-load-balancer` answers
/// `implemented-elsewhere` (upstream: the service controller then leaves it alone) and
/// nothing is created for it.
async fn elsewhere_checks(
    provider: &Provider,
    request: &Conformance,
    svc: &Value,
    hosts: &[wit::Node],
    report: &mut Report,
) -> Result<(), CallError> {
    let svc = service(&with_uid(svc, "elsewhere"))?;
    let lb = provider.load_balancer().expect("checked by the caller");
    let cluster = &request.cluster_name;
    report.record(
        "ensure-load-balancer for a Service served elsewhere is implemented-elsewhere",
        match lb.ensure_load_balancer(cluster, &svc, hosts).await {
            Err(err) if matches!(err.cloud(), Some(CloudError::ImplementedElsewhere)) => {
                Outcome::Pass
            }
            Err(err) => Outcome::Fail(describe(&err)),
            Ok(status) => {
                // Clean up what was created by mistake.
                let _ = lb.ensure_load_balancer_deleted(cluster, &svc).await;
                Outcome::Fail(format!("created a load balancer: {status:?}"))
            }
        },
    );
    report.record(
        "nothing is created for a Service served elsewhere",
        match lb.get_load_balancer(cluster, &svc).await {
            Ok(None) => Outcome::Pass,
            Err(err) if matches!(err.cloud(), Some(CloudError::ImplementedElsewhere)) => {
                Outcome::Pass
            }
            Ok(Some(status)) => Outcome::Fail(format!("get-load-balancer finds {status:?}")),
            Err(err) => Outcome::Fail(describe(&err)),
        },
    );
    Ok(())
}

/// `svc` with a UID of the check's own when it has none, so only what the check
/// creates is touched.
fn with_uid(svc: &Value, role: &str) -> Value {
    let mut svc = svc.clone();
    if svc
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        svc["metadata"]["uid"] = json!(format!(
            "wasm-ccm-conformance-{role}-{}",
            std::process::id()
        ));
    }
    svc
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

async fn load_balancer_checks(
    provider: &Provider,
    request: &Conformance,
    svc: &Value,
    hosts: &[wit::Node],
    report: &mut Report,
) -> Result<(), CallError> {
    let svc = service(&with_uid(svc, "lb"))?;
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
    // `get-load-balancer` finds the load balancer with the status ensure gave.
    let as_ensured = |found: &Option<wit::LoadBalancerStatus>| match (found, &first) {
        (Some(status), Ok(ensured)) if status == ensured => None,
        (Some(status), _) => Some(format!("status {status:?} differs from the ensured one")),
        (None, _) => Some("none".into()),
    };
    report.record(
        "get-load-balancer finds it",
        check(lb.get_load_balancer(cluster, &svc).await, as_ensured),
    );
    // A node leaves and comes back, as the service controller's node sync does it.
    if hosts.len() > 1 {
        report.record(
            format!(
                "update-load-balancer to {} of {} nodes works",
                hosts.len() - 1,
                hosts.len()
            ),
            check(
                lb.update_load_balancer(cluster, &svc, &hosts[1..]).await,
                |_| None,
            ),
        );
    }
    report.record(
        format!("update-load-balancer to all {} nodes works", hosts.len()),
        check(lb.update_load_balancer(cluster, &svc, hosts).await, |_| {
            None
        }),
    );
    report.record(
        "get-load-balancer after the updates gives the same status",
        check(lb.get_load_balancer(cluster, &svc).await, as_ensured),
    );
    report.record(
        "ensure-load-balancer-deleted succeeds",
        check(lb.ensure_load_balancer_deleted(cluster, &svc).await, |_| {
            None
        }),
    );
    // One delete removes what both ensures made: the second did not make another.
    report.record(
        "get-load-balancer then says none (ensure made one load balancer)",
        check(lb.get_load_balancer(cluster, &svc).await, |found| {
            found.as_ref().map(|s| format!("still {s:?}"))
        }),
    );
    report.record(
        "ensure-load-balancer-deleted succeeds again",
        check(lb.ensure_load_balancer_deleted(cluster, &svc).await, |_| {
            None
        }),
    );
    // The service controller's node sync can reach a Service whose load balancer was
    // just deleted: the update may fail (occm's does) but must make nothing.
    let _ = lb.update_load_balancer(cluster, &svc, hosts).await;
    report.record(
        "update-load-balancer without a load balancer creates none",
        match lb.get_load_balancer(cluster, &svc).await {
            Ok(None) => Outcome::Pass,
            Ok(Some(status)) => {
                let _ = lb.ensure_load_balancer_deleted(cluster, &svc).await;
                Outcome::Fail(format!("created one: {status:?}"))
            }
            Err(err) => Outcome::Fail(describe(&err)),
        },
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
        enable_node_addresses: true,
        target_node_provider_id: target.provider_id.clone(),
    };
    // A route named by its next hop only (as occm lists them) is the target's when the
    // target holds that address: the controller manager resolves it so.
    let targets = |r: &wit::Route| {
        r.target_node == route.target_node
            || (r.target_node.is_empty()
                && r.target_node_addresses
                    .iter()
                    .any(|hop| target.addresses.iter().any(|a| a.address == hop.address)))
    };
    let listed = |list: &[wit::Route]| -> Option<wit::Route> {
        list.iter()
            .find(|r| r.destination_cidr == cidr && targets(r))
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
