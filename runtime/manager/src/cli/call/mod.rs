//! `wasm-ccm call FILE.wasm [--cloud-config FILE] [--credentials-dir DIR]
//! INTERFACE.FUNCTION [ARG...]`: runs one export of a provider under the real sandbox
//! (the policy next to the component, the egress broker, the limits, credential files
//! only inside `--credentials-dir` and none without it) and prints the result as JSON.
//!
//! Arguments are positional, in the WIT function's order. Each is JSON, `@PATH` (JSON
//! read from a file), or plain text taken as a string. A `node` is a Kubernetes Node
//! (`kubectl get node N -o json`) or just a node name; a `service` a Kubernetes
//! Service; `nodes` a list of Nodes or names; a `route` `{"destinationCIDR",
//! "targetNode", "name", "blackhole"}`. Results print as `{"ok": ...}` (Kubernetes
//! shapes where there is one: node addresses, load balancer status), and the
//! contract's errors as `{"error": {"instance-not-found": null}}`, `{"error":
//! {"retry-after": {"delayMs": 5000, "message": "..."}}}`, `{"error": {"other":
//! "..."}}`, and so on. A trap, timeout or load failure is an error of the command.

use std::path::PathBuf;

use k8s_openapi::api::core::v1 as k8s;
use serde_json::{Value, json};
use wasm_ccm_host::contract::types as wit;
use wasm_ccm_host::provider::{CloudError, ConfineError, LoadError, ProviderError};

mod functions;

pub use functions::{FUNCTIONS, Function};

use super::sandboxed::Sandboxed;
use crate::cloud::convert;

/// What to call: `wasm-ccm call`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Call {
    /// The component, its policy and credentials directory.
    #[command(flatten)]
    pub provider: Sandboxed,
    /// The cloud config for `initialize`.
    #[arg(long)]
    pub cloud_config: Option<PathBuf>,
    /// INTERFACE.FUNCTION, e.g. `instances-v2.instance-metadata`.
    pub function: String,
    /// The function's arguments, in order.
    pub args: Vec<String>,
}

/// Runs `wasm-ccm call`: the result as JSON on stdout, or the error on stderr.
pub async fn main(request: Call) -> std::process::ExitCode {
    super::exit::exit_code(call(&request).await.map(|result| println!("{result:#}")))
}

/// Why a call could not be made (the provider's own errors are results).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The function or its arguments are not right.
    #[error("{0}")]
    Usage(String),
    /// A file could not be read.
    #[error("cannot read {path}: {source}", path = .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The engine could not be created, or `--credentials-dir` cannot be used.
    #[error(transparent)]
    Confine(#[from] ConfineError),
    /// The provider could not be loaded (or its `initialize` failed).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The call trapped, timed out or could not run.
    #[error(transparent)]
    Provider(ProviderError),
}

/// Loads the provider and makes the call; the JSON to print.
pub async fn call(request: &Call) -> Result<Value, CallError> {
    let function = functions::find(&request.function).ok_or_else(|| {
        CallError::Usage(format!(
            "unknown function {:?}; one of:\n  {}",
            request.function,
            FUNCTIONS
                .iter()
                .map(Function::signature)
                .collect::<Vec<_>>()
                .join("\n  ")
        ))
    })?;
    if request.args.len() != function.args.len() {
        return Err(CallError::Usage(format!(
            "{} takes {} argument(s), {} given",
            function.signature(),
            function.args.len(),
            request.args.len()
        )));
    }
    let args = request
        .args
        .iter()
        .map(|a| argument(a))
        .collect::<Result<Vec<Value>, CallError>>()?;
    let config = match &request.cloud_config {
        Some(path) => std::fs::read(path).map_err(|source| CallError::Read {
            path: path.clone(),
            source,
        })?,
        None => Vec::new(),
    };
    let loader = request.provider.loader(2)?;
    let provider = loader.load(config).await?;
    functions::dispatch(&provider, function, &args).await
}

/// An argument: JSON, `@PATH` (JSON in a file), or plain text as a string.
fn argument(text: &str) -> Result<Value, CallError> {
    if let Some(path) = text.strip_prefix('@') {
        let bytes = std::fs::read(path).map_err(|source| CallError::Read {
            path: path.into(),
            source,
        })?;
        return serde_json::from_slice(&bytes)
            .map_err(|e| CallError::Usage(format!("{path}: not JSON: {e}")));
    }
    Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())))
}

