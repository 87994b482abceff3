//! One whole request in, one whole answer out: what both ways out of a guest hand the
//! broker ([`super::Egress::send_buffered`]) and get back.
//!
//! A guest's request is checked here, once, under the rules `wasi:http` applies to
//! guests, whichever way it came: no header the host owns (hop-by-hop, `host`), a
//! bounded header section, a `content-length` that is the body's, a bounded body.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::{DEFAULT_FORBIDDEN_HEADERS, Error as HttpError, WasiBody};

use crate::capabilities::MAX_FIELDS_BYTES;
use crate::policy::MAX_REQUEST_BODY_BYTES;

/// A guest's request, body and all.
#[derive(Debug, Clone)]
pub struct GuestRequest {
    /// The method.
    pub method: Method,
    /// The URL as the guest wrote it (parsed once, by the broker).
    pub url: String,
    /// The guest's headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

/// An answer read whole (bounded by the policy), without the headers the host hides.
#[derive(Debug, Clone)]
pub struct Buffered {
    /// The status.
    pub status: StatusCode,
    /// The headers the guest may see.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl GuestRequest {
    /// `request` with its body read, up to [`MAX_REQUEST_BODY_BYTES`]; the `host` header
    /// wasmtime adds from the URI is dropped (the URL is what is sent).
    pub async fn from_wasi(request: http::Request<WasiBody>) -> Result<Self, HttpError> {
        let (mut parts, body) = request.into_parts();
        parts.headers.remove(http::header::HOST);
        let body = http_body_util::Limited::new(body, MAX_REQUEST_BODY_BYTES)
            .collect()
            .await
            .map_err(|_| HttpError::HttpRequestBodySize(Some(MAX_REQUEST_BODY_BYTES as u64)))?
            .to_bytes();
        Ok(Self {
            method: parts.method,
            url: parts.uri.to_string(),
            headers: parts.headers,
            body,
        })
    }

    /// Checks the request under `wasi:http`'s rules for guests: an absolute `http` or
    /// `https` URI (as `wasi:http` takes it: no control characters, no whitespace,
    /// bounded), no header the host owns, a bounded header section, a
    /// `content-length` that is the body's, a bounded body.
    pub fn check(&self) -> Result<(), HttpError> {
        let uri: http::Uri = self
            .url
            .parse()
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(HttpError::HttpRequestUriInvalid);
        }
        if self.body.len() > MAX_REQUEST_BODY_BYTES {
            return Err(HttpError::HttpRequestBodySize(Some(self.body.len() as u64)));
        }
        let mut section = 0usize;
        for (name, value) in &self.headers {
            if DEFAULT_FORBIDDEN_HEADERS.contains(name) {
                return Err(HttpError::InternalError(Some(format!(
                    "header {:?}: forbidden",
                    name.as_str()
                ))));
            }
            // As `wasi:http` counts a fields resource: name and value bytes.
            section += name.as_str().len() + value.len();
            if section > MAX_FIELDS_BYTES {
                return Err(HttpError::HttpRequestHeaderSectionSize(Some(
                    MAX_FIELDS_BYTES as u32,
                )));
            }
        }
        // A `content-length` other than the body's would let the body run into the
        // next request on a pooled connection.
        for value in self.headers.get_all(http::header::CONTENT_LENGTH) {
            if value.to_str().ok().and_then(|v| v.parse::<usize>().ok()) != Some(self.body.len()) {
                return Err(HttpError::HttpRequestHeaderSize {
                    field_name: Some("content-length".into()),
                    field_size: None,
                });
            }
        }
        Ok(())
    }

    /// The URL without its user information, query and fragment (which may carry
    /// tokens), for logs.
    pub(super) fn redacted_url(&self) -> String {
        redact(&self.url)
    }
}

/// `url` without its user information, query and fragment.
pub(super) fn redact(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

impl Buffered {
    /// The answer as `wasi:http` hands it to the guest.
    pub fn into_wasi(self) -> http::Response<WasiBody> {
        let mut response = http::Response::new(
            Full::new(self.body)
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

impl From<http::Response<Bytes>> for Buffered {
    fn from(answer: http::Response<Bytes>) -> Self {
        let (parts, body) = answer.into_parts();
        Self {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn request(headers: &[(&str, &str)], body: &[u8]) -> GuestRequest {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        GuestRequest {
            method: Method::POST,
            url: "https://api.example.com/v1?token=x#f".into(),
            headers: map,
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn what_wasi_http_refuses_is_refused() {
        assert!(
            request(
                &[("content-type", "text/plain"), ("content-length", "2")],
                b"hi"
            )
            .check()
            .is_ok()
        );
        for header in ["host", "connection", "transfer-encoding", "upgrade"] {
            let err = request(&[(header, "x")], b"").check().unwrap_err();
            assert!(
                matches!(&err, HttpError::InternalError(Some(m)) if m.contains("forbidden")),
                "{header}: {err:?}"
            );
        }
        let big = "v".repeat(MAX_FIELDS_BYTES);
        assert!(matches!(
            request(&[("x-big", &big)], b"").check(),
            Err(HttpError::HttpRequestHeaderSectionSize(_))
        ));
        assert!(matches!(
            request(&[], &vec![0; MAX_REQUEST_BODY_BYTES + 1]).check(),
            Err(HttpError::HttpRequestBodySize(_))
        ));
    }

    #[test]
    fn a_content_length_other_than_the_bodys_is_refused() {
        for length in ["0", "1", "3", "x", ""] {
            assert!(
                matches!(
                    request(&[("content-length", length)], b"hi").check(),
                    Err(HttpError::HttpRequestHeaderSize { .. })
                ),
                "{length}"
            );
        }
        assert!(
            request(&[("content-length", "2"), ("content-length", "5")], b"hi")
                .check()
                .is_err()
        );
    }

    #[test]
    fn logs_name_the_url_without_credentials_query_or_fragment() {
        assert_eq!(
            request(&[], b"").redacted_url(),
            "https://api.example.com/v1"
        );
        assert_eq!(
            redact("https://user:s3cret@api.example.com/v1?token=x"),
            "https://api.example.com/v1"
        );
        assert_eq!(redact("not a url?token=x"), "not a url");
    }

    #[test]
    fn only_absolute_http_uris_as_wasi_http_takes_them() {
        for url in [
            "/relative",
            "ftp://example.com/",
            "http:///no-host",
            "not a url",
            "https://a.example.com/x\r\nforged: log line",
            "https://a.example.com/x y",
        ] {
            let mut r = request(&[], b"");
            r.url = url.into();
            assert!(
                matches!(r.check(), Err(HttpError::HttpRequestUriInvalid)),
                "{url}"
            );
        }
        let mut long = request(&[], b"");
        long.url = format!("https://a.example.com/{}", "x".repeat(70_000));
        assert!(long.check().is_err());
    }
}
