//! The throttling check: the host answers the provider's requests with 429 and a
//! `Retry-After`, and the provider must say `retry-after`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasm_ccm_host::provider::{CloudError, Provider};

use super::{Outcome, Report, describe};
use crate::cli::call::node;
use wasm_ccm_host::capabilities::http_egress::{Broker, EgressInterceptor};

/// The `Retry-After` the throttling check answers with.
const THROTTLE_RETRY_AFTER: Duration = Duration::from_secs(7);

/// An interceptor answering the next `n` allowed requests `429 Too Many Requests` with
/// `Retry-After` itself, without forwarding them: the cloud's throttling, made on
/// demand.
pub struct Throttle {
    left: std::sync::Mutex<u32>,
    answered: std::sync::atomic::AtomicU32,
    retry_after: Duration,
}

impl Throttle {
    /// Throttles the next `requests` requests with `retry_after`.
    pub fn new(requests: u32, retry_after: Duration) -> Self {
        Self {
            left: std::sync::Mutex::new(requests),
            answered: std::sync::atomic::AtomicU32::new(0),
            retry_after,
        }
    }

    /// The requests throttled so far.
    pub fn answered(&self) -> u32 {
        self.answered.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl EgressInterceptor for Throttle {
    fn intercept(
        &self,
        _method: &http::Method,
        _url: &url::Url,
    ) -> Option<http::Response<bytes::Bytes>> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        if *left == 0 {
            return None;
        }
        *left -= 1;
        self.answered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        http::Response::builder()
            .status(http::StatusCode::TOO_MANY_REQUESTS)
            .header(http::header::CONTENT_TYPE, "text/plain")
            .header(http::header::RETRY_AFTER, self.retry_after.as_secs())
            .body(bytes::Bytes::from_static(
                b"throttled by the host (wasm-ccm conformance)",
            ))
            .ok()
    }
}

/// A cloud's throttling is the contract's `retry-after`, no sooner than the cloud
/// asked: the host answers the provider's next request `429` with `Retry-After: 7`
/// itself (nothing reaches the cloud), and the provider must say `retry-after` with at
/// least 7 s, not fail otherwise nor retry on its own.
pub(super) async fn throttling_check(
    broker: &Broker,
    provider: &Provider,
    reaches_nothing: bool,
    report: &mut Report,
) {
    let rule = format!(
        "a 429 with Retry-After: {} s is retry-after, no sooner",
        THROTTLE_RETRY_AFTER.as_secs()
    );
    let Some(v2) = provider.instances_v2() else {
        report.record(
            rule,
            Outcome::Skip("the provider does not export instances-v2".into()),
        );
        return;
    };
    let name = format!("wasm-ccm-conformance-throttled-{}", std::process::id());
    let Ok(host) = node(&Value::String(name)) else {
        return;
    };
    let throttle = Arc::new(Throttle::new(1, THROTTLE_RETRY_AFTER));
    broker.set_interceptor(Some(throttle.clone()));
    let result = v2.instance_exists(&host).await;
    // Whether or not the provider sent anything, nothing else is throttled.
    broker.set_interceptor(None);
    if reaches_nothing && result.is_ok() && throttle.answered() == 0 {
        report.record(
            rule,
            Outcome::Skip("its policy allows no host: it sends nothing to throttle".into()),
        );
        return;
    }
    let wanted = THROTTLE_RETRY_AFTER.as_millis();
    report.record(
        rule,
        match result {
            Err(err) => match err.cloud() {
                Some(CloudError::RetryAfter { delay, .. }) if delay.as_millis() >= wanted => {
                    Outcome::Pass
                }
                Some(CloudError::RetryAfter { delay, .. }) => Outcome::Fail(format!(
                    "retry-after {} ms, sooner than the cloud's {wanted} ms",
                    delay.as_millis()
                )),
                _ => Outcome::Fail(format!("answered {}", describe(&err))),
            },
            Ok(answer) => Outcome::Fail(format!(
                "answered {answer} despite the 429: throttling must reach the host as \
                 retry-after, which schedules the next attempt"
            )),
        },
    );
}
