//! Blocking HTTP through the host's broker.
//!
//! Every request goes to the host, which checks the provider policy's allowlist, adds
//! credentials for the destination, and enforces deadlines and size limits. A refused
//! request fails with [`ErrorKind::Denied`] and never reaches the network.
//!
//! ```
//! use wasm_ccm_guest::http::Request;
//!
//! let request = Request::get("https://compute.example.com/v1/instances")
//!     .query("name", "node 1")
//!     .query("state", "running")
//!     .header("accept", "application/json");
//! assert_eq!(
//!     request.url_text(),
//!     "https://compute.example.com/v1/instances?name=node%201&state=running"
//! );
//! ```
//!
//! Map the answer to the contract's errors with [`crate::cloud_error`].

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::url::{Url, encode_component};

/// What kind of failure a transport error is; the message says the details. More kinds
/// may come: match with a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The URL cannot be parsed.
    Url,
    /// The host refused the request: the destination is not in the policy's
    /// allowlist, a header is forbidden, or the credential is unavailable. Nothing
    /// left the sandbox.
    Denied,
    /// The destination refused the connection: nothing listens on that port.
    Refused,
    /// The destination could not be reached (DNS, route, connection reset).
    Unreachable,
    /// A deadline passed: connecting, waiting for the answer, or reading the body.
    Timeout,
    /// Not sent: the request could outlive the current call (the host starts one only
    /// while the policy's `requestTimeout` fits before the call's deadline). Nothing
    /// left the sandbox; answer `retry-after` and go on in the next call, which the
    /// [`CloudError`](crate::types::CloudError) conversion does.
    Deadline,
    /// A request or response exceeded the host's size limits.
    TooLarge,
    /// A request body could not be encoded.
    Encode,
    /// Any other transport failure.
    Other,
}

/// How the host's message begins for a request it did not start because the call's
/// deadline was too close (an `internal-error`); read as [`ErrorKind::Deadline`].
pub const DEADLINE_MARKER: &str = "call deadline:";

/// A request that did not produce a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True when a deadline passed.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// True when the request was not sent because the call's deadline is too close.
    pub fn is_deadline(&self) -> bool {
        self.kind == ErrorKind::Deadline
    }

    /// True when the host's egress policy refused the request.
    pub fn is_denied(&self) -> bool {
        self.kind == ErrorKind::Denied
    }

    /// True when the destination refused the connection.
    pub fn is_refused(&self) -> bool {
        self.kind == ErrorKind::Refused
    }

    /// The same error with `context` before its message.
    pub fn context(self, context: &str) -> Self {
        Self {
            kind: self.kind,
            message: format!("{context}: {}", self.message),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            // The host logs which rule refused it; the guest learns nothing more.
            ErrorKind::Denied => return write!(f, "request denied by the host's egress policy"),
            ErrorKind::Url => "invalid URL",
            ErrorKind::Refused => "connection refused",
            ErrorKind::Unreachable => "destination unreachable",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Deadline => "not sent before the call's deadline",
            ErrorKind::TooLarge => "too large for the host's limits",
            ErrorKind::Encode => "request body not encodable",
            ErrorKind::Other => "request failed",
        };
        write!(f, "{what}: {}", self.message)
    }
}

impl std::error::Error for Error {}

/// An HTTP method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
    /// An extension method, by name.
    Other(String),
}

impl Method {
    /// Parses a method name (case-insensitive for the standard ones).
    pub fn parse(name: &str) -> Self {
        match name.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            _ => Method::Other(name.to_owned()),
        }
    }

    /// The method's name, e.g. `GET`.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Other(name) => name,
        }
    }
}

/// An outgoing request, built then [sent](Request::send).
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    /// Set when a body could not be encoded; reported by `send`.
    encode_error: Option<String>,
}

impl Request {
    /// A request with `method` to `url` (`http(s)://host[:port][/path][?query]`).
    pub fn new(method: Method, url: &str) -> Self {
        Self {
            method,
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            encode_error: None,
        }
    }

    /// A request with any method by name (`GET`, `PATCH`, ... or an extension).
    pub fn method_named(method: &str, url: &str) -> Self {
        Self::new(Method::parse(method), url)
    }

    /// `GET url`.
    pub fn get(url: &str) -> Self {
        Self::new(Method::Get, url)
    }

    /// `HEAD url`.
    pub fn head(url: &str) -> Self {
        Self::new(Method::Head, url)
    }

