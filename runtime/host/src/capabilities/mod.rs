//! Everything a provider can reach, one module per capability:
//!
//! - [`http_egress`]: outbound HTTP, the only network path (allowlist, credentials, limits);
//! - [`http_client`]: the `wasm-ccm:http/client` import, a whole request through the
//!   same broker in one call (what the SDK sends with);
//! - [`logging`]: the `wasm-ccm:provider/logging` import, recorded with `tracing`;
//! - [`shared_cache`]: the `cache` import, a key/value store shared by a version's instances;
//! - [`events`]: the `events` import, Kubernetes Events through the embedder's
//!   [`events::EventSink`];
//! - [`deadline`]: the `deadline` import, the time left for the current call;
//! - [`annotations`]: the `annotations` import, annotations on a load-balancer call's
//!   Service through the embedder's [`annotations::AnnotationSink`];
//! - [`services`]: the `services` import, the cluster's LoadBalancer Services
//!   (read-only) from the embedder's [`services::ServiceSource`];
//! - [`compat`]: older contract versions' imports, answered by the current capabilities;
//! - [`wasi`]: the closed WASI context (no files, no environment, no sockets);
//! - [`memory_budget`]: `limits.memoryMiB`, over all the instance's linear memories and
//!   tables together.
//!
//! [`HostState`] is the data of each provider instance's `Store`, tying them together;
//! [`Shared`] is what all instances of one provider version share.

pub mod annotations;
pub mod compat;
pub mod deadline;
pub mod events;
pub mod http_client;
pub mod http_egress;
pub mod logging;
pub mod memory_budget;
pub mod services;
pub mod shared_cache;
pub mod wasi;

use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use events::ObjectRef;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::metrics::{ProviderLabel, ProviderMetrics};
use http_egress::{Egress, EgressHooks};
use memory_budget::MemoryBudget;

/// Host resources (requests, responses, bodies, header fields, streams, pollables) one
/// instance may hold at once; creating one more fails in the guest.
pub const MAX_RESOURCES: usize = 256;
/// The most memory one header-fields resource may use (roughly its bytes in memory).
pub const MAX_FIELDS_BYTES: usize = 64 << 10;

/// What the embedder plugs into the capabilities, each optional: where events and
/// annotations go, where the `services` import reads. Set on the loader
/// (`ProviderLoader::with_event_sink`, ...); every version it loads shares them.
#[derive(Clone, Default)]
pub struct Embedder {
    /// The `events` import's sink (none: logged only).
    pub events: Option<Arc<dyn events::EventSink>>,
    /// The `annotations` import's sink (none: logged only).
    pub annotations: Option<Arc<dyn annotations::AnnotationSink>>,
    /// The `services` import's source (none: `not-ready`).
    pub services: Option<Arc<dyn services::ServiceSource>>,
}

/// What every instance of one provider version shares.
pub struct Shared {
    /// The `cache` import's store.
    pub cache: shared_cache::Cache,
    /// The `events` import's sink and budget.
    pub events: events::Events,
    /// The `annotations` import's sink and the policy's prefixes.
    pub annotations: annotations::Annotations,
    /// The `services` import's source and the policy's annotation prefixes.
    pub services: services::Services,
}

impl Shared {
    /// The capabilities of the version labelled `label`: `embedder`'s plug-ins, the
    /// policy's cache size and Service annotation prefixes.
    pub fn new(
        embedder: &Embedder,
        policy: &crate::policy::Policy,
        label: &Arc<ProviderLabel>,
        metrics: &Arc<ProviderMetrics>,
    ) -> Self {
        let prefixes = policy.service_annotations.clone();
        Self {
            cache: shared_cache::Cache::new(
                policy.instance_limits.cache_bytes,
                label.clone(),
                metrics.clone(),
            ),
            events: events::Events::new(embedder.events.clone(), label.clone(), metrics.clone()),
            annotations: annotations::Annotations::new(
                embedder.annotations.clone(),
                prefixes.clone(),
            ),
            services: services::Services::new(embedder.services.clone(), prefixes),
        }
    }
}

