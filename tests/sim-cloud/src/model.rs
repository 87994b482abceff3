//! The simulated cloud's resources and their JSON form.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Instance lifecycle states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    Running,
    Stopped,
    Terminated,
}

/// An address of an instance; `type` uses Kubernetes' NodeAddressType names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

impl Address {
    pub fn new(kind: &str, address: &str) -> Self {
        Self {
            kind: kind.into(),
            address: address.into(),
        }
    }
}

/// A virtual machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub state: InstanceState,
    pub addresses: Vec<Address>,
    pub labels: BTreeMap<String, String>,
}

/// What `POST /admin/instances` takes; everything but `name` has a default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewInstance {
    pub name: String,
    #[serde(rename = "type")]
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub region: Option<String>,
    pub state: Option<InstanceState>,
    pub addresses: Option<Vec<Address>>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl NewInstance {
    /// An instance request with defaults for everything but the name.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}

/// What `PATCH /admin/instances/{id}` takes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstancePatch {
    pub state: Option<InstanceState>,
    pub addresses: Option<Vec<Address>>,
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(rename = "type")]
    pub instance_type: Option<String>,
}

/// One listener of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LbPort {
    #[serde(default)]
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub port: u16,
    /// The node port traffic is forwarded to on the backends.
    pub node_port: u16,
}

/// A load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    pub name: String,
    /// The public address assigned by the cloud.
    pub address: String,
    pub ports: Vec<LbPort>,
    /// Instance IDs traffic is sent to.
    pub backends: Vec<String>,
    pub source_ranges: Vec<String>,
    /// Free-form description, e.g. the Service it belongs to.
    pub description: String,
}

/// What `PUT /v1/load-balancers/{name}` takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadBalancerSpec {
    pub ports: Vec<LbPort>,
    pub backends: Vec<String>,
    #[serde(default)]
    pub source_ranges: Vec<String>,
    #[serde(default)]
    pub description: String,
}

/// What `PUT /v1/load-balancers/{name}/backends` takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backends {
    pub backends: Vec<String>,
}

/// A route in the cloud's route table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    pub name: String,
    pub cluster: String,
    pub destination_cidr: String,
    /// The instance ID packets are sent to.
    pub target_instance: String,
    /// True when the target instance no longer exists (or is terminated), or the
    /// route was blackholed through the admin API.
    pub blackhole: bool,
}

/// What `POST /v1/routes` takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewRoute {
    pub name: String,
    pub cluster: String,
    pub destination_cidr: String,
    pub target_instance: String,
}

/// A cluster known to the cloud.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub name: String,
    /// The control plane address.
    pub master: String,
}

/// A list response: `{"items": [...]}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct List<T> {
    pub items: Vec<T>,
}

/// An error response: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// A fault rule installed with `POST /admin/faults`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Fault {
    /// Only requests whose path starts with this are affected (default: all of `/v1`).
    #[serde(default)]
    pub path_prefix: String,
    /// Only this method (default: any).
    pub method: Option<String>,
    /// Answer with this status instead of serving the request (e.g. 500, 429).
    pub status: Option<u16>,
    /// With status 429 or 503: the `Retry-After` header, in seconds.
    pub retry_after_seconds: Option<u64>,
    /// Delay before answering, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Apply to this many matching requests, then remove the rule (default: forever).
    pub count: Option<u64>,
}
