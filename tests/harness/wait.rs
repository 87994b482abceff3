//! Waiting on conditions with a deadline (never a fixed sleep).

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `condition` until it holds or `timeout` passes.
pub async fn eventually(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls an async condition until it holds or `timeout` passes. A condition has
/// nothing to show when it fails; where the value read would say why, use
/// [`wait_for`], which prints it.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let read = || {
        let check = condition();
        async move { Condition(check.await) }
    };
    wait_for(timeout, what, read, |held| held.0).await;
}

/// A condition's last answer, as a timed-out [`wait_until`] reports it.
struct Condition(bool);

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0 {
            "it held"
        } else {
            "it did not hold (no value to show: wait_for prints the value it read)"
        })
    }
}

/// Reads a value with `read` until `done` holds for it, or `timeout` passes: then the
/// test fails with the last value read. The value that satisfied `done`.
pub async fn wait_for<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut read: F,
    done: impl Fn(&T) -> bool,
) -> T
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let value = read().await;
        if done(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; last seen: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
