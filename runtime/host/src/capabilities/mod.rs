//! Everything a provider can reach, one module per capability:
//!
//! - [`http_egress`]: outbound HTTP, the only network path (allowlist, credentials, limits);
//! - [`logging`]: the `wasm-ccm:provider/logging` import, recorded with `tracing`;
//! - [`wasi`]: the closed WASI context (no files, no environment, no sockets).
//!
//! [`HostState`] is the data of each provider instance's `Store`, tying them together.

pub mod http_egress;
pub mod logging;
pub mod wasi;

use std::sync::{Arc, Mutex};

use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::metrics::ProviderMetrics;
use http_egress::{Egress, EgressHooks};

/// The data of one provider instance's store.
pub struct HostState {
    pub(crate) provider: Arc<str>,
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) hooks: EgressHooks,
    pub(crate) table: ResourceTable,
    pub(crate) limits: StoreLimits,
    pub(crate) log: Arc<Mutex<logging::LogLimiter>>,
    pub(crate) metrics: Arc<ProviderMetrics>,
}

impl HostState {
    /// State for a new instance of `provider`, whose requests go through `egress` and
    /// whose memory is capped at `memory_bytes`.
    pub fn new(
        provider: Arc<str>,
        egress: &Arc<Egress>,
        memory_bytes: usize,
        metrics: &Arc<ProviderMetrics>,
    ) -> Self {
        // One budget for the logging import, stdout and stderr of the instance.
        let log = Arc::new(Mutex::new(logging::LogLimiter::default()));
        Self {
            wasi: wasi::closed_context(&provider, &log, metrics),
            http: WasiHttpCtx::new(),
            hooks: egress.hooks(),
            table: ResourceTable::new(),
            limits: wasmtime::StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .trap_on_grow_failure(false)
                .build(),
            log,
            metrics: metrics.clone(),
            provider,
        }
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
