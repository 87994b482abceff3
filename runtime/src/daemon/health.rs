//! `/healthz`, `/readyz` and `/metrics` on `--bind-address`:`--secure-port`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// What the health endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    /// The provider is loaded and initialized.
    pub provider_ready: AtomicBool,
    /// Leader election has not failed (always true without leader election).
    pub leader_ok: AtomicBool,
    /// The controllers of this replica are running (false while waiting for the lease).
    pub controllers_running: AtomicBool,
}

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    metrics: Metrics,
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.leader_ok.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok".to_string())
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "leader election failed".to_string(),
        )
    }
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let h = &s.health;
    if !h.provider_ready.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "provider not loaded".to_string(),
        );
    }
    if !h.leader_ok.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "leader election failed".to_string(),
        );
    }
    let role = if h.controllers_running.load(Ordering::Relaxed) {
        "controllers running"
    } else {
        "standby (waiting for the leader lease)"
    };
    (StatusCode::OK, format!("ok: {role}"))
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// Serves the endpoints on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    health: Arc<Health>,
    metrics: Metrics,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { health, metrics });
    axum::serve(listener, app).await
}
