use super::*;

fn key() -> Key {
    Key {
        access_key_id: "AccessKey".into(),
        secret_access_key: "SecretKey".into(),
        security_token: None,
    }
}

fn owned(headers: &[(&str, &str)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The Go SDK signer's known answer: `GET https://example.huaweicloud.com/path?limit=1`
/// signed at 2006-01-02T15:04:05Z over `x-sdk-date` alone.
#[test]
fn go_sdk_known_answer() {
    let headers = owned(&[("X-Sdk-Date", "20060102T150405Z")]);
    let signed = vec!["x-sdk-date".to_owned()];
    let canonical = canonical_request(
        "GET",
        "/path",
        "limit=1",
        &headers,
        &signed,
        &hex_sha256(b""),
    )
    .unwrap();
    assert_eq!(
        canonical,
        "GET\n/path/\nlimit=1\nx-sdk-date:20060102T150405Z\n\nx-sdk-date\n\
         e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let expected = "5a2ce64c865e0e6046321c6f3d5a77ba8413eeaf355c3166c03d58d02ac79624";
    assert_eq!(
        signature("SecretKey", &string_to_sign("20060102T150405Z", &canonical)),
        expected
    );
    let mut headers = headers;
    headers.push((
        "Authorization".into(),
        format!("SDK-HMAC-SHA256 Access=AccessKey, SignedHeaders=x-sdk-date, Signature={expected}"),
    ));
    let request = SignedRequest {
        method: "GET",
        path: "/path",
        query: "limit=1",
        headers: &headers,
        body: b"",
    };
    let keys = [key()];
    assert_eq!(
        verify(&request, &keys, 1_136_214_245)
            .unwrap()
            .access_key_id,
        "AccessKey"
    );
    // Fifteen minutes either way is still accepted; a second more is not.
    assert!(verify(&request, &keys, 1_136_214_245 + MAX_SKEW_SECONDS).is_ok());
    assert!(verify(&request, &keys, 1_136_214_245 - MAX_SKEW_SECONDS).is_ok());
    assert!(matches!(
        verify(&request, &keys, 1_136_214_245 + MAX_SKEW_SECONDS + 1),
        Err(Refusal::Expired { .. })
    ));
}

#[test]
fn canonical_uri_and_query_encode_as_the_sdks() {
    assert_eq!(
        canonical_uri("/v1/p/cloudservers/detail"),
        "/v1/p/cloudservers/detail/"
    );
    assert_eq!(canonical_uri("/"), "/");
    assert_eq!(canonical_uri("/a%20b/%7Ec/d+e/"), "/a%20b/~c/d%2Be/");
    assert_eq!(canonical_uri("/%e4%b8%ad"), "/%E4%B8%AD/");
    // An encoded slash splits the segment, as the SDKs decode before splitting.
    assert_eq!(canonical_uri("/publicips/a%2Fb"), "/publicips/a/b/");
    assert_eq!(canonical_query(""), "");
    assert_eq!(
        canonical_query("name=%5Enode-1%24&limit=10&ip_eq=10.0.0.1"),
        "ip_eq=10.0.0.1&limit=10&name=%5Enode-1%24"
    );
    // Repeated keys are kept, sorted by value; no `=` is an empty value; `+` is a
    // space, `%2B` a plus.
    assert_eq!(
        canonical_query("port_id=b&port_id=a&flag&x=1+2&y=a%20b&z=1%2B2"),
        "flag=&port_id=a&port_id=b&x=1%202&y=a%20b&z=1%2B2"
    );
    assert_eq!(canonical_query("a=&b=~"), "a=&b=~");
}

#[test]
fn authorization_header_parses() {
    let parsed = parse_authorization(
        "SDK-HMAC-SHA256 Access=AK, SignedHeaders=host;x-sdk-date, Signature=ab",
    )
    .unwrap();
    assert_eq!(parsed.access_key_id, "AK");
    assert_eq!(parsed.signed_headers, ["host", "x-sdk-date"]);
    assert_eq!(parsed.signature, "ab");
    for bad in [
        "",
        "SDK-HMAC-SM3 Access=AK, SignedHeaders=x-sdk-date, Signature=ab",
        "SDK-HMAC-SHA256 Access=AK, SignedHeaders=x-sdk-date",
        "SDK-HMAC-SHA256 Access=, SignedHeaders=x-sdk-date, Signature=ab",
        "SDK-HMAC-SHA256 Access=AK, Access=AK, SignedHeaders=x-sdk-date, Signature=ab",
        "Bearer abc",
    ] {
        assert_eq!(parse_authorization(bad), None, "{bad}");
    }
}

/// A POST signed over `host`, `content-type` and `x-sdk-date`, with a query and a body.
fn signed_post(now: i64) -> (Vec<(String, String)>, Vec<u8>) {
    let body = br#"{"loadbalancer":{"name":"lb","vip_subnet_id":"s"}}"#.to_vec();
    let mut headers = owned(&[
        ("Host", "127.0.0.1:8443"),
        ("Content-Type", "application/json"),
    ]);
    sign(
        &key(),
        "POST",
        "/v2/p/elb/loadbalancers",
        "a=1&b=x%20y",
        &mut headers,
        &body,
        now,
    );
    (headers, body)
}

#[test]
fn any_flipped_byte_fails() {
    let now = 1_780_000_000;
    let (headers, body) = signed_post(now);
    let keys = [key()];
    let check = |path: &str, query: &str, headers: &[(String, String)], body: &[u8]| {
        verify(
            &SignedRequest {
                method: "POST",
                path,
                query,
                headers,
                body,
            },
            &keys,
            now,
        )
    };
    let path = "/v2/p/elb/loadbalancers";
    let query = "a=1&b=x%20y";
    assert!(check(path, query, &headers, &body).is_ok());
    // The same query in another order, and the path without escapes, still verify.
    assert!(check(path, "b=x%20y&a=1", &headers, &body).is_ok());
    let signature_refused = |r: Result<&Key, Refusal>| matches!(r, Err(Refusal::Signature { .. }));
    assert!(signature_refused(check(
        "/v2/p/elb/loadbalancerz",
        query,
        &headers,
        &body
    )));
    assert!(signature_refused(check(
        path,
        "a=2&b=x%20y",
        &headers,
        &body
    )));
    // `+` is a space, as the gateway reads it; `%2B` is a plus.
    assert!(check(path, "a=1&b=x+y", &headers, &body).is_ok());
    assert!(signature_refused(check(
        path,
        "a=1&b=x%2By",
        &headers,
        &body
    )));
    let mut flipped = body.clone();
    flipped[5] ^= 1;
    assert!(signature_refused(check(path, query, &headers, &flipped)));
    let mut other_host = headers.clone();
    other_host[0].1 = "127.0.0.1:8444".into();
    assert!(signature_refused(check(path, query, &other_host, &body)));
    let mut other_date = headers.clone();
    let date = other_date
        .iter_mut()
        .find(|(k, _)| k == "X-Sdk-Date")
        .unwrap();
    date.1 = crate::clock::sdk_date(now + 1);
    assert!(signature_refused(check(path, query, &other_date, &body)));
    // An unsigned header may change; a signed one may not go missing.
    let mut extra = headers.clone();
    extra.push(("User-Agent".into(), "curl".into()));
    assert!(check(path, query, &extra, &body).is_ok());
    let missing: Vec<_> = headers
        .iter()
        .filter(|(k, _)| k != "Content-Type")
        .cloned()
        .collect();
    assert_eq!(
        check(path, query, &missing, &body).unwrap_err(),
        Refusal::MissingHeader("content-type".into())
    );
}

#[test]
fn keys_dates_and_tokens_are_checked() {
    let now = 1_780_000_000;
    let (headers, body) = signed_post(now);
    let request = SignedRequest {
        method: "POST",
        path: "/v2/p/elb/loadbalancers",
        query: "a=1&b=x%20y",
        headers: &headers,
        body: &body,
    };
    let other = Key {
        access_key_id: "Other".into(),
        secret_access_key: "SecretKey".into(),
        security_token: None,
    };
    let refusal = verify(&request, std::slice::from_ref(&other), now).unwrap_err();
    assert_eq!(refusal, Refusal::UnknownKey("AccessKey".into()));
    assert!(refusal.error_msg().contains("ak not exist"));
    let expired = verify(&request, &[key()], now + 16 * 60).unwrap_err();
    assert!(
        expired.error_msg().contains("expired"),
        "{}",
        expired.error_msg()
    );
    let unsigned: Vec<_> = headers
        .iter()
        .filter(|(k, _)| k != "Authorization")
        .cloned()
        .collect();
    let request = SignedRequest {
        headers: &unsigned,
        ..request
    };
    assert_eq!(
        verify(&request, &[key()], now).unwrap_err(),
        Refusal::NoCredentials
    );

    // A temporary key: its token must be sent and signed.
    let temporary = Key {
        security_token: Some("token-1".into()),
        ..key()
    };
    let mut headers = owned(&[("Host", "h")]);
    sign(
        &temporary,
        "GET",
        "/v1/p/publicips",
        "",
        &mut headers,
        b"",
        now,
    );
    let get = |headers: &[(String, String)]| {
        verify(
            &SignedRequest {
                method: "GET",
                path: "/v1/p/publicips",
                query: "",
                headers,
                body: b"",
            },
            std::slice::from_ref(&temporary),
            now,
        )
        .map(|k| k.access_key_id.clone())
    };
    assert!(get(&headers).is_ok());
    let without: Vec<_> = headers
        .iter()
        .filter(|(k, _)| k != "X-Security-Token")
        .cloned()
        .collect();
    assert!(matches!(get(&without), Err(Refusal::SecurityToken(_))));
    let mut changed = headers.clone();
    for (k, v) in &mut changed {
        if k == "X-Security-Token" {
            *v = "token-2".into();
        }
    }
    assert!(matches!(get(&changed), Err(Refusal::SecurityToken(_))));
    // Signed by the permanent key but sent with a token that is not signed.
    let mut headers = owned(&[("Host", "h")]);
    sign(&key(), "GET", "/v1/p/publicips", "", &mut headers, b"", now);
    headers.push(("X-Security-Token".into(), "token-1".into()));
    assert!(matches!(get(&headers), Err(Refusal::SecurityToken(_))));
}

#[test]
fn unsigned_payload_is_honoured() {
    let now = 1_780_000_000;
    let mut headers = owned(&[
        ("Host", "h"),
        ("Content-Type", "application/octet-stream"),
        ("X-Sdk-Content-Sha256", UNSIGNED_PAYLOAD),
    ]);
    sign(&key(), "PUT", "/v1/p/x", "", &mut headers, b"anything", now);
    for body in [&b"anything"[..], &b"something else"[..]] {
        let request = SignedRequest {
            method: "PUT",
            path: "/v1/p/x",
            query: "",
            headers: &headers,
            body,
        };
        assert!(verify(&request, &[key()], now).is_ok());
    }
}
