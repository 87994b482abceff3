//! The disk cache of pulled components, by manifest digest: a restart serves the
//! pinned component without the registry.
//!
//! `DIR/sha256-<hex>/component.wasm` beside `entry.json` (the layer digest and the
//! keys whose signatures were verified). An entry is written to a temporary directory
//! and renamed into place, so a reader sees a whole entry or none. A hit is hashed
//! again against its layer digest; its signers are checked against the keys the
//! source trusts *now*, so dropping a key from the source refuses what only that key
//! signed, from the cache too. At most [`KEPT`] entries are kept, the newest.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::provider::compile_cache::sha256_hex;

/// How many entries the cache keeps: the serving version, one on its way in, and
/// the one before (to swap back to without the registry).
pub(super) const KEPT: usize = 3;

/// A cached component.
#[derive(Debug)]
pub(super) struct Entry {
    /// The component's bytes (hashed to `layer_digest`).
    pub component: Vec<u8>,
    /// The layer's digest.
    pub layer_digest: String,
    /// The ids of the keys whose signatures were verified when it was pulled.
    pub signers: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    reference: String,
    layer_digest: String,
    signers: Vec<String>,
}

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

    /// The entry for `digest`, if whole and intact.
    pub(super) fn get(&self, digest: &str) -> Option<Entry> {
        let dir = self.entry_dir(digest);
        let record: Record =
            serde_json::from_slice(&std::fs::read(dir.join("entry.json")).ok()?).ok()?;
        let component = std::fs::read(dir.join("component.wasm")).ok()?;
        if format!("sha256:{}", sha256_hex(&component)) != record.layer_digest {
            tracing::warn!(entry = %dir.display(), "cached provider does not match its digest; pulling it again");
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        Some(Entry {
            component,
            layer_digest: record.layer_digest,
            signers: record.signers,
        })
    }

    /// Stores `entry` for `digest` (pulled as `reference`).
    pub(super) fn put(&self, digest: &str, reference: &str, entry: &Entry) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let dir = self.entry_dir(digest);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            digest.replace(':', "-")
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
        let written = (|| {
            std::fs::write(tmp.join("component.wasm"), &entry.component)?;
            let record = Record {
                reference: reference.to_owned(),
                layer_digest: entry.layer_digest.clone(),
                signers: entry.signers.clone(),
            };
            std::fs::write(
                tmp.join("entry.json"),
                serde_json::to_vec_pretty(&record).map_err(std::io::Error::other)?,
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

    /// Removes all but the [`KEPT`] newest entries (never `keep`).
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

    #[test]
    fn entries_round_trip_and_a_corrupt_one_is_dropped() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-oci-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::new(dir.clone());
        let digest = "sha256:00ff";
        assert!(cache.get(digest).is_none());
        let component = b"\0asm component".to_vec();
        let entry = Entry {
            layer_digest: format!("sha256:{}", sha256_hex(&component)),
            component,
            signers: vec!["k1".into()],
        };
        cache.put(digest, "r/p@sha256:00ff", &entry).unwrap();
        let got = cache.get(digest).unwrap();
        assert_eq!(got.component, entry.component);
        assert_eq!(got.signers, ["k1"]);
        std::fs::write(dir.join("sha256-00ff/component.wasm"), b"tampered").unwrap();
        assert!(
            cache.get(digest).is_none(),
            "a tampered entry is not served"
        );
        assert!(!dir.join("sha256-00ff").exists(), "and is removed");
        // Only the newest entries stay.
        for i in 0..(KEPT + 2) {
            let digest = format!("sha256:{i:04}");
            cache.put(&digest, "r/p", &entry).unwrap();
            // Distinct modification times, oldest first (a put writes the newest).
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000 + i as u64);
            if let Ok(dir) = std::fs::File::open(cache.entry_dir(&digest)) {
                dir.set_modified(at).unwrap();
            }
        }
        let left = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(left, KEPT);
        assert!(
            cache.get(&format!("sha256:{:04}", KEPT + 1)).is_some(),
            "the newest stays"
        );
        assert!(cache.get("sha256:0000").is_none(), "the oldest went");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
