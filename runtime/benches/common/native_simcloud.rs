//! The reference provider's `instances-v2` logic ported to native Rust (reqwest +
//! serde), for comparing the sandboxed component with the same work done in-process:
//! the same requests (`GET /v1/instances/ID` by provider ID, else
//! `GET /v1/instances?name=NAME`), the same decoding and mapping.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use wasm_ccm::bindings::types::{InstanceInfo, Node, NodeAddress, NodeAddressType};
use wasm_ccm::provider::CloudError;
use wasm_ccm::provider::native::{NativeFuture, NativeInstancesV2};

#[derive(Deserialize)]
struct Address {
    #[serde(rename = "type")]
    kind: String,
    address: String,
}

#[derive(Deserialize)]
pub struct Instance {
    id: String,
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
}

impl NativeSimcloud {
    /// Uses `client` (give it the broker's, so both sides share one connection pool
    /// setup).
    pub fn new(client: reqwest::Client, base: &str, token: &str) -> Self {
        Self {
            client,
            base: base.to_owned(),
            token: token.to_owned(),
        }
    }

    async fn get(&self, path: &str) -> Result<Option<bytes::Bytes>, CloudError> {
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
                .map(Some)
                .map_err(|e| CloudError::Other(e.to_string())),
            status => Err(CloudError::Other(format!("{path}: HTTP {status}"))),
        }
    }

    /// The instance backing `node`: by provider ID when set, else by name.
    pub async fn find(&self, node: &Node) -> Result<Option<Instance>, CloudError> {
        let decode = |bytes: &[u8]| CloudError::Other(format!("decoding: {bytes:?}"));
        match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
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
                let path = format!("/v1/instances?name={}", node.metadata.name);
                let body = self.get(&path).await?.unwrap_or_default();
                let list: List = serde_json::from_slice(&body).map_err(|_| decode(&body))?;
                Ok(list.items.into_iter().find(|i| i.state != "terminated"))
            }
        }
    }
}

pub fn info(i: Instance) -> InstanceInfo {
    InstanceInfo {
        provider_id: format!("simcloud://{}", i.id),
        instance_type: i.instance_type,
        node_addresses: i
            .addresses
            .into_iter()
            .filter_map(|a| {
                let address_type = match a.kind.as_str() {
                    "Hostname" => NodeAddressType::Hostname,
                    "InternalIP" => NodeAddressType::InternalIp,
                    "ExternalIP" => NodeAddressType::ExternalIp,
                    "InternalDNS" => NodeAddressType::InternalDns,
                    "ExternalDNS" => NodeAddressType::ExternalDns,
                    _ => return None,
                };
                Some(NodeAddress {
                    address_type,
                    address: a.address,
                })
            })
            .collect(),
        zone: i.zone,
        region: i.region,
        additional_labels: i.labels.into_iter().collect(),
    }
}

impl NativeInstancesV2 for NativeSimcloud {
    fn instance_exists<'a>(&'a self, node: &'a Node) -> NativeFuture<'a, bool> {
        Box::pin(async move { Ok(self.find(node).await?.is_some()) })
    }

    fn instance_shutdown<'a>(&'a self, node: &'a Node) -> NativeFuture<'a, bool> {
        Box::pin(async move {
            let instance = self.find(node).await?.ok_or(CloudError::InstanceNotFound)?;
            Ok(instance.state == "stopped")
        })
    }

    fn instance_metadata<'a>(&'a self, node: &'a Node) -> NativeFuture<'a, InstanceInfo> {
        Box::pin(async move {
            let instance = self.find(node).await?.ok_or(CloudError::InstanceNotFound)?;
            Ok(info(instance))
        })
    }
}
