//! The shared load balancers' API v2 (`/v2/{project_id}/elb/...`): load balancers,
//! listeners, pools, their members and health monitors, with the shapes of the SDK's v2
//! models (`LoadbalancerResp`, `ListenerResp`, `PoolResp`, `MemberResp`,
//! `HealthmonitorResp`) and `GET .../loadbalancers/{id}/statuses`.
//!
//! A new load balancer is `PENDING_CREATE` for [`crate::State::pending_reads`] reads
//! (shows, lists and `statuses` that include it), then `ACTIVE`; while it is not
//! `ACTIVE`, changes to it or anything under it answer 409 (with
//! [`crate::State::pending_on_change`], every change makes it `PENDING_UPDATE` the same
//! way). Lists filter on any field of the answer given in the query (a field given
//! several times matches any of its values; `loadbalancer_id`, `listener_id`, `pool_id`
//! match the parent lists; load balancers and pools also by `member_address` and
//! `member_device_id`, load balancers by `vpc_id`) and page with `limit`, `marker` and
//! `page_reverse` (`*_links` as neutron's).
//!
//! Errors are the shared ELB's `{"error": {"message": "...", "code": "ELB.xxxx"}}`:
//! `ELB.9800` 404 for a resource not found, `ELB.0002` 400 for a missing body,
//! `ELB.9805` 400 for a missing required field, `ELB.6200` 400 for a port already
//! listened on, `ELB.1101` 400 for a VIP address in use, and `ELB.9899` (the code under
//! which the shared ELB passes its backend's errors on) for the rest: 400 invalid
//! input, 409 `Invalid state PENDING_CREATE of loadbalancer resource <id>` while busy,
//! 409 `<kind> <id> is using this <kind>` for a parent with children.

mod healthmonitors;
mod listeners;
mod loadbalancers;
mod members;
mod pools;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};

use crate::query::{self, Page, Params};
use crate::state::State;
use crate::{Shared, reply};

pub(crate) fn router() -> Router<Shared> {
    let base = "/v2/{project_id}/elb";
    Router::new()
        .route(
            &format!("{base}/loadbalancers"),
            get(loadbalancers::list).post(loadbalancers::create),
        )
        .route(
            &format!("{base}/loadbalancers/{{id}}"),
            get(loadbalancers::show)
                .put(loadbalancers::update)
                .delete(loadbalancers::delete),
        )
        .route(
            &format!("{base}/loadbalancers/{{id}}/statuses"),
            get(loadbalancers::statuses),
        )
        .route(
            &format!("{base}/listeners"),
            get(listeners::list).post(listeners::create),
        )
        .route(
            &format!("{base}/listeners/{{id}}"),
            get(listeners::show)
                .put(listeners::update)
                .delete(listeners::delete),
        )
        // ELB v3's listener API, which also makes and changes a shared ELB's listeners
        // (upstream's CCM uses it for the timeouts): v3 takes the same fields.
        .route(
            "/v3/{project_id}/elb/listeners",
            get(listeners::list).post(listeners::create),
        )
        .route(
            "/v3/{project_id}/elb/listeners/{id}",
            get(listeners::show).put(listeners::update),
        )
        .route(
            &format!("{base}/pools"),
            get(pools::list).post(pools::create),
        )
        .route(
            &format!("{base}/pools/{{id}}"),
            get(pools::show).put(pools::update).delete(pools::delete),
        )
        .route(
            &format!("{base}/pools/{{pool_id}}/members"),
            get(members::list).post(members::create),
        )
        .route(
            &format!("{base}/pools/{{pool_id}}/members/{{id}}"),
            get(members::show)
                .put(members::update)
                .delete(members::delete),
        )
        .route(
            &format!("{base}/healthmonitors"),
            get(healthmonitors::list).post(healthmonitors::create),
        )
        .route(
            &format!("{base}/healthmonitors/{{id}}"),
            get(healthmonitors::show)
                .put(healthmonitors::update)
                .delete(healthmonitors::delete),
        )
}

/// The shared ELB's error body.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response {
    reply(status, json!({"error": {"message": message, "code": code}}))
}

/// 404 `ELB.9800`: `<kind> <id> could not be found`.
pub(crate) fn not_found(kind: &str, id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "ELB.9800",
        &format!("{kind} {id} could not be found"),
    )
}

/// 400 `ELB.9899`: invalid input.
pub(crate) fn invalid(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "ELB.9899", message)
}

/// 409 `ELB.9899`.
pub(crate) fn conflict(message: &str) -> Response {
    error(StatusCode::CONFLICT, "ELB.9899", message)
}

/// 409: `<using> <id> is using this <used>` (a parent with children).
pub(crate) fn in_use(using: &str, id: &str, used: &str) -> Response {
    conflict(&format!("{using} {id} is using this {used}"))
}

