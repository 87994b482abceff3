//! Method overrides: what asks a server to take a request for another method than the
//! one it carries (`GET /things/t1?_method=DELETE`, `X-HTTP-Method-Override: DELETE` on
//! a `POST`). Rack, Laravel and Symfony, Express's `method-override` and Octavia's pecan
//! honour them, so a request that `allowedActions` read as a `GET` would run as a
//! `DELETE`. Every spelling the host refuses is found here, once: the headers
//! ([`override_header`], refused on every request the host adds a credential to) and
//! `_method` in the query or the body ([`method_override`], refused where the method
//! decides what the credential may do: see [`super::check_request`]).

use std::collections::HashMap;

use http::HeaderMap;
use serde::de::IgnoredAny;

use super::Outgoing;
use crate::capabilities::http_egress::Denial;

/// Headers asking a server to take a request for another method:
/// `X-HTTP-Method-Override` (Rack, Symfony, Express's default), `X-HTTP-Method` (OData,
/// ASP.NET) and `X-Method-Override`. Compared in any case and with `_` read as `-`, as
/// servers that map header names to CGI variables (`HTTP_X_HTTP_METHOD_OVERRIDE`) read
/// them.
pub const METHOD_OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The first method override header of `headers`, if any.
pub fn override_header(headers: &HeaderMap) -> Option<Denial> {
    headers.keys().find_map(|name| {
        // Header names are lower case already.
        let dashed = name.as_str().replace('_', "-");
        METHOD_OVERRIDE_HEADERS
            .contains(&dashed.as_str())
            .then(|| Denial::MethodOverride(format!("the `{name}` header")))
    })
}

/// The method override `request` carries, if any: a header of
/// [`METHOD_OVERRIDE_HEADERS`], or a `_method` field (in the spellings of
/// [`is_method_field`]) in the query or in a body a server reads fields from. Every
/// `Content-Type` the request has is taken at its word: a form, or no content type
/// (webob and Rack read such a body as a form); multipart, refused whole without being
/// read; JSON (`application/json`, `*+json`), whose top-level object Laravel reads
/// `_method` from, as Express does when told to.
pub fn method_override(request: &Outgoing) -> Option<Denial> {
    if let Some(header) = override_header(&request.headers) {
        return Some(header);
    }
    if has_method_field(request.url.query().unwrap_or_default().as_bytes()) {
        return Some(Denial::MethodOverride("a `_method` query parameter".into()));
    }
    let body = &request.body;
    for media_type in media_types(&request.headers) {
        let found = match media_type.as_str() {
            multipart if multipart.starts_with("multipart/") => {
                return Some(Denial::MethodOverride(
                    "a multipart body (unread: it may hold a `_method` field)".into(),
                ));
            }
            "" | "application/x-www-form-urlencoded" => has_method_field(body),
            json if json.contains("/json") || json.contains("+json") => has_json_method(body),
            _ => false,
        };
        if found {
            return Some(Denial::MethodOverride(match media_type.as_str() {
                "" => "a `_method` field in a body without content type (read as a form)".into(),
                media_type => format!("a `_method` field in the `{media_type}` body"),
            }));
        }
    }
    None
}

