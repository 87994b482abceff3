//! The HTTP API: `/v1/...` (bearer token) and `/admin/...` (tests and demos).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;

use crate::model::*;
use crate::state::CloudState;

#[derive(Clone)]
pub(crate) struct AppState {
    pub cloud: Arc<Mutex<CloudState>>,
    pub token: Arc<str>,
}

impl AppState {
    fn lock(&self) -> std::sync::MutexGuard<'_, CloudState> {
        self.cloud.lock().expect("cloud state lock")
    }
}

pub(crate) fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/instances", get(list_instances))
        .route("/v1/instances/{id}", get(get_instance))
        .route("/v1/load-balancers", get(list_load_balancers))
        .route(
            "/v1/load-balancers/{name}",
            get(get_load_balancer)
                .put(put_load_balancer)
                .delete(delete_load_balancer),
        )
        .route("/v1/load-balancers/{name}/backends", put(put_backends))
        .route("/v1/routes", get(list_routes).post(create_route))
        .route("/v1/routes/{name}", axum::routing::delete(delete_route))
        .route("/v1/clusters", get(list_clusters))
        .route_layer(middleware::from_fn_with_state(state.clone(), guard));
    let admin = Router::new()
        .route("/admin/instances", post(admin_create_instance))
        .route(
            "/admin/instances/{id}",
            axum::routing::patch(admin_patch_instance).delete(admin_delete_instance),
        )
        .route(
            "/admin/routes/{name}/blackhole",
            post(admin_blackhole_route),
        )
        .route("/admin/hidden-instances", put(admin_hide_instances))
        .route("/admin/clusters", post(admin_add_cluster))
        .route(
            "/admin/faults",
            post(admin_add_fault).delete(admin_clear_faults),
        )
        .route("/admin/stats", get(admin_stats))
        .route("/admin/reset", post(admin_reset));
    Router::new()
        .merge(v1)
        .merge(admin)
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state)
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }),
    )
        .into_response()
}

fn not_found(what: &str, name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{what} {name} not found"),
    )
}

/// Counts the request, checks the bearer token, applies fault rules.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| path.clone());
    let expected = format!("Bearer {}", state.token);
    let authorized = request
        .headers()
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == expected.as_bytes());
    let fault = {
        let mut cloud = state.lock();
        cloud.record_request(format!("{method} {template}"));
        if !authorized {
            cloud.unauthorized += 1;
        }
        if authorized {
            cloud.take_fault(&method, &path)
        } else {
            None
        }
    };
    if !authorized {
        return error(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "missing or invalid bearer token",
        );
    }
    if let Some(fault) = fault {
        if fault.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(fault.latency_ms)).await;
        }
        if let Some(status) = fault.status {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = error(status, "InjectedFault", format!("injected {status}"));
            if let Some(secs) = fault.retry_after_seconds {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            return response;
        }
    }
    next.run(request).await
}

#[derive(Deserialize)]
struct NameQuery {
    name: Option<String>,
}

async fn list_instances(State(s): State<AppState>, Query(q): Query<NameQuery>) -> Response {
    Json(List {
        items: s.lock().list_instances(q.name.as_deref()),
    })
    .into_response()
}

async fn get_instance(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    match s.lock().visible_instance(&id) {
        Some(i) => Json(i.clone()).into_response(),
        None => not_found("instance", &id),
    }
}

async fn list_load_balancers(State(s): State<AppState>) -> Response {
    Json(List {
        items: s.lock().load_balancers.values().cloned().collect(),
    })
    .into_response()
}

async fn get_load_balancer(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    match s.lock().load_balancers.get(&name) {
        Some(lb) => Json(lb.clone()).into_response(),
        None => not_found("load balancer", &name),
    }
}

fn unknown_backends(cloud: &CloudState, backends: &[String]) -> Option<Response> {
    let unknown: Vec<&String> = backends
        .iter()
        .filter(|b| !cloud.instances.contains_key(*b))
        .collect();
    (!unknown.is_empty()).then(|| {
        error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "InvalidBackend",
            format!("unknown backend instances: {unknown:?}"),
        )
    })
}

