use super::*;

/// The policy example of docs/policy.md is a valid policy, with every credential kind.
#[test]
fn the_documented_policy_example_parses() {
    let section = include_str!("../../../../docs/policy.md");
    let start = section.find("```yaml\n").expect("a YAML block") + "```yaml\n".len();
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let policy = Policy::parse(block, Path::new("/etc/wasm-ccm/providers/example.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> = policy
        .credentials
        .iter()
        .map(|rule| rule.credential.key())
        .collect();
    // Every kind of the registry, in its order.
    assert_eq!(kinds, crate::policy::CREDENTIAL_KEYS);
    assert!(policy.tls_client_certificate.is_some());
    assert_eq!(policy.require_signature.map(|keys| keys.len()), Some(1));
}

#[test]
fn require_signature_names_its_keys() {
    for (text, field) in [
        ("requireSignature: {keys: []}\n", "requireSignature.keys"),
        (
            "requireSignature: {keys: [not-a-key]}\n",
            "requireSignature.keys[0]",
        ),
    ] {
        match parse(text) {
            Err(PolicyError::Invalid { field: got, .. }) => assert_eq!(got, field, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert!(
        parse("requireSignature: {key: []}\n").is_err(),
        "unknown fields are refused"
    );
    assert_eq!(parse("{}\n").unwrap().require_signature, None);
}

fn parse(text: &str) -> Result<Policy, PolicyError> {
    Policy::parse(text, Path::new("/providers/sim.yaml"))
}

#[test]
fn full_policy_parses() {
    let policy = parse(
        "allowedOutboundHosts: ['http://127.0.0.1:*', 'https://*.example.com']\n\
         credentials:\n\
         - destination: http://127.0.0.1:*\n\
         \x20 bearerTokenFile: token\n\
         - destination: https://api.example.com\n\
         \x20 header: {name: X-Api-Key, valueFile: /secrets/key}\n\
         limits: {callTimeout: 1500ms, memoryMiB: 32, poolSize: 2, maxResponseBytes: 1024,\n\
         \x20 maxConcurrentRequests: 3, requestsPerSecond: 2.5, burst: 5}\n\
         tls: {caBundleFile: ca.pem}\n",
    )
    .unwrap();
    assert_eq!(policy.allowed_outbound_hosts.len(), 2);
    assert_eq!(
        policy.credentials[0].credential,
        Credential::Bearer {
            token_file: PathBuf::from("/providers/token")
        }
    );
    assert_eq!(
        policy.credentials[1].credential,
        Credential::Header {
            name: "x-api-key".into(),
            value_file: PathBuf::from("/secrets/key")
        }
    );
    assert_eq!(
        policy.instance_limits.call_timeout,
        Duration::from_millis(1500)
    );
    assert_eq!(policy.instance_limits.memory_bytes, 32 << 20);
    assert_eq!(policy.instance_limits.pool_size, 2);
    assert_eq!(policy.egress_limits.max_response_bytes, 1024);
    assert_eq!(policy.egress_limits.max_concurrent_requests, 3);
    assert_eq!(policy.egress_limits.requests_per_second, Some(2.5));
    assert_eq!(policy.egress_limits.burst, Some(5));
    assert_eq!(
        policy.tls_ca_bundle,
        Some(PathBuf::from("/providers/ca.pem"))
    );
}

/// Every file a policy names is listed with its field, and `without_files` leaves
/// none of them (what the tools load without `--credentials-dir`).
#[test]
fn the_files_a_policy_names_are_listed_and_can_be_left_out() {
    let policy = parse(
        "allowedOutboundHosts: ['https://api.example.com']\n\
         credentials:\n\
         - destination: https://api.example.com\n\
         \x20 basic: {usernameFile: /home/op/.kube/config, passwordFile: pw}\n\
         tls: {caBundleFile: ca.pem, clientCertificateFile: c.crt, clientKeyFile: c.key}\n\
         limits: {poolSize: 2}\n",
    )
    .unwrap();
    let files: Vec<(String, PathBuf)> = policy
        .files()
        .into_iter()
        .map(|(field, file)| (field, file.to_owned()))
        .collect();
    let named = |field: &str, file: &str| (field.to_owned(), PathBuf::from(file));
    assert_eq!(
        files,
        [
            named("credentials[0]", "/home/op/.kube/config"),
            named("credentials[0]", "/providers/pw"),
            named("tls.caBundleFile", "/providers/ca.pem"),
            named("tls.clientCertificateFile", "/providers/c.crt"),
            named("tls.clientKeyFile", "/providers/c.key"),
        ]
    );
    let without = policy.without_files();
    assert!(without.files().is_empty());
    assert!(without.credentials.is_empty());
    assert_eq!(without.allowed_outbound_hosts.len(), 1);
    assert_eq!(without.instance_limits.pool_size, 2);
}

#[test]
fn empty_policy_denies_everything() {
    let policy = parse("").unwrap();
    assert!(policy.allowed_outbound_hosts.is_empty());
    assert_eq!(policy.instance_limits, InstanceLimits::default());
    assert_eq!(policy.egress_limits, EgressLimits::default());
}

#[test]
fn unknown_field_is_named_with_the_file() {
    let err = parse("allowedHosts: []\n").unwrap_err().to_string();
    assert!(err.contains("/providers/sim.yaml"), "{err}");
    assert!(err.contains("allowedHosts"), "{err}");
    let err = parse("limits: {timeout: 1s}\n").unwrap_err().to_string();
    assert!(err.contains("timeout"), "{err}");
}

#[test]
fn bad_values_name_the_field() {
    let err = parse("allowedOutboundHosts: ['ftp//x']\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("allowedOutboundHosts[0]"), "{err}");
    let err = parse("limits: {callTimeout: soon}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("limits.callTimeout"), "{err}");
    let err = parse("limits: {poolSize: 0}\n").unwrap_err().to_string();
    assert!(err.contains("limits.poolSize"), "{err}");
    let err = parse("limits: {requestsPerSecond: 0}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("limits.requestsPerSecond"), "{err}");
    let err = parse("limits: {burst: 3}\n").unwrap_err().to_string();
    assert!(err.contains("limits.burst"), "{err}");
    let err = parse("tls: {caBundle: x}\n").unwrap_err().to_string();
    assert!(err.contains("caBundle"), "{err}");
    let err = parse("credentials: [{destination: 'https://a'}]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("credentials[0]"), "{err}");
}

#[test]
fn credentials_never_go_over_plain_http_unless_said_so() {
    for destination in ["http://api.example.com", "*://api.example.com"] {
        let err = parse(&format!(
            "credentials: [{{destination: '{destination}', bearerTokenFile: t}}]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("credentials[0].destination") && err.contains("allowPlaintext"),
            "{err}"
        );
    }
    for ok in [
        "{destination: 'https://api.example.com', bearerTokenFile: t}",
        "{destination: 'http://127.0.0.1:8080', bearerTokenFile: t}",
        "{destination: 'http://localhost:*', bearerTokenFile: t}",
        "{destination: 'http://api.example.com', bearerTokenFile: t, allowPlaintext: true}",
    ] {
        parse(&format!("credentials: [{ok}]\n")).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn wide_patterns_are_refused_naming_the_field() {
    let err = parse("allowedOutboundHosts: ['https://api.example.com', 'http://*:*']\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("allowedOutboundHosts[1]") && err.contains("too wide"),
        "{err}"
    );
    let err = parse("allowedOutboundHosts: ['https://*.com']\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("too wide"), "{err}");
}

#[test]
fn no_limit_value_can_panic_the_host() {
    for (limits, field) in [
        ("requestsPerSecond: 1.0e-300", "limits.requestsPerSecond"),
        ("requestsPerSecond: 1.0e300", "limits.requestsPerSecond"),
        ("requestsPerSecond: .nan", "limits.requestsPerSecond"),
        ("requestsPerSecond: -1", "limits.requestsPerSecond"),
        ("requestsPerSecond: 5, burst: 4294967295", "limits.burst"),
        (
            "maxConcurrentRequests: 18446744073709551615",
            "limits.maxConcurrentRequests",
        ),
        ("maxConcurrentRequests: 0", "limits.maxConcurrentRequests"),
        ("memoryMiB: 18446744073709551615", "limits.memoryMiB"),
        ("memoryMiB: 1", "limits.memoryMiB"),
        ("maxResponseBytes: 0", "limits.maxResponseBytes"),
        (
            "maxResponseBytes: 18446744073709551615",
            "limits.maxResponseBytes",
        ),
        ("callTimeout: 100000h", "limits.callTimeout"),
        ("callTimeout: 0s", "limits.callTimeout"),
        (
            "requestTimeout: 99999999999999999999h",
            "limits.requestTimeout",
        ),
        ("poolSize: 65", "limits.poolSize"),
    ] {
        let err = parse(&format!("limits: {{{limits}}}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{limits}: {err}");
    }
}

#[test]
fn one_keystone_login_is_one_rule() {
    let rule = |actions: &str| {
        format!(
            "- destination: https://keystone.example.com:5000\n  keystone: {{authUrl: 'https://keystone.example.com:5000/v3', applicationCredentialId: a1, applicationCredentialSecretFile: s}}\n  allowedActions: ['{actions}']\n"
        )
    };
    let text = format!(
        "credentials:\n{}{}",
        rule("GET **/servers/detail"),
        rule("DELETE **/servers/*")
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("credentials[1].keystone") && err.contains("credentials[0]"),
        "{err}"
    );
}

#[test]
fn worst_case_memory() {
    // The defaults: 4 instances x 64 MiB + a 1 MiB cache + 16 requests x (4 MiB +
    // 2 MiB + the response head buffer).
    let head = RESPONSE_HEAD_BUFFER_BYTES as u64;
    assert_eq!(
        parse("").unwrap().worst_case_bytes(),
        ((256 + 1 + 96) << 20) + 16 * head
    );
    let small = parse("limits: {poolSize: 1, memoryMiB: 16, maxConcurrentRequests: 2, maxResponseBytes: 1048576, cacheKiB: 0}\n")
        .unwrap();
    assert_eq!(small.worst_case_bytes(), ((16 + 2 * 3) << 20) + 2 * head);
    let cached = parse("limits: {cacheKiB: 4096}\n").unwrap();
    assert_eq!(cached.instance_limits.cache_bytes, 4 << 20);
    assert!(
        parse("limits: {cacheKiB: 300000}\n")
            .unwrap_err()
            .to_string()
            .contains("limits.cacheKiB")
    );
}

#[test]
fn durations_use_the_go_grammar() {
    let policy = parse("limits: {callTimeout: 1m30s, requestTimeout: 1.5s}\n").unwrap();
    assert_eq!(policy.instance_limits.call_timeout, Duration::from_secs(90));
    assert_eq!(
        policy.egress_limits.request_timeout,
        Duration::from_millis(1500)
    );
    let err = parse("limits: {callTimeout: 10}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limits.callTimeout") && err.contains("1m30s"),
        "{err}"
    );
}

#[test]
fn a_request_must_fit_in_a_call() {
    let err = parse("limits: {callTimeout: 60s, requestTimeout: 60s}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limits.requestTimeout") && err.contains("limits.callTimeout (60s)"),
        "{err}"
    );
    let fits = parse("limits: {callTimeout: 61s, requestTimeout: 60s}\n").unwrap();
    assert_eq!(fits.egress_limits.request_timeout, Duration::from_secs(60));
}

#[test]
fn the_default_request_timeout_leaves_room_for_two_requests() {
    let timeout = |limits: &str| {
        parse(&format!("limits: {{{limits}}}\n"))
            .unwrap()
            .egress_limits
            .request_timeout
    };
    assert_eq!(timeout(""), Duration::from_secs(10));
    assert_eq!(timeout("callTimeout: 60s"), Duration::from_secs(10));
    assert_eq!(timeout("callTimeout: 10s"), Duration::from_millis(4500));
    assert_eq!(timeout("callTimeout: 1s"), Duration::from_millis(450));
}
