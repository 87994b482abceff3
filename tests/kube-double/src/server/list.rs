//! Lists: label and field selectors (events.k8s.io's translated to the stored core/v1
//! form), paging with continue tokens, and Table answers.

use std::collections::HashMap;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{check_namespace, json_response};
use crate::convert;
use crate::errors::ApiError;
use crate::resources::{self, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::Store;
use crate::table;

pub(super) fn selectors(
    resource: &Resource,
    query: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let mut field_text = query.get("fieldSelector").cloned().unwrap_or_default();
    let fields = FieldSelector::parse(&field_text, resource).map_err(ApiError::bad_request)?;
    if resource.group == "events.k8s.io" {
        // Selectors are evaluated on the stored core/v1 form.
        field_text = field_text
            .replace("regarding.", "involvedObject.")
            .replace("reportingController", "reportingComponent");
        let core = resources::find("", "v1", "events").expect("core events");
        return Ok((
            labels,
            FieldSelector::parse(&field_text, core).map_err(ApiError::bad_request)?,
        ));
    }
    Ok((labels, fields))
}

pub(super) fn list(
    store: &Store,
    resource: &Resource,
    storage: &Resource,
    ns: &str,
    (labels, fields): &(LabelSelector, FieldSelector),
    query: &HashMap<String, String>,
    as_table: bool,
) -> Result<Response, ApiError> {
    if resource.namespaced && !ns.is_empty() {
        check_namespace(store, ns)?;
    }
    let (mut items, rv) = store.list(storage, ns, labels, fields);
    if resource.group == "events.k8s.io" {
        items = items.iter().map(convert::core_to_events_v1).collect();
    }
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    let offset: usize = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (token_rv, offset) = token
                .split_once(':')
                .and_then(|(rv, o)| Some((rv.parse::<u64>().ok()?, o.parse().ok()?)))
                .ok_or_else(|| {
                    ApiError::bad_request(format!("invalid continue token {token:?}"))
                })?;
            // As after an etcd compaction: the list the token continues is gone.
            if token_rv < store.oldest_watchable() {
                return Err(ApiError::gone(format!(
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter, or use the continue token \
                     in this response to retrieve the remainder of the results. (token resource version {token_rv})"
                )));
            }
            offset
        }
        None => 0,
    };
    let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let total = items.len();
    let mut items: Vec<Value> = items.into_iter().skip(offset).collect();
    if limit > 0 && items.len() > limit {
        items.truncate(limit);
        metadata["continue"] = json!(format!("{rv}:{}", offset + limit));
        metadata["remainingItemCount"] = json!(total - offset - limit);
    }
    if as_table {
        return Ok(json_response(
            StatusCode::OK,
            &table::render(resource, &items, metadata),
        ));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", resource.kind),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    ))
}
