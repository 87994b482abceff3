//! The reference provider's `instances-v2` logic ported to native Rust (reqwest +
//! serde) and plugged in at the controller manager's cloud seam, for comparing the
//! sandboxed component with the same work done in-process: the same requests
//! (`GET /v1/instances/ID` by provider ID, else `GET /v1/instances?name=NAME`), the
//! same decoding and mapping, straight from and to Kubernetes objects; with
//! [`NativeSimcloud::batched`], its `instances-batch` logic too (one listing,
//! `GET /v1/instances`, for a batch of Nodes).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress};
use serde::Deserialize;
use wasm_ccm::cloud::{self, BatchFuture, Cloud, CloudFuture, InstanceMetadata, Requirement};
use wasm_ccm_host::provider::{CloudError, ProviderError};

#[derive(Deserialize, Clone)]
struct Address {
    #[serde(rename = "type")]
    kind: String,
    address: String,
}

#[derive(Deserialize, Clone)]
pub struct Instance {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(rename = "type")]
    instance_type: String,
    zone: String,
    region: String,
    state: String,
    addresses: Vec<Address>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct List {
    items: Vec<Instance>,
}

/// A client of the simulated cloud doing what the reference provider does.
pub struct NativeSimcloud {
    client: reqwest::Client,
    base: String,
    token: String,
    batched: bool,
}

impl NativeSimcloud {
    /// Uses `client` (give it the broker's, so both sides share one connection pool
    /// setup).
    pub fn new(client: reqwest::Client, base: &str, token: &str) -> Self {
        Self {
            client,
            base: base.to_owned(),
            token: token.to_owned(),
            batched: false,
        }
    }

    /// Answers calls about several Nodes with one listing, as the reference provider's
    /// `instances-batch` does.
    pub fn batched(mut self) -> Self {
        self.batched = true;
        self
    }

    /// The instance of each of `nodes` (`None`: none), from one listing.
    async fn find_all(&self, nodes: &[Arc<Node>]) -> Result<Vec<Option<Instance>>, CloudError> {
        let body = self.get("/v1/instances").await?.unwrap_or_default();
        let list: List = serde_json::from_slice(&body)
            .map_err(|_| CloudError::Other(format!("decoding: {body:?}")))?;
        let live: Vec<&Instance> = list
            .items
            .iter()
            .filter(|i| i.state != "terminated")
            .collect();
        let by_id: HashMap<&str, &Instance> = live.iter().map(|i| (i.id.as_str(), *i)).collect();
        let by_name: HashMap<&str, &Instance> =
            live.iter().map(|i| (i.name.as_str(), *i)).collect();
        Ok(nodes
            .iter()
            .map(|node| {
                let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
                match provider_id.filter(|p| !p.is_empty()) {
                    Some(pid) => by_id.get(pid.strip_prefix("simcloud://").unwrap_or(pid)),
                    None => by_name.get(node.metadata.name.as_deref().unwrap_or_default()),
                }
                .map(|i| (*i).clone())
            })
            .collect())
    }

    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>, CloudError> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json")
            // The broker sets a per-request timeout too.
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| CloudError::Other(e.to_string()))?;
        match response.status().as_u16() {
            404 => Ok(None),
            200 => response
                .bytes()
                .await
                .map(|body| Some(body.to_vec()))
                .map_err(|e| CloudError::Other(e.to_string())),
            status => Err(CloudError::Other(format!("{path}: HTTP {status}"))),
        }
    }

    /// The instance backing `node`: by provider ID when set, else by name.
    pub async fn find(&self, node: &Node) -> Result<Option<Instance>, CloudError> {
        let decode = |bytes: &[u8]| CloudError::Other(format!("decoding: {bytes:?}"));
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        match provider_id.filter(|p| !p.is_empty()) {
            Some(pid) => {
                let id = pid.strip_prefix("simcloud://").unwrap_or(pid);
                let Some(body) = self.get(&format!("/v1/instances/{id}")).await? else {
                    return Ok(None);
                };
                let instance: Instance =
                    serde_json::from_slice(&body).map_err(|_| decode(&body))?;
                Ok((instance.state != "terminated").then_some(instance))
            }
            None => {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                let path = format!("/v1/instances?name={name}");
                let body = self.get(&path).await?.unwrap_or_default();
                let list: List = serde_json::from_slice(&body).map_err(|_| decode(&body))?;
                Ok(list.items.into_iter().find(|i| i.state != "terminated"))
            }
        }
    }
}

pub fn metadata(i: Instance) -> InstanceMetadata {
    InstanceMetadata {
        provider_id: format!("simcloud://{}", i.id),
        instance_type: i.instance_type,
        addresses: i
            .addresses
            .into_iter()
            .filter(|a| {
                matches!(
                    a.kind.as_str(),
                    "Hostname" | "InternalIP" | "ExternalIP" | "InternalDNS" | "ExternalDNS"
                )
            })
            .map(|a| NodeAddress {
                type_: a.kind,
                address: a.address,
            })
            .collect(),
        zone: i.zone,
        region: i.region,
        additional_labels: i.labels.into_iter().collect(),
    }
}

/// A cloud error as the seam reports a provider's.
fn failed(function: &'static str, error: CloudError) -> cloud::Error {
    ProviderError::Cloud {
        provider: "simcloud".into(),
        function,
        error,
    }
    .into()
}

impl Cloud for NativeSimcloud {
    fn name(&self) -> &str {
        "simcloud"
    }

    fn meets(&self, requirement: Requirement) -> bool {
        requirement == Requirement::Instances
    }

    fn instance_metadata<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, InstanceMetadata> {
        Box::pin(async move {
            let instance = self
                .find(node)
                .await
                .map_err(|e| failed("instance-metadata", e))?;
            let instance = instance
                .ok_or_else(|| failed("instance-metadata", CloudError::InstanceNotFound))?;
            Ok(metadata(instance))
        })
    }

    fn node_addresses<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<Vec<NodeAddress>>> {
        Box::pin(async move { Ok(Some(self.instance_metadata(node).await?.addresses)) })
    }

    fn instance_exists<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        Box::pin(async move {
            let instance = self
                .find(node)
                .await
                .map_err(|e| failed("instance-exists", e))?;
            Ok(Some(instance.is_some()))
        })
    }

    fn batches(&self) -> bool {
        self.batched
    }

    fn instances_metadata<'a>(
        &'a self,
        nodes: &'a [Arc<Node>],
    ) -> BatchFuture<'a, InstanceMetadata> {
        Box::pin(async move {
            let found = self
                .find_all(nodes)
                .await
                .map_err(|e| failed("instances-metadata", e))?;
            Ok(found
                .into_iter()
                .map(|i| {
                    i.map(metadata)
                        .ok_or_else(|| failed("instance-metadata", CloudError::InstanceNotFound))
                })
                .collect())
        })
    }

    fn instances_exist<'a>(&'a self, nodes: &'a [Arc<Node>]) -> BatchFuture<'a, Option<bool>> {
        Box::pin(async move {
            let found = self
                .find_all(nodes)
                .await
                .map_err(|e| failed("instances-exist", e))?;
            Ok(found.into_iter().map(|i| Ok(Some(i.is_some()))).collect())
        })
    }

    fn instance_shutdown<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        Box::pin(async move {
            let instance = self
                .find(node)
                .await
                .map_err(|e| failed("instance-shutdown", e))?;
            let instance = instance
                .ok_or_else(|| failed("instance-shutdown", CloudError::InstanceNotFound))?;
            Ok(Some(instance.state == "stopped"))
        })
    }
}
