//! A double of the OpenStack APIs a cloud-controller-manager calls, for tests and the
//! playground: compute (Nova, [`compute`]), network (Neutron, [`network`]) and
//! load-balancer (Octavia, [`load_balancer`]), with the real APIs' JSON shapes, status
//! codes and error bodies, pagination, microversion headers and Octavia's
//! `PENDING_*` → `ACTIVE` transitions (a load balancer that is busy answers 409 to
//! changes). Every request's `X-Auth-Token` is validated with the real Keystone
//! (tests/keystone-peer), as keystonemiddleware does in front of each service.
//!
//! The services are served on one port under devstack's paths, which is how
//! [`OpenStackDouble::register`] puts them in Keystone's catalog:
//! `/compute/v2.1`, `/network` (API `v2.0`) and `/load-balancer` (API `v2`, also
//! served as `v2.0`, as Octavia does).
//!
//! ```no_run
//! # async fn demo() {
//! use std::sync::Arc;
//! use keystone_peer::Keystone;
//! use openstack_double::{OpenStackDouble, state::NewServer};
//!
//! let keystone = Arc::new(Keystone::start().await);
//! let cloud = OpenStackDouble::start(keystone.clone()).await.unwrap();
//! cloud.register(&keystone).await;
//! let server = cloud.with_state(|s| s.add_server(NewServer::named("node-1", "10.0.0.11")));
//! println!("{} serves {}", cloud.url(), server.id);
//! # }
//! ```

// Handlers' helpers return the error answer itself (axum's idiom); it is large.
#![allow(clippy::result_large_err)]

pub mod compute;
pub mod load_balancer;
pub mod network;
pub mod state;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State as Extract};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use keystone_peer::Keystone;
use serde_json::{Value, json};

pub use state::State;

/// What every handler shares.
#[derive(Clone)]
pub struct Shared {
    pub state: Arc<Mutex<State>>,
    keystone: Arc<Keystone>,
    settings: Settings,
    /// Tokens Keystone accepted, and when (keystonemiddleware's token cache).
    validated: Arc<Mutex<std::collections::HashMap<String, std::time::Instant>>>,
}

/// How the double behaves.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// How long a token Keystone accepted is accepted without asking again, as
    /// keystonemiddleware's `token_cache_time` (300 s there); zero (the default here)
    /// asks Keystone on every request, so a revoked token is refused at once.
    pub token_cache: std::time::Duration,
}

impl Shared {
    /// Runs `f` on the state (load balancers settled first).
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.settle();
        f(&mut state)
    }
}

/// A running double. Stops when dropped.
pub struct OpenStackDouble {
    addr: SocketAddr,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for OpenStackDouble {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl OpenStackDouble {
    /// Serves on a free port of 127.0.0.1, validating every token with `keystone`.
    pub async fn start(keystone: Arc<Keystone>) -> std::io::Result<Self> {
        Self::start_with(keystone, Settings::default()).await
    }

    /// [`OpenStackDouble::start`] with `settings`.
    pub async fn start_with(keystone: Arc<Keystone>, settings: Settings) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Shared {
            state: Arc::new(Mutex::new(State::default())),
            keystone,
            settings,
            validated: Arc::default(),
        };
        let api = axum::Router::new()
            .nest("/compute/v2.1", compute::router())
            .nest("/network/v2.0", network::router())
            .nest("/load-balancer/v2", load_balancer::router())
            // Octavia serves its API under both names.
            .nest("/load-balancer/v2.0", load_balancer::router())
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                authenticate,
            ));
        // Version discovery needs no token, as on the real services.
        let mut app = axum::Router::new();
        for path in VERSION_PATHS {
            app = app.route(path, axum::routing::get(versions));
        }
        let app = app.merge(api).with_state(shared.clone());
        let server = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(error = %err, "OpenStack double stopped");
            }
        });
        Ok(Self {
            addr,
            shared,
            server,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Registers the three services' public endpoints in `keystone`'s catalog.
    pub async fn register(&self, keystone: &Keystone) {
        let url = self.url();
        for (kind, name, path) in [
            ("compute", "nova", "/compute/v2.1"),
            ("network", "neutron", "/network"),
            ("load-balancer", "octavia", "/load-balancer"),
        ] {
            keystone
                .register_endpoint(kind, name, "public", &format!("{url}{path}"))
                .await;
        }
    }

    /// Runs `f` on the world.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.shared.with(f)
    }
}

