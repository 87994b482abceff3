//! Calling OpenStack through the host: the service catalog (read from the host at
//! `<auth-url>/auth/catalog`, kept in the shared cache), JSON requests with Nova's
//! microversion, errors as the contract's, and pagination by `next` links.
//!
//! The host adds the Keystone token to every request for a catalog endpoint; the
//! provider never sees it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasm_ccm_guest::http::{Request, Response};
use wasm_ccm_guest::types::CloudError;
use wasm_ccm_guest::{cache, cloud_error};

use crate::config::Config;

/// Nova's microversion asked for: `flavor.original_name` in servers (2.47).
pub const COMPUTE_MICROVERSION: &str = "compute 2.47";

/// How long the catalog is kept in the shared cache.
const CATALOG_TTL: Duration = Duration::from_secs(600);

/// The most pages followed in one listing (a loop guard).
const MAX_PAGES: usize = 1000;

/// The endpoints used, from the catalog (no trailing slash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    /// Nova (`compute`), e.g. `https://nova:8774/v2.1`.
    pub compute: Option<String>,
    /// Neutron (`network`) with its API version: `<endpoint>/v2.0`.
    pub network: Option<String>,
    /// Octavia (`load-balancer`) with its API version: `<endpoint>/v2`.
    pub load_balancer: Option<String>,
}

impl Endpoints {
    /// The endpoints of `config`'s region and interface: from the shared cache, else
    /// the catalog.
    pub fn get(config: &Config) -> Result<Self, CloudError> {
        let key = format!(
            "catalog/{}/{}/{}",
            config.identity_v3(),
            config.region,
            config.interface
        );
        if let Some(endpoints) = cache::get_json::<Endpoints>(&key) {
            return Ok(endpoints);
        }
        let url = format!("{}/auth/catalog", config.identity_v3());
        let response = cloud_error::check(Request::get(&url).send()?, "read the service catalog")?;
        let catalog: Value = cloud_error::json(&response, "read the service catalog")?;
        let endpoints = Self::from_catalog(&catalog, &config.region, &config.interface);
        let _ = cache::set_json(&key, &endpoints, CATALOG_TTL);
        Ok(endpoints)
    }

    /// The endpoints of a catalog (`{"catalog": [...]}`), as gophercloud picks them:
    /// the service type, the interface, the region when one is set.
    pub fn from_catalog(catalog: &Value, region: &str, interface: &str) -> Self {
        let find = |kind: &str| {
            catalog["catalog"]
                .as_array()?
                .iter()
                .filter(|service| service["type"] == kind)
                .flat_map(|service| service["endpoints"].as_array().into_iter().flatten())
                .find(|endpoint| {
                    let in_region = region.is_empty()
                        || endpoint["region_id"] == region
                        || endpoint["region"] == region;
                    endpoint["interface"] == interface && in_region
                })
                .and_then(|endpoint| endpoint["url"].as_str())
                .map(|url| url.trim_end_matches('/').to_owned())
        };
        Endpoints {
            compute: find("compute"),
            network: find("network").map(|u| format!("{u}/v2.0")),
            load_balancer: find("load-balancer").map(|u| format!("{u}/v2")),
        }
    }
}

/// The endpoint of `kind`, or an error naming what the catalog lacks.
pub fn endpoint(
    endpoint: &Option<String>,
    kind: &str,
    config: &Config,
) -> Result<String, CloudError> {
    endpoint.clone().ok_or_else(|| {
        cloud_error::other(format!(
            "the service catalog has no `{kind}` endpoint on interface {} in region `{}` \
             (or the policy's keystone rule does not list `{kind}` in services)",
            config.interface, config.region
        ))
    })
}

/// Sends `request` and checks the answer (see [`cloud_error::check`]), with Octavia's
/// 409 for a busy load balancer as `retry-after`.
pub fn send(request: Request, what: &str) -> Result<Response, CloudError> {
    let response = request.header("accept", "application/json").send()?;
    checked(response, what)
}

/// [`send`], but a 404 is `Ok(None)`: for deleting what may be gone already.
pub fn send_found(request: Request, what: &str) -> Result<Option<Response>, CloudError> {
    let response = request.header("accept", "application/json").send()?;
    if response.status == 404 {
        return Ok(None);
    }
    checked(response, what).map(Some)
}

/// The answer checked as [`send`] checks it.
fn checked(response: Response, what: &str) -> Result<Response, CloudError> {
    if response.status == 409 {
        let message = cloud_error::message(&response).unwrap_or_default();
        if message.contains("immutable") {
            return Err(cloud_error::retry_after(
                2_000,
                format!("{what}: the load balancer is busy ({message})"),
            ));
        }
    }
    cloud_error::check(response, what)
}

/// Sends `request` and decodes its JSON answer.
pub fn json(request: Request, what: &str) -> Result<Value, CloudError> {
    let response = send(request, what)?;
    cloud_error::json(&response, what)
}

/// Every item of a listing under `key`, following the `<key>_links` `next` links
/// (Nova, Neutron and Octavia page that way).
pub fn list(first: Request, key: &str, what: &str) -> Result<Vec<Value>, CloudError> {
    list_dated(first, key, what).map(|(items, _)| items)
}

/// [`list`], with the `Date` header of the first page's answer (the cloud's clock
/// when it began answering, as it says it: `Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn list_dated(
    first: Request,
    key: &str,
    what: &str,
) -> Result<(Vec<Value>, Option<String>), CloudError> {
    let headers: Vec<(String, Vec<u8>)> = first.headers().to_vec();
    let mut items = Vec::new();
    let mut date = None;
    let mut request = first;
    let mut seen = Vec::new();
    for _ in 0..MAX_PAGES {
        let response = send(request, what)?;
        if date.is_none() {
            date = response.header("date").map(str::to_owned);
        }
        let page: Value = cloud_error::json(&response, what)?;
        items.extend(page[key].as_array().cloned().unwrap_or_default());
        let next = page[format!("{key}_links")]
            .as_array()
            .and_then(|links| links.iter().find(|l| l["rel"] == "next"))
            .and_then(|l| l["href"].as_str())
            .map(str::to_owned);
        let Some(next) = next else {
            return Ok((items, date));
        };
        if seen.contains(&next) {
            return Err(cloud_error::other(format!(
                "{what}: the cloud repeated a page link"
            )));
        }
        seen.push(next.clone());
        request = Request::get(&next);
        for (name, value) in &headers {
            request = request.header(name, &String::from_utf8_lossy(value));
        }
    }
    Err(cloud_error::other(format!(
        "{what}: more than {MAX_PAGES} pages"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoints_by_type_interface_and_region() {
        let catalog = json!({"catalog": [
            {"type": "compute", "endpoints": [
                {"interface": "internal", "region_id": "RegionOne", "url": "http://nova-int/v2.1"},
                {"interface": "public", "region_id": "RegionTwo", "url": "http://nova-2/v2.1"},
                {"interface": "public", "region_id": "RegionOne", "url": "http://nova/v2.1/"}]},
            {"type": "network", "endpoints": [
                {"interface": "public", "region": "RegionOne", "url": "http://neutron:9696"}]},
        ]});
        let e = Endpoints::from_catalog(&catalog, "RegionOne", "public");
        assert_eq!(e.compute.as_deref(), Some("http://nova/v2.1"));
        assert_eq!(e.network.as_deref(), Some("http://neutron:9696/v2.0"));
        assert_eq!(e.load_balancer, None);
        let e = Endpoints::from_catalog(&catalog, "RegionOne", "internal");
        assert_eq!(e.compute.as_deref(), Some("http://nova-int/v2.1"));
    }
}
