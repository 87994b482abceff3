//! Huawei Cloud's AK/SK request signature (`SDK-HMAC-SHA256`), as API Gateway checks it
//! in front of every service: an independent implementation of what the official SDKs'
//! signers compute (the Python SDK's `huaweicloudsdkcore/signer/signer.py`, the Go
//! SDK's `core/auth/signer/signer.go` and `escape.go`).
//!
//! A signed request carries `X-Sdk-Date: 20060102T150405Z` and
//! `Authorization: SDK-HMAC-SHA256 Access=<AK>, SignedHeaders=<a;b;c>, Signature=<hex>`,
//! where the signature is `hex(HMAC-SHA256(SK, string to sign))` and
//!
//! ```text
//! string to sign    = "SDK-HMAC-SHA256" \n <X-Sdk-Date> \n hex(sha256(canonical request))
//! canonical request = METHOD \n canonical URI \n canonical query \n canonical headers \n
//!                     signed headers (`;`-joined) \n payload hash
//! ```
//!
//! - canonical URI: the path percent-decoded, split on `/` (an encoded `%2F` splits too,
//!   as the SDKs decode before splitting), each piece encoded again (only
//!   `A-Z a-z 0-9 - _ . ~` kept, upper-case hex), joined with `/`, always ending in `/`;
//! - canonical query: each `key=value` percent-decoded and encoded the same way, sorted
//!   by key then value, joined with `&`; a parameter without `=` has an empty value and
//!   is written `key=` (the Go SDK sends `key` alone but signs `key=`). A `+` is a
//!   space, as the gateway (a Go server: `url.ParseQuery`) and the SDKs' own query
//!   parsers read one (`%2B` is a plus);
//! - canonical headers: `name:value\n` for each signed header (values trimmed, several
//!   values of one header sorted, each on its own line), in `SignedHeaders` order, which
//!   must be sorted; `host` is the `Host` header as received;
//! - payload hash: `hex(sha256(body))`, or `UNSIGNED-PAYLOAD` when the request says so in
//!   `X-Sdk-Content-Sha256` (the Python SDK hashes an empty body even then: both are
//!   accepted for an empty body).
//!
//! [`verify`] also checks that the key is known, that `X-Sdk-Date` is signed and within
//! [`MAX_SKEW_SECONDS`] of the double's clock, and that a temporary key's security
//! token is sent (`X-Security-Token`), equal and signed. [`sign`] signs a request the
//! same way, for tests.

use hmac::{Hmac, KeyInit, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, percent_encode};
use sha2::{Digest, Sha256};

use crate::Key;
use crate::clock::{parse_sdk_date, sdk_date};

/// The algorithm named in `Authorization` and the string to sign.
pub const ALGORITHM: &str = "SDK-HMAC-SHA256";
/// The signing time header (lower case, as signed).
pub const DATE_HEADER: &str = "x-sdk-date";
/// The header that may replace the payload hash.
pub const CONTENT_SHA256_HEADER: &str = "x-sdk-content-sha256";
/// The temporary key's token header.
pub const SECURITY_TOKEN_HEADER: &str = "x-security-token";
/// `X-Sdk-Content-Sha256`'s value for a payload that is not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// How far `X-Sdk-Date` may be from API Gateway's clock (15 minutes, either way).
pub const MAX_SKEW_SECONDS: i64 = 15 * 60;

/// Everything but `A-Z a-z 0-9 - _ . ~` is percent-encoded.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `bytes` percent-encoded as the signer does (upper-case hex).
pub fn escape(bytes: &[u8]) -> String {
    percent_encode(bytes, ESCAPED).to_string()
}

/// `text` with its `%XX` escapes decoded (a path segment: `+` stays a plus).
fn decode(text: &str) -> Vec<u8> {
    percent_decode_str(text).collect()
}

/// A query key or value decoded: `+` is a space, then `%XX` escapes.
pub fn decode_query(text: &str) -> Vec<u8> {
    percent_decode_str(&text.replace('+', " ")).collect()
}

