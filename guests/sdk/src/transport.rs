//! Where [`Request::send`](crate::http::Request::send) goes: the host's broker in a
//! component (the buffered `wasm-ccm:http/client` import: the whole request in, the
//! whole response out, one host call), or a [`Transport`] installed for the current
//! thread: [`WasiHttp`] (the same broker over `wasi:http/outgoing-handler`), a
//! [`MockTransport`](crate::testing::MockTransport) in native tests.

use std::cell::RefCell;
use std::rc::Rc;

use crate::http::{Error, Request, Response};

/// Sends one request and reads the whole response.
///
/// The component's transport is the host; install another one with
/// [`MockTransport::install`](crate::testing::MockTransport::install) (tests) or
/// [`install`] (for example to record traffic).
pub trait Transport {
    /// Sends `request`.
    fn send(&self, request: &Request) -> Result<Response, Error>;
}

thread_local! {
    static INSTALLED: RefCell<Option<Rc<dyn Transport>>> = const { RefCell::new(None) };
}

/// Routes this thread's requests to `transport` until the guard is dropped.
pub fn install(transport: Rc<dyn Transport>) -> Installed {
    let previous = INSTALLED.with(|t| t.borrow_mut().replace(transport));
    Installed { previous }
}

/// Restores the previous transport when dropped.
#[must_use = "the transport is uninstalled when this guard is dropped"]
pub struct Installed {
    previous: Option<Rc<dyn Transport>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        INSTALLED.with(|t| *t.borrow_mut() = previous);
    }
}

impl Request {
    /// Sends the request and reads the whole response. Any status is a response;
    /// judge it with [`crate::cloud_error`].
    pub fn send(self) -> Result<Response, Error> {
        self.sendable()?;
        let installed = INSTALLED.with(|t| t.borrow().clone());
        match installed {
            Some(transport) => transport.send(&self),
            None => host::send(&self),
        }
    }
}

/// The host's broker over `wasi:http/outgoing-handler`: the same rules as the default
/// transport, in a request resource, its body stream and a response future per
/// request. For comparing the two (the `hostile` fixture, benchmarks); install it with
/// [`install`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WasiHttp;

impl Transport for WasiHttp {
    fn send(&self, request: &Request) -> Result<Response, Error> {
        host::send_wasi_http(request)
    }
}

#[cfg(target_arch = "wasm32")]
mod host {
    //! Blocking HTTP over the host's `wasm-ccm:http/client` and over
    //! `wasi:http/outgoing-handler`.

    use crate::bindings::wasi::http::outgoing_handler;
    use crate::bindings::wasi::http::types::{
        ErrorCode, Fields, IncomingBody, Method as WasiMethod, OutgoingBody, OutgoingRequest,
        Scheme,
    };
    use crate::bindings::wasi::io::streams::StreamError;
    use crate::bindings::wasm_ccm::http::client;
    use crate::http::{Error, ErrorKind, Method, Request, Response};

    impl From<ErrorCode> for Error {
        fn from(code: ErrorCode) -> Self {
            if let ErrorCode::InternalError(Some(message)) = &code
                && let Some(rest) = message.strip_prefix(crate::http::DEADLINE_MARKER)
            {
                return Error::new(ErrorKind::Deadline, rest.trim_start());
            }
            let kind = match &code {
                ErrorCode::HttpRequestDenied => ErrorKind::Denied,
                ErrorCode::ConnectionRefused => ErrorKind::Refused,
                ErrorCode::ConnectionTerminated
                | ErrorCode::ConnectionLimitReached
                | ErrorCode::DestinationNotFound
                | ErrorCode::DestinationUnavailable
                | ErrorCode::DestinationIpProhibited
                | ErrorCode::DestinationIpUnroutable
                | ErrorCode::DnsTimeout
                | ErrorCode::DnsError(_) => ErrorKind::Unreachable,
                ErrorCode::ConnectionTimeout
                | ErrorCode::ConnectionReadTimeout
                | ErrorCode::ConnectionWriteTimeout
                | ErrorCode::HttpResponseTimeout => ErrorKind::Timeout,
                ErrorCode::HttpRequestBodySize(_)
                | ErrorCode::HttpRequestHeaderSize(_)
                | ErrorCode::HttpRequestHeaderSectionSize(_)
                | ErrorCode::HttpResponseBodySize(_)
                | ErrorCode::HttpResponseHeaderSize(_)
                | ErrorCode::HttpResponseHeaderSectionSize(_) => ErrorKind::TooLarge,
                _ => ErrorKind::Other,
            };
            Error::new(kind, format!("{code:?}"))
        }
    }

    fn method(method: &Method) -> WasiMethod {
        match method {
            Method::Get => WasiMethod::Get,
            Method::Head => WasiMethod::Head,
            Method::Post => WasiMethod::Post,
            Method::Put => WasiMethod::Put,
            Method::Patch => WasiMethod::Patch,
            Method::Delete => WasiMethod::Delete,
            Method::Options => WasiMethod::Options,
            Method::Other(name) => WasiMethod::Other(name.clone()),
        }
    }

