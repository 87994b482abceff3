//! Blocking HTTP over `wasi:http/outgoing-handler`.
//!
//! Every request goes to the host's egress broker, which checks the provider policy's
//! allowlist, adds credentials for the destination, and enforces timeouts and size
//! limits. A refused request fails with [`Error::Denied`] and never reaches the network.

use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;
use crate::url::Url;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The URL cannot be parsed.
    Url(String),
    /// The host refused the request (destination not allowed, or a forbidden header).
    Denied,
    /// The request failed in transport (connection refused, timeout, oversized body...).
    Transport(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Url(e) => write!(f, "{e}"),
            Error::Denied => write!(f, "request denied by the host's egress policy"),
            Error::Transport(e) => write!(f, "request failed: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ErrorCode> for Error {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::HttpRequestDenied => Error::Denied,
            other => Error::Transport(format!("{other:?}")),
        }
    }
}

/// An outgoing request.
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// A fully read response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header (case-insensitive), if it is UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// True for 2xx statuses.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as (lossy) text, for error messages.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Request {
    fn new(method: Method, url: &str) -> Self {
        Self {
            method,
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn get(url: &str) -> Self {
        Self::new(Method::Get, url)
    }

    /// A request with any method by name (`GET`, `HEAD`, `PATCH`, ... or an
    /// extension method).
    pub fn method(method: &str, url: &str) -> Self {
        let method = match method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "CONNECT" => Method::Connect,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "PATCH" => Method::Patch,
            _ => Method::Other(method.to_owned()),
        };
        Self::new(method, url)
    }

    pub fn post(url: &str) -> Self {
        Self::new(Method::Post, url)
    }

    pub fn put(url: &str) -> Self {
        Self::new(Method::Put, url)
    }

    pub fn delete(url: &str) -> Self {
        Self::new(Method::Delete, url)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
        self
    }

    /// Sets a body with its `content-type`.
    pub fn body(mut self, content_type: &str, body: Vec<u8>) -> Self {
        self.body = body;
        self.header("content-type", content_type)
    }

    /// Sets a body with `content-type: application/json`.
    pub fn json_body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self.header("content-type", "application/json")
    }

    /// Sends the request and reads the whole response.
    pub fn send(self) -> Result<Response, Error> {
        let url = Url::parse(&self.url).map_err(|e| Error::Url(e.to_string()))?;
        let mut headers = self.headers;
        if !self.body.is_empty() {
            headers.push((
                "content-length".into(),
                self.body.len().to_string().into_bytes(),
            ));
        }
        let fields = Fields::from_list(&headers)
            .map_err(|e| Error::Transport(format!("invalid header: {e:?}")))?;
        let request = OutgoingRequest::new(fields);
        let bad = |what: &str| Error::Url(format!("{}: invalid {what}", self.url));
        request
            .set_method(&self.method)
            .map_err(|_| bad("method"))?;
        let scheme = if url.scheme == "https" {
            Scheme::Https
        } else {
            Scheme::Http
        };
        request
            .set_scheme(Some(&scheme))
            .map_err(|_| bad("scheme"))?;
        request
            .set_authority(Some(&url.authority))
            .map_err(|_| bad("authority"))?;
        request
            .set_path_with_query(Some(&url.path_and_query))
            .map_err(|_| bad("path"))?;
        let body = request
            .body()
            .map_err(|_| Error::Transport("request body already taken".into()))?;
        let future = outgoing_handler::handle(request, None)?;
        if !self.body.is_empty() {
            let stream = body
                .write()
                .map_err(|_| Error::Transport("request body stream unavailable".into()))?;
            for chunk in self.body.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|e| Error::Transport(format!("writing request body: {e:?}")))?;
            }
            drop(stream);
        }
        OutgoingBody::finish(body, None)?;
        let incoming = loop {
            match future.get() {
                Some(result) => break result,
                None => future.subscribe().block(),
            }
        };
        let response =
            incoming.map_err(|_| Error::Transport("response already taken".into()))??;
        let status = response.status();
        let headers = response.headers().entries();
        let body = response
            .consume()
            .map_err(|_| Error::Transport("response body already taken".into()))?;
        let bytes = read_body(&body)?;
        IncomingBody::finish(body);
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }
}

fn read_body(body: &IncomingBody) -> Result<Vec<u8>, Error> {
    let stream = body
        .stream()
        .map_err(|_| Error::Transport("response body stream unavailable".into()))?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(Error::Transport(format!(
                    "reading response body: {}",
                    e.to_debug_string()
                )));
            }
        }
    }
    Ok(bytes)
}
