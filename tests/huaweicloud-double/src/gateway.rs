//! API Gateway's part, in front of each service: the request's body is read whole, its
//! AK/SK signature verified ([`crate::signature::verify`]) and its project checked
//! before the service sees it; the refused get API Gateway's answer. Every answer
//! carries `Date` (the double's clock) and `X-Request-Id`, and every request is
//! journaled. A path no service serves is API Gateway's 404 `APIGW.0101`.
//!
//! Refusals:
//! - no or bad signature, unknown key, `X-Sdk-Date` off by more than 15 minutes, a
//!   temporary key's token missing: 401 `{"error_msg": "Incorrect IAM authentication
//!   information: ...", "error_code": "APIGW.0301", "request_id": "..."}` (the messages
//!   are API Gateway's documented ones; see [`crate::signature::Refusal::error_msg`]);
//! - `X-Project-Id` not the keys' project: the same 401 (`...: Unauthorized`): IAM
//!   issues no token for another account's project;
//! - a path whose `{project_id}` is not the keys' project: the service's own answer
//!   where it is documented (ELB: 400 `ELB.9808` "Tenant_id in token mismatches with
//!   tenant_id in url."; VPC: 400 `VPC.0007` "urlTenantId is not equal
//!   tokenTenantId"), else (ECS) API Gateway's 403 `APIGW.0302`.

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State as Extract};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::clock::http_date;
use crate::signature::{self, SignedRequest};
use crate::{Recorded, Service, Shared};

/// The largest request body read (larger ones are answered 413).
pub const MAX_BODY: usize = 8 << 20;

/// The request's ID, for handlers whose answers carry it.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub String);

/// `routes` behind the gateway, with the 404 of paths not served.
pub(crate) fn wrap(service: Service, routes: Router<Shared>, shared: Shared) -> Router {
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            (shared.clone(), service),
            gate,
        ))
        .with_state(shared)
}

/// API Gateway's error body.
pub(crate) fn apigw(status: StatusCode, code: &str, message: &str, request_id: &str) -> Response {
    (
        status,
        axum::Json(json!({"error_msg": message, "error_code": code, "request_id": request_id})),
    )
        .into_response()
}

async fn not_found(axum::Extension(id): axum::Extension<RequestId>) -> Response {
    apigw(
        StatusCode::NOT_FOUND,
        "APIGW.0101",
        "The API does not exist or has not been published in the environment",
        &id.0,
    )
}

/// A refusal: the answer, and why (for the journal).
struct Refused {
    answer: Response,
    why: String,
}

/// The service's answer to a path naming another project than the keys'.
fn wrong_project(service: Service, request_id: &str) -> Response {
    match service {
        Service::Elb => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {
                "message": "Tenant_id in token mismatches with tenant_id in url.",
                "code": "ELB.9808"}})),
        )
            .into_response(),
        Service::Vpc => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"code": "VPC.0007",
                "message": "urlTenantId is not equal tokenTenantId"})),
        )
            .into_response(),
        Service::Ecs => apigw(
            StatusCode::FORBIDDEN,
            "APIGW.0302",
            "The IAM user is not authorized to access the API.",
            request_id,
        ),
    }
}

/// Verifies the signature and the project of a request.
fn authorize(
    shared: &Shared,
    service: Service,
    request: &SignedRequest<'_>,
    now: i64,
    request_id: &str,
) -> Result<(), Refused> {
    let keys = shared.gate.keys();
    if let Err(refusal) = signature::verify(request, &keys, now) {
        return Err(Refused {
            answer: apigw(
                StatusCode::UNAUTHORIZED,
                "APIGW.0301",
                &refusal.error_msg(),
                request_id,
            ),
            why: refusal.reason(),
        });
    }
    let project = &shared.gate.project_id;
    if let Some(asked) = signature::header(request.headers, "x-project-id")
        && asked != project
    {
        return Err(Refused {
            answer: apigw(
                StatusCode::UNAUTHORIZED,
                "APIGW.0301",
                "Incorrect IAM authentication information: Unauthorized",
                request_id,
            ),
            why: format!("X-Project-Id {asked} is not the keys' project {project}"),
        });
    }
    // `/<version>/<project_id>/...` on every path the services serve.
    let segments: Vec<&str> = request.path.split('/').collect();
    if segments.len() >= 4 && segments[2] != project {
        return Err(Refused {
            answer: wrong_project(service, request_id),
            why: format!(
                "the path's project {} is not the keys' project {project}",
                segments[2]
            ),
        });
    }
    Ok(())
}

/// The gateway: reads the body, verifies, passes the request on (or refuses it), stamps
/// the answer and journals the exchange.
async fn gate(
    Extract((shared, service)): Extract<(Shared, Service)>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let request_id = shared.gate.request_id();
    let now = shared.with(|s| s.now());
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| parts.uri.path().to_owned());
    let method = parts.method.as_str().to_owned();
    let (bytes, outcome) = match axum::body::to_bytes(body, MAX_BODY).await {
        Err(e) => (
            bytes::Bytes::new(),
            Err(Refused {
                answer: apigw(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "APIGW.0201",
                    "Request entity too large",
                    &request_id,
                ),
                why: format!("the body could not be read: {e}"),
            }),
        ),
        Ok(bytes) => {
            let signed = SignedRequest {
                method: &method,
                path: parts.uri.path(),
                query: parts.uri.query().unwrap_or(""),
                headers: &headers,
                body: &bytes,
            };
            let outcome = authorize(&shared, service, &signed, now, &request_id);
            (bytes, outcome)
        }
    };
    let (mut response, refused) = match outcome {
        Err(refused) => {
            tracing::debug!(service = service.name(), %method, %target, why = %refused.why, "refused");
            (refused.answer, Some(refused.why))
        }
        Ok(()) => {
            parts.extensions.insert(RequestId(request_id.clone()));
            let request = Request::from_parts(parts, Body::from(bytes.clone()));
            (next.run(request).await, None)
        }
    };
    let stamps = response.headers_mut();
    if let Ok(date) = HeaderValue::from_str(&http_date(shared.with(|s| s.now()))) {
        stamps.insert(header::DATE, date);
    }
    if let Ok(id) = HeaderValue::from_str(&request_id) {
        stamps.insert("x-request-id", id);
    }
    shared.gate.record(Recorded {
        service,
        method,
        target,
        headers,
        body: bytes.to_vec(),
        status: response.status().as_u16(),
        refused,
    });
    response
}
