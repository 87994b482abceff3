//! The addresses this provider handed out lately, kept in the shared cache (one entry
//! read and written under a short lock, so the provider's instances and concurrent
//! syncs never interleave): what a Service holds before the host's view of the
//! Services shows it.
//!
//! An entry counts until the host lists the Service with the addresses it was given,
//! or for [`RECENT_TTL`] at most.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wasm_ccm_guest::cache;
use wasm_ccm_guest::types::{CloudError, Retry};

use crate::pools::Holder;

/// The shared cache's key for the addresses handed out lately.
const RECENT_KEY: &str = "k3s/recent-allocations";
/// The lock around reading, allocating and writing [`RECENT_KEY`].
const LOCK_KEY: &str = "k3s/allocating";
/// How long the lock is held at most (an instance that dies holding it).
const LOCK_TTL: Duration = Duration::from_secs(10);
/// How long a handed-out address counts as taken without the host listing it.
pub const RECENT_TTL: Duration = Duration::from_secs(300);

/// One address assignment made lately.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Recent {
    /// The Service's UID.
    pub uid: String,
    /// When, in seconds since the epoch.
    pub at: u64,
    /// The Service and what it was given.
    pub holder: Holder,
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The entries younger than [`RECENT_TTL`].
pub fn load() -> Vec<Recent> {
    let oldest = now().saturating_sub(RECENT_TTL.as_secs());
    let mut entries: Vec<Recent> = cache::get_json(RECENT_KEY).unwrap_or_default();
    entries.retain(|r| r.at >= oldest);
    entries
}

/// Replaces the entries.
pub fn store(entries: &[Recent]) {
    if let Err(e) = cache::set_json(RECENT_KEY, &entries, RECENT_TTL) {
        wasm_ccm_guest::log::warn(
            "cannot keep the addresses handed out lately",
            &[("error", &format!("{e:?}"))],
        );
    }
}

/// Runs `f` holding the allocation lock: no other instance's allocation or release
/// runs meanwhile. Busy: `retry-after` 1 s.
pub fn locked<T>(owner: &str, f: impl FnOnce() -> Result<T, CloudError>) -> Result<T, CloudError> {
    let taken = cache::add(LOCK_KEY, owner.as_bytes(), LOCK_TTL).map_err(|e| {
        CloudError::Other(format!(
            "cannot take the allocation lock in the cache: {e:?}"
        ))
    })?;
    if !taken {
        return Err(CloudError::RetryAfter(Retry {
            delay_ms: 1_000,
            message: "another address allocation is running".into(),
        }));
    }
    let result = f();
    cache::delete(LOCK_KEY);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_expire() {
        cache::clear();
        let r = Recent {
            uid: "u".into(),
            at: now(),
            holder: Holder {
                namespace: "ns".into(),
                name: "n".into(),
                ports: vec![80, 443],
                addresses: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            },
        };
        let old = Recent {
            at: now() - RECENT_TTL.as_secs() - 1,
            ..r.clone()
        };
        store(&[old, r.clone()]);
        assert_eq!(load(), [r]);
    }

    #[test]
    fn the_lock_is_exclusive_and_released() {
        cache::clear();
        let inner = locked("a", || Ok(locked("b", || Ok(()))));
        assert!(
            matches!(inner, Ok(Err(CloudError::RetryAfter(_)))),
            "{inner:?}"
        );
        assert_eq!(locked("c", || Ok(7)).unwrap(), 7, "released");
    }
}
