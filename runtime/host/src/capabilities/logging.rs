//! The `wasm-ccm:provider/logging` import: provider log records become `tracing` events
//! with the provider's name, rate-limited so a chatty guest cannot flood the host's logs.

use std::time::{Duration, Instant};

use crate::contract::logging::{Host, Level};

use super::HostState;
use crate::metrics::ProviderLabels;

/// Log records a single instance may emit per second; the excess is dropped and
/// counted in one warning.
pub const LOG_RECORDS_PER_SECOND: u32 = 200;

/// The most bytes of one guest-provided text (a log message, a field, an error
/// message) the host keeps.
pub const MAX_GUEST_TEXT_BYTES: usize = 2048;

/// A guest-provided text made safe for logs, events and error messages: control
/// characters (CR, LF, ESC, ...) escaped as `\n`, `\u{1b}` and so on, so no guest can
/// forge a log line or a terminal sequence, and cut at [`MAX_GUEST_TEXT_BYTES`].
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_GUEST_TEXT_BYTES));
    for (i, c) in text.char_indices() {
        if out.len() >= MAX_GUEST_TEXT_BYTES {
            out.push_str(&format!("... ({} more bytes)", text.len() - i));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A one-second window counter, shared by an instance's logging import, stdout and
/// stderr (and used for the broker's denial warnings).
#[derive(Debug)]
pub struct LogLimiter {
    window_start: Instant,
    in_window: u32,
    dropped: u64,
}

impl Default for LogLimiter {
    fn default() -> Self {
        Self {
            window_start: Instant::now(),
            in_window: 0,
            dropped: 0,
        }
    }
}

impl LogLimiter {
    /// Whether one more record may be emitted now. When a new window starts, returns
    /// how many records the previous windows dropped.
    pub fn admit(&mut self, now: Instant) -> (bool, u64) {
        let mut dropped_report = 0;
        if now.duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.in_window = 0;
            dropped_report = std::mem::take(&mut self.dropped);
        }
        if self.in_window < LOG_RECORDS_PER_SECOND {
            self.in_window += 1;
            (true, dropped_report)
        } else {
            self.dropped += 1;
            (false, dropped_report)
        }
    }
}

impl Host for HostState {
    async fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let (admit, dropped) = self
            .log
            .lock()
            .expect("log limiter lock")
            .admit(Instant::now());
        let label = self.provider.get();
        let provider = &*label;
        if dropped > 0 {
            tracing::warn!(
                provider,
                dropped,
                "provider log records dropped by rate limit"
            );
        }
        if !admit {
            self.metrics
                .guest_log_dropped
                .get_or_create(&ProviderLabels {
                    provider: provider.to_owned(),
                })
                .inc();
            return;
        }
        let message = sanitize(&message);
        let fields = format_fields(&fields);
        match level {
            Level::Trace => tracing::trace!(target: "provider", provider, fields, "{message}"),
            Level::Debug => tracing::debug!(target: "provider", provider, fields, "{message}"),
            Level::Info => tracing::info!(target: "provider", provider, fields, "{message}"),
            Level::Warn => tracing::warn!(target: "provider", provider, fields, "{message}"),
            Level::Error => tracing::error!(target: "provider", provider, fields, "{message}"),
        }
    }
}

impl crate::contract::types::Host for HostState {}

/// Contract 0.1's `logging` import: the same records, its levels mapped to the current
/// ones.
impl crate::contract::v0_1::logging::Host for HostState {
    async fn log(
        &mut self,
        level: crate::contract::v0_1::logging::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) {
        Host::log(self, level.into(), message, fields).await
    }
}

impl crate::contract::v0_1::types::Host for HostState {}

fn format_fields(fields: &[(String, String)]) -> String {
    let mut out = String::new();
    for (k, v) in fields {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&sanitize(k));
        out.push('=');
        out.push_str(&sanitize(v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_drops_excess_and_reports_it_next_window() {
        let mut limiter = LogLimiter::default();
        let t0 = limiter.window_start;
        for _ in 0..LOG_RECORDS_PER_SECOND {
            assert_eq!(limiter.admit(t0), (true, 0));
        }
        assert_eq!(limiter.admit(t0), (false, 0));
        assert_eq!(limiter.admit(t0), (false, 0));
        assert_eq!(limiter.admit(t0 + Duration::from_secs(1)), (true, 2));
    }

    #[test]
    fn guest_text_cannot_forge_lines_or_terminal_sequences() {
        assert_eq!(
            sanitize("ok\n2026-01-01T00:00:00Z INFO wasm_ccm: forged\r\x1b[2J"),
            "ok\\n2026-01-01T00:00:00Z INFO wasm_ccm: forged\\r\\u{1b}[2J"
        );
        let long = "x".repeat(10_000);
        let cut = sanitize(&long);
        assert!(cut.len() < MAX_GUEST_TEXT_BYTES + 40, "{}", cut.len());
        assert!(cut.ends_with("... (7952 more bytes)"), "{cut}");
        assert_eq!(sanitize("naïve ✓"), "naïve ✓");
        assert_eq!(
            format_fields(&[("k\n".into(), "v\r\nINFO forged".into())]),
            "k\\n=v\\r\\nINFO forged"
        );
    }

    #[test]
    fn fields_are_key_value_pairs() {
        assert_eq!(
            format_fields(&[("a".into(), "1".into()), ("b".into(), "x y".into())]),
            "a=1 b=x y"
        );
    }
}
