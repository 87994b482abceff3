//! `TokenReview` and `SubjectAccessReview` creates, for delegated authentication and
//! authorization.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{Shared, json_response};
use crate::errors::ApiError;

/// A `TokenReview` or `SubjectAccessReview` create (`resource`), answered from the
/// double's users and grants, counted like any request.
pub(super) fn answer_review(
    state: &Shared,
    resource: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let group = if resource == "tokenreviews" {
        "authentication.k8s.io"
    } else {
        "authorization.k8s.io"
    };
    let access = crate::Access {
        group: group.into(),
        resource: resource.into(),
        verb: "create".into(),
        namespace: String::new(),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    };
    *state
        .accesses
        .lock()
        .expect("access log lock")
        .entry(access)
        .or_insert(0) += 1;
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return ApiError::bad_request("the review is not JSON").into_response();
    };
    let reviews = state.reviews.lock().expect("reviews lock");
    let answer = if resource == "tokenreviews" {
        reviews.token_review(&review)
    } else {
        reviews.subject_access_review(&review)
    };
    json_response(StatusCode::CREATED, &answer)
}
