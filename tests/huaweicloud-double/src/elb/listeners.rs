//! Listeners: one per load balancer, port and transport (TCP, HTTP and
//! TERMINATED_HTTPS share TCP ports; UDP has its own), with the shared ELB's timeouts
//! (`keepalive_timeout` for every protocol, `client_timeout` and `member_timeout` for
//! HTTP and TERMINATED_HTTPS only), `insert_headers`, `transparent_client_ip_enable`
//! (always on for HTTP and TERMINATED_HTTPS) and TLS container references; deleted only
//! once no pool uses them.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Fields, error, in_use, invalid, listing, mutable, not_found, parse, refs, select};
use crate::clock::iso8601_local;
use crate::query::Params;
use crate::state::{Listener, State};
use crate::{Shared, reply};

/// The protocols a shared load balancer's listener speaks.
pub const PROTOCOLS: [&str; 4] = ["TCP", "UDP", "HTTP", "TERMINATED_HTTPS"];

fn is_http(protocol: &str) -> bool {
    matches!(protocol, "HTTP" | "TERMINATED_HTTPS")
}

/// A listener as the API shows it (`ListenerResp`, with the shared ELB's timeouts).
pub(super) fn listener_json(s: &State, l: &Listener) -> Value {
    json!({
        "id": l.id,
        "tenant_id": s.project_id(),
        "project_id": s.project_id(),
        "name": l.name,
        "description": l.description,
        "admin_state_up": l.admin_state_up,
        "loadbalancers": refs([&l.loadbalancer_id]),
        "connection_limit": l.connection_limit,
        "http2_enable": l.http2_enable,
        "protocol": l.protocol,
        "protocol_port": l.protocol_port,
        "default_pool_id": l.default_pool_id,
        "default_tls_container_ref": l.default_tls_container_ref,
        "client_ca_tls_container_ref": l.client_ca_tls_container_ref,
        "sni_container_refs": l.sni_container_refs,
        "tags": l.tags,
        "created_at": iso8601_local(l.created),
        "updated_at": iso8601_local(l.updated),
        "insert_headers": l.insert_headers,
        "tls_ciphers_policy": l.tls_ciphers_policy,
        "protection_status": "nonProtection",
        "protection_reason": "",
        "keepalive_timeout": l.keepalive_timeout,
        "client_timeout": l.client_timeout,
        "member_timeout": l.member_timeout,
        "transparent_client_ip_enable": l.transparent_client_ip_enable,
    })
}

pub(super) async fn list(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = Params::parse(raw.as_deref());
    shared.with(|s| {
        let all = s.listeners.values().map(|l| listener_json(s, l)).collect();
        match select(all, &params, &[]) {
            Ok(page) => listing("listeners", page, &params, &headers, &uri),
            Err(e) => e,
        }
    })
}

pub(super) async fn show(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| match s.listeners.get(&id) {
        Some(l) => reply(StatusCode::OK, json!({"listener": listener_json(s, l)})),
        None => not_found("listener", &id),
    })
}

