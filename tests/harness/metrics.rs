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
    assert_known(text, "wasm_ccm_provider_calls_total");
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
    assert_known(text, "wasm_ccm_provider_calls_total");
    text.lines()
        .filter(|l| l.starts_with("wasm_ccm_provider_calls_total{"))
        .filter(|l| l.contains(&format!("function=\"{function}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The SHA-256 of `provider`'s serving version, from `wasm_ccm_provider_info`.
pub fn serving_sha256(text: &str, provider: &str) -> Option<String> {
    let prefix = format!("wasm_ccm_provider_info{{provider=\"{provider}\",sha256=\"");
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(&prefix)?;
        let (sha, value) = rest.split_once("\"} ")?;
        (value == "1").then(|| sha.to_owned())
    })
}

/// `wasm_ccm_provider_reloads_total` of `provider` with `result`.
pub fn provider_reloads(text: &str, provider: &str, result: &str) -> f64 {
    metric(
        text,
        &format!("wasm_ccm_provider_reloads_total{{provider=\"{provider}\",result=\"{result}\"}}"),
    )
}

/// Waits (up to `timeout`) until the controller manager serving metrics on `port`
/// serves `provider` at `sha256`.
pub async fn wait_serving_sha256(
    port: u16,
    provider: &str,
    sha256: &str,
    timeout: std::time::Duration,
) {
    crate::wait_until(timeout, &format!("version {sha256} serving"), || async {
        serving_sha256(&metrics(port).await, provider).as_deref() == Some(sha256)
    })
    .await;
}

/// A metric's value from a Prometheus exposition (the first line starting with
/// `series`), or 0 when the series is not there: a counter never incremented, or a
/// label set never seen, is not exposed. The series must belong to a metric the
/// exposition declares (`# TYPE`) or docs/metrics.md lists, so a misspelt or removed
/// metric fails the test instead of reading as 0.
pub fn metric(text: &str, series: &str) -> f64 {
    assert_known(text, series.split('{').next().unwrap_or(series));
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The metrics users are told of: docs/metrics.md, whose table names them in its
/// first column.
const DOCUMENTED: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"));

/// Whether `name` is a series of a metric `text` declares (`# TYPE`; a family with no
/// label set yet is not declared) or docs/metrics.md's table names in its first column:
/// the metric itself, or a series OpenMetrics derives from it (`_total`, `_count`,
/// `_sum`, `_bucket`, `_created`, `_info`).
fn known(text: &str, name: &str) -> bool {
    const SUFFIXES: [&str; 7] = [
        "", "_total", "_count", "_sum", "_bucket", "_created", "_info",
    ];
    let declared = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next());
    let documented = DOCUMENTED
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split(" |").next())
        .flat_map(|cell| cell.split('`').step_by(2))
        .map(|m| m.strip_suffix("_total").unwrap_or(m));
    declared.chain(documented).any(|metric| {
        SUFFIXES
            .iter()
            .any(|suffix| name.strip_prefix(metric) == Some(suffix))
    })
}

/// Panics unless `name` is a series [`known`] to `text`.
fn assert_known(text: &str, name: &str) {
    assert!(
        known(text, name),
        "{name:?} is a series of no metric the exposition declares or docs/metrics.md lists: {text}"
    );
}

#[cfg(test)]
mod tests {
    use super::metric;

    const EXPOSITION: &str = "# HELP syncs Syncs.\n# TYPE syncs counter\nsyncs_total{r=\"a\"} 3\n# TYPE lat histogram\nlat_count 2\n# EOF\n";

    #[test]
    fn a_known_series_reads_its_value_or_zero() {
        assert_eq!(metric(EXPOSITION, "syncs_total{r=\"a\"}"), 3.0);
        assert_eq!(metric(EXPOSITION, "syncs_total{r=\"b\"}"), 0.0);
        assert_eq!(metric(EXPOSITION, "lat_count"), 2.0);
        assert_eq!(metric(EXPOSITION, "lat_sum"), 0.0);
        // Documented, not yet exposed.
        let reconciles = "wasm_ccm_controller_reconciles_total{controller=\"service\"}";
        assert_eq!(metric(EXPOSITION, reconciles), 0.0);
        assert_eq!(
            metric(
                EXPOSITION,
                "node_controller_initial_node_sync_delay_seconds_count"
            ),
            0.0
        );
    }

    #[test]
    #[should_panic(expected = "is a series of no metric")]
    fn an_unknown_series_fails() {
        metric(EXPOSITION, "wasm_ccm_controller_reconcile_total");
    }

    /// A label value docs/metrics.md quotes is not a metric.
    #[test]
    #[should_panic(expected = "is a series of no metric")]
    fn a_documented_label_value_is_not_a_metric() {
        metric(EXPOSITION, "cloud_error");
    }
}
