//! The disk cache of pulled artifacts, by manifest digest: a restart serves the pinned
//! component without the registry.
//!
//! `DIR/sha256-<hex>/` holds the manifest and the layer as the registry stored them and
//! the signatures that verified (`signatures.json`). Nothing in it is trusted: a hit is
//! checked as a pull is (the manifest against the pinned digest, the layer against the
//! manifest, the size limit, then the component taken out of the layer), and its
//! signatures are verified again with the keys the source lists *now*, so dropping a
//! key refuses what only it signed, from the cache too. An entry is written to a
//! temporary directory and renamed into place, so a reader sees a whole entry or none.
//! At most [`KEPT`] entries are kept, the most recently used.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::pull::Artifact;
use super::verify::StoredSignature;

/// How many entries the cache keeps: the serving version, one on its way in, and the
/// one before (to swap back to without the registry).
pub(super) const KEPT: usize = 3;

/// The cache in `dir`.
#[derive(Debug, Clone)]
pub(super) struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub(super) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn entry_dir(&self, digest: &str) -> PathBuf {
        self.dir.join(digest.replace(':', "-"))
    }

    /// The entry for `digest`, unchecked (the caller checks it as it checks a pull),
    /// marked as the most recently used.
    pub(super) fn get(&self, digest: &str) -> Option<(Artifact, Vec<StoredSignature>)> {
        let dir = self.entry_dir(digest);
        let manifest = std::fs::read(dir.join("manifest.json")).ok()?;
        let layer = std::fs::read(dir.join("layer")).ok()?;
        let signatures =
            serde_json::from_slice(&std::fs::read(dir.join("signatures.json")).ok()?).ok()?;
        if let Ok(entry) = std::fs::File::open(&dir) {
            let _ = entry.set_modified(std::time::SystemTime::now());
        }
        Some((Artifact { manifest, layer }, signatures))
    }

    /// Drops the entry for `digest` (it failed its checks).
    pub(super) fn remove(&self, digest: &str) {
        let _ = std::fs::remove_dir_all(self.entry_dir(digest));
    }

    /// Stores `artifact` and its `signatures` for `digest`.
    pub(super) fn put(
        &self,
        digest: &str,
        artifact: &Artifact,
        signatures: &[StoredSignature],
    ) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let dir = self.entry_dir(digest);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
        let written = (|| {
            std::fs::write(tmp.join("manifest.json"), &artifact.manifest)?;
            std::fs::write(tmp.join("layer"), &artifact.layer)?;
            std::fs::write(
                tmp.join("signatures.json"),
                serde_json::to_vec_pretty(signatures).map_err(std::io::Error::other)?,
            )?;
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::rename(&tmp, &dir)
        })();
        if written.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        } else {
            self.evict(&dir);
        }
        written
    }

    /// Removes all but the [`KEPT`] most recently used entries (never `keep`).
    fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("sha256-"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        entries.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        for (_, path) in entries.into_iter().skip(KEPT) {
            if path != keep {
                let _ = std::fs::remove_dir_all(path);
            }
        }
    }

    /// The directory, for messages.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact() -> Artifact {
        Artifact {
            manifest: b"{}".to_vec(),
            layer: b"\0asm".to_vec(),
        }
    }

    #[test]
    fn entries_round_trip_and_the_most_recently_used_stay() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-oci-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::new(dir.clone());
        assert!(cache.get("sha256:00ff").is_none());
        let signatures = vec![StoredSignature {
            payload: "cGF5bG9hZA==".into(),
            signature: "c2ln".into(),
        }];
        cache.put("sha256:00ff", &artifact(), &signatures).unwrap();
        let (got, sigs) = cache.get("sha256:00ff").unwrap();
        assert_eq!(got.layer, b"\0asm");
        assert_eq!(sigs[0].signature, "c2ln");
        // Distinct times, oldest first; then a hit makes the oldest the most recent.
        let stamp = |digest: &str, secs: u64| {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            std::fs::File::open(cache.entry_dir(digest))
                .unwrap()
                .set_modified(at)
                .unwrap();
        };
        stamp("sha256:00ff", 1_000);
        for i in 1..KEPT {
            let digest = format!("sha256:{i:04}");
            cache.put(&digest, &artifact(), &[]).unwrap();
            stamp(&digest, 1_000 + i as u64);
        }
        assert!(cache.get("sha256:00ff").is_some(), "used now");
        cache.put("sha256:new", &artifact(), &[]).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), KEPT);
        assert!(
            cache.get("sha256:00ff").is_some(),
            "the recently used one stays"
        );
        assert!(cache.get("sha256:new").is_some());
        assert!(
            cache.get("sha256:0001").is_none(),
            "the least recently used went"
        );
        cache.remove("sha256:new");
        assert!(cache.get("sha256:new").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
