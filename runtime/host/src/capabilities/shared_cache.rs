//! The `wasm-ccm:provider/cache` import: a key/value store shared by every pooled
//! instance of one provider version, with a TTL per entry and a byte cap from the
//! policy (`limits.cacheKiB`). A new version (hot swap) gets a new, empty cache.
//!
//! When a value does not fit, expired entries go first, then those closest to expiry.
//! Hits, misses and the bytes held are metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::HostState;
use crate::contract::cache::{CacheError, Host};
use crate::metrics::{CacheLabels, ProviderLabel, ProviderLabels, ProviderMetrics};

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The longest time an entry lives.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// What one entry costs besides its key and value (map slot, expiry), counted
/// against the cap so many tiny entries cannot hide memory.
const ENTRY_OVERHEAD: usize = 64;

/// The cache of one provider version.
pub struct Cache {
    capacity: usize,
    entries: Mutex<Entries>,
    provider: Arc<ProviderLabel>,
    metrics: Arc<ProviderMetrics>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    bytes: usize,
}

struct Entry {
    value: Vec<u8>,
    expires: Instant,
}

fn cost(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

impl Entries {
    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.map.remove(key) {
            self.bytes -= cost(key, &entry.value);
        }
    }

    fn remove_expired(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .map
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
    }

    /// Removes the entry closest to expiry; false when empty.
    fn evict_one(&mut self) -> bool {
        let Some(key) = self
            .map
            .iter()
            .min_by_key(|(_, e)| e.expires)
            .map(|(k, _)| k.clone())
        else {
            return false;
        };
        self.remove(&key);
        true
    }
}

impl Cache {
    /// An empty cache of at most `capacity` bytes (keys, values and a small overhead
    /// per entry), recording under `provider`.
    pub fn new(
        capacity: usize,
        provider: Arc<ProviderLabel>,
        metrics: Arc<ProviderMetrics>,
    ) -> Self {
        Self {
            capacity,
            entries: Mutex::new(Entries::default()),
            provider,
            metrics,
        }
    }

    fn count(&self, result: &str) {
        self.metrics
            .cache_requests
            .get_or_create(&CacheLabels {
                provider: self.provider.get().to_string(),
                result: result.into(),
            })
            .inc();
    }

    fn report_bytes(&self, bytes: usize) {
        self.metrics
            .cache_bytes
            .get_or_create(&ProviderLabels {
                provider: self.provider.get().to_string(),
            })
            .set(bytes as i64);
    }

    /// The value under `key`, unless absent or expired.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let now = Instant::now();
        let mut entries = self.entries.lock().expect("cache lock");
        let found = match entries.map.get(key) {
            Some(entry) if entry.expires > now => Some(entry.value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        };
        let bytes = entries.bytes;
        drop(entries);
        self.report_bytes(bytes);
        self.count(if found.is_some() { "hit" } else { "miss" });
        found
    }

    /// Stores `value` under `key` for `ttl` (at most [`MAX_TTL`]).
    pub fn set(&self, key: &str, value: Vec<u8>, ttl: Duration) -> Result<(), CacheError> {
        self.store(key, value, ttl, false).map(|_| ())
    }

    /// [`Self::set`] only when `key` holds no live value, in one step (no other
    /// instance's call comes between the check and the store): `Ok(false)` when it
    /// holds one, which is kept.
    pub fn add(&self, key: &str, value: Vec<u8>, ttl: Duration) -> Result<bool, CacheError> {
        self.store(key, value, ttl, true)
    }

    fn store(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Duration,
        only_if_absent: bool,
    ) -> Result<bool, CacheError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(CacheError::InvalidKey);
        }
        let needed = cost(key, &value);
        if needed > self.capacity {
            return Err(CacheError::TooLarge(self.capacity as u64));
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().expect("cache lock");
        if only_if_absent && entries.map.get(key).is_some_and(|e| e.expires > now) {
            drop(entries);
            self.count("hit");
            return Ok(false);
        }
        entries.remove(key);
        if entries.bytes + needed > self.capacity {
            entries.remove_expired(now);
        }
        let mut evicted = 0;
        while entries.bytes + needed > self.capacity && entries.evict_one() {
            evicted += 1;
        }
        entries.bytes += needed;
        entries.map.insert(
            key.to_owned(),
            Entry {
                value,
                expires: now + ttl.min(MAX_TTL),
            },
        );
        let bytes = entries.bytes;
        drop(entries);
        self.report_bytes(bytes);
        self.count("set");
        for _ in 0..evicted {
            self.count("evicted");
        }
        Ok(true)
    }

    /// Removes `key`.
    pub fn delete(&self, key: &str) {
        let mut entries = self.entries.lock().expect("cache lock");
        entries.remove(key);
        let bytes = entries.bytes;
        drop(entries);
        self.report_bytes(bytes);
    }

    /// The bytes held now (keys, values, per-entry overhead).
    pub fn bytes(&self) -> usize {
        self.entries.lock().expect("cache lock").bytes
    }
}

