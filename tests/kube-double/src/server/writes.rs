//! What create, update and patch requests need besides the store: the JSON body, the
//! fields a patch names (for field validation), patches of the events.k8s.io view, and
//! `Warning` headers.

use axum::body::Bytes;
use axum::response::Response;
use serde_json::Value;

use crate::errors::ApiError;
use crate::resources::Resource;
use crate::store::PatchType;

/// A patch without strategic-merge directives, for field validation.
pub(super) fn patch_fields_only(patch: &Value) -> Value {
    match patch {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if k == "metadata" || k == "spec" {
                            patch_fields_only(v)
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        if let Ok(value) = axum::http::HeaderValue::from_str(&format!("299 - \"{warning}\"")) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

pub(super) fn apply_patch(
    view: &mut Value,
    patch_type: PatchType,
    patch: &Value,
    resource: &Resource,
    name: &str,
) -> Result<(), ApiError> {
    use crate::patch::{self, PatchError};
    let map = |e: PatchError| match e {
        PatchError::Malformed(m) => ApiError::bad_request(m),
        PatchError::Failed(m) => ApiError::invalid(resource.kind, name, m),
    };
    match patch_type {
        PatchType::Merge => patch::merge_patch(view, patch),
        PatchType::Json => patch::json_patch(view, patch).map_err(map)?,
        PatchType::Strategic => patch::strategic_merge_patch(view, patch, resource).map_err(map)?,
    }
    Ok(())
}

pub(super) fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}
