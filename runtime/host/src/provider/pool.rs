//! A small pool of initialized instances of one provider.
//!
//! A wasmtime `Store` runs one call at a time, and providers keep state between calls
//! (clients, caches), so each call borrows an initialized instance. The pool holds at
//! most `limits.poolSize` instances, which is also the provider's concurrency. An
//! instance that traps or times out is dropped, never returned; the next borrower
//! gets a fresh one from the `InstancePre` (microseconds with the pooling allocator).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::error::{ProviderError, TrapKind};
use super::{Guests, Indices};
use crate::capabilities::http_egress::Egress;
use crate::capabilities::{HostState, ObjectRef, Shared};
use crate::engine::WasmEngine;
use crate::metrics::{CallLabels, FunctionLabels, ProviderLabel, ProviderMetrics, TrapLabels};
use crate::policy::InstanceLimits;

/// One initialized instance.
pub(crate) struct Instance {
    pub store: Store<HostState>,
    pub guests: Guests,
}

/// A compiled component ready to instantiate.
pub(crate) struct Prepared {
    pub engine: WasmEngine,
    pub pre: InstancePre<HostState>,
    pub indices: Indices,
}

pub(crate) struct Pool {
    /// The `provider` label of its metrics and logs.
    pub label: Arc<ProviderLabel>,
    pub limits: InstanceLimits,
    engine: WasmEngine,
    pre: InstancePre<HostState>,
    indices: Indices,
    egress: Arc<Egress>,
    metrics: Arc<ProviderMetrics>,
    cloud_config: Arc<[u8]>,
    shared: Arc<Shared>,
    idle: Mutex<Vec<Instance>>,
    permits: Arc<Semaphore>,
}

impl Pool {
    pub fn new(
        label: Arc<ProviderLabel>,
        prepared: Prepared,
        egress: Arc<Egress>,
        metrics: Arc<ProviderMetrics>,
        limits: InstanceLimits,
        cloud_config: Arc<[u8]>,
        shared: Arc<Shared>,
    ) -> Self {
        Self {
            shared,
            permits: Arc::new(Semaphore::new(limits.pool_size)),
            idle: Mutex::new(Vec::with_capacity(limits.pool_size)),
            label,
            limits,
            engine: prepared.engine,
            pre: prepared.pre,
            indices: prepared.indices,
            egress,
            metrics,
            cloud_config,
        }
    }

    /// Counts a call and its latency.
    fn record(&self, interface: &str, function: &str, started: Instant, result: &str) {
        let provider = self.label.get().to_string();
        self.metrics
            .calls
            .get_or_create(&CallLabels {
                provider: provider.clone(),
                interface: interface.into(),
                function: function.into(),
                result: result.into(),
            })
            .inc();
        self.metrics
            .call_duration
            .get_or_create(&FunctionLabels {
                provider,
                interface: interface.into(),
                function: function.into(),
            })
            .observe(started.elapsed().as_secs_f64());
    }

    fn record_trap(&self, kind: TrapKind) {
        self.metrics
            .traps
            .get_or_create(&TrapLabels {
                provider: self.label.get().to_string(),
                kind: kind.as_str().into(),
            })
            .inc();
    }

    /// Counts a call that failed before reaching the guest (no instance could be made).
    pub fn record_unavailable(&self, interface: &str, function: &str, started: Instant) {
        self.record(interface, function, started, "unavailable");
    }

    /// What the version's instances share (cache, events).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The provider's egress, shared by its instances.
    pub fn egress(&self) -> &Arc<Egress> {
        &self.egress
    }

    /// Number of idle, initialized instances.
    pub fn idle(&self) -> usize {
        self.idle.lock().expect("pool lock").len()
    }

    /// Borrows an instance, creating and initializing one if none is idle. Waits when
    /// `poolSize` calls are already in flight.
    pub async fn acquire(self: &Arc<Self>) -> Result<Lease, ProviderError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the pool semaphore is never closed");
        let idle = self.idle.lock().expect("pool lock").pop();
        let instance = match idle {
            Some(instance) => instance,
            None => self.instantiate().await?,
        };
        Ok(Lease {
            instance: Some(instance),
            pool: self.clone(),
            _permit: permit,
        })
    }

    /// Returns an instance that finished its call normally.
    fn release(&self, instance: Instance) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < self.limits.pool_size {
            idle.push(instance);
        }
    }

    /// Creates an instance and runs `initialize` with the cloud config, under the
    /// call deadline.
    pub async fn instantiate(&self) -> Result<Instance, ProviderError> {
        let provider = self.label.get().to_string();
        let mut store = new_store(
            &self.engine,
            &self.label,
            &self.egress,
            &self.metrics,
            &self.limits,
            &self.shared,
        );
        let deadline = self.limits.call_timeout;
        let instance = tokio::time::timeout(deadline, self.pre.instantiate_async(&mut store))
            .await
            .map_err(|_| ProviderError::Timeout {
                provider: provider.clone(),
                function: "instantiate",
                after: deadline,
            })?
            .map_err(|source| ProviderError::Instantiate {
                provider: provider.clone(),
                source,
            })?;
        let guests = self
            .indices
            .load(&mut store, &instance)
            .map_err(|mismatch| ProviderError::Instantiate {
                provider: provider.clone(),
                source: mismatch.source,
            })?;
        store.set_epoch_deadline(WasmEngine::deadline_ticks(deadline));
        store
            .data_mut()
            .begin_call(std::time::Instant::now() + deadline, Vec::new());
        let result = tokio::time::timeout(
            deadline,
            guests.call_initialize(&mut store, &self.cloud_config),
        )
        .await;
        store.data_mut().end_call();
        match result {
            Err(_) => {
                self.record_trap(TrapKind::Deadline);
                Err(ProviderError::Timeout {
                    provider,
                    function: "initialize",
                    after: deadline,
                })
            }
            Ok(Err(trap)) => {
                let kind = TrapKind::classify(&trap);
                self.record_trap(kind);
                Err(ProviderError::Trap {
                    provider,
                    function: "initialize",
                    kind,
                    message: format!("{trap:#}"),
                })
            }
            Ok(Ok(Err(message))) => Err(ProviderError::Initialize {
                provider,
                message: crate::capabilities::logging::sanitize(&message),
            }),
            Ok(Ok(Ok(()))) => {
                // Nothing HTTP may outlive `initialize` either: kept responses would
                // hold memory the policy's worst case does not count.
                let held = store.data_mut().held_http_resources();
                if held > 0 {
                    return Err(ProviderError::Initialize {
                        provider,
                        message: format!(
                            "returned still holding {held} HTTP resources (requests, responses, \
                             bodies or fields); drop them before returning"
                        ),
                    });
                }
                Ok(Instance { store, guests })
            }
        }
    }
}