impl Host for HostState {
    async fn get(&mut self, key: String) -> Option<Vec<u8>> {
        self.shared.cache.get(&key)
    }

    async fn set(&mut self, key: String, value: Vec<u8>, ttl_ms: u64) -> Result<(), CacheError> {
        self.shared
            .cache
            .set(&key, value, Duration::from_millis(ttl_ms))
    }

    async fn add(&mut self, key: String, value: Vec<u8>, ttl_ms: u64) -> Result<bool, CacheError> {
        self.shared
            .cache
            .add(&key, value, Duration::from_millis(ttl_ms))
    }

    async fn delete(&mut self, key: String) {
        self.shared.cache.delete(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(capacity: usize) -> Cache {
        Cache::new(
            capacity,
            ProviderLabel::new("test"),
            crate::metrics::Metrics::new().provider().clone(),
        )
    }

    #[test]
    fn values_expire_and_the_cap_holds() {
        let c = cache(3 * (ENTRY_OVERHEAD + 10));
        c.set("a", vec![1; 9], Duration::from_secs(60)).unwrap();
        assert_eq!(c.get("a"), Some(vec![1; 9]));
        assert_eq!(c.get("b"), None);
        c.set("b", vec![2; 9], Duration::from_millis(0)).unwrap();
        assert_eq!(c.get("b"), None, "expired at once");
        c.set("c", vec![3; 9], Duration::from_secs(30)).unwrap();
        c.set("d", vec![4; 9], Duration::from_secs(90)).unwrap();
        // Full: the next value pushes out the entry closest to expiry ("c").
        c.set("e", vec![5; 9], Duration::from_secs(120)).unwrap();
        assert!(c.bytes() <= 3 * (ENTRY_OVERHEAD + 10));
        assert_eq!(c.get("c"), None);
        assert_eq!(c.get("a"), Some(vec![1; 9]));
        assert_eq!(c.get("e"), Some(vec![5; 9]));
        c.delete("a");
        assert_eq!(c.get("a"), None);
    }

    #[test]
    fn add_stores_only_over_nothing_or_an_expired_value() {
        let c = cache(1024);
        assert_eq!(
            c.add("lock", b"a".to_vec(), Duration::from_secs(60)),
            Ok(true)
        );
        assert_eq!(
            c.add("lock", b"b".to_vec(), Duration::from_secs(60)),
            Ok(false)
        );
        assert_eq!(
            c.get("lock"),
            Some(b"a".to_vec()),
            "the first value is kept"
        );
        c.set("gone", b"x".to_vec(), Duration::from_millis(0))
            .unwrap();
        assert_eq!(
            c.add("gone", b"y".to_vec(), Duration::from_secs(60)),
            Ok(true)
        );
        c.delete("lock");
        assert_eq!(
            c.add("lock", b"c".to_vec(), Duration::from_secs(60)),
            Ok(true)
        );
        assert_eq!(
            c.add("", b"c".to_vec(), Duration::from_secs(60)),
            Err(CacheError::InvalidKey)
        );
    }

    #[test]
    fn bad_keys_and_oversized_values_are_refused() {
        let c = cache(1024);
        assert_eq!(
            c.set("", vec![], Duration::ZERO),
            Err(CacheError::InvalidKey)
        );
        assert_eq!(
            c.set(&"k".repeat(MAX_KEY_BYTES + 1), vec![], Duration::ZERO),
            Err(CacheError::InvalidKey)
        );
        assert_eq!(
            c.set("k", vec![0; 2048], Duration::ZERO),
            Err(CacheError::TooLarge(1024))
        );
        assert_eq!(c.bytes(), 0);
        let off = cache(0);
        assert!(off.set("k", vec![], Duration::from_secs(1)).is_err());
    }
}
