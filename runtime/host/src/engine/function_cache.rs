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
    state: Mutex<State>,
    /// Held for a whole compilation: compilations take turns, so each one's entries
    /// and counts are its own.
    compiling: Mutex<()>,
    functions: Family<ResultLabel, Counter>,
    size_gauge: Gauge,
}

/// The entries and the current compilation's counts, changed under one lock.
#[derive(Debug, Default)]
struct State {
    entries: HashMap<Vec<u8>, Entry>,
    bytes: u64,
    generation: u64,
    reused: u64,
    compiled: u64,
}

/// A compilation in progress; [`Compilation::end`] ends it.
#[must_use = "end the compilation to drop stale entries and count it"]
pub struct Compilation<'a> {
    cache: &'a FunctionCache,
    _turn: std::sync::MutexGuard<'a, ()>,
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

    /// Starts a compilation (waiting for one in progress to end): entries it uses
    /// belong to it.
    pub fn begin(&self) -> Compilation<'_> {
        let turn = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
        let mut state = self.lock();
        state.generation += 1;
        state.reused = 0;
        state.compiled = 0;
        Compilation {
            cache: self,
            _turn: turn,
        }
    }

    /// The bytes held.
    pub fn size(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Compilation<'_> {
    /// Ends the compilation: drops entries neither it nor the one before used, and
    /// says how many functions it reused and compiled.
    pub fn end(self) -> CompileStats {
        let cache = self.cache;
        let mut state = cache.lock();
        if state.reused + state.compiled == 0 {
            // Nothing compiled (the compile cache had the component): the entries of
            // the versions before keep their age.
            state.generation -= 1;
        }
        let current = state.generation;
        state
            .entries
            .retain(|_, entry| entry.generation + 1 >= current);
        state.bytes = state.entries.values().map(|e| e.bytes.len() as u64).sum();
        cache.size_gauge.set(state.bytes as i64);
        let stats = CompileStats {
            reused: state.reused,
            compiled: state.compiled,
        };
        drop(state);
        cache
            .functions
            .get_or_create(&ResultLabel { result: "reused" })
            .inc_by(stats.reused);
        cache
            .functions
            .get_or_create(&ResultLabel { result: "compiled" })
            .inc_by(stats.compiled);
        stats
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let mut state = self.lock();
        let generation = state.generation;
        let found = state.entries.get_mut(key).map(|entry| {
            entry.generation = generation;
            entry.bytes.clone()
        });
        match &found {
            Some(_) => state.reused += 1,
            None => state.compiled += 1,
        }
        found.map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut state = self.lock();
        let replaced = state.entries.get(key).map_or(0, |e| e.bytes.len() as u64);
        let size = value.len() as u64;
        if state.bytes - replaced + size > Self::MAX_BYTES {
            return false;
        }
        let generation = state.generation;
        state.bytes = state.bytes - replaced + size;
        state.entries.insert(
            key.to_vec(),
            Entry {
                generation,
                bytes: value,
            },
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_the_two_last_compilations_are_kept() {
        let cache = FunctionCache::default();
        let compilation = cache.begin();
        assert!(cache.get(b"a").is_none());
        cache.insert(b"a", vec![1; 10]);
        cache.insert(b"b", vec![2; 10]);
        assert_eq!(
            compilation.end(),
            CompileStats {
                reused: 0,
                compiled: 1
            }
        );
        let compilation = cache.begin();
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1u8; 10][..]));
        cache.insert(b"c", vec![3; 10]);
        // Replacing an entry counts its bytes once.
        cache.insert(b"c", vec![3; 10]);
        assert_eq!(compilation.end().reused, 1);
        assert_eq!(cache.size(), 30);
        // A third compilation using only c: b (last used two compilations ago) goes.
        let compilation = cache.begin();
        assert!(cache.get(b"c").is_some());
        compilation.end();
        assert!(cache.get(b"b").is_none());
        assert!(
            cache.get(b"a").is_some(),
            "a was used by the second compilation"
        );
    }

    #[test]
    fn the_cache_never_grows_past_its_limit() {
        let cache = FunctionCache::default();
        let compilation = cache.begin();
        assert!(cache.insert(b"big", vec![0; FunctionCache::MAX_BYTES as usize]));
        assert!(!cache.insert(b"more", vec![0; 1]));
        assert_eq!(cache.size(), FunctionCache::MAX_BYTES);
        compilation.end();
    }
}