    /// The request's headers, with `content-length` when it has a body (the host
    /// refuses a body without one or with another length).
    fn headers_with_length(request: &Request) -> Vec<(String, Vec<u8>)> {
        let mut headers = request.headers().to_vec();
        if !request.body_bytes().is_empty() {
            headers.push((
                "content-length".into(),
                request.body_bytes().len().to_string().into_bytes(),
            ));
        }
        headers
    }

    /// The whole request in one call to the host's buffered client.
    pub(super) fn send(request: &Request) -> Result<Response, Error> {
        let url = request.url()?;
        let headers = headers_with_length(request);
        let response = client::send(&client::Request {
            method: request.method().as_str().to_owned(),
            url: format!("{}://{}{}", url.scheme, url.authority, url.path_and_query),
            headers,
            body: request.body_bytes().to_vec(),
        })?;
        Ok(Response {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }

    /// The request over `wasi:http/outgoing-handler`'s resources and streams.
    pub(super) fn send_wasi_http(request: &Request) -> Result<Response, Error> {
        let url = request.url()?;
        let other = |message: String| Error::new(ErrorKind::Other, message);
        let headers = headers_with_length(request);
        let fields =
            Fields::from_list(&headers).map_err(|e| other(format!("invalid header: {e:?}")))?;
        let outgoing = OutgoingRequest::new(fields);
        let bad = |what: &str| Error::new(ErrorKind::Url, format!("{url}: invalid {what}"));
        outgoing
            .set_method(&method(request.method()))
            .map_err(|_| bad("method"))?;
        let scheme = if url.scheme == "https" {
            Scheme::Https
        } else {
            Scheme::Http
        };
        outgoing
            .set_scheme(Some(&scheme))
            .map_err(|_| bad("scheme"))?;
        outgoing
            .set_authority(Some(&url.authority))
            .map_err(|_| bad("authority"))?;
        outgoing
            .set_path_with_query(Some(&url.path_and_query))
            .map_err(|_| bad("path"))?;
        let body = outgoing
            .body()
            .map_err(|_| other("request body already taken".into()))?;
        let future = outgoing_handler::handle(outgoing, None)?;
        // A server (or the host) may answer before reading the whole body, e.g. a 429
        // or a 413: a failed write is reported only if no response comes.
        let mut write_error = None;
        if !request.body_bytes().is_empty() {
            match body.write() {
                Ok(stream) => {
                    for chunk in request.body_bytes().chunks(4096) {
                        if let Err(e) = stream.blocking_write_and_flush(chunk) {
                            write_error = Some(other(format!("writing request body: {e:?}")));
                            break;
                        }
                    }
                    drop(stream);
                }
                Err(()) => write_error = Some(other("request body stream unavailable".into())),
            }
        }
        if let Err(code) = OutgoingBody::finish(body, None) {
            write_error.get_or_insert(Error::from(code));
        }
        let incoming = loop {
            match future.get() {
                Some(result) => break result,
                None => future.subscribe().block(),
            }
        };
        let response = match incoming.map_err(|_| other("response already taken".into()))? {
            Ok(response) => response,
            Err(code) => return Err(write_error.unwrap_or_else(|| Error::from(code))),
        };
        let status = response.status();
        let headers = response.headers().entries();
        let body = response
            .consume()
            .map_err(|_| other("response body already taken".into()))?;
        let bytes = read_body(&body)?;
        IncomingBody::finish(body);
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }

    fn read_body(body: &IncomingBody) -> Result<Vec<u8>, Error> {
        let stream = body
            .stream()
            .map_err(|_| Error::new(ErrorKind::Other, "response body stream unavailable"))?;
        let mut bytes = Vec::new();
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    // The host ends a body it stops reading (a deadline or a size
                    // limit) with an error code; keep its kind.
                    let error = match crate::bindings::wasi::http::types::http_error_code(&e) {
                        Some(code) => Error::from(code),
                        None => Error::new(ErrorKind::Other, e.to_debug_string()),
                    };
                    return Err(error.context("reading response body"));
                }
            }
        }
        Ok(bytes)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod host {
    //! Outside a component there is no host to send through.

    use crate::http::{Error, ErrorKind, Request, Response};

    pub(super) fn send_wasi_http(request: &Request) -> Result<Response, Error> {
        send(request)
    }

    pub(super) fn send(request: &Request) -> Result<Response, Error> {
        Err(Error::new(
            ErrorKind::Unreachable,
            format!(
                "{} {}: no transport outside a component; install a \
                 wasm_ccm_guest::testing::MockTransport",
                request.method().as_str(),
                request.url_text()
            ),
        ))
    }
}