/// Applies the changeable fields of `f` to `l` (type-checked, and checked against its
/// protocol).
fn apply(l: &mut Listener, f: &Fields<'_>) -> Result<(), Response> {
    if let Some(name) = f.text("name")? {
        l.name = name;
    }
    if let Some(description) = f.text("description")? {
        l.description = description;
    }
    if let Some(limit) = f.int_in("connection_limit", -1..=i64::from(i32::MAX))? {
        l.connection_limit = limit;
    }
    if let Some(http2) = f.boolean("http2_enable")? {
        l.http2_enable = http2;
    }
    if f.boolean("admin_state_up")? == Some(false) {
        return Err(invalid(
            "Invalid input for admin_state_up. Reason: it can only be true.",
        ));
    }
    if f.has("default_tls_container_ref") {
        l.default_tls_container_ref = f.text("default_tls_container_ref")?;
    }
    if f.has("client_ca_tls_container_ref") {
        l.client_ca_tls_container_ref = f.text("client_ca_tls_container_ref")?;
    }
    if let Some(refs) = f.strings("sni_container_refs")? {
        l.sni_container_refs = refs;
    }
    if let Some(tags) = f.strings("tags")? {
        l.tags = tags;
    }
    if f.has("tls_ciphers_policy") {
        l.tls_ciphers_policy = f.one_of(
            "tls_ciphers_policy",
            &["tls-1-0", "tls-1-1", "tls-1-2", "tls-1-2-strict"],
        )?;
    }
    match f.object.get("insert_headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(headers))
            if headers.values().all(Value::is_boolean)
                && headers.keys().all(|k| INSERT_HEADERS.contains(&k.as_str())) =>
        {
            let mut merged: Map<String, Value> = l.insert_headers.clone();
            merged.extend(headers.clone());
            l.insert_headers = merged;
        }
        Some(other) => {
            return Err(invalid(&format!(
                "Invalid input for insert_headers. Reason: '{other}' is not an object of \
                 booleans named by the headers a listener inserts."
            )));
        }
    }
    let http = is_http(&l.protocol);
    let keepalive = if http { 0..=4000 } else { 10..=4000 };
    if let Some(t) = f.int_in("keepalive_timeout", keepalive)? {
        l.keepalive_timeout = Some(t);
    }
    for (key, slot) in [
        ("client_timeout", &mut l.client_timeout),
        ("member_timeout", &mut l.member_timeout),
    ] {
        if let Some(t) = f.int_in(key, 1..=300)? {
            if !http {
                return Err(invalid(&format!(
                    "Invalid input for {key}. Reason: it can only be set on HTTP and TERMINATED_HTTPS listeners."
                )));
            }
            *slot = Some(t);
        }
    }
    if let Some(transparent) = f.boolean("transparent_client_ip_enable")? {
        if http && !transparent {
            return Err(invalid(
                "Invalid input for transparent_client_ip_enable. Reason: it is always true on HTTP and TERMINATED_HTTPS listeners.",
            ));
        }
        l.transparent_client_ip_enable = transparent;
    }
    if l.protocol == "TERMINATED_HTTPS" && l.default_tls_container_ref.is_none() {
        return Err(f.missing("default_tls_container_ref"));
    }
    Ok(())
}

/// Points listener `listener`'s default pool at `pool` (None: none), which must be a
/// pool of the same load balancer that no other listener uses.
fn set_default_pool(
    s: &mut State,
    listener: &str,
    lb: &str,
    pool: Option<String>,
) -> Result<(), Response> {
    if let Some(pool) = &pool {
        match s.pools.get(pool) {
            None => return Err(not_found("pool", pool)),
            Some(p) if p.loadbalancer_id != lb => {
                return Err(invalid(&format!(
                    "Pool {pool} is not on loadbalancer {lb}."
                )));
            }
            Some(p) if p.listener_id.as_deref().is_some_and(|l| l != listener) => {
                return Err(in_use(
                    "listener",
                    p.listener_id.as_deref().unwrap_or_default(),
                    "pool",
                ));
            }
            Some(_) => {}
        }
    }
    for p in s.pools.values_mut() {
        if p.listener_id.as_deref() == Some(listener) {
            p.listener_id = None;
        }
    }
    if let Some(p) = &pool
        && let Some(found) = s.pools.get_mut(p)
    {
        found.listener_id = Some(listener.to_owned());
    }
    if let Some(l) = s.listeners.get_mut(listener) {
        l.default_pool_id = pool;
    }
    Ok(())
}

/// The headers a listener may insert (the API's `insert_headers` keys).
const INSERT_HEADERS: [&str; 10] = [
    "X-Forwarded-ELB-IP",
    "X-Forwarded-Port",
    "X-Forwarded-For-Port",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "X-Real-IP",
    "X-Forwarded-ELB-ID",
    "X-Forwarded-TLS-Certificate-ID",
    "X-Forwarded-TLS-Protocol",
    "X-Forwarded-TLS-Cipher",
];

