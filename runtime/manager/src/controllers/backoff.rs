//! Per-object exponential backoff, as client-go's rate-limiting work queue: the delay
//! doubles with each consecutive failure of the same object, from `base` to `max`, and
//! resets on success. A provider's retry-after overrides it.
//!
//! Times are tokio's clock, so a test that pauses it (`tokio::time::pause`) moves the
//! back-off with the controller's requeue timers instead of waiting for them.
//!
//! The objects waiting for a retry are the depth of the controller's retry queue,
//! exported as `wasm_ccm_controller_retries_pending{controller}` when a gauge is
//! attached ([`Backoff::reporting`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use prometheus_client::metrics::gauge::Gauge;

/// One object's failures: how many in a row, and when its retry is due.
#[derive(Debug, Clone, Copy)]
struct Failing {
    count: u32,
    retry_at: Instant,
}

/// Failure counts by object key.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<Failures>,
    pending: Option<Gauge>,
}

/// The failing objects, and when forgotten ones were last swept out.
#[derive(Debug)]
struct Failures {
    by_key: HashMap<String, Failing>,
    swept: Instant,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(Failures {
                by_key: HashMap::new(),
                swept: Instant::now(),
            }),
            pending: None,
        }
    }

    /// Keeps `gauge` set to [`Self::pending`].
    pub fn reporting(mut self, gauge: Gauge) -> Self {
        self.pending = Some(gauge);
        self
    }

    /// The delay before retrying `key` after one more failure.
    pub fn failed(&self, key: &str, retry_after: Option<Duration>) -> Duration {
        let now = Instant::now();
        let mut failures = self.failures.lock().expect("backoff lock");
        let entry = failures.by_key.entry(key.to_owned()).or_insert(Failing {
            count: 0,
            retry_at: now,
        });
        let delay = retry_after.unwrap_or_else(|| {
            self.base
                .saturating_mul(2u32.saturating_pow(entry.count))
                .min(self.max)
        });
        // A cloud's Retry-After (upstream RetryError) schedules the next attempt
        // without growing the backoff.
        if retry_after.is_none() {
            entry.count = entry.count.saturating_add(1);
        }
        entry.retry_at = now + delay;
        // An object deleted while failing is never retried: forget it once its retry
        // is long overdue. Swept at most once per `max`, not on every failure (during
        // a cloud outage every object fails at once).
        let stale = self.max * 2;
        if now.duration_since(failures.swept) >= self.max {
            failures.by_key.retain(|_, f| f.retry_at + stale > now);
            failures.swept = now;
        }
        self.report(&failures.by_key);
        delay
    }

    /// Forgets `key`'s failures.
    pub fn succeeded(&self, key: &str) {
        let mut failures = self.failures.lock().expect("backoff lock");
        if failures.by_key.remove(key).is_some() {
            self.report(&failures.by_key);
        }
    }

    /// Objects waiting for a retry after a failure.
    pub fn pending(&self) -> usize {
        self.failures.lock().expect("backoff lock").by_key.len()
    }

    fn report(&self, failures: &HashMap<String, Failing>) {
        if let Some(gauge) = &self.pending {
            gauge.set(failures.len() as i64);
        }
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

    /// Ported from upstream service controller's `TestServiceQueueDelay`: a success
    /// leaves nothing to retry; a regular error is retried with the rate limiter's
    /// backoff (one requeue counted); a `RetryError` is retried after its own delay
    /// without counting a requeue, so the next regular error starts again at the base.
    #[test]
    fn service_queue_delay() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        // processing successful
        b.succeeded("default/external-balancer");
        assert_eq!(b.pending(), 0);
        // regular error
        assert_eq!(b.failed("regular", None), Duration::from_secs(5));
        assert_eq!(b.failed("regular", None), Duration::from_secs(10));
        // retry error: "LB create in progress", 42 s
        let delay = b.failed("retry", Some(Duration::from_secs(42)));
        assert_eq!(delay, Duration::from_secs(42));
        assert_eq!(b.failed("retry", Some(Duration::from_secs(42))), delay);
        assert_eq!(b.failed("retry", None), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn pending_counts_failing_objects_and_reports_them() {
        let gauge = Gauge::default();
        let b = Backoff::new(Duration::from_secs(60), Duration::from_secs(120))
            .reporting(gauge.clone());
        b.failed("a", None);
        b.failed("b", None);
        b.failed("b", None);
        assert_eq!((b.pending(), gauge.get()), (2, 2));
        b.succeeded("a");
        assert_eq!((b.pending(), gauge.get()), (1, 1));
        // An object deleted while failing is forgotten once its retry is overdue by
        // twice the max delay, at a failure at least a max delay after the last sweep.
        let gauge = Gauge::default();
        let b =
            Backoff::new(Duration::from_secs(5), Duration::from_secs(300)).reporting(gauge.clone());
        b.failed("deleted", None);
        tokio::time::advance(Duration::from_secs(300)).await;
        b.failed("c", None);
        assert_eq!((b.pending(), gauge.get()), (2, 2), "not yet overdue enough");
        tokio::time::advance(Duration::from_secs(310)).await;
        b.failed("c", None);
        assert_eq!(
            (b.pending(), gauge.get()),
            (1, 1),
            "the deleted one is forgotten"
        );
    }
}
