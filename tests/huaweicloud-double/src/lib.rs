//! A loopback double of the Huawei Cloud APIs a cloud-controller-manager calls, for
//! tests and the playground: ECS ([`ecs`]: servers in detail and their interfaces), the
//! shared load balancer API v2 ([`elb`]: load balancers, listeners, pools, members and
//! health monitors, with `PENDING_CREATE` → `ACTIVE` and 409 while busy) and the VPC
//! service ([`vpc`]: EIPs under `/v1/{project_id}/publicips`, bound to a port and
//! unbound, and subnets), with the JSON shapes of the official SDKs' models, real
//! status codes and error bodies, and pagination.
//!
//! As in the real cloud, where each service has its own host
//! (`ecs.<region>.myhuaweicloud.com`, `elb.…`, `vpc.…`), each service is served on its
//! own loopback port ([`HuaweiCloudDouble::endpoint`]); they share one world
//! ([`State`]). Every request must carry a valid AK/SK signature (`SDK-HMAC-SHA256`,
//! [`signature`]) by one of the double's keys and name the keys' project, or API
//! Gateway's 401 is answered; every request, accepted or refused, is kept in the
//! [journal](HuaweiCloudDouble::journal), and every answer carries a `Date` from the
//! double's clock (which a test may set off, [`HuaweiCloudDouble::set_clock_offset`]).
//!
//! # Where the double is a guess
//!
//! The shapes follow the official SDKs' models; the error codes and messages are the
//! documented ones where documentation was found (API Gateway's `APIGW.0301` messages,
//! `APIGW.0101`, ECS's `Ecs.0114`, the shared ELB's `ELB.0002`/`ELB.9805`/`ELB.9800`/
//! `ELB.6200`/`ELB.9808`/`ELB.1101`, the VPC service's `VPC.0202`/`VPC.0504`/
//! `VPC.0007`). These are this double's choices: the message for an expired
//! `X-Sdk-Date` (modelled on API Gateway's app-authentication one: `... verify aksk
//! signature fail, signature expired, signature time:<date>,server time:<date>`); ECS's
//! answer to another project in the path (API Gateway's 403 `APIGW.0302`); `Ecs.0005`
//! for a bad ECS query; the EIP service's `VPC.0501` (malformed request) and
//! `VPC.0514` (port not found or taken); `ELB.9899` with neutron-lbaas' wording for
//! the shared ELB's 409s and validation errors; and `PENDING_*` lasting a number of
//! reads rather than a time.
//!
//! ```no_run
//! # async fn demo() {
//! use huaweicloud_double::{HuaweiCloudDouble, Key, Service, Settings, state::NewServer};
//!
//! let mut settings = Settings::new("0123456789abcdef0123456789abcdef", "ap-southeast-1");
//! settings.keys.push(Key::new("AK-EXAMPLE", "SK-EXAMPLE"));
//! let cloud = HuaweiCloudDouble::start(settings).await.unwrap();
//! let server = cloud.with_state(|s| s.add_server(NewServer::named("node-1", "192.168.0.11")));
//! println!("{} serves {}", cloud.endpoint(Service::Ecs), server.id);
//! // ... run the code under test against the three endpoints, then:
//! for call in cloud.journal() {
//!     println!("{:?} {} {} -> {}", call.service, call.method, call.target, call.status);
//! }
//! # }
//! ```

// Handlers' helpers return the error answer itself (axum's idiom); it is large.
#![allow(clippy::result_large_err)]
#![recursion_limit = "256"]

pub mod clock;
pub mod ecs;
pub mod elb;
mod gateway;
pub mod query;
pub mod signature;
pub mod state;
pub mod vpc;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

pub use state::State;

/// One of the three services, each on its own port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Elastic Cloud Server (`ecs.<region>.myhuaweicloud.com`).
    Ecs,
    /// Elastic Load Balance, the shared load balancers' API v2 (`elb.…`).
    Elb,
    /// Virtual Private Cloud: EIPs and subnets (`vpc.…`).
    Vpc,
}

impl Service {
    /// The three services.
    pub const ALL: [Service; 3] = [Service::Ecs, Service::Elb, Service::Vpc];

    /// The service's name in its host (`ecs`, `elb`, `vpc`).
    pub fn name(self) -> &'static str {
        match self {
            Service::Ecs => "ecs",
            Service::Elb => "elb",
            Service::Vpc => "vpc",
        }
    }
}

/// An access key: its ID (AK), secret (SK) and, for a temporary key, its security
/// token. Every key belongs to the double's project.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub security_token: Option<String>,
}

impl Key {
    /// A permanent key.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            security_token: None,
        }
    }

    /// A temporary key, whose requests must carry (and sign) `X-Security-Token`.
    pub fn temporary(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        security_token: impl Into<String>,
    ) -> Self {
        Self {
            security_token: Some(security_token.into()),
            ..Self::new(access_key_id, secret_access_key)
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// How the double starts.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The project every key belongs to: the `{project_id}` of every path.
    pub project_id: String,
    /// The region (`ap-southeast-1`, ...): availability zones are named after it.
    pub region: String,
    /// The keys whose signatures are accepted (more may be added, and removed, later).
    pub keys: Vec<Key>,
    /// How many reads of a new load balancer still see it `PENDING_CREATE` (or
    /// `PENDING_UPDATE`) before it is `ACTIVE` ([`State::pending_reads`]).
    pub pending_reads: u32,
}

impl Settings {
    /// `project_id` in `region`, no keys, and a new load balancer `ACTIVE` from the second
    /// read on (`pending_reads` 1).
    pub fn new(project_id: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            project_id: project_id.into(),
            region: region.into(),
            keys: Vec::new(),
            pending_reads: 1,
        }
    }
}

