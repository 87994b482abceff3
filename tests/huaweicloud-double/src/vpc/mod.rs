//! The VPC service's part the CCM uses: EIPs (`/v1/{project_id}/publicips`, the EIP
//! SDK's v2 client: create, list, show, bind and unbind by updating `port_id`, delete)
//! and subnets (`/v1/{project_id}/subnets`, list and show). Shapes are the SDKs'
//! `PublicipCreateResp`, `PublicipShowResp`, `PublicipUpdateResp` and `Subnet`.
//!
//! Errors are the VPC service's `{"code": "VPC.xxxx", "message": "..."}`: `VPC.0504`
//! (404, "Floating IP could not be found.", the EIP API's documented example),
//! `VPC.0202` (404, a subnet not found, as the service words it), `VPC.0514` for a
//! port an EIP cannot be bound to (404 unknown, 409 taken) and `VPC.0501` (400) for a
//! malformed request (the last two codes are this double's choice: see the crate's
//! notes).

mod publicips;
mod subnets;

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::json;

use crate::{Shared, reply};

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/v1/{project_id}/publicips",
            get(publicips::list).post(publicips::create),
        )
        .route(
            "/v1/{project_id}/publicips/{id}",
            get(publicips::show)
                .put(publicips::update)
                .delete(publicips::delete),
        )
        .route("/v1/{project_id}/subnets", get(subnets::list))
        .route("/v1/{project_id}/subnets/{id}", get(subnets::show))
}

/// The VPC service's error body.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response {
    reply(status, json!({"code": code, "message": message}))
}

/// 400 `VPC.0501`: a malformed request.
pub(crate) fn bad_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "VPC.0501", message)
}
