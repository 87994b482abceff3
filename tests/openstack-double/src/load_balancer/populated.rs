//! Fully populated load balancer creation (Octavia's `POST /lbaas/loadbalancers` with
//! `listeners` and `pools`, as occm sends it unless `provider-requires-serial-api-calls`
//! is set): each listener, its `default_pool`, the pool's `members` and `healthmonitor`
//! are validated and added as their own creations would add them, all or nothing.

use axum::response::Response;
use serde_json::Value;

use super::listeners::insert_listener;
use super::monitors::insert_monitor;
use super::pools::{insert_member, insert_pool};
use crate::state::State;

/// Whether `request` (a load balancer) carries children.
pub(super) fn is_populated(request: &Value) -> bool {
    request.get("listeners").is_some() || request.get("pools").is_some()
}

/// Adds the children `request` carries to load balancer `lb` (the caller undoes the
/// whole creation on an error).
pub(super) fn populate(s: &mut State, lb: &str, request: &Value) -> Result<(), Response> {
    for listener in request["listeners"].as_array().into_iter().flatten() {
        let mut listener = listener.clone();
        let pool = listener
            .as_object_mut()
            .and_then(|o| o.remove("default_pool"));
        listener["loadbalancer_id"] = lb.into();
        let (_, added) = insert_listener(s, &listener)?;
        if let Some(mut pool) = pool {
            pool["listener_id"] = added["id"].clone();
            add_pool(s, pool)?;
        }
    }
    for pool in request["pools"].as_array().into_iter().flatten() {
        let mut pool = pool.clone();
        pool["loadbalancer_id"] = lb.into();
        add_pool(s, pool)?;
    }
    Ok(())
}

/// A pool with its members and health monitor.
fn add_pool(s: &mut State, mut pool: Value) -> Result<(), Response> {
    let members = pool.as_object_mut().and_then(|o| o.remove("members"));
    let monitor = pool.as_object_mut().and_then(|o| o.remove("healthmonitor"));
    let (_, id) = insert_pool(s, &pool)?;
    for member in members
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        insert_member(s, &id, member)?;
    }
    if let Some(mut monitor) = monitor {
        monitor["pool_id"] = id.into();
        insert_monitor(s, &monitor)?;
    }
    Ok(())
}
