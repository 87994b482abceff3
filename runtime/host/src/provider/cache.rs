//! The compile cache: components compiled once are serialized to a writable directory
//! (`--compile-cache-dir`) so a restart or a hot swap back to known content skips
//! Cranelift.
//!
//! An entry is named `<sha256 of the .wasm>-<engine hash>.cwasm`. The engine hash is
//! wasmtime's [`Engine::precompile_compatibility_hash`] (wasmtime version, target and
//! every setting that changes the generated code), so an upgrade or a changed engine
//! configuration misses instead of loading incompatible code. Entries are only ever
//! produced here from source `.wasm` bytes: precompiled artifacts are never taken from
//! the providers directory (a ConfigMap).
//!
//! Loading an entry maps machine code into the process, so the directory must be
//! private to this process (an `emptyDir`, mode 0700); entries are written 0600 through
//! a temporary file and a rename, so a crash never leaves a torn entry behind.

#![allow(unsafe_code)]

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::metrics::Metrics;

/// Labels of `wasm_ccm_compile_cache_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    /// `hit`, `miss`, `stale` (an entry wasmtime refused) or `write_error`.
    result: String,
}

/// A directory of serialized compiled components.
#[derive(Clone)]
pub struct CompileCache {
    dir: PathBuf,
    results: Family<CacheLabels, Counter>,
}

impl std::fmt::Debug for CompileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileCache")
            .field("dir", &self.dir)
            .finish()
    }
}

/// The hex SHA-256 of `bytes`: how components are identified in the cache, logs and
/// metrics.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl CompileCache {
    /// Uses (and creates, mode 0700) `dir`, counting hits and misses in `metrics`.
    pub fn open(dir: &Path, metrics: &Metrics) -> std::io::Result<Self> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
        let results = Family::<CacheLabels, Counter>::default();
        metrics.register(
            "compile_cache",
            "Compiled-component cache lookups, by result",
            results.clone(),
        );
        Ok(Self {
            dir: dir.to_owned(),
            results,
        })
    }

    /// The directory entries live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry for `bytes` compiled by `engine`.
    pub fn entry_path(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        self.dir.join(format!(
            "{}-{:016x}.cwasm",
            sha256_hex(bytes),
            hasher.finish()
        ))
    }

    /// The compiled component for `bytes`: from the cache when present, otherwise
    /// compiled and stored. CPU-bound: call off the async runtime.
    pub fn component(&self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
        let entry = self.entry_path(engine, bytes);
        if entry.exists() {
            // SAFETY: entries are written only by `store` below, from components this
            // process compiled, into a directory private to it (see the module docs);
            // wasmtime checks the header (version, engine settings) and refuses
            // mismatching entries with an error.
            match unsafe { Component::deserialize_file(engine, &entry) } {
                Ok(component) => {
                    self.count("hit");
                    return Ok(component);
                }
                Err(err) => {
                    tracing::warn!(entry = %entry.display(), error = %err, "discarding unusable compile cache entry");
                    self.count("stale");
                    let _ = std::fs::remove_file(&entry);
                }
            }
        } else {
            self.count("miss");
        }
        let component = Component::new(engine, bytes)?;
        if let Err(err) = component
            .serialize()
            .map_err(std::io::Error::other)
            .and_then(|serialized| store(&entry, &serialized))
        {
            tracing::warn!(entry = %entry.display(), error = %err, "cannot write compile cache entry");
            self.count("write_error");
        }
        Ok(component)
    }

    fn count(&self, result: &str) {
        self.results
            .get_or_create(&CacheLabels {
                result: result.into(),
            })
            .inc();
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let result = options
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid component: the header of an empty one.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn engine() -> Engine {
        Engine::default()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "wasm-ccm-cache-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn count(metrics: &Metrics, result: &str) -> String {
        let text = metrics.encode();
        text.lines()
            .find(|l| {
                l.starts_with(&format!(
                    "wasm_ccm_compile_cache_total{{result=\"{result}\"}}"
                ))
            })
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_owned())
            .unwrap_or_else(|| "0".into())
    }

    #[test]
    fn second_lookup_is_a_hit_and_entries_are_private() {
        let dir = temp_dir("hit");
        let metrics = Metrics::new();
        let cache = CompileCache::open(&dir, &metrics).unwrap();
        let engine = engine();
        let bytes = EMPTY_COMPONENT;
        cache.component(&engine, bytes).unwrap();
        assert_eq!(count(&metrics, "miss"), "1");
        let entry = cache.entry_path(&engine, bytes);
        assert!(entry.exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&entry).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "entry mode {mode:o}");
        }
        cache.component(&engine, bytes).unwrap();
        assert_eq!(count(&metrics, "hit"), "1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_entry_is_discarded_and_recompiled() {
        let dir = temp_dir("stale");
        let metrics = Metrics::new();
        let cache = CompileCache::open(&dir, &metrics).unwrap();
        let engine = engine();
        let bytes = EMPTY_COMPONENT;
        std::fs::write(
            cache.entry_path(&engine, bytes),
            b"not a compiled component",
        )
        .unwrap();
        cache.component(&engine, bytes).unwrap();
        assert_eq!(count(&metrics, "stale"), "1");
        // The rewritten entry now loads.
        cache.component(&engine, bytes).unwrap();
        assert_eq!(count(&metrics, "hit"), "1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_key_depends_on_content_and_engine_settings() {
        let dir = temp_dir("key");
        let cache = CompileCache::open(&dir, &Metrics::new()).unwrap();
        let engine = engine();
        let a = cache.entry_path(&engine, b"a");
        assert_ne!(a, cache.entry_path(&engine, b"b"));
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let other = Engine::new(&config).unwrap();
        assert_ne!(a, cache.entry_path(&other, b"a"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
