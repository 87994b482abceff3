//! Calling Huawei Cloud's APIs through the host: JSON requests to the services'
//! endpoints, Huawei's error bodies read into [`ApiError`], and the two pagination
//! styles (ECS's page numbers, ELB's and VPC's markers).
//!
//! # Signing
//!
//! The host signs every request (AK/SK, `SDK-HMAC-SHA256`) under the policy's
//! `huaweicloud` credential rule, adding `X-Sdk-Date`, `Authorization`, `X-Project-Id`
//! and `X-Security-Token`. The provider never holds a key and must never set one of
//! those headers (the host refuses a request that does): [`Client`] sets `accept` and,
//! with a body, `content-type`, nothing else. The policy must list the endpoints
//! ([`Config::endpoint`]) in `allowedOutboundHosts` and sign for their services
//! (`services: [ecs, elb, vpc]`, the default).
//!
//! # Using it
//!
//! ```ignore
//! use crate::api::{self, Client, Service};
//!
//! let client = Client::new(&provider.config);          // or `provider.client`
//! // `{project_id}` is filled in; the query is the caller's (see `api::with_query`).
//! let path = api::with_query("/v2/{project_id}/elb/loadbalancers", &[("name", &name)]);
//! let found: serde_json::Value = client.get(Service::Elb, &path)?;
//! let lb: Option<serde_json::Value> =
//!     client.get_found(Service::Elb, &format!("/v2/{{project_id}}/elb/loadbalancers/{id}"))?;
//! let created: serde_json::Value = client.post(Service::Elb, "/v2/{project_id}/elb/listeners",
//!     &serde_json::json!({"listener": {"loadbalancer_id": id, "protocol": "TCP"}}))?;
//! client.delete_found(Service::Elb, &format!("/v2/{{project_id}}/elb/listeners/{id}"))?;
//! let eips: Vec<serde_json::Value> =
//!     client.list_marker(Service::Vpc, "/v1/{project_id}/publicips", "publicips")?;
//! ```
//!
//! Every method answers `Result<_, ApiError>`; `?` turns an [`ApiError`] into the
//! contract's [`CloudError`] (`From`), and [`ApiError::is_not_found`],
//! [`ApiError::is_conflict`], [`ApiError::status`], [`ApiError::code`] say what the
//! cloud answered before that. Paths are written with a literal `{project_id}` (so in
//! `format!`, `{{project_id}}`); values put in paths go through
//! [`wasm_ccm_guest::url::encode_component`].
//!
//! # Errors
//!
//! Huawei's services answer errors in several shapes, all read into an [`ApiError`]'s
//! code and message ([`error_body`]): ECS and VPC `{"error": {"code", "message"}}`; ELB
//! v2 (shared) `{"error": ...}` or Neutron's `{"NeutronError": {"type", "message"}}`;
//! the API gateway, ELB v3 and VPC v3 `{"error_code", "error_msg"}`; Nova-style
//! `{"itemNotFound": {"code", "message"}}`. What the error means for the contract:
//! - 429 and 503 (with `Retry-After` in seconds or as a date), and the API gateway's
//!   throttling code `APIGW.0308` whatever the status → `retry-after`;
//! - 409 (a load balancer or listener busy with another change, `PENDING_*`) →
//!   `retry-after` of [`CONFLICT_RETRY_MS`];
//! - anything else (404 included: only the caller knows what a 404 means) →
//!   [`CloudError::Other`] naming the call, the status, Huawei's code and message;
//! - a request that got no answer → the SDK's [`cloud_error::transport`] (a request not
//!   sent for the call's deadline is a prompt `retry-after`).
//!
//! # Pagination
//!
//! - [`Client::list_offset`]: ECS's `offset` (a page number from 1) and `limit`, until
//!   the answer's `count` items are read (or, without a `count`, a short page);
//! - [`Client::list_marker`]: `limit` and `marker`, the next marker from the answer's
//!   `page_info.next_marker` (ELB v3, VPC v3), else its `<key>_links` `next` link (ELB v2,
//!   Neutron style), else the last item's `id` while pages are full (VPC v1, EIP v1).
//!
//! Both ask [`PAGE_SIZE`] items a page unless the path names a `limit`, and stop after
//! [`MAX_PAGES`] pages.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use wasm_ccm_guest::http::{self, Method, Request, Response};
use wasm_ccm_guest::paginate::{self, Page};
use wasm_ccm_guest::types::CloudError;
use wasm_ccm_guest::{cloud_error, url};

