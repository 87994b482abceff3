//! The `wasm-ccm:http/client` import: one whole request through the broker in one
//! call, answered with the whole response.
//!
//! A request over `wasi:http/outgoing-handler` takes a dozen host calls (header
//! fields, the request resource, its body stream, the future, the response, its body
//! stream) and a task per request; a provider that sends whole requests and reads
//! whole answers, as every cloud API client does, pays for none of it here. The
//! request goes to the same
//! [`Egress::send_buffered`](super::http_egress::Egress::send_buffered) as a
//! `wasi:http` one, which checks it under the same rules: this module only turns the
//! record into a [`GuestRequest`] (valid method, header names and values) and the
//! answer back.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use wasmtime_wasi_http::Error as HttpError;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, FieldSizePayload};

use super::HostState;
use super::http_egress::exchange::GuestRequest;

// Generated from `wit/deps/wasm-ccm-http.wit`; the WIT documents each item.
#[allow(missing_docs)]
mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        inline: "
            package wasm-ccm:host-http-client;
            world client {
                import wasm-ccm:http/client@0.1.0;
            }
        ",
        world: "wasm-ccm:host-http-client/client",
        imports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// The generated host side of `wasm-ccm:http/client`.
pub use bindings::wasm_ccm::http::client;

/// The import's fully qualified name.
pub const INTERFACE: &str = "wasm-ccm:http/client@0.1.0";

impl client::Host for HostState {
    async fn send(&mut self, request: client::Request) -> Result<client::Response, ErrorCode> {
        let request = guest_request(request)?;
        let deadline = self.hooks.deadline();
        let answer = self
            .hooks
            .egress()
            .clone()
            .send_buffered(request, deadline)
            .await
            .map_err(error_code)?;
        Ok(client::Response {
            status: answer.status.as_u16(),
            headers: answer
                .headers
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect(),
            body: answer.body.into(),
        })
    }
}

/// The guest's record as the broker's request: a valid method, header names and
/// values (the broker checks the rest).
fn guest_request(request: client::Request) -> Result<GuestRequest, ErrorCode> {
    let method = Method::from_bytes(request.method.as_bytes())
        .map_err(|_| ErrorCode::HttpRequestMethodInvalid)?;
    let mut headers = http::HeaderMap::with_capacity(request.headers.len());
    for (name, value) in request.headers {
        let invalid = || ErrorCode::InternalError(Some(format!("header {name:?}: InvalidSyntax")));
        let value = HeaderValue::from_bytes(&value).map_err(|_| invalid())?;
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?,
            value,
        );
    }
    Ok(GuestRequest {
        method,
        url: request.url,
        headers,
        body: Bytes::from(request.body),
    })
}

/// The `wasi:http` error code a broker error is reported to the guest as.
fn error_code(error: HttpError) -> ErrorCode {
    use HttpError as E;
    let size = |field_name: Option<String>, field_size: Option<u32>| FieldSizePayload {
        field_name,
        field_size,
    };
    match error {
        E::HttpRequestBodySize(n) => ErrorCode::HttpRequestBodySize(n),
        E::DnsTimeout => ErrorCode::DnsTimeout,
        E::DnsError { rcode, info_code } => ErrorCode::DnsError(
            wasmtime_wasi_http::p2::bindings::http::types::DnsErrorPayload { rcode, info_code },
        ),
        E::DestinationNotFound => ErrorCode::DestinationNotFound,
        E::DestinationUnavailable => ErrorCode::DestinationUnavailable,
        E::DestinationIpProhibited => ErrorCode::DestinationIpProhibited,
        E::DestinationIpUnroutable => ErrorCode::DestinationIpUnroutable,
        E::ConnectionRefused => ErrorCode::ConnectionRefused,
        E::ConnectionTerminated => ErrorCode::ConnectionTerminated,
        E::ConnectionTimeout => ErrorCode::ConnectionTimeout,
        E::ConnectionReadTimeout => ErrorCode::ConnectionReadTimeout,
        E::ConnectionWriteTimeout => ErrorCode::ConnectionWriteTimeout,
        E::ConnectionLimitReached => ErrorCode::ConnectionLimitReached,
        E::TlsProtocolError => ErrorCode::TlsProtocolError,
        E::TlsCertificateError => ErrorCode::TlsCertificateError,
        E::HttpRequestDenied => ErrorCode::HttpRequestDenied,
        E::HttpRequestMethodInvalid => ErrorCode::HttpRequestMethodInvalid,
        E::HttpRequestUriInvalid => ErrorCode::HttpRequestUriInvalid,
        E::HttpRequestHeaderSectionSize(n) => ErrorCode::HttpRequestHeaderSectionSize(n),
        E::HttpRequestHeaderSize {
            field_name,
            field_size,
        } => ErrorCode::HttpRequestHeaderSize(Some(size(field_name, field_size))),
        E::HttpResponseIncomplete => ErrorCode::HttpResponseIncomplete,
        E::HttpResponseHeaderSectionSize(n) => ErrorCode::HttpResponseHeaderSectionSize(n),
        E::HttpResponseBodySize(n) => ErrorCode::HttpResponseBodySize(n),
        E::HttpResponseTimeout => ErrorCode::HttpResponseTimeout,
        E::HttpProtocolError => ErrorCode::HttpProtocolError,
        E::InternalError(message) => ErrorCode::InternalError(message),
        other => ErrorCode::InternalError(Some(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &[u8])]) -> client::Request {
        client::Request {
            method: "POST".into(),
            url: "https://api.example.com/v1?x=1".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_vec()))
                .collect(),
            body: b"hi".to_vec(),
        }
    }

    #[test]
    fn a_whole_request_becomes_the_brokers_request() {
        let built = guest_request(request(&[
            ("content-type", b"text/plain"),
            ("x-a", b"1"),
            ("x-a", b"2"),
        ]))
        .unwrap();
        assert_eq!(built.method, Method::POST);
        assert_eq!(built.url, "https://api.example.com/v1?x=1");
        assert_eq!(built.headers["content-type"], "text/plain");
        assert_eq!(built.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(built.body, "hi");
    }

    #[test]
    fn invalid_methods_names_and_values_are_refused() {
        assert!(guest_request(request(&[("bad name", b"x")])).is_err());
        assert!(guest_request(request(&[("x-a", b"line\nbreak")])).is_err());
        let mut r = request(&[]);
        r.method = "GE T".into();
        assert!(matches!(
            guest_request(r),
            Err(ErrorCode::HttpRequestMethodInvalid)
        ));
    }
}