/// The media type of every `Content-Type` field (lower case, without parameters), or
/// one empty type when the request has none.
fn media_types(headers: &HeaderMap) -> Vec<String> {
    let types: Vec<String> = headers
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .map(|value| {
            String::from_utf8_lossy(value.as_bytes())
                // Rack ends the media type at a `,` as well as a `;`.
                .split([';', ','])
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    if types.is_empty() {
        vec![String::new()]
    } else {
        types
    }
}

/// Whether form data (a query string or a form body) has a `_method` field. A `;`
/// separates fields too, as Rack 2 and older Python read forms.
fn has_method_field(form: &[u8]) -> bool {
    form.split(|b| matches!(*b, b'&' | b';'))
        .flat_map(url::form_urlencoded::parse)
        .any(|(name, _)| is_method_field(&name))
}

/// Whether a JSON body is an object with a `_method` member (nested values are skipped
/// without a depth limit, so nesting cannot hide the member).
fn has_json_method(body: &[u8]) -> bool {
    serde_json::from_slice::<HashMap<String, IgnoredAny>>(body)
        .is_ok_and(|object| object.keys().any(|name| is_method_field(name)))
}

/// Whether a server reads a field (decoded) named `name` as `_method`: in any case,
/// up to a NUL byte (where PHP ends it);
/// with PHP's renaming (leading spaces dropped, a `.`, ` ` or `[` read as `_`), which
/// Laravel and Symfony see; or between brackets, which Rack 2 drops (`[_method]`).
fn is_method_field(name: &str) -> bool {
    // PHP ends a name at a NUL byte.
    let name = name.split('\0').next().unwrap_or_default();
    let php = name.trim_start_matches(' ');
    let rack = name.trim_start_matches(['[', ']']).trim_end_matches(']');
    php.strip_prefix(['_', '.', ' ', '['])
        .is_some_and(|rest| rest.eq_ignore_ascii_case("method"))
        || rack.eq_ignore_ascii_case("_method")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::http_egress::credentials::tests::{FORM, JSON, outgoing};
    use http::Method;

    /// `GET /things/t1?<query>` for each query.
    fn gets<const N: usize>(queries: [&str; N]) -> [Outgoing; N] {
        queries.map(|query| outgoing(Method::GET, &format!("/things/t1?{query}"), &[], ""))
    }

    /// `POST /things` with each body and its content type (none when empty).
    fn posts<const N: usize>(bodies: [(&str, &str); N]) -> [Outgoing; N] {
        bodies.map(|(content_type, body)| {
            let mut request = outgoing(Method::POST, "/things", &[], body);
            if !content_type.is_empty() {
                let value = content_type.parse().unwrap();
                request.headers.insert(http::header::CONTENT_TYPE, value);
            }
            request
        })
    }

    #[test]
    fn every_spelling_frameworks_read_is_found() {
        let mut requests = Vec::from(gets([
            "_method=DELETE",
            "_METHOD=delete",
            "a=1&%5Fmethod=DELETE",
            // Rack 2 and older Python split at `;` too.
            "a=1;_method=DELETE",
            // PHP's renaming: Laravel and Symfony read these as `_method`.
            ".method=DELETE",
            "+_method=DELETE",
            // Rack 2 drops the brackets.
            "[_method]=DELETE",
            // PHP ends a name at a NUL.
            "_method%00x=DELETE",
        ]));
        requests.extend(posts([
            (FORM.1, "name=x&_method=DELETE"),
            (FORM.1, "name=x;_Method=DELETE"),
            ("", "_method=DELETE"),
            ("Application/X-WWW-Form-URLEncoded", "_method=DELETE"),
            ("multipart/form-data; boundary=b", "--b--"),
            ("multipart/mixed; boundary=b", "--b--"),
            // Rack ends the media type at a `,`.
            ("multipart/form-data, x; boundary=b", "--b--"),
            ("application/x-www-form-urlencoded, x", "_method=DELETE"),
            (JSON.1, r#"{"name": "x", "_method": "DELETE"}"#),
            (
                "application/merge-patch+json",
                r#"{"\u005fmethod": "DELETE", "deep": [[[[[[[[[[{}]]]]]]]]]]}"#,
            ),
        ]));
        // A second content type, which a server may read instead of the first.
        let two_types = [("content-type", "text/plain"), FORM];
        requests.push(outgoing(
            Method::POST,
            "/things",
            &two_types,
            "_method=DELETE",
        ));
        requests.extend(
            [
                "X-HTTP-Method-Override",
                "X-HTTP-Method",
                "X-Method-Override",
                "X_HTTP_Method_Override",
            ]
            .map(|name| outgoing(Method::POST, "/things", &[(name, "DELETE")], "")),
        );
        for request in &requests {
            let denial =
                method_override(request).unwrap_or_else(|| panic!("not found: {request:?}"));
            assert_eq!(denial.reason(), "method_override", "{denial}");
        }
    }

    #[test]
    fn ordinary_requests_carry_no_override() {
        let mut requests = Vec::from(gets(["fields=id&method=x", "x_method=DELETE", "a=_method"]));
        requests.extend(posts([
            (FORM.1, "name=x&description=_method"),
            (JSON.1, r#"{"thing": {"_method": "x"}}"#),
            (JSON.1, r#"[{"_method": "DELETE"}]"#),
            // An octet stream is not read for fields.
            ("application/octet-stream", "_method=DELETE"),
        ]));
        requests.push(outgoing(
            Method::POST,
            "/things",
            &[("X-Method", "DELETE")],
            "",
        ));
        for request in &requests {
            assert_eq!(method_override(request), None, "{request:?}");
        }
    }
}