use crate::config::Config;
pub use crate::config::Service;

/// Items a page asked for when the path names no `limit` (every service allows 100).
pub const PAGE_SIZE: usize = 100;

/// The most pages read in one listing (a loop guard; the call's deadline ends it
/// sooner).
pub const MAX_PAGES: usize = paginate::MAX_PAGES;

/// The delay asked for after a 409: the resource is busy with another change (ELB's
/// `PENDING_UPDATE`), which takes seconds.
pub const CONFLICT_RETRY_MS: u64 = 5_000;

/// Error codes meaning "throttled" whatever the status: the API gateway's flow control.
pub const THROTTLING_CODES: &[&str] = &["APIGW.0308"];

/// The most characters of a cloud's message kept.
const MAX_MESSAGE_CHARS: usize = 300;

/// A call that failed: the cloud's answer (status, Huawei's error code and message) and
/// what it means for the contract ([`ApiError::cloud_error`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status; `None` when no answer came (transport) or a request could not be
    /// made.
    status: Option<u16>,
    /// Huawei's error code (`Ecs.0114`, `ELB.8902`, `APIGW.0308`, ...); empty when none.
    code: String,
    /// The cloud's message (or the transport's).
    message: String,
    /// What the failure means for the contract.
    error: CloudError,
}

// The load balancer code's API: not every accessor is used by every build.
#[allow(dead_code)]
impl ApiError {
    /// The error a non-2xx answer to `what` is (see the module docs).
    pub fn from_response(response: &Response, what: &str) -> Self {
        let (code, message) = error_body(response);
        let status = response.status;
        let coded = if code.is_empty() {
            String::new()
        } else {
            format!(" {code}")
        };
        let error = if status == 429 || status == 503 {
            cloud_error::from_status(response, what)
        } else if THROTTLING_CODES.contains(&code.as_str()) {
            let delay = cloud_error::retry_after_ms(response, std::time::SystemTime::now())
                .unwrap_or(cloud_error::DEFAULT_RETRY_MS);
            cloud_error::retry_after(
                delay,
                format!("{what}: throttled (HTTP {status}{coded}): {message}"),
            )
        } else if status == 409 {
            cloud_error::retry_after(
                CONFLICT_RETRY_MS,
                format!("{what}: conflict (HTTP 409{coded}): {message}; retrying later"),
            )
        } else if message.is_empty() {
            CloudError::Other(format!("{what}: HTTP {status}{coded}"))
        } else {
            CloudError::Other(format!("{what}: HTTP {status}{coded}: {message}"))
        };
        Self {
            status: Some(status),
            code,
            message,
            error,
        }
    }

    /// A request to `what` that got no answer.
    pub fn transport(error: http::Error, what: &str) -> Self {
        Self {
            status: None,
            code: String::new(),
            message: error.to_string(),
            error: cloud_error::transport(error, what),
        }
    }

