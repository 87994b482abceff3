//! The HTTP front of the double: discovery, CRUD, patch and watch under the real
//! API paths, with Status error bodies. This module holds the shared state, the entry
//! point (authentication) and the helpers the request modules share.

mod auth_reviews;
mod discovery;
mod list;
mod routes;
mod watch;
mod writes;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::errors::ApiError;
use crate::resources;
use crate::store::Store;
use routes::route;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Require `Authorization: Bearer <token>` when set.
    pub token: Option<String>,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
}

pub(crate) struct AppState {
    pub store: Arc<Store>,
    pub settings: ServerSettings,
    pub address: String,
    /// Bumped to end every open watch (clients must reconnect).
    pub disconnect: tokio::sync::watch::Sender<u64>,
    /// Every (group, resource, verb, namespace) requested, for RBAC checks.
    pub accesses: std::sync::Mutex<std::collections::BTreeMap<crate::Access, u64>>,
    /// Injected errors ([`crate::ApiServer::inject_conflicts`],
    /// [`crate::ApiServer::inject_not_found`]).
    pub faults: std::sync::Mutex<Vec<crate::InjectedFault>>,
    /// Users and grants for `TokenReview` and `SubjectAccessReview`.
    pub reviews: std::sync::Mutex<crate::reviews::Reviews>,
}

type Shared = Arc<AppState>;

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(status, &self.status())
    }
}

/// The single entry point: authentication, then routing by path.
pub(crate) async fn handle(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/').to_owned();
    if matches!(path.as_str(), "/healthz" | "/readyz" | "/livez") {
        return "ok".into_response();
    }
    if let Some(token) = &state.settings.token {
        let expected = format!("Bearer {token}");
        if headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            != Some(expected.as_str())
        {
            return ApiError::unauthorized().into_response();
        }
    }
    match route(&state, &method, &path, &query, &headers, &body).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

fn check_namespace(store: &Store, ns: &str) -> Result<(), ApiError> {
    let namespaces = resources::find("", "v1", "namespaces").expect("namespaces");
    store.get(namespaces, "", ns).map(drop)
}

fn is_true(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true" | "1"))
}
