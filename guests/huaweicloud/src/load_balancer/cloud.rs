//! The cloud calls of the load balancer, through [`crate::api::Client`]: JSON in and
//! out as [`Value`], every error naming what failed, a 404 meaning "not there" only
//! where the caller says so. Paths keep `{project_id}` for the client to fill.

use serde_json::Value;
use wasm_ccm_guest::cloud_error;
use wasm_ccm_guest::types::CloudError;

use crate::HuaweiCloud;
use crate::api;
pub(super) use crate::api::Service as Endpoint;

/// Shared ELB (v2) paths.
pub(super) const ELB: &str = "/v2/{project_id}/elb";
/// ELB v3 paths: upstream creates and updates the shared ELB's listeners through v3
/// (`dedicatedELBClient.CreateListener`), which alone takes timeouts and transparent
/// client IP.
pub(super) const ELB_V3: &str = "/v3/{project_id}/elb";
/// VPC paths: subnets and (EIP v2's) public IPs, on the VPC endpoint as upstream's
/// `EIpClient` calls them.
pub(super) const VPC: &str = "/v1/{project_id}";

/// `value` percent-encoded for a query or a path segment.
pub(super) fn encode(value: &str) -> String {
    wasm_ccm_guest::url::encode_component(value)
}

/// A string field of a cloud object (empty when absent).
pub(super) fn text<'a>(object: &'a Value, field: &str) -> &'a str {
    object[field].as_str().unwrap_or_default()
}

/// The error `error` means, naming `what` failed.
fn fail(error: api::ApiError, what: &str) -> CloudError {
    match CloudError::from(error) {
        CloudError::Other(message) => CloudError::Other(format!("{what}: {message}")),
        CloudError::RetryAfter(retry) => {
            cloud_error::retry_after(retry.delay_ms, format!("{what}: {}", retry.message))
        }
        other => other,
    }
}

pub(super) struct Cloud {
    client: api::Client,
}

impl Cloud {
    pub(super) fn new(provider: &HuaweiCloud) -> Self {
        Cloud {
            client: provider.client.clone(),
        }
    }

    /// GET `path`: `None` on a 404.
    pub(super) fn find(
        &self,
        service: Endpoint,
        path: &str,
        what: &str,
    ) -> Result<Option<Value>, CloudError> {
        self.client
            .get_found(service, path)
            .map_err(|e| fail(e, what))
    }

    /// Every item of a marker-paged listing, from the `key` collection.
    pub(super) fn list(
        &self,
        service: Endpoint,
        path: &str,
        key: &str,
        what: &str,
    ) -> Result<Vec<Value>, CloudError> {
        let items: Vec<Value> = self
            .client
            .list_marker(service, path, key)
            .map_err(|e| fail(e, what))?;
        Ok(items)
    }

    pub(super) fn post(
        &self,
        service: Endpoint,
        path: &str,
        body: &Value,
        what: &str,
    ) -> Result<Value, CloudError> {
        let answer: Value = self
            .client
            .post(service, path, body)
            .map_err(|e| fail(e, what))?;
        Ok(answer)
    }

    pub(super) fn put(
        &self,
        service: Endpoint,
        path: &str,
        body: &Value,
        what: &str,
    ) -> Result<Value, CloudError> {
        let answer: Value = self
            .client
            .put(service, path, body)
            .map_err(|e| fail(e, what))?;
        Ok(answer)
    }

    /// DELETE `path`; already gone (404) is done.
    pub(super) fn delete(
        &self,
        service: Endpoint,
        path: &str,
        what: &str,
    ) -> Result<(), CloudError> {
        self.client
            .delete_found(service, path)
            .map(drop)
            .map_err(|e| fail(e, what))
    }
}