fn string(v: &Value, what: &str) -> Result<String, CallError> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| CallError::Usage(format!("{what}: expected a string, got {v}")))
}

pub(crate) fn node(v: &Value) -> Result<wit::Node, CallError> {
    let node: k8s::Node = match v {
        Value::String(name) => serde_json::from_value(json!({"metadata": {"name": name}})),
        other => serde_json::from_value(other.clone()),
    }
    .map_err(|e| CallError::Usage(format!("node: not a Kubernetes Node: {e}")))?;
    Ok(convert::node(&node))
}

fn nodes(v: &Value) -> Result<Vec<wit::Node>, CallError> {
    v.as_array()
        .ok_or_else(|| CallError::Usage("nodes: expected a JSON list".into()))?
        .iter()
        .map(node)
        .collect()
}

pub(crate) fn service(v: &Value) -> Result<wit::Service, CallError> {
    let svc: k8s::Service = serde_json::from_value(v.clone())
        .map_err(|e| CallError::Usage(format!("service: not a Kubernetes Service: {e}")))?;
    Ok(convert::service(&svc))
}

fn route(v: &Value) -> Result<wit::Route, CallError> {
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if field("destinationCIDR").is_empty() {
        return Err(CallError::Usage(format!(
            "route: expected {{\"destinationCIDR\": ..., \"targetNode\": ...}}, got {v}"
        )));
    }
    Ok(convert::route(&crate::cloud::Route {
        name: field("name"),
        target_node: field("targetNode"),
        target_node_addresses: Vec::new(),
        destination_cidr: field("destinationCIDR"),
        blackhole: v.get("blackhole").and_then(Value::as_bool).unwrap_or(false),
        enable_node_addresses: false,
        target_node_provider_id: v
            .get("targetNodeProviderID")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }))
}

fn addresses(a: &[wit::NodeAddress]) -> Value {
    json!(convert::to_k8s_addresses(a))
}

fn routes(r: &[wit::Route]) -> Value {
    Value::Array(
        r.iter()
            .map(|r| {
                let r = convert::to_route(r);
                json!({"name": r.name, "targetNode": r.target_node,
                       "targetNodeAddresses": r.target_node_addresses,
                       "destinationCIDR": r.destination_cidr, "blackhole": r.blackhole})
            })
            .collect(),
    )
}

fn zone(z: &wit::Zone) -> Value {
    json!({"failureDomain": z.failure_domain, "region": z.region})
}

fn metadata(m: &wit::InstanceInfo) -> Value {
    json!({
        "providerID": m.provider_id,
        "instanceType": m.instance_type,
        "nodeAddresses": addresses(&m.node_addresses),
        "zone": m.zone,
        "region": m.region,
        "additionalLabels": m.additional_labels.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
    })
}

/// `{"ok": ...}`, or the contract's error case; traps and timeouts are command errors.
fn outcome<T>(
    result: Result<T, ProviderError>,
    show: impl FnOnce(T) -> Value,
) -> Result<Value, CallError> {
    match result {
        Ok(value) => Ok(json!({"ok": show(value)})),
        Err(err) => match err.cloud() {
            Some(cloud) => Ok(json!({"error": cloud_error(cloud)})),
            None => Err(CallError::Provider(err)),
        },
    }
}

/// One node's answer in a batch: `{"ok": ...}` or `{"error": ...}`.
fn answer<T>(result: Result<T, wit::CloudError>, show: impl FnOnce(T) -> Value) -> Value {
    match result {
        Ok(value) => json!({"ok": show(value)}),
        Err(err) => json!({"error": cloud_error(&CloudError::from(err))}),
    }
}

pub(crate) fn cloud_error(err: &CloudError) -> Value {
    match err {
        CloudError::InstanceNotFound => json!({"instance-not-found": null}),
        CloudError::NotImplemented => json!({"not-implemented": null}),
        CloudError::ImplementedElsewhere => json!({"implemented-elsewhere": null}),
        CloudError::RetryAfter { delay, message } => {
            json!({"retry-after": {"delayMs": delay.as_millis() as u64, "message": message}})
        }
        CloudError::Other(message) => json!({"other": message}),
    }
}
