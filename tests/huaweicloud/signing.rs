//! What the host signs, judged by Huawei Cloud's own SDK: requests sent through the
//! broker (the hostile fixture's `fetch`) with encoded path segments, repeated and
//! empty query keys, unicode, empty and JSON bodies, to the double's three endpoints
//! (non-default ports), each re-signed by `huaweicloudsdkcore`'s signer with its own
//! `X-Sdk-Date` and signed headers; a byte changed anywhere signed is refused.

use std::path::Path;

use super::*;

/// The paths, queries and bodies the host signs, in every combination used below.
const PATHS: &[&str] = &[
    "/v1/{project}/cloudservers/detail",
    "/v1/{project}/cloudservers/a%20b/nics",
    "/v2/{project}/elb/listeners/%E4%B8%AD%E6%96%87",
    "/v2/{project}/elb/pools/x~y_z-1.2",
    "/v1/{project}/publicips/a%2Fb",
    "/v1/{project}/subnets/semi;colon/",
    "/v1/{project}/subnets/plus+sign/%21%2A%27%28%29",
    "/",
];
const QUERIES: &[&str] = &[
    "",
    "limit=1",
    "name=node-b&limit=50&offset=1",
    "tag=z&tag=a&tag=m",
    "flag=&empty",
    "name=a%20b&q=c+d",
    "name=%E8%8A%82%E7%82%B9-1",
    "x=%2F%3F%26%3D&~k=~v",
];
const BODIES: &[&str] = &[
    "",
    "{}",
    r#"{"loadbalancer":{"name":"k8s_service_kubernetes_default_web","vip_subnet_id":"9a2f"}}"#,
    r#"{"server":{"name":"节点-1 ☃","metadata":{"k":"v\n\t\"q\""}}}"#,
];