/// A request the double received, and how it was answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub service: Service,
    pub method: String,
    /// The path and query exactly as received.
    pub target: String,
    /// Every header as received, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The answer's status code.
    pub status: u16,
    /// Why the request was refused before reaching the service (a signature, key, date or
    /// project the gateway refuses), if it was.
    pub refused: Option<String>,
}

impl Recorded {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        signature::header(&self.headers, name)
    }
}

/// What the gateway in front of the services keeps: the keys and the journal.
pub(crate) struct Gate {
    pub(crate) project_id: String,
    keys: Mutex<Vec<Key>>,
    journal: Mutex<Vec<Recorded>>,
    requests: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Gate {
    pub(crate) fn keys(&self) -> Vec<Key> {
        lock(&self.keys).clone()
    }

    pub(crate) fn record(&self, recorded: Recorded) {
        lock(&self.journal).push(recorded);
    }

    /// A new request ID (32 hex digits, as API Gateway's).
    pub(crate) fn request_id(&self) -> String {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{:016x}{n:016x}", 0x5eed_cafe_u64)
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct Shared {
    pub state: Arc<Mutex<State>>,
    pub(crate) gate: Arc<Gate>,
}

impl Shared {
    /// Runs `f` on the state.
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut lock(&self.state))
    }
}

/// A running double: three listeners on 127.0.0.1, stopped when dropped.
pub struct HuaweiCloudDouble {
    settings: Settings,
    shared: Shared,
    addrs: Vec<(Service, SocketAddr)>,
    servers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for HuaweiCloudDouble {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
    }
}

impl HuaweiCloudDouble {
    /// Serves each service on a free port of 127.0.0.1.
    pub async fn start(settings: Settings) -> std::io::Result<Self> {
        let state = State::new(
            &settings.project_id,
            &settings.region,
            settings.pending_reads,
        );
        let shared = Shared {
            state: Arc::new(Mutex::new(state)),
            gate: Arc::new(Gate {
                project_id: settings.project_id.clone(),
                keys: Mutex::new(settings.keys.clone()),
                journal: Mutex::new(Vec::new()),
                requests: AtomicU64::new(0),
            }),
        };
        let mut double = Self {
            settings,
            shared: shared.clone(),
            addrs: Vec::new(),
            servers: Vec::new(),
        };
        for service in Service::ALL {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            double.addrs.push((service, listener.local_addr()?));
            let routes = match service {
                Service::Ecs => ecs::router(),
                Service::Elb => elb::router(),
                Service::Vpc => vpc::router(),
            };
            let app = gateway::wrap(service, routes, shared.clone());
            double.servers.push(tokio::spawn(async move {
                if let Err(err) = axum::serve(listener, app).await {
                    tracing::error!(error = %err, service = service.name(), "Huawei Cloud double stopped");
                }
            }));
        }
        Ok(double)
    }

    /// `http://127.0.0.1:<port>` of `service`.
    pub fn endpoint(&self, service: Service) -> String {
        let addr = self
            .addrs
            .iter()
            .find(|(s, _)| *s == service)
            .map(|(_, a)| *a)
            .expect("every service is served");
        format!("http://{addr}")
    }

    /// A wasm-ccm provider policy with a `huaweicloud` rule for a wildcard destination
    /// (deploy/huaweicloud's, parsed), made for this double: the rule once per
    /// service, each for the service's endpoint and naming its `service` (a destination
    /// of one host), the keys, project and `allowedActions` unchanged, and the
    /// endpoints as `allowedOutboundHosts`.
    pub fn policy_for(&self, documented: &Value) -> Value {
        let rule = &documented["credentials"][0];
        let mut rules = Vec::new();
        let mut hosts = Vec::new();
        for service in Service::ALL {
            let endpoint = self.endpoint(service);
            let mut rule = rule.clone();
            rule["destination"] = Value::String(endpoint.clone());
            if let Some(kind) = rule["huaweicloud"].as_object_mut() {
                kind.remove("services");
                kind.insert("service".into(), Value::String(service.name().into()));
            }
            rules.push(rule);
            hosts.push(Value::String(endpoint));
        }
        let mut policy = documented.clone();
        policy["credentials"] = Value::Array(rules);
        policy["allowedOutboundHosts"] = Value::Array(hosts);
        policy
    }

    /// Runs `f` on the world.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.shared.with(f)
    }

    /// Accepts `key`'s signatures from now on (replacing a key with the same ID: a
    /// rotated secret).
    pub fn add_key(&self, key: Key) {
        let mut keys = lock(&self.shared.gate.keys);
        keys.retain(|k| k.access_key_id != key.access_key_id);
        keys.push(key);
    }

    /// Refuses the key `access_key_id` from now on.
    pub fn remove_key(&self, access_key_id: &str) {
        lock(&self.shared.gate.keys).retain(|k| k.access_key_id != access_key_id);
    }

    /// Sets the double's clock `seconds` off the host's (positive: ahead): what
    /// `X-Sdk-Date` is checked against, what answers' `Date` says, and when things are
    /// created.
    pub fn set_clock_offset(&self, seconds: i64) {
        self.shared.with(|s| s.clock_offset = seconds);
    }

    /// Every request received so far, in order.
    pub fn journal(&self) -> Vec<Recorded> {
        lock(&self.shared.gate.journal).clone()
    }

    /// The project every key belongs to.
    pub fn project_id(&self) -> &str {
        &self.settings.project_id
    }

    /// The region.
    pub fn region(&self) -> &str {
        &self.settings.region
    }
}

/// A JSON answer.
pub(crate) fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}