/// 404 without load balancer `id`; 409 while it is not `ACTIVE`.
pub(crate) fn mutable(s: &State, id: &str) -> Result<(), Response> {
    match s.load_balancer(id) {
        None => Err(not_found("loadbalancer", id)),
        Some(lb) if lb.provisioning_status != "ACTIVE" => Err(conflict(&format!(
            "Invalid state {} of loadbalancer resource {id}",
            lb.provisioning_status
        ))),
        Some(_) => Ok(()),
    }
}

/// The object `key` of a request body (`{"listener": {...}}`), or `ELB.0002`.
pub(crate) fn parse(bytes: &[u8], key: &str) -> Result<Map<String, Value>, Response> {
    let missing = || {
        let mut kind = key.to_owned();
        if let Some(first) = kind.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        error(
            StatusCode::BAD_REQUEST,
            "ELB.0002",
            &format!("{kind} is null, request is invalid."),
        )
    };
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(mut body)) => match body.remove(key) {
            Some(Value::Object(object)) => Ok(object),
            _ => Err(missing()),
        },
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "ELB.0002",
            "RequestBody is null, request is invalid.",
        )),
    }
}

/// A request object's fields, type-checked as the API does.
pub(crate) struct Fields<'a> {
    pub object: &'a Map<String, Value>,
    /// The object's name in messages (`listener`).
    pub name: &'static str,
}

impl<'a> Fields<'a> {
    pub fn new(object: &'a Map<String, Value>, name: &'static str) -> Self {
        Self { object, name }
    }

    /// Whether `key` is given (null included).
    pub fn has(&self, key: &str) -> bool {
        self.object.contains_key(key)
    }

    fn wrong(&self, key: &str, what: &str) -> Response {
        invalid(&format!(
            "Invalid input for {key}. Reason: '{}' is not {what}.",
            self.object[key]
        ))
    }

    /// 400 `ELB.9805` for the required `key`.
    pub fn missing(&self, key: &str) -> Response {
        error(
            StatusCode::BAD_REQUEST,
            "ELB.9805",
            &format!(
                "RequestBody {}[{key}] is null, this is a required parameter.",
                self.name
            ),
        )
    }

    pub fn text(&self, key: &str) -> Result<Option<String>, Response> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.wrong(key, "a valid string")),
        }
    }

    pub fn int(&self, key: &str) -> Result<Option<i64>, Response> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "an integer")),
        }
    }

    pub fn boolean(&self, key: &str) -> Result<Option<bool>, Response> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.wrong(key, "a valid boolean")),
        }
    }

    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>, Response> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a list of strings")),
            Some(_) => Err(self.wrong(key, "a list")),
        }
    }

    pub fn required_text(&self, key: &str) -> Result<String, Response> {
        self.text(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn required_int(&self, key: &str) -> Result<i64, Response> {
        self.int(key)?.ok_or_else(|| self.missing(key))
    }

    /// An integer in `range`, if given.
    pub fn int_in(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, Response> {
        match self.int(key)? {
            Some(n) if !range.contains(&n) => Err(invalid(&format!(
                "Invalid input for {key}. Reason: {n} is not in the range {} to {}.",
                range.start(),
                range.end()
            ))),
            n => Ok(n),
        }
    }

    /// One of `allowed`, if given.
    pub fn one_of(&self, key: &str, allowed: &[&str]) -> Result<Option<String>, Response> {
        match self.text(key)? {
            Some(v) if !allowed.contains(&v.as_str()) => Err(invalid(&format!(
                "Invalid input for {key}. Reason: {v} is not in {allowed:?}."
            ))),
            v => Ok(v),
        }
    }
}

/// `[{"id": ...}]` of `ids`.
pub(crate) fn refs<'a>(ids: impl IntoIterator<Item = &'a String>) -> Value {
    Value::Array(ids.into_iter().map(|id| json!({"id": id})).collect())
}

/// The page of `items` the query asks for, filtered (`hidden`: fields added for the
/// filters only, dropped from the page), or the 400.
pub(crate) fn select(
    items: Vec<Value>,
    params: &Params,
    hidden: &[&str],
) -> Result<Page, Response> {
    let items = query::filter(items, params, &["fields", "enterprise_project_id"]);
    let mut page = query::page(items, params).map_err(|m| invalid(&m))?;
    for item in &mut page.items {
        if let Some(object) = item.as_object_mut() {
            for key in hidden {
                object.remove(*key);
            }
        }
    }
    Ok(page)
}

/// `{"<key>": [...], "<key>_links": [...]}` for a page of the list at `uri`.
pub(crate) fn listing(
    key: &str,
    page: Page,
    params: &Params,
    headers: &HeaderMap,
    uri: &Uri,
) -> Response {
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let links = query::links(&format!("http://{host}{}", uri.path()), params, &page);
    let mut body = Map::new();
    body.insert(key.into(), Value::Array(page.items));
    if !links.is_empty() {
        body.insert(format!("{key}_links"), Value::Array(links));
    }
    reply(StatusCode::OK, Value::Object(body))
}