/// The paths answering version discovery (with and without a trailing slash).
const VERSION_PATHS: [&str; 10] = [
    "/compute",
    "/compute/",
    "/compute/v2.1",
    "/compute/v2.1/",
    "/network",
    "/network/",
    "/load-balancer",
    "/load-balancer/",
    "/load-balancer/v2",
    "/load-balancer/v2/",
];

/// The version documents of the three services, as each serves them (Octavia's lists
/// `v2.0` to [`State::octavia_version`], the last one current).
async fn versions(
    Extract(shared): Extract<Shared>,
    headers: axum::http::HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let path = uri.path().trim_end_matches('/');
    let link = |p: &str| json!([{"rel": "self", "href": format!("http://{host}{p}/")}]);
    let body = match path {
        "/compute" => json!({"versions": [{"id": "v2.1", "status": "CURRENT", "version": "2.96",
            "min_version": "2.1", "updated": "2013-07-23T11:33:21Z", "links": link("/compute/v2.1")}]}),
        "/compute/v2.1" => json!({"version": {"id": "v2.1", "status": "CURRENT", "version": "2.96",
            "min_version": "2.1", "updated": "2013-07-23T11:33:21Z", "links": link("/compute/v2.1")}}),
        "/network" => json!({"versions": [{"id": "v2.0", "status": "CURRENT",
            "links": link("/network/v2.0")}]}),
        _ => {
            if shared.with(|s| s.octavia_versions_fail) {
                return reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"error": "version document unavailable"}),
                );
            }
            let (major, last) = shared.with(|s| s.octavia_version);
            let versions: Vec<Value> = (0..=last)
                .map(|minor| {
                    let status = if minor == last {
                        "CURRENT"
                    } else {
                        "SUPPORTED"
                    };
                    json!({"id": format!("v{major}.{minor}"), "status": status,
                        "updated": "2026-01-01T00:00:00Z", "links": link("/load-balancer/v2")})
                })
                .collect();
            json!({"versions": versions})
        }
    };
    reply(StatusCode::OK, body)
}

/// keystonemiddleware's part: a request without a token Keystone accepts is answered
/// 401 with its body; accepted requests are recorded.
async fn authenticate(Extract(shared): Extract<Shared>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let cached = |token: &str| {
        let validated = shared.validated.lock().unwrap_or_else(|p| p.into_inner());
        validated
            .get(token)
            .is_some_and(|at| at.elapsed() < shared.settings.token_cache)
    };
    let valid = match token {
        Some(token) if cached(&token) => true,
        Some(token) => {
            let valid = shared.keystone.validate(&token).await.unwrap_or(false);
            if valid && !shared.settings.token_cache.is_zero() {
                shared
                    .validated
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(token, std::time::Instant::now());
            }
            valid
        }
        None => false,
    };
    if !valid {
        return (
            StatusCode::UNAUTHORIZED,
            [(
                "www-authenticate",
                format!("Keystone uri=\"{}\"", shared.keystone.url()),
            )],
            axum::Json(json!({"error": {"code": 401, "title": "Unauthorized",
                "message": "The request you have made requires authentication."}})),
        )
            .into_response();
    }
    let line = format!("{} {}", request.method(), request.uri().path());
    let creates = request.method() == axum::http::Method::POST;
    let latency = shared.with(|s| {
        s.requests.push(line);
        s.latency.map(|range| spread(range, s.requests.len()))
    });
    let response = next.run(request).await;
    let lost = creates
        && response.status().is_success()
        && shared.with(|s| {
            let lose = s.lost_answers > 0;
            s.lost_answers = s.lost_answers.saturating_sub(1);
            lose
        });
    let delay = if lost {
        Some(shared.with(|s| s.lost_answer_delay))
    } else {
        latency
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    response
}

/// The `n`th request's delay in `range`: spread over it, the same in every run.
fn spread(
    (low, high): (std::time::Duration, std::time::Duration),
    n: usize,
) -> std::time::Duration {
    let step = (n as u64).wrapping_mul(7919) % 1000;
    low + high.saturating_sub(low).mul_f64(step as f64 / 1000.0)
}

/// A JSON answer.
pub(crate) fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// The JSON body of a request, or a 400 in `error`'s shape.
pub(crate) fn body(
    bytes: &[u8],
    error: impl Fn(StatusCode, &str) -> Response,
) -> Result<Value, Response> {
    serde_json::from_slice(bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            &format!("Malformed request body: {e}"),
        )
    })
}
