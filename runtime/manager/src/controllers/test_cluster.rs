//! A cluster for the controllers' in-process tests: the API server double on 127.0.0.1
//! (watches, finalizers, the status subresource, injected conflicts) and a recording
//! cloud ([`crate::cloud::fake`]), with a controller running in the test's own runtime.
//! What a test asserts is what upstream's controller tests assert: the cloud calls
//! recorded, and the objects and events left in the API.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Node};
use kube::Api;
use kube::api::{ListParams, PostParams};
use tokio::task::JoinHandle;

use super::Context;
use super::node_informer::NodeInformer;
use crate::cloud::Cloud;
use crate::cloud::fake::{Calls, Switch};

/// How long a test waits for a condition before failing.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The API server double and a recording cloud; controllers started on it stop when
/// it is dropped.
pub struct TestCluster {
    pub api: kube_double::ApiServer,
    pub client: kube::Client,
    /// Every cloud call, in order.
    pub calls: Calls,
    /// The cloud the controllers take each reconcile's version from.
    pub cloud: Switch,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    ctx: Context,
}

impl TestCluster {
    /// Starts the double; `cloud` builds the first cloud version on the shared call log.
    /// The controllers reach the double over HTTP on 127.0.0.1.
    pub async fn start(cloud: impl FnOnce(&Calls) -> Arc<dyn Cloud>) -> Self {
        let api = Self::api().await;
        let config = kube::Config::new(api.url().parse().expect("the API server's URL"));
        let client = {
            wasm_ccm_host::tls::install_crypto_provider();
            kube::Client::try_from(config).expect("a client")
        };
        Self::with_client(api, client, cloud)
    }

    /// As [`Self::start`], but the controllers call the double in process, with no
    /// socket: for tests that pause tokio's clock (`#[tokio::test(start_paused =
    /// true)]`), which would otherwise jump to the next timer whenever a request waited
    /// for the socket.
    pub async fn in_memory(cloud: impl FnOnce(&Calls) -> Arc<dyn Cloud>) -> Self {
        let api = Self::api().await;
        let client = kube::Client::new(api.router(), "default");
        Self::with_client(api, client, cloud)
    }

    async fn api() -> kube_double::ApiServer {
        kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("the API server double")
    }

    fn with_client(
        api: kube_double::ApiServer,
        client: kube::Client,
        cloud: impl FnOnce(&Calls) -> Arc<dyn Cloud>,
    ) -> Self {
        let calls = Calls::default();
        let switch = Switch::new(cloud(&calls));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (ctx, informer) = context(client.clone(), switch.shared(), stopped);
        Self {
            api,
            client,
            calls,
            cloud: switch,
            stop,
            tasks: vec![tokio::spawn(informer)],
            ctx,
        }
    }

    /// Runs a controller: `run` gets the context and the shutdown signal.
    pub fn run<F>(&mut self, run: impl FnOnce(Context, tokio::sync::watch::Receiver<bool>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let task = run(self.ctx.clone(), self.stop.subscribe());
        self.tasks.push(tokio::spawn(task));
    }

    /// The controllers' context: the double's client, the cloud, the shared Nodes.
    pub fn context(&self) -> Context {
        self.ctx.clone()
    }

    /// Creates a Ready, initialized Node `name` (provider ID `fake://name`) and waits
    /// until the controllers' Node informer has it.
    pub async fn ready_node(&self, name: &str) {
        self.node(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"providerID": format!("fake://{name}")},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .await;
    }

    /// Creates the Node `node` (JSON) and waits until the controllers' Node informer
    /// has it.
    pub async fn node(&self, node: serde_json::Value) {
        let node: Node = serde_json::from_value(node).expect("a Node");
        let name = node.metadata.name.clone().expect("a named Node");
        Api::<Node>::all(self.client.clone())
            .create(&PostParams::default(), &node)
            .await
            .expect("the Node is created");
        let nodes = self.ctx.nodes.clone();
        wait_for(&format!("the informer to have Node {name}"), || {
            let listed: Vec<String> = nodes
                .list()
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            let found = listed.contains(&name);
            async move {
                if found {
                    Ok(())
                } else {
                    Err(format!("{listed:?}"))
                }
            }
        })
        .await
    }

    /// The calls recorded so far, as (version, call).
    pub fn taken(&self) -> Vec<(u64, &'static str)> {
        self.calls.taken()
    }

    /// The reasons of the events recorded about `name` in `default`.
    pub async fn reasons(&self, name: &str) -> Vec<String> {
        let events: Api<CoreEvent> = Api::namespaced(self.client.clone(), "default");
        events
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .expect("the events can be listed")
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Waits until `check` answers `Ok`, polling every 20 ms; after [`TIMEOUT`], panics
/// naming `what` and the last `Err` it gave.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// On paused time, `delay` is `want`: no shorter, and longer by no more than the
/// timers' rounding (the clock moves only to timers, so a retry comes at its timer's
/// instant).
pub fn about(delay: Duration, want: Duration) -> bool {
    delay >= want && delay < want + Duration::from_millis(5)
}

/// A context whose API server nobody answers at (events are logged as not recorded)
/// and whose Node informer never runs, for tests of what a controller asks the cloud.
pub fn context_without_api(cloud: crate::cloud::SharedCloud) -> Context {
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
    let client = {
        wasm_ccm_host::tls::install_crypto_provider();
        kube::Client::try_from(config).expect("a client")
    };
    context(client, cloud, stopped).0
}

/// The controllers' context on `client`, with the Node informer to run until `stopped`
/// turns true.
fn context(
    client: kube::Client,
    cloud: crate::cloud::SharedCloud,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> (Context, impl Future<Output = ()> + Send + 'static) {
    let (nodes, informer) = NodeInformer::new(client.clone(), stopped);
    let ctx = Context {
        client,
        cloud,
        metrics: Arc::new(crate::metrics::ControllerMetrics::register(
            &wasm_ccm_host::metrics::Metrics::new(),
            &super::node_lifecycle::guard::Answer::LABELS,
        )),
        instance: "in-process".into(),
        nodes,
        services: super::service::ServiceView::default(),
    };
    (ctx, informer)
}
