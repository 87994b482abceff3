//! A client for the simulated cloud's REST API (see `tests/sim-cloud/README.md`),
//! mapping HTTP failures to the contract's error variant.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use wasm_ccm_guest::http::{Request, Response};
use wasm_ccm_guest::url::{Url, encode_component};

use crate::bindings::wasm_ccm::provider::types::{CloudError, Retry};

/// Default delay when the cloud answers 429/503 without `Retry-After`.
const DEFAULT_RETRY_MS: u64 = 5_000;

#[derive(Debug, Clone, Deserialize)]
pub struct Address {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Instance {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub state: String,
    pub addresses: Vec<Address>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Instance {
    /// Terminated instances count as gone, like a deleted one.
    pub fn is_terminated(&self) -> bool {
        self.state == "terminated"
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbPort {
    pub name: String,
    pub protocol: String,
    pub port: u16,
    pub node_port: u16,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    pub address: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerSpec {
    pub ports: Vec<LbPort>,
    pub backends: Vec<String>,
    pub source_ranges: Vec<String>,
    pub description: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    pub name: String,
    pub cluster: String,
    pub destination_cidr: String,
    pub target_instance: String,
    #[serde(default, skip_serializing)]
    pub blackhole: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Cluster {
    pub name: String,
    pub master: String,
}

#[derive(Deserialize)]
struct List<T> {
    items: Vec<T>,
}

/// The API client.
pub struct Cloud {
    base: Url,
}

impl Cloud {
    pub fn new(endpoint: &str) -> Result<Self, CloudError> {
        let base = Url::parse(endpoint).map_err(|e| CloudError::Other(e.to_string()))?;
        Ok(Self { base })
    }

    fn url(&self, path: &str) -> String {
        self.base.join(path).to_string()
    }

    /// Sends a request. Transport failures and throttling (429/503) become errors;
    /// any other status is returned for the caller to judge.
    fn send(&self, request: Request, what: &str) -> Result<Response, CloudError> {
        let response = request
            .header("accept", "application/json")
            .send()
            .map_err(|e| CloudError::Other(format!("simcloud: {what}: {e}")))?;
        if response.status == 429 || response.status == 503 {
            let delay_ms = response
                .header("retry-after")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|secs| secs * 1000)
                .unwrap_or(DEFAULT_RETRY_MS);
            return Err(CloudError::RetryAfter(Retry {
                delay_ms,
                message: format!("simcloud: {what}: throttled (HTTP {})", response.status),
            }));
        }
        Ok(response)
    }

    /// Like `send`, but any non-2xx status is an error.
    fn send_ok(&self, request: Request, what: &str) -> Result<Response, CloudError> {
        let response = self.send(request, what)?;
        if response.is_success() {
            Ok(response)
        } else {
            Err(status_error(&response, what))
        }
    }

    fn get_json<T: DeserializeOwned>(&self, path: &str, what: &str) -> Result<T, CloudError> {
        let response = self.send_ok(Request::get(&self.url(path)), what)?;
        decode(&response, what)
    }

    /// `None` on 404.
    fn get_optional<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Option<T>, CloudError> {
        let response = self.send(Request::get(&self.url(path)), what)?;
        match response.status {
            404 => Ok(None),
            200..=299 => decode(&response, what).map(Some),
            _ => Err(status_error(&response, what)),
        }
    }

    /// The instance with this ID; `None` when the cloud has no such instance.
    pub fn instance(&self, id: &str) -> Result<Option<Instance>, CloudError> {
        self.get_optional(
            &format!("/v1/instances/{}", encode_component(id)),
            &format!("get instance {id}"),
        )
    }

    /// The instance with this name, ignoring terminated ones.
    pub fn instance_by_name(&self, name: &str) -> Result<Option<Instance>, CloudError> {
        let list: List<Instance> = self.get_json(
            &format!("/v1/instances?name={}", encode_component(name)),
            &format!("find instance {name}"),
        )?;
        Ok(list.items.into_iter().find(|i| !i.is_terminated()))
    }

    pub fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        self.get_json::<List<Instance>>("/v1/instances", "list instances")
            .map(|l| l.items)
    }

    pub fn load_balancer(&self, name: &str) -> Result<Option<LoadBalancer>, CloudError> {
        self.get_optional(
            &format!("/v1/load-balancers/{}", encode_component(name)),
            &format!("get load balancer {name}"),
        )
    }

    pub fn put_load_balancer(
        &self,
        name: &str,
        spec: &LoadBalancerSpec,
    ) -> Result<LoadBalancer, CloudError> {
        let what = format!("ensure load balancer {name}");
        let body = serde_json::to_vec(spec).map_err(|e| CloudError::Other(e.to_string()))?;
        let response = self.send_ok(
            Request::put(&self.url(&format!("/v1/load-balancers/{}", encode_component(name))))
                .json_body(body),
            &what,
        )?;
        decode(&response, &what)
    }

    pub fn put_backends(&self, name: &str, backends: &[String]) -> Result<(), CloudError> {
        let body = serde_json::to_vec(&serde_json::json!({ "backends": backends }))
            .map_err(|e| CloudError::Other(e.to_string()))?;
        self.send_ok(
            Request::put(&self.url(&format!(
                "/v1/load-balancers/{}/backends",
                encode_component(name)
            )))
            .json_body(body),
            &format!("update load balancer {name}"),
        )
        .map(drop)
    }

    /// Deletes a load balancer; `false` if it did not exist.
    pub fn delete_load_balancer(&self, name: &str) -> Result<bool, CloudError> {
        self.delete(
            &format!("/v1/load-balancers/{}", encode_component(name)),
            &format!("delete load balancer {name}"),
        )
    }

    pub fn routes(&self, cluster: &str) -> Result<Vec<Route>, CloudError> {
        self.get_json::<List<Route>>(
            &format!("/v1/routes?cluster={}", encode_component(cluster)),
            "list routes",
        )
        .map(|l| l.items)
    }

    pub fn create_route(&self, route: &Route) -> Result<(), CloudError> {
        let body = serde_json::to_vec(route).map_err(|e| CloudError::Other(e.to_string()))?;
        self.send_ok(
            Request::post(&self.url("/v1/routes")).json_body(body),
            &format!("create route {}", route.name),
        )
        .map(drop)
    }

    /// Deletes a route; `false` if it did not exist.
    pub fn delete_route(&self, name: &str) -> Result<bool, CloudError> {
        self.delete(
            &format!("/v1/routes/{}", encode_component(name)),
            &format!("delete route {name}"),
        )
    }

    pub fn clusters(&self) -> Result<Vec<Cluster>, CloudError> {
        self.get_json::<List<Cluster>>("/v1/clusters", "list clusters")
            .map(|l| l.items)
    }

    fn delete(&self, path: &str, what: &str) -> Result<bool, CloudError> {
        let response = self.send(Request::delete(&self.url(path)), what)?;
        match response.status {
            404 => Ok(false),
            200..=299 => Ok(true),
            _ => Err(status_error(&response, what)),
        }
    }
}

fn decode<T: DeserializeOwned>(response: &Response, what: &str) -> Result<T, CloudError> {
    serde_json::from_slice(&response.body)
        .map_err(|e| CloudError::Other(format!("simcloud: {what}: unexpected response body: {e}")))
}

fn status_error(response: &Response, what: &str) -> CloudError {
    CloudError::Other(format!(
        "simcloud: {what}: HTTP {}: {}",
        response.status,
        error_message(response)
    ))
}

fn error_message(response: &Response) -> String {
    #[derive(Deserialize)]
    struct Body {
        error: Detail,
    }
    #[derive(Deserialize)]
    struct Detail {
        message: String,
    }
    match serde_json::from_slice::<Body>(&response.body) {
        Ok(body) => body.error.message,
        Err(_) => {
            let text = response.text();
            text.chars().take(200).collect()
        }
    }
}
