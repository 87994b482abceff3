//! HTTP answers and transport failures as the contract's [`CloudError`].
//!
//! The host's controllers act on the variant: `instance-not-found` deletes a Node,
//! `retry-after` delays the next attempt exactly as asked (upstream `api.RetryError`),
//! anything else is an error event and a retry with backoff. So:
//! - a 429 or 503 becomes [`CloudError::RetryAfter`], with the delay from
//!   `Retry-After` (delay-seconds or an HTTP-date) or [`DEFAULT_RETRY_MS`];
//! - a 404 becomes "not found" only where the caller says what that means:
//!   [`check_found`] (`None`), [`check_instance`] (`instance-not-found`), [`exists`];
//! - every other non-2xx answer is [`CloudError::Other`] naming the call, the status
//!   and the cloud's message.
//!
//! ```
//! use wasm_ccm_guest::cloud_error;
//! use wasm_ccm_guest::http::Response;
//! use wasm_ccm_guest::types::{CloudError, Retry};
//!
//! let throttled = Response::new(429).with_header("retry-after", "7");
//! assert_eq!(
//!     cloud_error::check(throttled, "list instances").unwrap_err(),
//!     CloudError::RetryAfter(Retry {
//!         delay_ms: 7_000,
//!         message: "list instances: throttled (HTTP 429)".into(),
//!     })
//! );
//! let gone = Response::new(404);
//! assert_eq!(cloud_error::exists(&gone, "get instance"), Ok(false));
//! ```

use std::time::SystemTime;

use crate::http::{self, Response};
use crate::types::{CloudError, Retry};

/// The delay asked for when the cloud throttles without a usable `Retry-After`.
pub const DEFAULT_RETRY_MS: u64 = 5_000;

/// The longest delay honoured from a `Retry-After` (one hour): a cloud's answer cannot
/// park a controller for days.
pub const MAX_RETRY_MS: u64 = 3_600_000;

/// Most characters of a cloud's error body kept in a message.
const MAX_MESSAGE_CHARS: usize = 300;

/// The delay asked for after a request the host did not start for the call's deadline:
/// the next call has a whole deadline of its own.
pub const DEADLINE_RETRY_MS: u64 = 1_000;

impl From<http::Error> for CloudError {
    /// A request not sent for the call's deadline ([`http::ErrorKind::Deadline`]):
    /// [`CloudError::RetryAfter`] of [`DEADLINE_RETRY_MS`], so the controller calls
    /// again soon and the provider resumes where the cloud is. Any other transport
    /// failure: [`CloudError::Other`] with the kind and details.
    fn from(error: http::Error) -> Self {
        if error.is_deadline() {
            return CloudError::RetryAfter(Retry {
                delay_ms: DEADLINE_RETRY_MS,
                message: error.to_string(),
            });
        }
        CloudError::Other(error.to_string())
    }
}

/// The error a transport failure of `what` means: `retry-after` for a request not
/// sent for the call's deadline (as the `From` conversion), else
/// [`CloudError::Other`] naming `what`.
pub fn transport(error: http::Error, what: &str) -> CloudError {
    if error.is_deadline() {
        return CloudError::from(error.context(what));
    }
    CloudError::Other(format!("{what}: {error}"))
}

/// [`CloudError::Other`] with `message`.
pub fn other(message: impl Into<String>) -> CloudError {
    CloudError::Other(message.into())
}

/// The response if it is a 2xx; otherwise the error it means (see the module docs).
pub fn check(response: Response, what: &str) -> Result<Response, CloudError> {
    if response.is_success() {
        Ok(response)
    } else {
        Err(from_status(&response, what))
    }
}

/// Like [`check`], but a 404 is `Ok(None)`: for lookups of things that may not exist.
pub fn check_found(response: Response, what: &str) -> Result<Option<Response>, CloudError> {
    if response.status == 404 {
        Ok(None)
    } else {
        check(response, what).map(Some)
    }
}

/// Like [`check`], but a 404 is [`CloudError::InstanceNotFound`]: for calls about one
/// instance, where the contract says the cloud definitely has no such instance.
pub fn check_instance(response: Response, what: &str) -> Result<Response, CloudError> {
    if response.status == 404 {
        Err(CloudError::InstanceNotFound)
    } else {
        check(response, what)
    }
}

/// `true` for a 2xx, `false` for a 404, otherwise the error the status means.
pub fn exists(response: &Response, what: &str) -> Result<bool, CloudError> {
    match response.status {
        200..=299 => Ok(true),
        404 => Ok(false),
        _ => Err(from_status(response, what)),
    }
}

/// The error a non-2xx answer means: 429/503 → [`CloudError::RetryAfter`], anything
/// else [`CloudError::Other`] with the status and the cloud's [`message`].
pub fn from_status(response: &Response, what: &str) -> CloudError {
    if response.status == 429 || response.status == 503 {
        return CloudError::RetryAfter(Retry {
            delay_ms: retry_after_ms(response, SystemTime::now()).unwrap_or(DEFAULT_RETRY_MS),
            message: format!("{what}: throttled (HTTP {})", response.status),
        });
    }
    match message(response) {
        None => CloudError::Other(format!("{what}: HTTP {}", response.status)),
        Some(message) => CloudError::Other(format!("{what}: HTTP {}: {message}", response.status)),
    }
}