async fn put_load_balancer(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Json(spec): Json<LoadBalancerSpec>,
) -> Response {
    let mut cloud = s.lock();
    if let Some(resp) = unknown_backends(&cloud, &spec.backends) {
        return resp;
    }
    Json(cloud.put_load_balancer(&name, spec)).into_response()
}

async fn put_backends(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<Backends>,
) -> Response {
    let mut cloud = s.lock();
    if let Some(resp) = unknown_backends(&cloud, &body.backends) {
        return resp;
    }
    match cloud.load_balancers.get_mut(&name) {
        Some(lb) => {
            lb.backends = body.backends;
            Json(lb.clone()).into_response()
        }
        None => not_found("load balancer", &name),
    }
}

async fn delete_load_balancer(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    match s.lock().load_balancers.remove(&name) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => not_found("load balancer", &name),
    }
}

#[derive(Deserialize)]
struct ClusterQuery {
    cluster: Option<String>,
}

async fn list_routes(State(s): State<AppState>, Query(q): Query<ClusterQuery>) -> Response {
    Json(List {
        items: s.lock().list_routes(q.cluster.as_deref()),
    })
    .into_response()
}

async fn create_route(State(s): State<AppState>, Json(new): Json<NewRoute>) -> Response {
    let mut cloud = s.lock();
    match cloud.instances.get(&new.target_instance) {
        None => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "InvalidTarget",
                format!("unknown target instance {}", new.target_instance),
            );
        }
        // As EC2's CreateRoute refuses an instance in the wrong state.
        Some(target) if target.state == InstanceState::Terminated => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "InvalidTarget",
                format!("target instance {} is terminated", new.target_instance),
            );
        }
        Some(_) => {}
    }
    if new.name.is_empty() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "InvalidName",
            "route name is empty",
        );
    }
    (StatusCode::CREATED, Json(cloud.create_route(new))).into_response()
}

async fn delete_route(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    let mut cloud = s.lock();
    match cloud.routes.remove(&name) {
        Some(_) => {
            cloud.forced_blackholes.remove(&name);
            StatusCode::NO_CONTENT.into_response()
        }
        None => not_found("route", &name),
    }
}

async fn list_clusters(State(s): State<AppState>) -> Response {
    Json(List {
        items: s.lock().clusters.clone(),
    })
    .into_response()
}

async fn admin_create_instance(
    State(s): State<AppState>,
    Json(new): Json<NewInstance>,
) -> Response {
    (StatusCode::CREATED, Json(s.lock().create_instance(new))).into_response()
}

async fn admin_patch_instance(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Json(patch): Json<InstancePatch>,
) -> Response {
    match s.lock().patch_instance(&id, patch) {
        Some(i) => Json(i).into_response(),
        None => not_found("instance", &id),
    }
}

async fn admin_delete_instance(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    if s.lock().delete_instance(&id) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        not_found("instance", &id)
    }
}

/// The body of `PUT /admin/hidden-instances`.
#[derive(Deserialize)]
struct Hidden {
    ids: Vec<String>,
}

async fn admin_hide_instances(State(s): State<AppState>, Json(hidden): Json<Hidden>) -> Response {
    s.lock().hidden_instances = hidden.ids.into_iter().collect();
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_blackhole_route(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    let mut cloud = s.lock();
    if !cloud.routes.contains_key(&name) {
        return not_found("route", &name);
    }
    cloud.forced_blackholes.insert(name);
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_add_cluster(State(s): State<AppState>, Json(c): Json<Cluster>) -> Response {
    let mut cloud = s.lock();
    cloud.clusters.retain(|x| x.name != c.name);
    cloud.clusters.push(c);
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_add_fault(State(s): State<AppState>, Json(f): Json<Fault>) -> Response {
    s.lock().faults.push(f);
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_clear_faults(State(s): State<AppState>) -> Response {
    s.lock().faults.clear();
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_stats(State(s): State<AppState>) -> Response {
    let cloud = s.lock();
    Json(serde_json::json!({
        "total": cloud.total_requests(),
        "unauthorized": cloud.unauthorized,
        "requests": cloud.requests,
    }))
    .into_response()
}

async fn admin_reset(State(s): State<AppState>) -> Response {
    s.lock().reset();
    StatusCode::NO_CONTENT.into_response()
}
