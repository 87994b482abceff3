//! Cranelift's incremental compilation cache, in memory: each function compiled for
//! a provider is kept under the hash of its code (independent of where it sits in the
//! module), so a new version of a provider that changed a few functions recompiles
//! only those. A hot swap's compile time then follows the size of the change, not of
//! the provider.
//!
//! Kept in this process's memory only (never on disk: an entry is machine code the
//! process would run). Entries belong to the compilation that last used them; after
//! each compilation, entries unused by it and by the one before are dropped, so the
//! cache holds at most the functions of the serving version and of the version
//! being loaded. It never grows past [`FunctionCache::MAX_BYTES`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use wasmtime::CacheStore;

use crate::metrics::Metrics;

/// Labels of `wasm_ccm_compiled_functions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    /// `reused` (from the cache) or `compiled`.
    result: &'static str,
}

/// One compiled function.
#[derive(Debug)]
struct Entry {
    /// The compilation that last used it.
    generation: u64,
    bytes: Vec<u8>,
}

/// What one compilation found in the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Functions taken from the cache.
    pub reused: u64,
    /// Functions compiled (not in the cache).
    pub compiled: u64,
}

/// The cache; [`crate::engine::WasmEngine`] hands it to Cranelift.
#[derive(Debug, Default)]
pub struct FunctionCache {
    entries: Mutex<HashMap<Vec<u8>, Entry>>,
    bytes: AtomicU64,
    generation: AtomicU64,
    reused: AtomicU64,
    compiled: AtomicU64,
    functions: Family<ResultLabel, Counter>,
    size_gauge: Gauge,
}

impl FunctionCache {
    /// The most the cache holds; past it new functions are not kept.
    pub const MAX_BYTES: u64 = 64 << 20;

    /// Registers `wasm_ccm_compiled_functions_total{result}` and
    /// `wasm_ccm_function_cache_bytes` in `metrics`.
    pub fn register(&self, metrics: &Metrics) {
        metrics.register(
            "compiled_functions",
            "Functions of provider components compiled by Cranelift (compiled) or taken from the in-memory cache of the previous versions' functions (reused)",
            self.functions.clone(),
        );
        metrics.register(
            "function_cache_bytes",
            "Bytes of compiled functions kept for the next provider version's compilation",
            self.size_gauge.clone(),
        );
        for result in ["reused", "compiled"] {
            let _ = self.functions.get_or_create(&ResultLabel { result });
        }
    }

    /// Starts a compilation: entries it uses belong to it.
    pub fn begin(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.reused.store(0, Ordering::SeqCst);
        self.compiled.store(0, Ordering::SeqCst);
    }

    /// Ends a compilation: drops entries neither it nor the one before used, and
    /// says how many functions it reused and compiled.
    pub fn end(&self) -> CompileStats {
        let current = self.generation.load(Ordering::SeqCst);
        let mut entries = self.lock();
        entries.retain(|_, entry| entry.generation + 1 >= current);
        let bytes = entries.values().map(|e| e.bytes.len() as u64).sum();
        self.bytes.store(bytes, Ordering::SeqCst);
        self.size_gauge.set(bytes as i64);
        let stats = CompileStats {
            reused: self.reused.load(Ordering::SeqCst),
            compiled: self.compiled.load(Ordering::SeqCst),
        };
        self.functions
            .get_or_create(&ResultLabel { result: "reused" })
            .inc_by(stats.reused);
        self.functions
            .get_or_create(&ResultLabel { result: "compiled" })
            .inc_by(stats.compiled);
        stats
    }

    /// The bytes held.
    pub fn size(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let generation = self.generation.load(Ordering::SeqCst);
        let mut entries = self.lock();
        match entries.get_mut(key) {
            Some(entry) => {
                entry.generation = generation;
                self.reused.fetch_add(1, Ordering::Relaxed);
                Some(Cow::Owned(entry.bytes.clone()))
            }
            None => {
                self.compiled.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let size = value.len() as u64;
        if self.bytes.load(Ordering::SeqCst) + size > Self::MAX_BYTES {
            return false;
        }
        let generation = self.generation.load(Ordering::SeqCst);
        self.bytes.fetch_add(size, Ordering::SeqCst);
        let previous = self.lock().insert(
            key.to_vec(),
            Entry {
                generation,
                bytes: value,
            },
        );
        if let Some(previous) = previous {
            self.bytes
                .fetch_sub(previous.bytes.len() as u64, Ordering::SeqCst);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_the_two_last_compilations_are_kept() {
        let cache = FunctionCache::default();
        cache.begin();
        assert!(cache.get(b"a").is_none());
        cache.insert(b"a", vec![1; 10]);
        cache.insert(b"b", vec![2; 10]);
        assert_eq!(
            cache.end(),
            CompileStats {
                reused: 0,
                compiled: 1
            }
        );
        cache.begin();
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1u8; 10][..]));
        cache.insert(b"c", vec![3; 10]);
        assert_eq!(cache.end().reused, 1);
        assert_eq!(cache.size(), 30);
        // A third compilation using only c: b (last used two compilations ago) goes.
        cache.begin();
        assert!(cache.get(b"c").is_some());
        cache.end();
        assert!(cache.get(b"b").is_none());
        assert!(
            cache.get(b"a").is_some(),
            "a was used by the second compilation"
        );
    }

    #[test]
    fn the_cache_never_grows_past_its_limit() {
        let cache = FunctionCache::default();
        cache.begin();
        assert!(cache.insert(b"big", vec![0; FunctionCache::MAX_BYTES as usize]));
        assert!(!cache.insert(b"more", vec![0; 1]));
        assert_eq!(cache.size(), FunctionCache::MAX_BYTES);
    }
}
