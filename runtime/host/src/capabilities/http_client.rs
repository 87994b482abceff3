//! The `wasm-ccm:http/client` import: one whole request through the broker in one
//! call, answered with the whole response.
//!
//! A request over `wasi:http/outgoing-handler` takes a dozen host calls (header
//! fields, the request resource, its body stream, the future, the response, its body
//! stream) and a task per request; a provider that sends whole requests and reads
//! whole answers, as every cloud API client does, pays for none of it here. The
//! request goes to the same [`Egress::send`](super::http_egress::Egress) as a
//! `wasi:http` one, so the broker's rules hold whatever way it came: this module only
//! turns the record into an `http::Request` under the rules `wasi:http` applies to
//! guests (valid names and values, no hop-by-hop headers, a bounded header section, a
//! `content-length` that is the body's, a bounded body) and the answer back.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Uri};
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, FieldSizePayload, HeaderError};
use wasmtime_wasi_http::{DEFAULT_FORBIDDEN_HEADERS, Error as HttpError, WasiBody};

use super::{HostState, MAX_FIELDS_BYTES};
use crate::policy::MAX_REQUEST_BODY_BYTES;

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
        let request = into_http(request)?;
        let deadline = self.hooks.deadline();
        let response = self
            .hooks
            .egress()
            .clone()
            .send(request, deadline)
            .await
            .map_err(error_code)?;
        let (parts, body) = response.into_parts();
        // The broker hands back a body it has read whole (bounded by the policy).
        let body = body.collect().await.map_err(error_code)?.to_bytes();
        Ok(client::Response {
            status: parts.status.as_u16(),
            headers: parts
                .headers
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect(),
            body: body.into(),
        })
    }
}

/// The guest's record as the request the broker takes, under `wasi:http`'s rules.
fn into_http(request: client::Request) -> Result<http::Request<WasiBody>, ErrorCode> {
    let method = Method::from_bytes(request.method.as_bytes())
        .map_err(|_| ErrorCode::HttpRequestMethodInvalid)?;
    let uri: Uri = request
        .url
        .parse()
        .map_err(|_| ErrorCode::HttpRequestUriInvalid)?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.authority().is_some() => {}
        _ => return Err(ErrorCode::HttpRequestUriInvalid),
    }
    if request.body.len() > MAX_REQUEST_BODY_BYTES {
        return Err(ErrorCode::HttpRequestBodySize(Some(
            request.body.len() as u64
        )));
    }
    let mut headers = http::HeaderMap::with_capacity(request.headers.len());
    let mut section = 0usize;
    for (name, value) in request.headers {
        let header_error =
            |e: HeaderError| ErrorCode::InternalError(Some(format!("header {name:?}: {e:?}")));
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| header_error(HeaderError::InvalidSyntax))?;
        if DEFAULT_FORBIDDEN_HEADERS.contains(&name) {
            return Err(header_error(HeaderError::Forbidden));
        }
        let value = HeaderValue::from_bytes(&value)
            .map_err(|_| header_error(HeaderError::InvalidSyntax))?;
        // As `wasi:http` counts a fields resource: name and value bytes.
        section += name.as_str().len() + value.len();
        if section > MAX_FIELDS_BYTES {
            return Err(ErrorCode::HttpRequestHeaderSectionSize(Some(
                MAX_FIELDS_BYTES as u32,
            )));
        }
        headers.append(name, value);
    }
    // A `content-length` other than the body's would let the body run into the next
    // request on a pooled connection.
    for value in headers.get_all(http::header::CONTENT_LENGTH) {
        if value.to_str().ok().and_then(|v| v.parse::<usize>().ok()) != Some(request.body.len()) {
            return Err(ErrorCode::HttpRequestHeaderSize(Some(FieldSizePayload {
                field_name: Some("content-length".into()),
                field_size: None,
            })));
        }
    }
    let mut built = http::Request::new(
        Full::new(Bytes::from(request.body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *built.method_mut() = method;
    *built.uri_mut() = uri;
    *built.headers_mut() = headers;
    Ok(built)
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

    fn request(headers: &[(&str, &str)], body: &[u8]) -> client::Request {
        client::Request {
            method: "POST".into(),
            url: "https://api.example.com/v1?x=1".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.to_vec(),
        }
    }

    #[test]
    fn a_whole_request_becomes_the_brokers_request() {
        let built = into_http(request(
            &[("content-type", "text/plain"), ("content-length", "2")],
            b"hi",
        ))
        .unwrap();
        assert_eq!(built.method(), Method::POST);
        assert_eq!(built.uri(), "https://api.example.com/v1?x=1");
        assert_eq!(built.headers()["content-type"], "text/plain");
    }

    #[test]
    fn what_wasi_http_refuses_is_refused() {
        for header in ["host", "connection", "transfer-encoding", "upgrade"] {
            let err = into_http(request(&[(header, "x")], b"")).unwrap_err();
            assert!(
                matches!(&err, ErrorCode::InternalError(Some(m)) if m.contains("Forbidden")),
                "{header}: {err:?}"
            );
        }
        assert!(into_http(request(&[("bad name", "x")], b"")).is_err());
        assert!(into_http(request(&[("x-a", "line\nbreak")], b"")).is_err());
        let big = "v".repeat(MAX_FIELDS_BYTES);
        assert!(matches!(
            into_http(request(&[("x-big", &big)], b"")),
            Err(ErrorCode::HttpRequestHeaderSectionSize(_))
        ));
        assert!(matches!(
            into_http(request(&[], &vec![0; MAX_REQUEST_BODY_BYTES + 1])),
            Err(ErrorCode::HttpRequestBodySize(_))
        ));
        for url in [
            "/relative",
            "ftp://example.com/",
            "http:///no-host",
            "not a url",
        ] {
            let mut r = request(&[], b"");
            r.url = url.into();
            assert!(
                matches!(into_http(r), Err(ErrorCode::HttpRequestUriInvalid)),
                "{url}"
            );
        }
        let mut r = request(&[], b"");
        r.method = "GE T".into();
        assert!(matches!(
            into_http(r),
            Err(ErrorCode::HttpRequestMethodInvalid)
        ));
    }

    #[test]
    fn a_content_length_other_than_the_bodys_is_refused() {
        for length in ["0", "1", "3", "x", ""] {
            assert!(
                matches!(
                    into_http(request(&[("content-length", length)], b"hi")),
                    Err(ErrorCode::HttpRequestHeaderSize(_))
                ),
                "{length}"
            );
        }
        assert!(
            into_http(request(
                &[("content-length", "2"), ("content-length", "5")],
                b"hi"
            ))
            .is_err()
        );
    }
}