pub(super) async fn create(Extract(shared): Extract<Shared>, bytes: Bytes) -> Response {
    let object = match parse(&bytes, "listener") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "listener");
    let required = (|| -> Result<_, Response> {
        let lb = f.required_text("loadbalancer_id")?;
        let protocol = f
            .one_of("protocol", &PROTOCOLS)?
            .ok_or_else(|| f.missing("protocol"))?;
        let port = f
            .int_in("protocol_port", 1..=65535)?
            .ok_or_else(|| f.missing("protocol_port"))?;
        Ok((lb, protocol, port as u16, f.text("default_pool_id")?))
    })();
    let (lb, protocol, port, default_pool) = match required {
        Ok(r) => r,
        Err(e) => return e,
    };
    shared.with(|s| {
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        let udp = |p: &str| p == "UDP";
        if s.listeners.values().any(|l| {
            l.loadbalancer_id == lb && l.protocol_port == port && udp(&l.protocol) == udp(&protocol)
        }) {
            return error(
                StatusCode::BAD_REQUEST,
                "ELB.6200",
                &format!("Load Balancer {lb} already has a listener with protocol_port of {port}."),
            );
        }
        let http = is_http(&protocol);
        let now = s.now();
        let mut listener = Listener {
            id: s.id(),
            name: String::new(),
            description: String::new(),
            loadbalancer_id: lb.clone(),
            protocol: protocol.clone(),
            protocol_port: port,
            connection_limit: -1,
            http2_enable: false,
            default_pool_id: None,
            default_tls_container_ref: None,
            client_ca_tls_container_ref: None,
            sni_container_refs: Vec::new(),
            tags: Vec::new(),
            insert_headers: Map::new(),
            tls_ciphers_policy: (protocol == "TERMINATED_HTTPS").then(|| "tls-1-0".into()),
            keepalive_timeout: Some(if http { 60 } else { 300 }),
            client_timeout: http.then_some(60),
            member_timeout: http.then_some(60),
            transparent_client_ip_enable: http,
            admin_state_up: true,
            created: now,
            updated: now,
        };
        if let Err(e) = apply(&mut listener, &f) {
            return e;
        }
        let id = listener.id.clone();
        s.listeners.insert(id.clone(), listener);
        if let Some(pool) = default_pool
            && let Err(e) = set_default_pool(s, &id, &lb, Some(pool))
        {
            s.listeners.remove(&id);
            return e;
        }
        s.changed(&lb);
        reply(
            StatusCode::CREATED,
            json!({"listener": listener_json(s, &s.listeners[&id])}),
        )
    })
}

pub(super) async fn update(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let object = match parse(&bytes, "listener") {
        Ok(o) => o,
        Err(e) => return e,
    };
    let f = Fields::new(&object, "listener");
    let default_pool = match f.text("default_pool_id") {
        Ok(p) => p,
        Err(e) => return e,
    };
    shared.with(|s| {
        let Some(mut listener) = s.listeners.get(&id).cloned() else {
            return not_found("listener", &id);
        };
        let lb = listener.loadbalancer_id.clone();
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        if let Err(e) = apply(&mut listener, &f) {
            return e;
        }
        listener.updated = s.now();
        s.listeners.insert(id.clone(), listener);
        if f.has("default_pool_id")
            && let Err(e) = set_default_pool(s, &id, &lb, default_pool)
        {
            return e;
        }
        s.changed(&lb);
        reply(
            StatusCode::OK,
            json!({"listener": listener_json(s, &s.listeners[&id])}),
        )
    })
}

pub(super) async fn delete(
    Extract(shared): Extract<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    shared.with(|s| {
        let Some(lb) = s.listeners.get(&id).map(|l| l.loadbalancer_id.clone()) else {
            return not_found("listener", &id);
        };
        if let Err(e) = mutable(s, &lb) {
            return e;
        }
        if let Some(p) = s
            .pools
            .values()
            .find(|p| p.listener_id.as_deref() == Some(id.as_str()))
        {
            return in_use("pool", &p.id, "listener");
        }
        s.listeners.remove(&id);
        s.changed(&lb);
        StatusCode::NO_CONTENT.into_response()
    })
}
