//! `/healthz`, `/livez`, `/readyz` and `/metrics`, served on the secure port
//! ([`crate::serving`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use wasm_ccm_host::metrics::Metrics;

/// What the health endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    /// The provider is loaded and initialized.
    pub provider_ready: AtomicBool,
    /// Leader election has not failed (always true without leader election).
    pub leader_ok: AtomicBool,
    /// The controllers of this replica are running (false while waiting for the lease).
    pub controllers_running: AtomicBool,
    /// Each started controller: still running (false: it stopped on its own).
    controllers: Mutex<BTreeMap<&'static str, bool>>,
}

impl Health {
    /// Records that `controller` runs.
    pub fn controller_started(&self, controller: &'static str) {
        self.lock().insert(controller, true);
    }

    /// Records that `controller` stopped while it should run.
    pub fn controller_failed(&self, controller: &'static str) {
        self.lock().insert(controller, false);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, bool>> {
        self.controllers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The named checks of `/healthz`, in order: `leaderElection`, then
    /// `controller/<name>` per started controller.
    pub fn checks(&self) -> Vec<(String, Result<(), &'static str>)> {
        let mut checks = vec![(
            "leaderElection".to_owned(),
            if self.leader_ok.load(Ordering::Relaxed) {
                Ok(())
            } else {
                Err("the leader lease was lost")
            },
        )];
        for (name, running) in self.lock().iter() {
            checks.push((
                format!("controller/{name}"),
                if *running { Ok(()) } else { Err("stopped") },
            ));
        }
        checks
    }
}

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    metrics: Metrics,
}

/// `/healthz`: `ok` when every check passes; `?verbose` lists them as upstream does
/// (`[+]leaderElection ok`, `[-]controller/service failed: stopped`).
async fn healthz(
    State(s): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    report(s.health.checks(), query.contains_key("verbose"))
}

/// `/healthz/<check>`, e.g. `/healthz/controller/cloud-node`.
async fn healthz_check(State(s): State<AppState>, Path(name): Path<String>) -> impl IntoResponse {
    let checks: Vec<_> = s
        .health
        .checks()
        .into_iter()
        .filter(|(check, _)| *check == name)
        .collect();
    if checks.is_empty() {
        return (StatusCode::NOT_FOUND, format!("no health check {name:?}\n"));
    }
    report(checks, false)
}

fn report(checks: Vec<(String, Result<(), &'static str>)>, verbose: bool) -> (StatusCode, String) {
    let healthy = checks.iter().all(|(_, result)| result.is_ok());
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    if !verbose && healthy {
        return (status, "ok".into());
    }
    let mut body = String::new();
    for (name, result) in &checks {
        match result {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(reason) => body.push_str(&format!("[-]{name} failed: {reason}\n")),
        }
    }
    body.push_str(if healthy {
        "healthz check passed\n"
    } else {
        "healthz check failed\n"
    });
    (status, body)
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

/// The endpoints: `/healthz` (and `/livez`, the same checks), `/healthz/<check>`,
/// `/readyz`, `/metrics`.
pub fn router(health: Arc<Health>, metrics: Metrics) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/healthz/{*check}", get(healthz_check))
        .route("/livez", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { health, metrics })
}