    /// `POST url`.
    pub fn post(url: &str) -> Self {
        Self::new(Method::Post, url)
    }

    /// `PUT url`.
    pub fn put(url: &str) -> Self {
        Self::new(Method::Put, url)
    }

    /// `PATCH url`.
    pub fn patch(url: &str) -> Self {
        Self::new(Method::Patch, url)
    }

    /// `DELETE url`.
    pub fn delete(url: &str) -> Self {
        Self::new(Method::Delete, url)
    }

    /// Appends `name=value` to the URL's query, percent-encoded.
    pub fn query(mut self, name: &str, value: &str) -> Self {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        self.url = format!(
            "{}{separator}{}={}",
            self.url,
            encode_component(name),
            encode_component(value)
        );
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
        self
    }

    /// Sets a raw body with its `content-type`.
    pub fn body(mut self, content_type: &str, body: Vec<u8>) -> Self {
        self.body = body;
        self.header("content-type", content_type)
    }

    /// Sets `value` serialized as JSON, with `content-type: application/json`.
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => self.body("application/json", body),
            Err(e) => {
                self.encode_error = Some(format!("JSON body: {e}"));
                self
            }
        }
    }

    /// Sets a form body (`application/x-www-form-urlencoded`), fields in order,
    /// encoded as HTML forms are (a space is `+`), which form parsers that re-encode
    /// what they read (to check a signature over the body) reproduce.
    pub fn form<K: AsRef<str>, V: AsRef<str>>(self, fields: &[(K, V)]) -> Self {
        let encode = |s: &str| encode_component(s).replace("%20", "+");
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k.as_ref()), encode(v.as_ref())))
            .collect::<Vec<_>>()
            .join("&");
        self.body(
            "application/x-www-form-urlencoded; charset=utf-8",
            body.into_bytes(),
        )
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The URL as given, with the query added by [`query`](Self::query).
    pub fn url_text(&self) -> &str {
        &self.url
    }

    /// The URL, parsed.
    pub fn url(&self) -> Result<Url, Error> {
        Url::parse(&self.url).map_err(|e| Error::new(ErrorKind::Url, e.to_string()))
    }

    /// The headers, names in lower case.
    pub fn headers(&self) -> &[(String, Vec<u8>)] {
        &self.headers
    }

    /// The first value of a header (case-insensitive), if it is UTF-8.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The body.
    pub fn body_bytes(&self) -> &[u8] {
        &self.body
    }

    /// Whether the request can be sent: its query and body encoded, its URL valid.
    /// [`Request::send`] (in the transport module) asks before sending.
    pub(crate) fn sendable(&self) -> Result<(), Error> {
        if let Some(e) = &self.encode_error {
            return Err(Error::new(ErrorKind::Encode, e.clone()));
        }
        self.url().map(drop)
    }
}

/// A fully read response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A response with `status` and no headers or body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A response with a JSON body.
    pub fn with_json(status: u16, value: &serde_json::Value) -> Self {
        Self::new(status).with_body("application/json", value.to_string().into_bytes())
    }

    /// This response with `body` and its `content-type`.
    pub fn with_body(mut self, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self.with_header("content-type", content_type)
    }

    /// This response with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
        self
    }

    /// The first value of a header (case-insensitive), if it is UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// True for 2xx statuses.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as (lossy) text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body decoded from JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_queries_and_bodies() {
        let request = Request::patch("http://h/x?a=1")
            .query("b", "c/d")
            .form(&[("Action", "Run"), ("Tag.1", "a b")]);
        assert_eq!(request.url_text(), "http://h/x?a=1&b=c%2Fd");
        assert_eq!(request.method().as_str(), "PATCH");
        assert_eq!(request.body_bytes(), b"Action=Run&Tag.1=a+b");
        assert_eq!(
            request.header_value("Content-Type"),
            Some("application/x-www-form-urlencoded; charset=utf-8")
        );
        let request = Request::put("http://h/").json(&serde_json::json!({"a": 1}));
        assert_eq!(request.body_bytes(), br#"{"a":1}"#);
        assert_eq!(Method::parse("purge"), Method::Other("purge".into()));
        assert_eq!(Method::parse("head"), Method::Head);
    }

    #[test]
    fn a_bad_url_fails_before_any_transport() {
        let error = Request::get("ftp://h/").send().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Url);
    }
}
