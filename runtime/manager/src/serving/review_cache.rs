//! The answers of `TokenReview` and `SubjectAccessReview`, kept for a while as
//! upstream's delegated authenticator and authorizer keep them: probes and scrapers
//! then cost the API server one review per TTL, not one per request.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most this many answers are kept; past it expired ones go, then the one closest
/// to expiring. Callers keep answers that matter (a valid token, an allowed path) apart
/// from the others, so a flood of unknown tokens or paths only churns its own cache.
const MAX_ENTRIES: usize = 4096;

/// Answers by key, each until its own deadline.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Hash + Eq, V: Clone> Default for TtlCache<K, V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    /// The answer kept for `key`, if it has not expired.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.lock();
        entries
            .get(key)
            .filter(|(deadline, _)| Instant::now() < *deadline)
            .map(|(_, value)| value.clone())
    }

    /// Keeps `value` for `ttl` (a zero TTL keeps nothing).
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.lock();
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            entries.retain(|_, (deadline, _)| now < *deadline);
            if entries.len() >= MAX_ENTRIES
                && let Some(soonest) = entries
                    .iter()
                    .min_by_key(|(_, (deadline, _))| *deadline)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&soonest);
            }
        }
        entries.insert(key, (now + ttl, value));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, V)>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_expire_and_a_zero_ttl_keeps_nothing() {
        let cache = TtlCache::default();
        cache.insert("a", 1, Duration::from_secs(60));
        cache.insert("b", 2, Duration::ZERO);
        cache.insert("c", 3, Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(cache.get(&"a"), Some(1));
        assert_eq!(cache.get(&"b"), None);
        assert_eq!(cache.get(&"c"), None);
    }

    #[test]
    fn a_full_cache_drops_expired_answers_then_the_one_closest_to_expiring() {
        let cache = TtlCache::default();
        for i in 0..MAX_ENTRIES {
            cache.insert(i, i, Duration::from_nanos(1));
        }
        std::thread::sleep(Duration::from_millis(2));
        cache.insert(usize::MAX, 0, Duration::from_secs(60));
        assert_eq!(cache.lock().len(), 1);
        assert_eq!(cache.get(&usize::MAX), Some(0));
        for i in 0..MAX_ENTRIES {
            cache.insert(i, i, Duration::from_secs(60 + i as u64));
        }
        // Still caching while full: the newest answers are kept, the oldest went.
        assert_eq!(cache.lock().len(), MAX_ENTRIES);
        assert_eq!(cache.get(&usize::MAX), None, "closest to expiring");
        assert_eq!(cache.get(&(MAX_ENTRIES - 1)), Some(MAX_ENTRIES - 1));
        cache.insert(usize::MAX, 7, Duration::from_secs(3600));
        assert_eq!(cache.get(&usize::MAX), Some(7));
        assert_eq!(cache.get(&0), None);
    }
}