/// The canonical URI of a raw (percent-encoded) request path: decoded whole, then
/// split on `/` (as the SDKs do: a `%2F` in a segment splits it), each piece encoded.
pub fn canonical_uri(path: &str) -> String {
    let mut uri = decode(path)
        .split(|b| *b == b'/')
        .map(escape)
        .collect::<Vec<_>>()
        .join("/");
    if !uri.ends_with('/') {
        uri.push('/');
    }
    uri
}

/// The canonical query string of a raw query (without the `?`).
pub fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = query
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| match piece.split_once('=') {
            Some((key, value)) => (decode_query(key), decode_query(value)),
            None => (decode_query(piece), Vec::new()),
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(key, value)| format!("{}={}", escape(key), escape(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The values of header `name` (any case), in the order received.
pub fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The first value of header `name`, trimmed.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    header_values(headers, name).first().map(|v| v.trim())
}

/// The canonical headers block (each line ending in `\n`), or the first signed header
/// that was not sent.
pub fn canonical_headers(
    headers: &[(String, String)],
    signed: &[String],
) -> Result<String, String> {
    let mut block = String::new();
    for name in signed {
        let mut values: Vec<&str> = header_values(headers, name)
            .into_iter()
            .map(str::trim)
            .collect();
        if values.is_empty() {
            return Err(name.clone());
        }
        values.sort_unstable();
        for value in values {
            block.push_str(name);
            block.push(':');
            block.push_str(value);
            block.push('\n');
        }
    }
    Ok(block)
}

/// `hex(sha256(data))`.
pub fn hex_sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The canonical request, or the first signed header that was not sent.
pub fn canonical_request(
    method: &str,
    path: &str,
    query: &str,
    headers: &[(String, String)],
    signed: &[String],
    payload_hash: &str,
) -> Result<String, String> {
    Ok(format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        method.to_ascii_uppercase(),
        canonical_uri(path),
        canonical_query(query),
        canonical_headers(headers, signed)?,
        signed.join(";"),
        payload_hash
    ))
}

/// The string to sign for a canonical request signed at `sdk_date` (`X-Sdk-Date`).
pub fn string_to_sign(sdk_date: &str, canonical_request: &str) -> String {
    format!(
        "{ALGORITHM}\n{sdk_date}\n{}",
        hex_sha256(canonical_request.as_bytes())
    )
}

fn mac(secret: &str) -> Hmac<Sha256> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key")
}

/// `hex(HMAC-SHA256(secret, string_to_sign))`.
pub fn signature(secret: &str, string_to_sign: &str) -> String {
    let mut mac = mac(secret);
    Mac::update(&mut mac, string_to_sign.as_bytes());
    hex::encode(Mac::finalize(mac).into_bytes())
}

/// Whether `claimed` (hex) is the signature of `string_to_sign`, compared in constant
/// time.
fn signature_matches(secret: &str, string_to_sign: &str, claimed: &str) -> bool {
    let Ok(claimed) = hex::decode(claimed) else {
        return false;
    };
    let mut mac = mac(secret);
    Mac::update(&mut mac, string_to_sign.as_bytes());
    Mac::verify_slice(mac, &claimed).is_ok()
}

/// The parts of an `Authorization: SDK-HMAC-SHA256 ...` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub access_key_id: String,
    pub signed_headers: Vec<String>,
    pub signature: String,
}

/// Parses `SDK-HMAC-SHA256 Access=<AK>, SignedHeaders=<a;b>, Signature=<hex>`.
pub fn parse_authorization(value: &str) -> Option<Authorization> {
    let rest = value.trim().strip_prefix(ALGORITHM)?;
    if !rest.starts_with(' ') {
        return None;
    }
    let (mut access, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (name, value) = part.trim().split_once('=')?;
        let slot = match name.trim() {
            "Access" => &mut access,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut signature,
            _ => return None,
        };
        if slot.replace(value.trim().to_owned()).is_some() {
            return None;
        }
    }
    let signed: String = signed?;
    Some(Authorization {
        access_key_id: access.filter(|a: &String| !a.is_empty())?,
        signed_headers: signed.split(';').map(str::to_owned).collect(),
        signature: signature?,
    })
}