/// A store for one instance: memory limit, epoch deadline trap armed.
pub(crate) fn new_store(
    engine: &WasmEngine,
    provider: &Arc<ProviderLabel>,
    egress: &Arc<Egress>,
    metrics: &Arc<ProviderMetrics>,
    limits: &InstanceLimits,
    shared: &Arc<Shared>,
) -> Store<HostState> {
    let mut store = Store::new(
        engine.engine(),
        HostState::new(
            provider.clone(),
            egress,
            limits.memory_bytes,
            metrics,
            shared,
        ),
    );
    store.limiter(|state| &mut state.limits);
    store.epoch_deadline_trap();
    store.set_epoch_deadline(WasmEngine::deadline_ticks(limits.call_timeout));
    store
}

/// A borrowed instance. Dropping a lease without [`Lease::settle`] discards the
/// instance (used when a call was cancelled mid-flight).
pub(crate) struct Lease {
    instance: Option<Instance>,
    pool: Arc<Pool>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    /// The instance, with its epoch deadline armed for one call about `objects`.
    pub fn arm(&mut self, objects: Vec<ObjectRef>) -> (&mut Store<HostState>, &Guests, Duration) {
        let deadline = self.pool.limits.call_timeout;
        let instance = self.instance.as_mut().expect("lease holds an instance");
        instance
            .store
            .set_epoch_deadline(WasmEngine::deadline_ticks(deadline));
        instance
            .store
            .data_mut()
            .begin_call(std::time::Instant::now() + deadline, objects);
        (&mut instance.store, &instance.guests, deadline)
    }

    /// Classifies the outcome of a call, counts it, and returns the instance to the
    /// pool only if the guest returned normally.
    pub fn settle<T, E>(
        mut self,
        interface: &'static str,
        function: &'static str,
        started: Instant,
        outcome: Result<wasmtime::Result<Result<T, E>>, tokio::time::error::Elapsed>,
    ) -> Result<T, ProviderError>
    where
        E: Into<super::error::CloudError>,
    {
        if let Some(instance) = self.instance.as_mut() {
            // Written whatever the call returned, as upstream providers patch theirs.
            instance.store.data_mut().flush_annotations();
        }
        match outcome {
            Ok(Ok(result)) => {
                let mut instance = self.instance.take().expect("lease holds an instance");
                instance.store.data_mut().end_call();
                let held = instance.store.data_mut().held_http_resources();
                if held > 0 {
                    // Requests, responses, bodies or fields kept past the call would
                    // pile up across calls: the instance is not reused.
                    self.pool.record_trap(TrapKind::HeldResources);
                    tracing::warn!(
                        provider = &*self.pool.label.get(),
                        interface,
                        function,
                        held,
                        "provider returned still holding host resources; discarding the instance"
                    );
                } else {
                    self.pool.release(instance);
                }
                let result = result.map_err(|e| ProviderError::Cloud {
                    provider: self.pool.label.get().to_string(),
                    function,
                    error: e.into(),
                });
                let label = if result.is_ok() { "ok" } else { "cloud_error" };
                self.pool.record(interface, function, started, label);
                result
            }
            Ok(Err(trap)) => {
                let provider = self.pool.label.get().to_string();
                let kind = TrapKind::classify(&trap);
                self.pool.record_trap(kind);
                self.pool.record(interface, function, started, "trap");
                tracing::warn!(provider, interface, function, kind = kind.as_str(), error = %format!("{trap:#}"), "provider instance trapped; discarding it");
                Err(ProviderError::Trap {
                    provider,
                    function,
                    kind,
                    message: format!("{trap:#}"),
                })
            }
            Err(_) => {
                let provider = self.pool.label.get().to_string();
                let after = self.pool.limits.call_timeout;
                self.pool.record_trap(TrapKind::Deadline);
                self.pool.record(interface, function, started, "timeout");
                tracing::warn!(
                    provider,
                    interface,
                    function,
                    ?after,
                    "provider call timed out; discarding the instance"
                );
                Err(ProviderError::Timeout {
                    provider,
                    function,
                    after,
                })
            }
        }
    }
}