    /// An answer (status `status`) whose body is not what `what` expects, or a request
    /// that could not be made (`status` `None`).
    pub fn invalid(what: &str, status: Option<u16>, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            status,
            code: String::new(),
            error: CloudError::Other(format!("{what}: {message}")),
            message,
        }
    }

    /// The HTTP status of the answer; `None` when there was none.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Huawei's error code (`Ecs.0114`, `ELB.8902`, ...); empty when the answer had none.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The cloud's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True for a 404 the service gave: the resource does not exist. API Gateway's own
    /// 404 (`APIGW.*`, "the API does not exist": a wrong endpoint or path, a proxy in
    /// the way) says nothing about the resource and is an error like any other.
    pub fn is_not_found(&self) -> bool {
        self.status == Some(404) && !self.code.starts_with("APIGW.")
    }

    /// True for a 409: the resource is busy (or in a state that refuses the change).
    pub fn is_conflict(&self) -> bool {
        self.status == Some(409)
    }

    /// True when the contract's answer is `retry-after` (throttled, busy, deadline).
    pub fn is_retry(&self) -> bool {
        matches!(self.error, CloudError::RetryAfter(_))
    }

    /// What the failure means for the contract.
    pub fn cloud_error(&self) -> &CloudError {
        &self.error
    }

    /// [`ApiError::cloud_error`], owned.
    pub fn into_cloud_error(self) -> CloudError {
        self.error
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.error {
            CloudError::Other(message) => f.write_str(message),
            CloudError::RetryAfter(retry) => f.write_str(&retry.message),
            other => write!(f, "{other:?}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<ApiError> for CloudError {
    fn from(error: ApiError) -> Self {
        error.error
    }
}

/// Huawei's error code and message in an error answer (see the module docs for the
/// shapes); the code empty and the body's start as the message when it has neither.
pub fn error_body(response: &Response) -> (String, String) {
    let found = serde_json::from_slice::<Value>(&response.body)
        .ok()
        .and_then(|v| find_error(&v));
    let (code, message) = found.unwrap_or_else(|| {
        (
            String::new(),
            cloud_error::message(response).unwrap_or_default(),
        )
    });
    let message: String = message.trim().chars().take(MAX_MESSAGE_CHARS).collect();
    (code, message)
}

fn find_error(value: &Value) -> Option<(String, String)> {
    let object = value.as_object()?;
    // The API gateway, ELB v3, VPC v3.
    if object.contains_key("error_code") || object.contains_key("error_msg") {
        return Some(code_and_message(object));
    }
    // ECS, VPC, ELB v2; Neutron.
    for key in ["error", "NeutronError"] {
        match object.get(key) {
            Some(Value::Object(inner)) => return Some(code_and_message(inner)),
            Some(Value::String(message)) => return Some((String::new(), message.clone())),
            _ => {}
        }
    }
    if object.contains_key("code") || object.contains_key("message") {
        return Some(code_and_message(object));
    }
    // One wrapping object (Nova-style `{"itemNotFound": {...}}`).
    match object.values().collect::<Vec<_>>().as_slice() {
        [Value::Object(inner)] => Some(code_and_message(inner)),
        _ => None,
    }
}

fn code_and_message(object: &serde_json::Map<String, Value>) -> (String, String) {
    let text = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| match object.get(*k) {
                Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            })
            .unwrap_or_default()
    };
    (
        text(&["code", "error_code", "type"]),
        text(&["message", "error_msg", "error_message", "detail"]),
    )
}

/// `path` with `name=value` pairs added to its query, percent-encoded.
pub fn with_query(path: &str, params: &[(&str, &str)]) -> String {
    let mut out = path.to_owned();
    for (name, value) in params {
        out.push(if out.contains('?') { '&' } else { '?' });
        out.push_str(&url::encode_component(name));
        out.push('=');
        out.push_str(&url::encode_component(value));
    }
    out
}