/// A request as received: what the signature covers.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    pub method: &'a str,
    /// The raw (percent-encoded) path.
    pub path: &'a str,
    /// The raw query, without the `?` (empty without one).
    pub query: &'a str,
    /// Every header as received (names in any case).
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// Why a request's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Neither an `Authorization` header nor a token.
    NoCredentials,
    /// An `X-Auth-Token` without an AK/SK signature: the double takes no IAM tokens.
    TokenNotAccepted,
    /// `Authorization` is not `SDK-HMAC-SHA256 Access=..., SignedHeaders=...,
    /// Signature=...`, or its signed headers are not sorted, unique, lower-case names.
    Malformed(String),
    /// The access key ID is not one of the double's keys.
    UnknownKey(String),
    /// `X-Sdk-Date` is missing, malformed or not signed.
    BadDate(String),
    /// `X-Sdk-Date` is more than [`MAX_SKEW_SECONDS`] from the double's clock.
    Expired { signed: String, server: String },
    /// A header named in `SignedHeaders` was not sent.
    MissingHeader(String),
    /// The key's security token is missing, different or not signed (or a permanent
    /// key came with one).
    SecurityToken(String),
    /// The signature is not the one the double computes (whose canonical request is
    /// kept, to compare with the client's).
    Signature { canonical_request: String },
}

impl Refusal {
    /// API Gateway's `error_msg` for this refusal (`error_code` `APIGW.0301`).
    pub fn error_msg(&self) -> String {
        const PREFIX: &str = "Incorrect IAM authentication information";
        match self {
            Refusal::NoCredentials => format!("{PREFIX}: x-auth-token not found"),
            Refusal::TokenNotAccepted => format!("{PREFIX}: decrypt token fail"),
            Refusal::UnknownKey(ak) => {
                format!("{PREFIX}: Get secretKey failed,ak:{ak},err:ak not exist")
            }
            Refusal::Expired { signed, server } => format!(
                "{PREFIX}: verify aksk signature fail, signature expired, signature time:{signed},server time:{server}"
            ),
            _ => format!("{PREFIX}: verify aksk signature fail"),
        }
    }

    /// Why, in detail (for the journal).
    pub fn reason(&self) -> String {
        match self {
            Refusal::NoCredentials => "no Authorization header".into(),
            Refusal::TokenNotAccepted => "an X-Auth-Token, not an AK/SK signature".into(),
            Refusal::Malformed(why) => format!("malformed Authorization: {why}"),
            Refusal::UnknownKey(ak) => format!("unknown access key {ak}"),
            Refusal::BadDate(why) => format!("X-Sdk-Date: {why}"),
            Refusal::Expired { signed, server } => {
                format!("X-Sdk-Date {signed} is more than 15 minutes from the double's {server}")
            }
            Refusal::MissingHeader(name) => format!("signed header {name} was not sent"),
            Refusal::SecurityToken(why) => format!("security token: {why}"),
            Refusal::Signature { canonical_request } => format!(
                "signature mismatch; the double's canonical request was:\n{canonical_request}"
            ),
        }
    }
}

