//! What the host's logins (STS web identity, Keystone) share: when to renew, how
//! long a failure is held, and reading a bounded answer.

use std::time::{Duration, SystemTime};

/// Temporary credentials are renewed this long before they expire (or after half
/// their lifetime, if that is shorter).
pub(super) const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);
/// After a failed login (STS exchange, Keystone token), requests fail with its error for this long instead
/// of each asking again.
pub(super) const FAILURE_HOLD: Duration = Duration::from_secs(5);

/// When credentials obtained at `obtained` and expiring at `expiration` are renewed:
/// [`REFRESH_BEFORE_EXPIRY`] before they expire, or half-way for shorter lifetimes.
pub(super) fn refresh_time(obtained: SystemTime, expiration: SystemTime) -> SystemTime {
    let lifetime = expiration.duration_since(obtained).unwrap_or_default();
    expiration - REFRESH_BEFORE_EXPIRY.min(lifetime / 2)
}

/// A transport error with its causes (login URLs have no query to hide).
pub(super) fn transport_reason(error: &reqwest::Error) -> String {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    reason
}

/// The response body, refused past `limit` bytes.
pub(super) async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > limit {
            return Err(format!("response larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
