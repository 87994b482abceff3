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
//! Loading an entry runs its machine code in the process, so:
//! - the directory must be private: owned by the process's user and writable by no
//!   one else (a wider mode is narrowed to 0700; a directory owned by someone else, or
//!   a symlink, is refused with a clear error);
//! - entries are written 0600 through a temporary file created exclusively (never
//!   following a symlink planted at its name) and renamed into place, so a crash never
//!   leaves a torn entry;
//! - an entry is a regular file that starts with a header binding it to the SHA-256
//!   of the component it was compiled from and of the compiled bytes that follow; an
//!   entry that is not the compilation of the named component's bytes (renamed,
//!   truncated, swapped) is refused, deleted and recompiled.

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

/// The first bytes of an entry: a magic string, then the SHA-256 of the component's
/// bytes and of the compiled bytes that follow.
const MAGIC: &[u8; 8] = b"wccm-c1\n";
const HEADER_LEN: usize = MAGIC.len() + 32 + 32;

/// Makes `dir` private to this process's user, or says why it cannot be.
#[cfg(unix)]
fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(std::io::Error::other(
            "not a directory (a symlink is refused: the cache must be a directory of its own)",
        ));
    }
    // Who this process is, as the file system sees it: the owner of a file it creates.
    let probe = dir.join(format!(".owner-probe-{}", std::process::id()));
    // A probe left by a crashed start with the same PID (1 in a container) is stale.
    let _ = std::fs::remove_file(&probe);
    let me = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|file| file.metadata())
        .map(|m| m.uid());
    let _ = std::fs::remove_file(&probe);
    let me = me?;
    if meta.uid() != me {
        return Err(std::io::Error::other(format!(
            "owned by uid {}, not by this process (uid {me}); compiled code is loaded from it, \
             so it must be private to this process",
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(dir = %dir.display(), mode = format!("{:o}", meta.permissions().mode() & 0o777),
            "compile cache directory was accessible to others; setting mode 0700");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_private(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

impl CompileCache {
    /// Uses (and creates, mode 0700) `dir`, counting hits and misses in `metrics`. The
    /// directory must be (or is made) private to this process's user.
    pub fn open(dir: &Path, metrics: &Metrics) -> std::io::Result<Self> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
        make_private(dir)?;
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
        let source = Sha256::digest(bytes);
        match read_entry(&entry, &source) {
            Ok(Some(compiled)) => {
                // SAFETY: the entry is a regular file in a directory private to this
                // process's user (checked at open), written only by `store` below from
                // a component this process compiled; its header (a checksum, not a
                // signature: the directory's privacy is the protection) shows it was
                // compiled from exactly `bytes` and arrived intact; wasmtime checks its
                // own header (version, engine settings) and refuses mismatches.
                match unsafe { Component::deserialize(engine, compiled) } {
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
            }
            Ok(None) => self.count("miss"),
            Err(reason) => {
                tracing::warn!(entry = %entry.display(), %reason, "discarding compile cache entry that is not the compilation of this component");
                self.count("stale");
                let _ = std::fs::remove_file(&entry);
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Err(err) = component
            .serialize()
            .map_err(std::io::Error::other)
            .and_then(|serialized| store(&entry, &source, &serialized))
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

/// The compiled bytes of the entry at `path` when it is the compilation of the
/// component whose SHA-256 is `source`; `None` when there is no entry; why not
/// otherwise.
fn read_entry(path: &Path, source: &[u8]) -> Result<Option<Vec<u8>>, String> {
    match std::fs::symlink_metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.to_string()),
        Ok(meta) if !meta.is_file() => return Err("not a regular file".into()),
        Ok(_) => {}
    }
    let mut data = std::fs::read(path).map_err(|e| e.to_string())?;
    if data.len() < HEADER_LEN || &data[..MAGIC.len()] != MAGIC {
        return Err("no cache header".into());
    }
    let (source_hash, compiled_hash) = data[MAGIC.len()..HEADER_LEN].split_at(32);
    if source_hash != source {
        return Err("compiled from other component bytes".into());
    }
    if compiled_hash != Sha256::digest(&data[HEADER_LEN..]).as_slice() {
        return Err("compiled bytes do not match their checksum".into());
    }
    Ok(Some(data.split_off(HEADER_LEN)))
}

/// Writes the entry for the component whose SHA-256 is `source` to `path`: header
/// and compiled `bytes`, through a temporary file created exclusively and a rename.
fn store(path: &Path, source: &[u8], bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    // A leftover of a crashed write is ours to remove (the directory is private).
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    // Exclusive creation never follows a symlink planted at the name.
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let result = options
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(MAGIC)?;
            file.write_all(source)?;
            file.write_all(&Sha256::digest(bytes))?;
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
    fn an_entry_of_other_bytes_is_refused_and_recompiled() {
        let dir = temp_dir("swap");
        let metrics = Metrics::new();
        let cache = CompileCache::open(&dir, &metrics).unwrap();
        let engine = engine();
        // A valid entry for one component, renamed to another's name.
        let other = b"\0asm\x0d\0\x01\0\0\x02\x00\x00";
        let _ = cache.component(&engine, EMPTY_COMPONENT);
        std::fs::rename(
            cache.entry_path(&engine, EMPTY_COMPONENT),
            cache.entry_path(&engine, other),
        )
        .unwrap();
        let _ = cache.component(&engine, other);
        assert_eq!(count(&metrics, "stale"), "1");
        // A truncated entry.
        let entry = cache.entry_path(&engine, EMPTY_COMPONENT);
        cache.component(&engine, EMPTY_COMPONENT).unwrap();
        let data = std::fs::read(&entry).unwrap();
        std::fs::write(&entry, &data[..data.len() - 1]).unwrap();
        cache.component(&engine, EMPTY_COMPONENT).unwrap();
        assert_eq!(count(&metrics, "stale"), "2");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_directory_is_made_private_or_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("mode");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        CompileCache::open(&dir, &Metrics::new()).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        // A symlink to a directory is not a private directory.
        let link = temp_dir("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let err = CompileCache::open(&link, &Metrics::new()).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        std::fs::remove_file(&link).unwrap();
        // A planted symlink at an entry's temporary name is not followed.
        let cache = CompileCache::open(&dir, &Metrics::new()).unwrap();
        let engine = engine();
        let entry = cache.entry_path(&engine, EMPTY_COMPONENT);
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(
            &victim,
            entry.with_extension(format!("tmp{}", std::process::id())),
        )
        .unwrap();
        cache.component(&engine, EMPTY_COMPONENT).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&entry).unwrap().is_file());
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
