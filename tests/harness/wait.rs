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

/// Polls an async condition until it holds or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(timeout, what, condition, |done| *done).await;
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
