//! A simulated cloud: a small REST API for instances, load balancers and routes, with
//! bearer-token auth and an admin API to change the world and inject faults.
//!
//! It is test and demo infrastructure: integration tests, benchmarks and
//! `wasm-ccm playground` run it on 127.0.0.1, and the reference provider in
//! `guests/reference` speaks to it. The API is documented in this crate's README.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use sim_cloud::{SimCloud, model::NewInstance};
//!
//! let cloud = SimCloud::start("127.0.0.1:0", "secret-token").await?;
//! let node = cloud.with_state(|s| s.create_instance(NewInstance::named("node-1")));
//! println!("{} serves {}", cloud.url(), node.id);
//! # Ok(()) }
//! ```

pub mod api;
pub mod model;
pub mod state;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use state::CloudState;

/// A running simulated cloud. Stops when dropped.
pub struct SimCloud {
    addr: SocketAddr,
    token: String,
    cloud: Arc<Mutex<CloudState>>,
    server: JoinHandle<()>,
}

impl SimCloud {
    /// Binds `addr` (use port 0 for any free port) and serves until dropped. Requests
    /// under `/v1` need `Authorization: Bearer <token>`.
    pub async fn start(addr: &str, token: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let cloud = Arc::new(Mutex::new(CloudState::default()));
        let app = api::router(api::AppState {
            cloud: cloud.clone(),
            token: token.into(),
        });
        let server = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(error = %err, "simulated cloud server stopped");
            }
        });
        Ok(Self {
            addr,
            token: token.into(),
            cloud,
            server,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bearer token the API requires.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Runs `f` on the cloud's state (in-process admin access).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut CloudState) -> R) -> R {
        f(&mut self.cloud.lock().expect("cloud state lock"))
    }

    /// Requests served under `/v1` so far, authorized or not.
    pub fn total_requests(&self) -> u64 {
        self.with_state(|s| s.total_requests())
    }
}

impl Drop for SimCloud {
    fn drop(&mut self) {
        self.server.abort();
    }
}
