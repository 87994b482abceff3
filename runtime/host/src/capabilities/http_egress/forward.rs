//! What forwarding a request needs around the upstream call: whether it may start
//! before the call's deadline, the bounded response, how a failure is reported to the
//! guest, and the bounded labels of its metrics and logs.

use std::time::{Duration, Instant};

use bytes::Bytes;
use wasmtime_wasi_http::Error as HttpError;

use super::{Denial, connect, resolver};

/// How the message of a request not started for the call's deadline begins (an
/// `internal-error` to the guest): the guest SDK reads it as "answer `retry-after`
/// now", not as a failure of the cloud.
pub const DEADLINE_MARKER: &str = "call deadline:";

/// Whether a request may start at `now`: only while its whole `timeout` and the
/// call's `grace` after it are left before `deadline` (none: outside a call), so no
/// request outlives the call that sent it. The error says what was left.
pub(super) fn fits(
    deadline: Option<Instant>,
    timeout: Duration,
    grace: Duration,
    now: Instant,
) -> Result<(), String> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(now);
    if left >= timeout + grace {
        return Ok(());
    }
    Err(format!(
        "{:.1}s left in the call, and a request may take the policy's \
         requestTimeout ({timeout:?}) plus {grace:?} for the provider to answer",
        left.as_secs_f64()
    ))
}

/// How forwarding failed.
pub(super) enum Forward {
    /// Refused at connection time (a name resolving to a link-local address).
    Denied(Denial),
    /// Not started: it could outlive the call's deadline (the message says by what).
    NotStarted(String),
    /// A transport failure reported to the guest as this error code.
    Failed(HttpError),
}

/// The `status` label: the codes clouds use for their API contract, else the class,
/// so a server cannot create series at will.
pub(super) fn status_label(status: http::StatusCode) -> &'static str {
    const KNOWN: [&str; 17] = [
        "200", "201", "202", "204", "304", "400", "401", "403", "404", "409", "412", "422", "429",
        "500", "502", "503", "504",
    ];
    if let Some(known) = KNOWN.iter().find(|k| **k == status.as_str()) {
        return known;
    }
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// The URL without its query (which may carry tokens), for logs.
pub(super) fn redact_query(url: &reqwest::Url) -> String {
    let mut redacted = url.clone();
    redacted.set_query(None);
    redacted.set_fragment(None);
    redacted.to_string()
}

/// The size of a header section as sent: `name: value\r\n` per field.
pub(super) fn header_section_bytes(headers: &http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

pub(super) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Bytes, Forward> {
    if let Some(len) = response.content_length()
        && len > limit as u64
    {
        return Err(Forward::Failed(HttpError::HttpResponseBodySize(Some(len))));
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(classify)? {
        if buf.len() + chunk.len() > limit {
            return Err(Forward::Failed(HttpError::HttpResponseBodySize(Some(
                (buf.len() + chunk.len()) as u64,
            ))));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

pub(super) fn classify(err: reqwest::Error) -> Forward {
    // The operating system's error behind `err`, if one is (the first in the chain).
    let mut io_kind = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<resolver::Unreachable>() {
            return Forward::Denied(Denial::NeverByName {
                label: refused.label,
                message: refused.to_string(),
            });
        }
        if let Some(refused) = e.downcast_ref::<connect::RefusedPeer>() {
            return Forward::Denied(Denial::NeverByName {
                label: refused.label,
                message: refused.to_string(),
            });
        }
        if let Some(failed) = e.downcast_ref::<resolver::LookupFailed>() {
            return Forward::Failed(HttpError::DnsError {
                rcode: Some(failed.source.to_string()),
                info_code: None,
            });
        }
        io_kind = io_kind.or_else(|| e.downcast_ref::<std::io::Error>().map(|io| io.kind()));
        source = e.source();
    }
    Forward::Failed(if err.is_timeout() && err.is_connect() {
        HttpError::ConnectionTimeout
    } else if err.is_timeout() {
        HttpError::ConnectionReadTimeout
    } else if err.is_connect() {
        // The guest tells a refused connection (nothing listens) from a destination it
        // could not reach at all (no route, reset while connecting).
        match io_kind {
            Some(std::io::ErrorKind::ConnectionRefused) => HttpError::ConnectionRefused,
            Some(std::io::ErrorKind::TimedOut) => HttpError::ConnectionTimeout,
            _ => HttpError::DestinationUnavailable,
        }
    } else if err.is_body() || err.is_decode() {
        HttpError::HttpResponseIncomplete
    } else {
        HttpError::InternalError(Some(err.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_starts_only_while_its_timeout_and_the_grace_fit() {
        let now = Instant::now();
        let (timeout, grace) = (Duration::from_secs(20), Duration::from_secs(1));
        assert!(fits(None, timeout, grace, now).is_ok(), "outside a call");
        let deadline = |left_ms| Some(now + Duration::from_millis(left_ms));
        assert!(fits(deadline(21_000), timeout, grace, now).is_ok());
        let short = fits(deadline(20_999), timeout, grace, now).unwrap_err();
        assert!(
            short.contains("21.0s left") && short.contains("requestTimeout (20s)"),
            "{short}"
        );
        assert!(fits(Some(now), timeout, grace, now + Duration::from_secs(1)).is_err());
    }
}
