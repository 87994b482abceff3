//! Limits on a provider's outbound requests: at most N in flight, and optionally a
//! token bucket of requests per second (cloud API rate limits are the most common
//! production complaint about cloud controller managers).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

/// The longest a request waits for a token before asking again.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// A token bucket: `rate` tokens per second, at most `burst` stored.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `rate` per second.
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token if one is available at `now`; otherwise how long until one is.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            // Never a panic, whatever the rate: an unrepresentable wait is an hour.
            let wait = Duration::try_from_secs_f64((1.0 - self.tokens) / self.rate)
                .unwrap_or(MAX_WAIT)
                .min(MAX_WAIT);
            Err(wait)
        }
    }
}

/// The limits of one provider's egress.
#[derive(Debug)]
pub struct EgressLimiter {
    in_flight: Semaphore,
    bucket: Option<Mutex<TokenBucket>>,
}

impl EgressLimiter {
    /// At most `max_in_flight` requests at once and, with `requests_per_second`, a
    /// token bucket of `burst` tokens (the rate rounded up by default).
    pub fn new(max_in_flight: usize, requests_per_second: Option<f64>, burst: Option<u32>) -> Self {
        Self {
            in_flight: Semaphore::new(max_in_flight),
            bucket: requests_per_second.map(|rate| {
                let burst = burst.map(f64::from).unwrap_or_else(|| rate.ceil().max(1.0));
                Mutex::new(TokenBucket::new(rate, burst, Instant::now()))
            }),
        }
    }

    /// Waits for a request slot and, if configured, a rate token.
    pub async fn admit(&self) -> SemaphorePermit<'_> {
        let permit = self
            .in_flight
            .acquire()
            .await
            .expect("the egress semaphore is never closed");
        if let Some(bucket) = &self.bucket {
            loop {
                let wait = bucket
                    .lock()
                    .expect("rate limiter lock")
                    .try_take(Instant::now());
                match wait {
                    Ok(()) => break,
                    Err(delay) => tokio::time::sleep(delay).await,
                }
            }
        }
        permit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_the_burst_then_paces() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 2.0, t0);
        assert!(b.try_take(t0).is_ok());
        assert!(b.try_take(t0).is_ok());
        let wait = b.try_take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert!(b.try_take(t0 + Duration::from_millis(100)).is_ok());
        // Idle time refills up to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        assert!(b.try_take(later).is_ok());
        assert!(b.try_take(later).is_ok());
        assert!(b.try_take(later).is_err());
    }

    #[tokio::test]
    async fn in_flight_requests_are_capped() {
        let limiter = EgressLimiter::new(2, None, None);
        let a = limiter.admit().await;
        let _b = limiter.admit().await;
        assert_eq!(limiter.in_flight.available_permits(), 0);
        drop(a);
        let _c = limiter.admit().await;
        assert_eq!(limiter.in_flight.available_permits(), 0);
    }
}