/// The documented keys for the double's three endpoints, without the documented
/// `allowedActions`: this test is of the signature, on paths no provider calls.
fn signing_policy(world: &HuaweiWorld, dir: &Path) -> String {
    let mut policy: serde_json::Value =
        serde_saphyr::from_str(&world.documented_policy(dir)).unwrap();
    for rule in policy["credentials"].as_array_mut().unwrap() {
        rule.as_object_mut().unwrap().remove("allowedActions");
    }
    policy.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huawei_s_sdk_signs_what_the_host_signed_and_a_changed_byte_is_refused() {
    let world = HuaweiWorld::start().await;
    let dir = wasm_ccm_tests::ProviderDir::new("fixture_hostile", "hostile", "", "");
    std::fs::write(
        dir.dir.path().join("hostile.yaml"),
        signing_policy(&world, dir.dir.path()),
    )
    .unwrap();
    world.write_keys(dir.dir.path(), &world.key);
    let loader = wasm_ccm_tests::loader();
    let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();

    let methods = ["GET", "POST", "PUT", "DELETE", "PATCH"];
    let mut sent = 0;
    for (i, path) in PATHS.iter().enumerate() {
        for (j, query) in QUERIES.iter().enumerate() {
            let (service, _) = SERVICES[(i + j) % 3];
            let method = methods[(i * QUERIES.len() + j) % methods.len()];
            let body = match method {
                "GET" | "DELETE" => "",
                _ => BODIES[(i + 2 * j) % BODIES.len()],
            };
            let mut url = format!(
                "{}{}",
                world.cloud.endpoint(service),
                path.replace("{project}", PROJECT)
            );
            if !query.is_empty() {
                url = format!("{url}?{query}");
            }
            let mut annotations = vec![
                ("hostile/action", "fetch"),
                ("hostile/method", method),
                ("hostile/url", url.as_str()),
            ];
            if !body.is_empty() {
                annotations.push(("hostile/json", body));
            }
            let answer = wasm_ccm_tests::act(&provider, &annotations).await;
            let report = answer.unwrap_or_else(|e| panic!("{method} {url}: {e:?}"));
            let status = &report.additional_labels;
            assert!(
                !status.iter().any(|(k, v)| k == "status" && v == "401"),
                "{method} {url}: the double refused the host's signature: {status:?}"
            );
            sent += 1;
        }
    }
    assert!(sent >= 50, "{sent} requests");

    // What the double received, each re-signed by Huawei's SDK.
    let received: Vec<_> = world
        .cloud
        .journal()
        .into_iter()
        .filter(|r| r.refused.is_none())
        .collect();
    assert_eq!(
        received.len(),
        sent,
        "every request reached the double, accepted"
    );
    let requests: Vec<serde_json::Value> = received
        .iter()
        .map(|r| {
            json!({
                "method": r.method,
                "target": r.target,
                "headers": r.headers,
                "body": base64_encode(&r.body),
            })
        })
        .collect();
    let judged = sdk_judge(
        "resign",
        &[],
        &json!({
            "keys": {world.key.access_key_id.clone(): world.key.secret_access_key.clone()},
            "requests": requests,
        }),
    )
    .await;
    let judged = judged.as_array().unwrap();
    assert_eq!(judged.len(), sent);
    for (verdict, request) in judged.iter().zip(&received) {
        assert_eq!(
            verdict["equal"], true,
            "{} {}: the SDK signs {} where the host signed {}",
            request.method, request.target, verdict["sdk"], verdict["host"]
        );
    }
    // The project ID, the content type and the host are among what is signed.
    let with_body = received
        .iter()
        .find(|r| !r.body.is_empty())
        .expect("a request with a body");
    let authorization = header(with_body, "authorization");
    assert!(
        authorization.contains("SignedHeaders=content-type;host;x-project-id;x-sdk-date,"),
        "{authorization}"
    );

    // Sent again as received, a request is accepted; with one byte changed in the
    // path, the query, a signed header or the body, it is refused.
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let original = received
        .iter()
        .find(|r| !r.body.is_empty() && r.target.contains('?'))
        .expect("a request with a query and a body");
    let resend = |target: &str, headers: &[(String, String)], body: &[u8]| {
        let url = format!("{}{target}", endpoint_of(&world, original));
        let mut request = client.request(original.method.parse().unwrap(), url);
        for (name, value) in headers {
            if name != "host" && name != "content-length" {
                request = request.header(name.as_str(), value.as_str());
            }
        }
        request.body(body.to_vec()).send()
    };
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_ne!(
        status(
            resend(&original.target, &original.headers, &original.body)
                .await
                .unwrap()
        ),
        401,
        "the request as signed"
    );
    let flipped_path = flip_first(&original.target, |c| c.is_ascii_lowercase());
    let (path, query) = original.target.split_once('?').unwrap();
    let flipped_query = format!(
        "{path}?{}",
        flip_first(query, |c| c.is_ascii_alphanumeric())
    );
    let mut flipped_header = original.headers.clone();
    for (name, value) in flipped_header.iter_mut() {
        if name == "x-project-id" {
            *value = flip_first(value, |c| c.is_ascii_alphanumeric());
        }
    }
    let mut flipped_body = original.body.clone();
    flipped_body[1] ^= 0x01;
    for (what, response) in [
        (
            "path",
            resend(&flipped_path, &original.headers, &original.body),
        ),
        (
            "query",
            resend(&flipped_query, &original.headers, &original.body),
        ),
        (
            "signed header",
            resend(&original.target, &flipped_header, &original.body),
        ),
        (
            "body",
            resend(&original.target, &original.headers, &flipped_body),
        ),
    ] {
        let response = response.await.unwrap();
        assert_eq!(
            response.status().as_u16(),
            401,
            "a changed byte in the {what}"
        );
        let body = response.text().await.unwrap();
        assert!(body.contains("APIGW.0301"), "{what}: {body}");
    }
    // Neither key reached the provider: nothing it got back names them.
    let log = loader.metrics().encode();
    assert!(!log.contains(&world.key.secret_access_key));
}

/// A received request's header `name`.
fn header<'a>(request: &'a huaweicloud_double::Recorded, name: &str) -> &'a str {
    request
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} on {} {}", request.method, request.target))
}

/// The endpoint of the service that received `request`.
fn endpoint_of(world: &HuaweiWorld, request: &huaweicloud_double::Recorded) -> String {
    world.cloud.endpoint(request.service)
}

/// `text` with its first character matching `pick` changed (another letter or digit).
fn flip_first(text: &str, pick: impl Fn(char) -> bool) -> String {
    let mut done = false;
    text.chars()
        .map(|c| {
            if !done && pick(c) {
                done = true;
                match c {
                    'a'..='y' | 'A'..='Y' | '0'..='8' => (c as u8 + 1) as char,
                    _ => 'a',
                }
            } else {
                c
            }
        })
        .collect()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