/// The cloud's own words in an error answer: the message of the common JSON shapes
/// (`{"error": {"message": ..}}`, `{"message": ..}`, `{"error": ".."}`, OpenStack's
/// `{"itemNotFound": {"message": ..}}` and `{"faultstring": ..}`), else the start of
/// the body as text.
pub fn message(response: &Response) -> Option<String> {
    let from_json = serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .and_then(|v| json_message(&v));
    let text = from_json.unwrap_or_else(|| response.text());
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(MAX_MESSAGE_CHARS).collect())
}

fn json_message(value: &serde_json::Value) -> Option<String> {
    let object = value.as_object()?;
    // `faultstring`: Octavia's (and other WSME services') error body.
    if let Some(message) = ["message", "faultstring"]
        .iter()
        .find_map(|key| object.get(*key).and_then(|m| m.as_str()))
    {
        return Some(message.to_owned());
    }
    match object.get("error") {
        Some(serde_json::Value::String(message)) => return Some(message.clone()),
        Some(nested @ serde_json::Value::Object(_)) => return json_message(nested),
        _ => {}
    }
    // One wrapping object, as OpenStack answers.
    match object.values().collect::<Vec<_>>().as_slice() {
        [nested @ serde_json::Value::Object(_)] => json_message(nested),
        _ => None,
    }
}

/// The body of a 2xx answer decoded from JSON; an error naming the call otherwise.
pub fn json<T: serde::de::DeserializeOwned>(
    response: &Response,
    what: &str,
) -> Result<T, CloudError> {
    response
        .json()
        .map_err(|e| CloudError::Other(format!("{what}: unexpected response body: {e}")))
}

/// [`CloudError::RetryAfter`] with `delay_ms`, for clouds that signal throttling in
/// their own way (an error code in the body).
pub fn retry_after(delay_ms: u64, message: impl Into<String>) -> CloudError {
    CloudError::RetryAfter(Retry {
        delay_ms: delay_ms.min(MAX_RETRY_MS),
        message: message.into(),
    })
}

/// The delay a `Retry-After` header asks for, in milliseconds, capped at
/// [`MAX_RETRY_MS`]: delay-seconds (`120`) or an HTTP-date (`Wed, 21 Oct 2026 07:28:00
/// GMT`, relative to `now`; a date in the past is 0). `None` without a readable one.
pub fn retry_after_ms(response: &Response, now: SystemTime) -> Option<u64> {
    let value = response.header("retry-after")?.trim();
    let ms = if let Ok(seconds) = value.parse::<u64>() {
        seconds.saturating_mul(1000)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        match at.duration_since(now) {
            Ok(wait) => u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            Err(_) => 0,
        }
    };
    Some(ms.min(MAX_RETRY_MS))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_request_not_sent_for_the_deadline_is_a_prompt_retry() {
        let error = http::Error::new(http::ErrorKind::Deadline, "2.0s left");
        assert_eq!(
            CloudError::from(error),
            CloudError::RetryAfter(Retry {
                delay_ms: DEADLINE_RETRY_MS,
                message: "not sent before the call's deadline: 2.0s left".into(),
            })
        );
        let timeout = http::Error::new(http::ErrorKind::Timeout, "read");
        assert!(matches!(CloudError::from(timeout), CloudError::Other(_)));
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let with = |v: &str| Response::new(503).with_header("Retry-After", v);
        assert_eq!(retry_after_ms(&with("3"), now), Some(3_000));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(retry_after_ms(&with(&later), now), Some(90_000));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after_ms(&with(&earlier), now), Some(0));
        assert_eq!(retry_after_ms(&with("999999999"), now), Some(MAX_RETRY_MS));
        assert_eq!(retry_after_ms(&with("soon"), now), None);
        assert_eq!(retry_after_ms(&Response::new(503), now), None);
    }

    #[test]
    fn statuses_map_to_the_contract() {
        let throttled = check(Response::new(503), "x").unwrap_err();
        assert_eq!(
            throttled,
            CloudError::RetryAfter(Retry {
                delay_ms: DEFAULT_RETRY_MS,
                message: "x: throttled (HTTP 503)".into()
            })
        );
        assert_eq!(
            check_instance(Response::new(404), "x"),
            Err(CloudError::InstanceNotFound)
        );
        assert_eq!(check_found(Response::new(404), "x"), Ok(None));
        assert_eq!(
            check(
                Response::new(500).with_body("text/plain", "disk on fire\n"),
                "create"
            ),
            Err(CloudError::Other("create: HTTP 500: disk on fire".into()))
        );
        assert_eq!(exists(&Response::new(204), "x"), Ok(true));
        let json = |body: &str| Response::new(409).with_body("application/json", body);
        for body in [
            r#"{"error": {"code": 9, "message": "name taken"}}"#,
            r#"{"message": "name taken"}"#,
            r#"{"error": "name taken"}"#,
            r#"{"conflictingRequest": {"code": 409, "message": "name taken"}}"#,
        ] {
            assert_eq!(
                message(&json(body)).as_deref(),
                Some("name taken"),
                "{body}"
            );
        }
        assert_eq!(message(&json("[1]")).as_deref(), Some("[1]"));
        assert!(matches!(
            exists(&Response::new(403), "x"),
            Err(CloudError::Other(m)) if m == "x: HTTP 403"
        ));
    }
}
