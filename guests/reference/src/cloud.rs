//! A client for the simulated cloud's REST API (see `tests/sim-cloud/README.md`).
//! The SDK maps its answers to the contract's errors: 429/503 → `retry-after`
//! (honouring `Retry-After`), 404 → not found where a lookup allows it.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use wasm_ccm_guest::cloud_error;
use wasm_ccm_guest::http::{Request, Response};
use wasm_ccm_guest::types::CloudError;
use wasm_ccm_guest::url::{Url, encode_component};

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

    /// Sends a request; transport failures are errors, any status is returned.
    fn send(&self, request: Request, what: &str) -> Result<Response, CloudError> {
        request
            .header("accept", "application/json")
            .send()
            .map_err(|e| cloud_error::transport(e, &format!("simcloud: {what}")))
    }

    /// Like `send`, but any non-2xx status is an error.
    fn send_ok(&self, request: Request, what: &str) -> Result<Response, CloudError> {
        cloud_error::check(self.send(request, what)?, &format!("simcloud: {what}"))
    }

    fn get_json<T: DeserializeOwned>(&self, path: &str, what: &str) -> Result<T, CloudError> {
        let response = self.send_ok(Request::get(&self.url(path)), what)?;
        cloud_error::json(&response, &format!("simcloud: {what}"))
    }

    /// `None` on 404.
    fn get_optional<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Option<T>, CloudError> {
        let response = self.send(Request::get(&self.url(path)), what)?;
        let what = format!("simcloud: {what}");
        cloud_error::check_found(response, &what)?
            .map(|found| cloud_error::json(&found, &what))
            .transpose()
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
        let response = self.send_ok(
            Request::put(&self.url(&format!("/v1/load-balancers/{}", encode_component(name))))
                .json(spec),
            &what,
        )?;
        cloud_error::json(&response, &format!("simcloud: {what}"))
    }

    pub fn put_backends(&self, name: &str, backends: &[String]) -> Result<(), CloudError> {
        self.send_ok(
            Request::put(&self.url(&format!(
                "/v1/load-balancers/{}/backends",
                encode_component(name)
            )))
            .json(&serde_json::json!({ "backends": backends })),
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
        self.send_ok(
            Request::post(&self.url("/v1/routes")).json(route),
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
        cloud_error::exists(&response, &format!("simcloud: {what}"))
    }
}