/// The call an instance is running: what it is about and until when it may run.
#[derive(Debug, Default)]
pub(crate) struct CallScope {
    /// When the host ends the call.
    pub deadline: Option<Instant>,
    /// The objects the call is about (events land on them).
    pub objects: Vec<ObjectRef>,
    /// The annotations the call set on its Service, written when it returns.
    pub annotations: Vec<(String, String)>,
}

impl CallScope {
    /// Milliseconds left at `now` (0 once over or outside a call).
    pub fn remaining_ms(&self, now: Instant) -> u64 {
        self.deadline
            .map(|d| d.saturating_duration_since(now).as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The data of one provider instance's store.
pub struct HostState {
    pub(crate) provider: Arc<ProviderLabel>,
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) hooks: EgressHooks,
    pub(crate) table: ResourceTable,
    /// The store's resource limiter (`memoryMiB`, counts of instances, memories and
    /// tables), installed by `provider::pool::new_store`.
    pub(crate) limits: MemoryBudget,
    pub(crate) log: Arc<Mutex<logging::LogLimiter>>,
    pub(crate) metrics: Arc<ProviderMetrics>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) call: CallScope,
}

impl HostState {
    /// State for a new instance of `provider`, whose requests go through `egress`,
    /// whose linear memories and tables are capped at `memory_bytes` together, and
    /// which shares `shared` with the version's other instances.
    pub fn new(
        provider: Arc<ProviderLabel>,
        egress: &Arc<Egress>,
        memory_bytes: usize,
        metrics: &Arc<ProviderMetrics>,
        shared: &Arc<Shared>,
    ) -> Self {
        // One budget for the logging import, stdout and stderr of the instance.
        let log = Arc::new(Mutex::new(logging::LogLimiter::default()));
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_FIELDS_BYTES);
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        Self {
            wasi: wasi::closed_context(&provider, &log, metrics),
            http,
            hooks: egress.hooks(),
            table,
            limits: MemoryBudget::new(memory_bytes),
            log,
            metrics: metrics.clone(),
            provider,
            shared: shared.clone(),
            call: CallScope::default(),
        }
    }
}

impl HostState {
    /// Starts a call about `objects` that the host ends at `deadline`.
    pub(crate) fn begin_call(&mut self, deadline: Instant, objects: Vec<ObjectRef>) {
        self.call = CallScope {
            deadline: Some(deadline),
            objects,
            annotations: Vec::new(),
        };
        self.hooks.set_deadline(Some(deadline));
    }

    /// Ends the call: nothing of it is kept for the next.
    pub(crate) fn end_call(&mut self) {
        self.call = CallScope::default();
        self.hooks.set_deadline(None);
    }

    /// HTTP resources the instance holds now: header fields, requests, bodies,
    /// responses and their futures (WASI's own, such as a cached stdout stream, do not
    /// count: they do not pile up).
    pub fn held_http_resources(&mut self) -> usize {
        use wasmtime_wasi_http::FieldMap;
        use wasmtime_wasi_http::p2::body::{
            HostFutureTrailers, HostIncomingBody, HostOutgoingBody,
        };
        use wasmtime_wasi_http::p2::types::{
            HostFutureIncomingResponse, HostIncomingResponse, HostOutgoingRequest,
        };
        self.table
            .iter_mut()
            .filter(|entry| {
                entry.is::<FieldMap>()
                    || entry.is::<HostOutgoingRequest>()
                    || entry.is::<HostOutgoingBody>()
                    || entry.is::<HostFutureIncomingResponse>()
                    || entry.is::<HostIncomingResponse>()
                    || entry.is::<HostIncomingBody>()
                    || entry.is::<HostFutureTrailers>()
            })
            .count()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}