/// Verifies `request`'s signature with `keys` at `now` (seconds since the epoch, the
/// double's clock): the key that signed it, or why it is refused.
pub fn verify<'k>(
    request: &SignedRequest<'_>,
    keys: &'k [Key],
    now: i64,
) -> Result<&'k Key, Refusal> {
    let headers = request.headers;
    let Some(value) = header(headers, "authorization") else {
        return Err(if header(headers, "x-auth-token").is_some() {
            Refusal::TokenNotAccepted
        } else {
            Refusal::NoCredentials
        });
    };
    let auth = parse_authorization(value)
        .ok_or_else(|| Refusal::Malformed(format!("cannot parse {value:?}")))?;
    let names = &auth.signed_headers;
    if names
        .iter()
        .any(|n| n.is_empty() || *n != n.to_ascii_lowercase())
        || names.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(Refusal::Malformed(format!(
            "SignedHeaders {} are not sorted, unique, lower-case names",
            names.join(";")
        )));
    }
    let key = keys
        .iter()
        .find(|k| k.access_key_id == auth.access_key_id)
        .ok_or_else(|| Refusal::UnknownKey(auth.access_key_id.clone()))?;
    if !names.iter().any(|n| n == DATE_HEADER) {
        return Err(Refusal::BadDate("not among the signed headers".into()));
    }
    let date =
        header(headers, DATE_HEADER).ok_or_else(|| Refusal::MissingHeader(DATE_HEADER.into()))?;
    let signed_at = parse_sdk_date(date)
        .ok_or_else(|| Refusal::BadDate(format!("{date:?} is not yyyyMMddTHHmmssZ")))?;
    if (signed_at - now).abs() > MAX_SKEW_SECONDS {
        return Err(Refusal::Expired {
            signed: date.to_owned(),
            server: sdk_date(now),
        });
    }
    let sent_token = header(headers, SECURITY_TOKEN_HEADER);
    match (&key.security_token, sent_token) {
        (None, None) => {}
        (None, Some(_)) => {
            return Err(Refusal::SecurityToken(
                "sent with a permanent key, which has none".into(),
            ));
        }
        (Some(_), None) => return Err(Refusal::SecurityToken("not sent".into())),
        (Some(token), Some(sent)) if token != sent => {
            return Err(Refusal::SecurityToken("not the key's".into()));
        }
        (Some(_), Some(_)) if !names.iter().any(|n| n == SECURITY_TOKEN_HEADER) => {
            return Err(Refusal::SecurityToken("not signed".into()));
        }
        (Some(_), Some(_)) => {}
    }
    let actual = hex_sha256(request.body);
    let mut payloads = vec![actual.clone()];
    if header(headers, CONTENT_SHA256_HEADER) == Some(UNSIGNED_PAYLOAD) {
        payloads.insert(0, UNSIGNED_PAYLOAD.to_owned());
        if !request.body.is_empty() {
            payloads.pop();
        }
    }
    let mut first = None;
    for payload in &payloads {
        let canonical = canonical_request(
            request.method,
            request.path,
            request.query,
            headers,
            names,
            payload,
        )
        .map_err(Refusal::MissingHeader)?;
        if signature_matches(
            &key.secret_access_key,
            &string_to_sign(date, &canonical),
            &auth.signature,
        ) {
            return Ok(key);
        }
        first.get_or_insert(canonical);
    }
    Err(Refusal::Signature {
        canonical_request: first.unwrap_or_default(),
    })
}

/// Signs a request as the SDKs do, for tests: adds `X-Sdk-Date` (at `now`, unless one is
/// there), the key's `X-Security-Token` (if it has one) and `Authorization`, signing
/// every header in `headers` (include `Host` to have it signed).
pub fn sign(
    key: &Key,
    method: &str,
    path: &str,
    query: &str,
    headers: &mut Vec<(String, String)>,
    body: &[u8],
    now: i64,
) {
    headers.retain(|(k, _)| !k.eq_ignore_ascii_case("authorization"));
    if header(headers, DATE_HEADER).is_none() {
        headers.push(("X-Sdk-Date".into(), sdk_date(now)));
    }
    if let Some(token) = &key.security_token
        && header(headers, SECURITY_TOKEN_HEADER).is_none()
    {
        headers.push(("X-Security-Token".into(), token.clone()));
    }
    let mut signed: Vec<String> = headers
        .iter()
        .map(|(k, _)| k.to_ascii_lowercase())
        .collect();
    signed.sort();
    signed.dedup();
    let payload = match header(headers, CONTENT_SHA256_HEADER) {
        Some(value) => value.to_owned(),
        None => hex_sha256(body),
    };
    let canonical = canonical_request(method, path, query, headers, &signed, &payload)
        .expect("every signed header is in headers");
    let date = header(headers, DATE_HEADER).unwrap_or_default().to_owned();
    let signature = signature(&key.secret_access_key, &string_to_sign(&date, &canonical));
    headers.push((
        "Authorization".into(),
        format!(
            "{ALGORITHM} Access={}, SignedHeaders={}, Signature={signature}",
            key.access_key_id,
            signed.join(";")
        ),
    ));
}

#[cfg(test)]
mod tests;
