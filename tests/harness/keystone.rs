//! A real Keystone (tests/keystone-peer) on 127.0.0.1 with an OpenStack service
//! double in its catalog that validates every token with it, and the `hostile`
//! fixture loaded under a Keystone rule to send requests and print what it gets back.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use keystone_peer::{Keystone, Settings};
use wasm_ccm_host::provider::{Provider, ProviderLoader};

use crate::types::InstanceInfo;
use crate::{ProviderDir, TOKEN, act, loader};

/// An OpenStack service double: every request's `X-Auth-Token` is validated with
/// Keystone (401 as the services answer otherwise; a path ending `/always-401` is
/// answered 401 whatever the token); the tokens it accepted, and every request it
/// received (`METHOD path?query`), are kept.
pub struct Service {
    pub url: String,
    accepted: Arc<Mutex<Vec<String>>>,
    received: Arc<Mutex<Vec<String>>>,
    _task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct ServiceState {
    keystone: Arc<Keystone>,
    accepted: Arc<Mutex<Vec<String>>>,
    received: Arc<Mutex<Vec<String>>>,
}

async fn serve(
    State(state): State<ServiceState>,
    method: axum::http::Method,
    uri: Uri,
    headers: HeaderMap,
) -> (StatusCode, String) {
    state
        .received
        .lock()
        .unwrap()
        .push(format!("{method} {uri}"));
    if uri.path().ends_with("/always-401") {
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"error": {"code": 401, "title": "Unauthorized"}}"#.into(),
        );
    }
    let Some(token) = headers.get("x-auth-token").and_then(|v| v.to_str().ok()) else {
        return (StatusCode::UNAUTHORIZED, r#"{"error": "no token"}"#.into());
    };
    if !state.keystone.validate(token).await.unwrap_or(false) {
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"error": {"code": 401, "title": "Unauthorized"}}"#.into(),
        );
    }
    state.accepted.lock().unwrap().push(token.to_owned());
    (StatusCode::OK, format!(r#"{{"path": "{}"}}"#, uri.path()))
}

impl Service {
    /// Serves on 127.0.0.1, validating tokens with `keystone`.
    pub async fn start(keystone: Arc<Keystone>) -> Self {
        Self::start_on(keystone, "127.0.0.1:0").await
    }

    /// Serves on `addr` (an address bound in a private network namespace), validating
    /// tokens with `keystone`; its `url` is `http://<addr>`.
    pub async fn start_on(keystone: Arc<Keystone>, addr: &str) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(ServiceState {
                keystone,
                accepted: accepted.clone(),
                received: received.clone(),
            });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            accepted,
            received,
            _task: task,
        }
    }

    /// The tokens it accepted, in order.
    pub fn accepted(&self) -> Vec<String> {
        self.accepted.lock().unwrap().clone()
    }

    /// Every request it received, `METHOD path?query`, in order.
    pub fn received(&self) -> Vec<String> {
        self.received.lock().unwrap().clone()
    }
}

/// A project, a user with the member role, and Nova's endpoint in the catalog at the
/// service double (`<url>/compute/v2.1`); a second, internal one the rules do not allow.
pub struct Cloud {
    /// The real Keystone.
    pub keystone: Arc<Keystone>,
    /// The service double in its catalog.
    pub service: Service,
    /// The user's ID.
    pub user_id: String,
    /// The project's ID.
    pub project_id: String,
}

/// The user the tests log in as.
pub const USER: &str = "kubernetes-ccm";
/// Its password.
pub const PASSWORD: &str = "ccm-password-0c1d";
/// Its project.
pub const PROJECT: &str = "kubernetes";

impl Cloud {
    /// Keystone, the project, the user and the catalog.
    pub async fn start(settings: Settings) -> Self {
        let keystone = Arc::new(Keystone::start_with(settings).await.unwrap());
        let project = keystone.create_project(PROJECT).await;
        let user_id = keystone.create_user(USER, PASSWORD, &project).await;
        let service = Service::start(keystone.clone()).await;
        keystone
            .register_endpoint(
                "compute",
                "nova",
                "public",
                &format!("{}/compute/v2.1", service.url),
            )
            .await;
        keystone
            .register_endpoint(
                "compute",
                "nova",
                "internal",
                &format!("{}/internal", service.url),
            )
            .await;
        Self {
            keystone,
            service,
            user_id,
            project_id: project,
        }
    }

    /// The hostile fixture under a policy with `keystone` as the only rule and nothing
    /// in `allowedOutboundHosts`; `secret` is written to `secret`.
    pub async fn provider(&self, keystone: &str, secret: &str) -> Loaded {
        self.provider_with_file(keystone, "secret", secret).await
    }

    /// [`Self::provider`], the Secret file named `file`.
    pub async fn provider_with_file(&self, keystone: &str, file: &str, secret: &str) -> Loaded {
        let policy = format!(
            "credentials:\n  - destination: {url}\n    keystone:\n      authUrl: {url}/v3\n      region: RegionOne\n{keystone}limits:\n  callTimeout: 20s\n  poolSize: 1\n",
            url = self.keystone.url(),
        );
        let dir = ProviderDir::new("fixture_hostile", "hostile", &policy, TOKEN);
        std::fs::write(dir.dir.path().join(file), secret).unwrap();
        let loader = loader();
        let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
        Loaded {
            dir,
            provider,
            loader,
        }
    }

    /// A new application credential of the user: its ID and secret.
    pub async fn application_credential(&self, name: &str) -> (String, String) {
        self.keystone
            .create_application_credential(USER, &self.user_id, PASSWORD, PROJECT, name)
            .await
    }
}

/// The hostile fixture under a Keystone rule, with its loader (and metrics).
pub struct Loaded {
    /// Its directory: the component, the policy and the Secret files.
    pub dir: ProviderDir,
    /// The provider.
    pub provider: Provider,
    /// Its loader (and metrics).
    pub loader: ProviderLoader,
}

impl Loaded {
    /// `wasm_ccm_credential_logins_total` for `result`.
    pub fn logins(&self, result: &str) -> u64 {
        crate::metric(
            &self.loader.metrics().encode(),
            &format!(
                r#"wasm_ccm_credential_logins_total{{provider="hostile",kind="keystone",result="{result}"}} "#
            ),
        ) as u64
    }
}

/// The hostile fixture's `fetch` of `url`.
pub async fn get(provider: &Provider, url: &str) -> Result<InstanceInfo, String> {
    act(
        provider,
        &[("hostile/action", "fetch"), ("hostile/url", url)],
    )
    .await
    .map_err(|e| e.to_string())
}
