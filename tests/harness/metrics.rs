//! Reading the controller manager's Prometheus metrics.

use std::time::{Duration, Instant};

use crate::http_get;

/// How long [`metrics`] waits for the endpoint (a controller manager starting).
const REACHABLE_WITHIN: Duration = Duration::from_secs(30);

/// The Prometheus exposition served on `port`'s `/metrics`: a whole one (ending with
/// `# EOF`) answered 200. While the endpoint is not up it asks again, for at most 30 s;
/// then the test fails, so that a check of a metric's absence never passes on a read
/// that failed.
pub async fn metrics(port: u16) -> String {
    let deadline = Instant::now() + REACHABLE_WITHIN;
    loop {
        let failure = match http_get(port, "/metrics").await {
            Ok((200, body)) if body.contains("# EOF") => return body,
            Ok((status, body)) => format!(
                "status {status}, body {:?}",
                body.chars().take(200).collect::<String>()
            ),
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "GET http://127.0.0.1:{port}/metrics: {failure}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `wasm_ccm_controller_reconciles_total` of `controller` with `result` (`success` or
/// `error`).
pub fn reconciles(text: &str, controller: &str, result: &str) -> f64 {
    metric(
        text,
        &format!(
            "wasm_ccm_controller_reconciles_total{{controller=\"{controller}\",result=\"{result}\"}}"
        ),
    )
}

/// Provider calls, over every interface and function, that ended with one of `results`
/// (`ok`, `cloud_error`, `trap`, `timeout`, `unavailable`).
pub fn provider_calls(text: &str, results: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("wasm_ccm_provider_calls_total{"))
        .filter(|l| {
            results
                .iter()
                .any(|r| l.contains(&format!("result=\"{r}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Calls of the provider function `function` (e.g. `instances-metadata`), whatever
/// their result.
pub fn function_calls(text: &str, function: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("wasm_ccm_provider_calls_total{"))
        .filter(|l| l.contains(&format!("function=\"{function}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A metric's value from a Prometheus exposition (the first line starting with
/// `series`), or 0 when the series is not there (a counter never incremented is not
/// exposed; the exposition itself is a whole one, see [`metrics`]).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
