//! The wasmtime [`Engine`] shared by every provider: pooling allocator, epoch
//! interruption for call deadlines, and async support so guest HTTP waits never block
//! a thread; with [`EngineSettings::function_cache`], Cranelift's incremental cache
//! ([`function_cache`]) so a new provider version recompiles only what changed.

pub mod function_cache;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use function_cache::FunctionCache;

/// How often the epoch ticker advances the engine's epoch. Call deadlines are
/// expressed in these ticks, so this is the granularity of a deadline.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Linear memories one component instance may define in the pooling allocator: one
/// per core module instance it is composed of (the pool gives a core module one,
/// wasmtime's default `max_memories_per_module`; without the pool, multi-memory lets a
/// module define several). More memories are not more memory: a policy's `memoryMiB`
/// counts all of them together ([`crate::capabilities::memory_budget`]).
pub const MAX_MEMORIES_PER_COMPONENT: u32 = 4;

/// Engine-wide limits. Per-provider limits (from the provider policy) must fit inside.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Upper bound on any single guest linear memory (the pooling allocator's slot),
    /// and so on a policy's `memoryMiB`, which all the memories and tables of an
    /// instance share.
    pub max_memory_bytes: usize,
    /// How many guest instances may exist at once across all providers.
    pub max_instances: u32,
    /// Use the pooling allocator (fast instantiation). Falls back to on-demand
    /// allocation when the pool cannot be reserved.
    pub pooling: bool,
    /// Keep compiled functions for the next compilation ([`function_cache`]): for a
    /// process that loads new versions of a provider (hot swap).
    pub function_cache: bool,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            max_memory_bytes: 512 << 20,
            max_instances: 64,
            pooling: true,
            function_cache: false,
        }
    }
}

/// Errors building the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime rejected the engine configuration.
    #[error("cannot create the WebAssembly engine: {0}")]
    Create(#[source] wasmtime::Error),
}

/// A configured engine plus the background thread that advances its epoch.
///
/// Dropping the last clone stops the ticker.
#[derive(Clone)]
pub struct WasmEngine {
    engine: Engine,
    pooling: bool,
    max_memory_bytes: usize,
    function_cache: Option<Arc<FunctionCache>>,
    _ticker: Arc<EpochTicker>,
}

impl WasmEngine {
    /// Builds the engine. If the pooling allocator cannot be set up (for example in a
    /// process with a small virtual address space limit) it falls back to on-demand
    /// allocation and logs a warning.
    pub fn new(settings: &EngineSettings) -> Result<Self, EngineError> {
        let function_cache = settings
            .function_cache
            .then(|| Arc::new(FunctionCache::default()));
        let config = |pooling: bool| {
            let mut config = config(settings, pooling);
            if let Some(cache) = &function_cache {
                config
                    .enable_incremental_compilation(cache.clone())
                    .map_err(EngineError::Create)?;
            }
            Ok::<_, EngineError>(config)
        };
        let (engine, pooling) = if settings.pooling {
            match Engine::new(&config(true)?) {
                Ok(engine) => (engine, true),
                Err(err) => {
                    tracing::warn!(error = %err, "pooling allocator unavailable; using on-demand instance allocation");
                    (
                        Engine::new(&config(false)?).map_err(EngineError::Create)?,
                        false,
                    )
                }
            }
        } else {
            (
                Engine::new(&config(false)?).map_err(EngineError::Create)?,
                false,
            )
        };
        let ticker = EpochTicker::start(engine.clone());
        Ok(Self {
            engine,
            pooling,
            max_memory_bytes: settings.max_memory_bytes,
            function_cache,
            _ticker: Arc::new(ticker),
        })
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether instances come from the pooling allocator.
    pub fn is_pooling(&self) -> bool {
        self.pooling
    }

    /// The compiled-function cache, when [`EngineSettings::function_cache`] is on.
    pub fn function_cache(&self) -> Option<&Arc<FunctionCache>> {
        self.function_cache.as_ref()
    }

    /// The largest `memoryMiB` a policy may ask for: one linear memory may take all of
    /// it, and all of an instance's memories and tables together no more.
    pub fn max_memory_bytes(&self) -> usize {
        self.max_memory_bytes
    }

    /// Converts a call deadline to epoch ticks (at least one).
    pub fn deadline_ticks(timeout: Duration) -> u64 {
        (timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64
    }
}

fn config(settings: &EngineSettings, pooling: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    if pooling {
        let mut pool = PoolingAllocationConfig::default();
        let instances = settings.max_instances;
        pool.total_component_instances(instances)
            // A Rust guest is a few core modules (the program and WASI adapters).
            .total_core_instances(instances * 8)
            .total_memories(instances * 2)
            .total_tables(instances * 8)
            .total_stacks(instances)
            .max_memory_size(settings.max_memory_bytes)
            .max_memories_per_component(MAX_MEMORIES_PER_COMPONENT)
            .max_tables_per_component(16)
            .max_core_instances_per_component(16)
            .max_component_instance_size(1 << 20)
            .max_core_instance_size(1 << 20);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch thread");
        Self { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_ticks_round_down_but_never_zero() {
        assert_eq!(WasmEngine::deadline_ticks(Duration::from_millis(1)), 1);
        assert_eq!(WasmEngine::deadline_ticks(Duration::from_millis(10)), 1);
        assert_eq!(WasmEngine::deadline_ticks(Duration::from_secs(1)), 100);
    }

    #[test]
    fn engine_builds_with_pooling() {
        let engine = WasmEngine::new(&EngineSettings::default()).unwrap();
        assert!(engine.is_pooling());
    }
}
