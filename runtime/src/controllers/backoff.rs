//! Per-object exponential backoff, as client-go's rate-limiting work queue: the delay
//! doubles with each consecutive failure of the same object, from `base` to `max`, and
//! resets on success. A provider's retry-after overrides it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Failure counts by object key.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The delay before retrying `key` after one more failure.
    pub fn failed(&self, key: &str, retry_after: Option<Duration>) -> Duration {
        let mut failures = self.failures.lock().expect("backoff lock");
        let n = failures.entry(key.to_owned()).or_insert(0);
        let delay = self
            .base
            .saturating_mul(2u32.saturating_pow(*n))
            .min(self.max);
        *n = n.saturating_add(1);
        retry_after.unwrap_or(delay)
    }

    /// Forgets `key`'s failures.
    pub fn succeeded(&self, key: &str) {
        self.failures.lock().expect("backoff lock").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_max_and_resets() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let delays: Vec<u64> = (0..8).map(|_| b.failed("a", None).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(b.failed("other", None).as_secs(), 5);
        b.succeeded("a");
        assert_eq!(b.failed("a", None).as_secs(), 5);
        assert_eq!(b.failed("a", Some(Duration::from_secs(7))).as_secs(), 7);
    }
}