/// The value of the query parameter `name` in `url` (percent-decoded).
fn query_value(url: &str, name: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| percent_decode(v))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` with a `limit` (its own, else [`PAGE_SIZE`]), and that limit.
fn with_limit(path: &str) -> (String, usize) {
    match query_value(path, "limit").and_then(|l| l.parse::<usize>().ok()) {
        Some(limit) if limit > 0 => (path.to_owned(), limit),
        _ => (
            with_query(path, &[("limit", &PAGE_SIZE.to_string())]),
            PAGE_SIZE,
        ),
    }
}

/// A JSON body, decoded; an empty one reads as `null` (for `()`, `Option`, `Value`).
fn decode<T: DeserializeOwned>(response: &Response, what: &str) -> Result<T, ApiError> {
    let body: &[u8] = if response.body.iter().all(u8::is_ascii_whitespace) {
        b"null"
    } else {
        &response.body
    };
    serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            what,
            Some(response.status),
            format!("unexpected response body: {e}"),
        )
    })
}

/// The JSON client of one project's endpoints (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    ecs: String,
    elb: String,
    vpc: String,
    project_id: String,
}

impl Client {
    /// The client of `config`'s endpoints ([`Config::endpoint`]) and project.
    pub fn new(config: &Config) -> Self {
        Self {
            ecs: config.endpoint(Service::Ecs),
            elb: config.endpoint(Service::Elb),
            vpc: config.endpoint(Service::Vpc),
            project_id: config.project_id.clone(),
        }
    }

    /// The project written for `{project_id}`.
    #[allow(dead_code)]
    pub fn project_id(&self) -> &str {
        &self.project_id
    }

    /// The endpoint of `service`, without a trailing `/`.
    pub fn endpoint(&self, service: Service) -> &str {
        match service {
            Service::Ecs => &self.ecs,
            Service::Elb => &self.elb,
            Service::Vpc => &self.vpc,
        }
    }

    /// The URL of `path` (with `{project_id}` filled in) at `service`'s endpoint.
    pub fn url(&self, service: Service, path: &str) -> String {
        format!(
            "{}{}",
            self.endpoint(service),
            path.replace("{project_id}", &self.project_id)
        )
    }

    /// Sends `method path` to `service` with an optional JSON body; the answer when it is
    /// a 2xx, else its [`ApiError`]. The typed methods below are this plus decoding.
    pub fn send(
        &self,
        method: Method,
        service: Service,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Response, ApiError> {
        let what = what(&method, service, path);
        let mut request =
            Request::new(method, &self.url(service, path)).header("accept", "application/json");
        if let Some(body) = body {
            request = request.body("application/json", body);
        }
        let response = request.send().map_err(|e| ApiError::transport(e, &what))?;
        if response.is_success() {
            Ok(response)
        } else {
            Err(ApiError::from_response(&response, &what))
        }
    }

    fn send_json<T: DeserializeOwned>(
        &self,
        method: Method,
        service: Service,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<T, ApiError> {
        let bytes = match body {
            None => None,
            Some(body) => Some(serde_json::to_vec(body).map_err(|e| {
                ApiError::invalid(
                    &what(&method, service, path),
                    None,
                    format!("request body: {e}"),
                )
            })?),
        };
        let what = what(&method, service, path);
        let response = self.send(method, service, path, bytes)?;
        decode(&response, &what)
    }

    /// `GET path`, its JSON answer decoded.
    pub fn get<T: DeserializeOwned>(&self, service: Service, path: &str) -> Result<T, ApiError> {
        self.send_json(Method::Get, service, path, None::<&Value>)
    }

    /// [`Client::get`], but a 404 is `Ok(None)`: for what may not exist.
    pub fn get_found<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
    ) -> Result<Option<T>, ApiError> {
        match self.get(service, path) {
            Err(e) if e.is_not_found() => Ok(None),
            other => other.map(Some),
        }
    }

    /// `POST path` with `body` as JSON, the answer decoded (`serde_json::Value` or `()`
    /// when it does not matter; an empty answer reads as `null`).
    pub fn post<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        body: &(impl Serialize + ?Sized),
    ) -> Result<T, ApiError> {
        self.send_json(Method::Post, service, path, Some(body))
    }

    /// `PUT path` with `body` as JSON, the answer decoded.
    pub fn put<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        body: &(impl Serialize + ?Sized),
    ) -> Result<T, ApiError> {
        self.send_json(Method::Put, service, path, Some(body))
    }

    /// `DELETE path`; a 404 is an error ([`ApiError::is_not_found`]).
    pub fn delete(&self, service: Service, path: &str) -> Result<(), ApiError> {
        self.send(Method::Delete, service, path, None).map(drop)
    }

    /// `DELETE path`: `Ok(true)` when deleted, `Ok(false)` when it was gone (404).
    pub fn delete_found(&self, service: Service, path: &str) -> Result<bool, ApiError> {
        match self.delete(service, path) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every item under `key` of an ECS-style listing: `offset` is a page number (from
    /// 1), `limit` the page size ([`PAGE_SIZE`] unless `path` names one); pages are read
    /// until the answer's `count` items are (without a `count`: until a short page). A
    /// cloud answering the same page twice (an ignored `offset`) is an error, not a
    /// loop.
    pub fn list_offset<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        key: &str,
    ) -> Result<Vec<T>, ApiError> {
        let what = what(&Method::Get, service, path);
        let (path, limit) = with_limit(path);
        let mut items: Vec<Value> = Vec::new();
        let mut previous: Option<Value> = None;
        for page in 1..=MAX_PAGES {
            let body: Value = self.get(
                service,
                &with_query(&path, &[("offset", &page.to_string())]),
            )?;
            let list = items_of(&body, key, &what)?;
            if list.is_empty() {
                return decode_items(items, &what);
            }
            if page > 1 && previous.as_ref() == list.first() {
                return Err(ApiError::invalid(
                    &what,
                    None,
                    format!("the cloud answered page {page} as page {}", page - 1),
                ));
            }
            previous = list.first().cloned();
            let short = list.len() < limit;
            items.extend(list);
            let done = match body.get("count").and_then(Value::as_u64) {
                Some(count) => items.len() as u64 >= count,
                None => short,
            };
            if done {
                return decode_items(items, &what);
            }
        }
        Err(ApiError::invalid(
            &what,
            None,
            format!("more than {MAX_PAGES} pages; stopping"),
        ))
    }

    /// Every item under `key` of a marker-paged listing (ELB, VPC, EIP): `limit`
    /// ([`PAGE_SIZE`] unless `path` names one) and `marker`, the next marker from
    /// `page_info.next_marker`, else the `<key>_links` `next` link, else the last item's
    /// `id` while pages are full.
    pub fn list_marker<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        key: &str,
    ) -> Result<Vec<T>, ApiError> {
        let what = what(&Method::Get, service, path);
        let (path, limit) = with_limit(path);
        let items = paginate::collect(
            |marker| {
                let page_path = match marker {
                    Some(marker) => with_query(&path, &[("marker", marker)]),
                    None => path.clone(),
                };
                let body: Value = self.get(service, &page_path)?;
                let list = items_of(&body, key, &what)?;
                let next = next_marker(&body, key, &list, limit);
                Ok(Page { items: list, next })
            },
            |message| ApiError::invalid(&what, None, message),
        )?;
        decode_items(items, &what)
    }
}

/// `METHOD service /path` (the path as written, without its query), naming a call in
/// errors.
fn what(method: &Method, service: Service, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    format!("{} {service} {path}", method.as_str())
}

/// The array under `key`; an answer without one is an error.
fn items_of(body: &Value, key: &str, what: &str) -> Result<Vec<Value>, ApiError> {
    match body.get(key) {
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(Value::Null) => Ok(Vec::new()),
        _ => Err(ApiError::invalid(
            what,
            None,
            format!("the answer has no `{key}` list"),
        )),
    }
}

fn decode_items<T: DeserializeOwned>(items: Vec<Value>, what: &str) -> Result<Vec<T>, ApiError> {
    items
        .into_iter()
        .map(|item| {
            serde_json::from_value(item)
                .map_err(|e| ApiError::invalid(what, None, format!("unexpected item: {e}")))
        })
        .collect()
}

/// The marker of the page after `list` (see [`Client::list_marker`]).
fn next_marker(body: &Value, key: &str, list: &[Value], limit: usize) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    if let Some(info) = body.get("page_info") {
        return info
            .get("next_marker")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
    }
    if let Some(links) = body.get(format!("{key}_links")) {
        return links
            .as_array()?
            .iter()
            .find(|link| link["rel"] == "next")
            .and_then(|link| link["href"].as_str())
            .and_then(|href| query_value(href, "marker"));
    }
    if list.len() < limit {
        return None;
    }
    list.last()?.get("id")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasm_ccm_guest::testing::MockTransport;
    use wasm_ccm_guest::types::Retry;

    fn client() -> Client {
        let config = Config::parse(
            "[Global]\nregion = r1\nproject-id = p1\n[Endpoints]\necs = http://ecs.test\n\
             elb = http://elb.test/base\nvpc = http://vpc.test\n",
        )
        .unwrap();
        Client::new(&config)
    }

    fn json_error(status: u16, body: Value) -> Response {
        Response::with_json(status, &body)
    }

    #[test]
    fn huawei_error_shapes() {
        let cases = [
            (
                json!({"error": {"code": "Ecs.0114", "message": "Instance not found"}}),
                ("Ecs.0114", "Instance not found"),
            ),
            (
                json!({"error_code": "APIGW.0301", "error_msg": "Incorrect IAM authentication"}),
                ("APIGW.0301", "Incorrect IAM authentication"),
            ),
            (
                json!({"NeutronError": {"type": "LoadBalancerNotFound", "message": "lb x",
                                        "detail": ""}}),
                ("LoadBalancerNotFound", "lb x"),
            ),
            (
                json!({"request_id": "r", "error_code": "ELB.8902", "error_msg": "busy"}),
                ("ELB.8902", "busy"),
            ),
            (
                json!({"itemNotFound": {"code": 404, "message": "gone"}}),
                ("404", "gone"),
            ),
            (
                json!({"code": "VPC.0101", "message": "bad"}),
                ("VPC.0101", "bad"),
            ),
        ];
        for (body, (code, message)) in cases {
            let (c, m) = error_body(&json_error(400, body.clone()));
            assert_eq!((c.as_str(), m.as_str()), (code, message), "{body}");
        }
        // A 404 of the service is "not found"; API Gateway's own (no such API: a wrong
        // endpoint) is not.
        let client = Client::new(
            &crate::config::Config::parse("[Global]\nregion = r1\nproject-id = p1\n").unwrap(),
        );
        let cloud = MockTransport::new();
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/gone",
            json_error(
                404,
                json!({"error": {"code": "Ecs.0114", "message": "not found"}}),
            ),
        );
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/elsewhere",
            json_error(
                404,
                json!({"error_code": "APIGW.0101", "error_msg": "The API does not exist"}),
            ),
        );
        let _installed = cloud.install();
        let gone: Option<Value> = client
            .get_found(Service::Ecs, "/v1/{project_id}/cloudservers/gone")
            .unwrap();
        assert_eq!(gone, None);
        let elsewhere = client
            .get_found::<Value>(Service::Ecs, "/v1/{project_id}/cloudservers/elsewhere")
            .unwrap_err();
        assert_eq!(elsewhere.code(), "APIGW.0101");
        let text = Response::new(502).with_body("text/html", "<html>bad gateway</html>");
        assert_eq!(
            error_body(&text),
            (String::new(), "<html>bad gateway</html>".into())
        );
    }

    #[test]
    fn statuses_mean_what_the_contract_says() {
        let what = "GET ecs /v1/{project_id}/cloudservers/x";
        let gone = ApiError::from_response(
            &json_error(
                404,
                json!({"error": {"code": "Ecs.0114", "message": "not found"}}),
            ),
            what,
        );
        assert!(gone.is_not_found());
        assert_eq!(gone.code(), "Ecs.0114");
        assert_eq!(
            gone.cloud_error(),
            &CloudError::Other(format!("{what}: HTTP 404 Ecs.0114: not found"))
        );
        let busy = ApiError::from_response(
            &json_error(
                409,
                json!({"error_code": "ELB.1101", "error_msg": "PENDING_UPDATE"}),
            ),
            "PUT elb /x",
        );
        assert!(busy.is_conflict() && busy.is_retry());
        assert_eq!(
            CloudError::from(busy),
            CloudError::RetryAfter(Retry {
                delay_ms: CONFLICT_RETRY_MS,
                message: "PUT elb /x: conflict (HTTP 409 ELB.1101): PENDING_UPDATE; retrying \
                          later"
                    .into(),
            })
        );
        let throttled = Response::new(429).with_header("Retry-After", "7");
        assert_eq!(
            ApiError::from_response(&throttled, "x").into_cloud_error(),
            CloudError::RetryAfter(Retry {
                delay_ms: 7_000,
                message: "x: throttled (HTTP 429)".into(),
            })
        );
        let gateway = json_error(
            400,
            json!({"error_code": "APIGW.0308", "error_msg": "The throttling threshold has been reached"}),
        );
        assert!(ApiError::from_response(&gateway, "x").is_retry());
        let transport = ApiError::transport(
            http::Error::new(http::ErrorKind::Refused, "ecs.test:80"),
            "GET ecs /x",
        );
        assert_eq!(transport.status(), None);
        assert!(
            matches!(transport.cloud_error(), CloudError::Other(m) if m.starts_with("GET ecs /x:"))
        );
    }

    #[test]
    fn requests_go_to_the_services_endpoints_unsigned() {
        let cloud = MockTransport::new();
        cloud.on(
            "GET",
            "/base/v2/p1/elb/loadbalancers/lb-1",
            Response::with_json(200, &json!({"loadbalancer": {"id": "lb-1"}})),
        );
        cloud.on(
            "GET",
            "/base/v2/p1/elb/loadbalancers/lb-2",
            Response::new(404),
        );
        cloud.on("POST", "/v1/p1/publicips", Response::new(204));
        cloud.on("DELETE", "/v1/p1/publicips/e1", Response::new(404));
        let _installed = cloud.install();
        let client = client();
        let lb: Value = client
            .get(Service::Elb, "/v2/{project_id}/elb/loadbalancers/lb-1")
            .unwrap();
        assert_eq!(lb["loadbalancer"]["id"], "lb-1");
        let none: Option<Value> = client
            .get_found(Service::Elb, "/v2/{project_id}/elb/loadbalancers/lb-2")
            .unwrap();
        assert_eq!(none, None);
        let () = client
            .post(
                Service::Vpc,
                "/v1/{project_id}/publicips",
                &json!({"publicip": {}}),
            )
            .unwrap();
        assert!(
            !client
                .delete_found(Service::Vpc, "/v1/{project_id}/publicips/e1")
                .unwrap()
        );
        let requests = cloud.requests();
        assert_eq!(
            requests[0].url_text(),
            "http://elb.test/base/v2/p1/elb/loadbalancers/lb-1"
        );
        assert_eq!(requests[2].body_bytes(), br#"{"publicip":{}}"#);
        assert_eq!(
            requests[2].header_value("content-type"),
            Some("application/json")
        );
        for request in &requests {
            for (name, _) in request.headers() {
                assert!(
                    name == "accept" || name == "content-type",
                    "the guest set {name}"
                );
            }
        }
    }

    #[test]
    fn ecs_pages_by_page_number_until_count() {
        let cloud = MockTransport::new();
        cloud.on_with("GET", "/v1/p1/cloudservers/detail", |request| {
            let url = request.url_text().to_owned();
            let page: usize = query_value(&url, "offset").unwrap().parse().unwrap();
            assert_eq!(query_value(&url, "limit").as_deref(), Some("2"));
            let servers: Vec<Value> = [(1, ["a", "b"]), (2, ["c", "d"]), (3, ["e", ""])]
                .iter()
                .find(|(p, _)| *p == page)
                .map(|(_, ids)| {
                    ids.iter()
                        .filter(|id| !id.is_empty())
                        .map(|id| json!({"id": id}))
                        .collect()
                })
                .unwrap_or_default();
            Ok(Response::with_json(
                200,
                &json!({"count": 5, "servers": servers}),
            ))
        });
        let _installed = cloud.install();
        let servers: Vec<Value> = client()
            .list_offset(
                Service::Ecs,
                "/v1/{project_id}/cloudservers/detail?limit=2",
                "servers",
            )
            .unwrap();
        assert_eq!(servers.len(), 5);
        assert_eq!(cloud.count("GET", "/v1/p1/cloudservers/detail"), 3);
        // A cloud that ignores `offset` is caught on the second page.
        let same = MockTransport::new();
        same.on(
            "GET",
            "/v1/p1/cloudservers/detail",
            Response::with_json(200, &json!({"count": 9, "servers": [{"id": "a"}]})),
        );
        let _installed = same.install();
        let err = client()
            .list_offset::<Value>(
                Service::Ecs,
                "/v1/{project_id}/cloudservers/detail",
                "servers",
            )
            .unwrap_err();
        assert!(err.to_string().contains("page 2 as page 1"), "{err}");
    }

    #[test]
    fn markers_from_page_info_links_or_ids() {
        let cloud = MockTransport::new();
        // ELB v3: page_info.
        cloud.on_with("GET", "/base/v3/p1/elb/loadbalancers", |request| {
            let next = match query_value(request.url_text(), "marker").as_deref() {
                None => json!({"next_marker": "lb-2"}),
                Some("lb-2") => json!({}),
                other => panic!("{other:?}"),
            };
            let id = if next.get("next_marker").is_some() {
                "lb-1"
            } else {
                "lb-2"
            };
            Ok(Response::with_json(
                200,
                &json!({"loadbalancers": [{"id": id}], "page_info": next}),
            ))
        });
        // ELB v2: links.
        cloud.on_with("GET", "/base/v2/p1/elb/listeners", |request| {
            Ok(Response::with_json(
                200,
                &match query_value(request.url_text(), "marker").as_deref() {
                    None => json!({"listeners": [{"id": "l1"}], "listeners_links": [
                        {"rel": "next", "href": "http://elb.test/v2/p1/elb/listeners?limit=1&marker=l%2D1"}]}),
                    Some("l-1") => json!({"listeners": [{"id": "l2"}], "listeners_links": []}),
                    other => panic!("{other:?}"),
                },
            ))
        });
        // EIP v1: ids while pages are full.
        cloud.on_with("GET", "/v1/p1/publicips", |request| {
            let url = request.url_text();
            assert_eq!(query_value(url, "limit").as_deref(), Some("2"));
            Ok(Response::with_json(
                200,
                &match query_value(url, "marker").as_deref() {
                    None => json!({"publicips": [{"id": "e1"}, {"id": "e2"}]}),
                    Some("e2") => json!({"publicips": [{"id": "e3"}]}),
                    other => panic!("{other:?}"),
                },
            ))
        });
        let _installed = cloud.install();
        let client = client();
        let lbs: Vec<Value> = client
            .list_marker(
                Service::Elb,
                "/v3/{project_id}/elb/loadbalancers",
                "loadbalancers",
            )
            .unwrap();
        assert_eq!(lbs, [json!({"id": "lb-1"}), json!({"id": "lb-2"})]);
        let listeners: Vec<Value> = client
            .list_marker(Service::Elb, "/v2/{project_id}/elb/listeners", "listeners")
            .unwrap();
        assert_eq!(listeners.len(), 2);
        let eips: Vec<Value> = client
            .list_marker(
                Service::Vpc,
                "/v1/{project_id}/publicips?limit=2",
                "publicips",
            )
            .unwrap();
        assert_eq!(eips.len(), 3);
        assert_eq!(cloud.count("GET", "/v1/p1/publicips"), 2);
    }

    #[test]
    fn queries_are_encoded() {
        assert_eq!(
            with_query(
                "/v2/{project_id}/elb/loadbalancers",
                &[("name", "k8s_service a/b")]
            ),
            "/v2/{project_id}/elb/loadbalancers?name=k8s_service%20a%2Fb"
        );
        assert_eq!(with_query("/x?a=1", &[("b", "2")]), "/x?a=1&b=2");
        assert_eq!(percent_decode("a%2Fb+c%zz"), "a/b c%zz");
    }
}
