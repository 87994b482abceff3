//! The host's shared cache (`wasm-ccm:provider/cache`): a key/value store shared by
//! every pooled instance of the provider version serving, with a TTL per entry and a
//! byte cap set by the policy (`limits.cacheKiB`). Each instance has its own memory;
//! this is where they share what is expensive to look up (zone lists, subnets,
//! network IDs) or must survive from one call to the next (a long operation resumed
//! after `retry-after`). A hot swap starts the new version with an empty cache. Never
//! put secrets here: the host holds the credentials.
//!
//! ```
//! use std::time::Duration;
//! use wasm_ccm_guest::cache;
//!
//! let zones = match cache::get_json::<Vec<String>>("zones") {
//!     Some(zones) => zones,
//!     None => {
//!         let zones = vec!["zone-a".to_string()]; // from the cloud
//!         let _ = cache::set_json("zones", &zones, Duration::from_secs(3600));
//!         zones
//!     }
//! };
//! assert_eq!(zones, ["zone-a"]);
//! ```
//!
//! Outside a component (native unit tests) the cache is a per-thread map.

use std::time::Duration;

pub use crate::bindings::wasm_ccm::provider::cache::CacheError;

/// The value under `key`, if present and not expired.
pub fn get(key: &str) -> Option<Vec<u8>> {
    imp::get(key)
}

/// Stores `value` under `key` for `ttl` (the host caps it at one day).
pub fn set(key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError> {
    imp::set(key, value, ttl.as_millis().min(u128::from(u64::MAX)) as u64)
}

/// Stores `value` under `key` for `ttl` only when `key` holds no live value, in one
/// step across the provider's instances: `Ok(true)` when stored, `Ok(false)` when a
/// value was there (kept). For claiming a name, or a short lock around a
/// read-modify-write of shared entries.
pub fn add(key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
    imp::add(key, value, ttl.as_millis().min(u128::from(u64::MAX)) as u64)
}

/// Removes `key`.
pub fn delete(key: &str) {
    imp::delete(key)
}

/// [`get`], decoded from JSON; `None` also when the stored bytes do not decode.
pub fn get_json<T: serde::de::DeserializeOwned>(key: &str) -> Option<T> {
    serde_json::from_slice(&get(key)?).ok()
}

/// [`set`], encoded as JSON.
pub fn set_json<T: serde::Serialize>(
    key: &str,
    value: &T,
    ttl: Duration,
) -> Result<(), CacheError> {
    let bytes = serde_json::to_vec(value).expect("serializing to a Vec cannot fail");
    set(key, &bytes, ttl)
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::CacheError;
    use crate::bindings::wasm_ccm::provider::cache;

    pub fn get(key: &str) -> Option<Vec<u8>> {
        cache::get(key)
    }

    pub fn set(key: &str, value: &[u8], ttl_ms: u64) -> Result<(), CacheError> {
        cache::set(key, value, ttl_ms)
    }

    pub fn add(key: &str, value: &[u8], ttl_ms: u64) -> Result<bool, CacheError> {
        cache::add(key, value, ttl_ms)
    }

    pub fn delete(key: &str) {
        cache::delete(key)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use super::CacheError;

    thread_local! {
        static CACHE: RefCell<HashMap<String, (Vec<u8>, Instant)>> = RefCell::new(HashMap::new());
    }

    pub fn get(key: &str) -> Option<Vec<u8>> {
        CACHE.with(|c| {
            c.borrow()
                .get(key)
                .filter(|(_, expires)| *expires > Instant::now())
                .map(|(v, _)| v.clone())
        })
    }

    pub fn set(key: &str, value: &[u8], ttl_ms: u64) -> Result<(), CacheError> {
        if key.is_empty() || key.len() > 256 {
            return Err(CacheError::InvalidKey);
        }
        let expires = Instant::now() + Duration::from_millis(ttl_ms);
        CACHE.with(|c| c.borrow_mut().insert(key.into(), (value.to_vec(), expires)));
        Ok(())
    }

    pub fn add(key: &str, value: &[u8], ttl_ms: u64) -> Result<bool, CacheError> {
        if get(key).is_some() {
            return Ok(false);
        }
        set(key, value, ttl_ms).map(|()| true)
    }

    pub fn delete(key: &str) {
        CACHE.with(|c| c.borrow_mut().remove(key));
    }

    /// Empties this thread's cache (tests).
    pub fn clear() {
        CACHE.with(|c| c.borrow_mut().clear());
    }
}

/// Empties the cache of this thread (native unit tests only).
#[cfg(not(target_arch = "wasm32"))]
pub fn clear() {
    imp::clear()
}
