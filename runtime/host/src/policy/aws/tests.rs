use super::*;
use crate::policy::{Credential, Policy};

fn parse(text: &str) -> Result<Policy, String> {
    Policy::parse(text, Path::new("/providers/aws.yaml")).map_err(|e| e.to_string())
}

#[test]
fn aws_rules_parse() {
    let policy = parse(
        "allowedOutboundHosts: ['https://*.eu-west-1.amazonaws.com', 'http://127.0.0.1:5000']\n\
         credentials:\n\
         - destination: https://*.eu-west-1.amazonaws.com\n\
         \x20 aws: {services: [ec2, elasticloadbalancing], accessKeyIdFile: aws/id, secretAccessKeyFile: /secrets/key, sessionTokenFile: aws/token}\n\
         - destination: http://127.0.0.1:5000\n\
         \x20 aws:\n\
         \x20   region: us-east-1\n\
         \x20   service: ec2\n\
         \x20   webIdentity: {roleArn: 'arn:aws:iam::111122223333:role/ccm', webIdentityTokenFile: aws/sa-token, stsEndpoint: 'http://127.0.0.1:5000'}\n",
    )
    .unwrap();
    let Credential::Aws(keys) = &policy.credentials[0].credential else {
        panic!("an aws rule")
    };
    assert_eq!(
        keys.source,
        AwsSource::Static {
            access_key_id_file: "/providers/aws/id".into(),
            secret_access_key_file: "/secrets/key".into(),
            session_token_file: Some("/providers/aws/token".into()),
        }
    );
    assert_eq!(
        keys.scope_for("ec2.eu-west-1.amazonaws.com", None),
        Some(("ec2".into(), "eu-west-1".into()))
    );
    // Never a service outside `services`, never one that hands out credentials.
    assert_eq!(keys.scope_for("sts.eu-west-1.amazonaws.com", None), None);
    assert_eq!(keys.scope_for("s3.eu-west-1.amazonaws.com", None), None);
    // A service the provider names: signed for only when `services` lists it and,
    // under this wildcard destination, only on that service's own host.
    assert_eq!(
        keys.scope_for(
            "elasticloadbalancing.eu-west-1.amazonaws.com",
            Some("elasticloadbalancing")
        ),
        Some(("elasticloadbalancing".into(), "eu-west-1".into()))
    );
    assert_eq!(
        keys.scope_for("ec2.eu-west-1.amazonaws.com", Some("elasticloadbalancing")),
        None
    );
    assert_eq!(keys.scope_for("127.0.0.1", Some("s3")), None);
    assert_eq!(keys.scope_for("127.0.0.1", Some("sts")), None);
    let Credential::Aws(web) = &policy.credentials[1].credential else {
        panic!("an aws rule")
    };
    let AwsSource::WebIdentity(identity) = &web.source else {
        panic!("web identity")
    };
    assert_eq!(identity.session_name, "wasm-ccm");
    assert_eq!(identity.token_file, Path::new("/providers/aws/sa-token"));
    assert_eq!(
        web.scope_for("127.0.0.1", None),
        Some(("ec2".into(), "us-east-1".into()))
    );
    // A fixed `service` signs for nothing else, whatever the provider names.
    assert_eq!(
        web.scope_for("127.0.0.1", Some("elasticloadbalancing")),
        None
    );
    assert_eq!(web.files(), [Path::new("/providers/aws/sa-token")]);
}

#[test]
fn bad_aws_rules_name_the_field() {
    let rule = |destination: &str, aws: &str| {
        format!(
            "allowedOutboundHosts: ['{destination}']\ncredentials: [{{destination: '{destination}', aws: {{{aws}}}}}]\n"
        )
    };
    let ec2 = "https://ec2.us-east-1.amazonaws.com";
    let keys = "accessKeyIdFile: a, secretAccessKeyFile: b";
    let web = |fields: &str| {
        rule(
            ec2,
            &format!(
                "services: [ec2], webIdentity: {{roleArn: 'arn:aws:iam::1:role/r', webIdentityTokenFile: t{fields}}}"
            ),
        )
    };
    for (text, field) in [
        (
            rule(ec2, "services: [ec2], accessKeyIdFile: a"),
            "credentials[0].aws.secretAccessKeyFile",
        ),
        (
            rule(ec2, "services: [ec2]"),
            "credentials[0].aws.webIdentity",
        ),
        (rule(ec2, keys), "credentials[0].aws.services"),
        (
            rule(ec2, &format!("services: [ec2, sts], {keys}")),
            "credentials[0].aws.services",
        ),
        (
            rule(ec2, &format!("service: iam, {keys}")),
            "credentials[0].aws.service",
        ),
        (
            rule(ec2, &format!("service: ec2, services: [ec2], {keys}")),
            "credentials[0].aws.services",
        ),
        (
            rule("http://127.0.0.1:5000", &format!("services: [ec2], {keys}")),
            "credentials[0].aws.service",
        ),
        (
            rule(ec2, &format!("region: 'US East', services: [ec2], {keys}")),
            "credentials[0].aws.region",
        ),
        (
            rule(
                "https://*.example.com",
                &format!("service: ec2, region: r, {keys}"),
            ),
            "credentials[0].aws.destination",
        ),
        (
            format!(
                "allowedOutboundHosts: ['http://ec2.us-east-1.amazonaws.com']\ncredentials: [{{destination: 'http://ec2.us-east-1.amazonaws.com', allowPlaintext: true, aws: {{services: [ec2], {keys}}}}}]\n"
            ),
            "credentials[0].aws.destination",
        ),
        (
            web("").replace("role/r", "user/r"),
            "credentials[0].aws.webIdentity.roleArn",
        ),
        (
            web(", stsEndpoint: 'https://sts.evil.example'"),
            "credentials[0].aws.webIdentity.stsEndpoint",
        ),
        (
            web(", stsEndpoint: 'https://ec2.us-east-1.amazonaws.com'"),
            "credentials[0].aws.webIdentity.stsEndpoint",
        ),
        (
            web(", stsEndpoint: 'http://sts.us-east-1.amazonaws.com'"),
            "credentials[0].aws.webIdentity.stsEndpoint",
        ),
        (
            web(", sessionName: 'a b'"),
            "credentials[0].aws.webIdentity.sessionName",
        ),
    ] {
        let err = parse(&text).unwrap_err();
        assert!(err.contains(&format!("`{field}`")), "{text}\n-> {err}");
    }
    // The STS endpoint defaults to the region's (.cn in China).
    let policy = parse(&rule(
        "https://ec2.cn-north-1.amazonaws.com.cn",
        "region: cn-north-1, services: [ec2], webIdentity: {roleArn: 'arn:aws-cn:iam::1:role/r', webIdentityTokenFile: t}",
    ))
    .unwrap();
    let Credential::Aws(AwsCredential {
        source: AwsSource::WebIdentity(web),
        ..
    }) = &policy.credentials[0].credential
    else {
        panic!("web identity")
    };
    assert_eq!(
        web.sts_endpoint.as_str(),
        "https://sts.cn-north-1.amazonaws.com.cn/"
    );
}

/// Under a wildcard destination the host signs only for the service the host name
/// implies: never an S3 bucket's or an API Gateway stage's host with EC2's keys,
/// whatever the rule or the provider names.
#[test]
fn under_a_wildcard_only_the_host_s_own_service_is_signed_for() {
    let policy = parse(
        "credentials:\n\
         - destination: https://*.amazonaws.com\n\
         \x20 aws: {services: [ec2], accessKeyIdFile: i, secretAccessKeyFile: k}\n\
         - destination: https://*.us-east-1.amazonaws.com\n\
         \x20 aws: {service: ec2, accessKeyIdFile: i, secretAccessKeyFile: k}\n\
         - destination: https://ec2.us-east-1.amazonaws.com\n\
         \x20 aws: {services: [ec2, elasticloadbalancing], region: us-east-1, accessKeyIdFile: i, secretAccessKeyFile: k}\n",
    )
    .unwrap();
    let aws = |i: usize| match &policy.credentials[i].credential {
        Credential::Aws(aws) => aws.clone(),
        _ => panic!("an aws rule"),
    };
    let scope = |i: usize, host: &str, named: Option<&str>| {
        aws(i)
            .scope_for(host, named)
            .map(|(s, r)| format!("{s}/{r}"))
    };
    for rule in [0, 1] {
        assert_eq!(
            scope(rule, "ec2.us-east-1.amazonaws.com", None).as_deref(),
            Some("ec2/us-east-1")
        );
        for (host, named) in [
            ("attacker.execute-api.us-east-1.amazonaws.com", Some("ec2")),
            ("attacker.execute-api.us-east-1.amazonaws.com", None),
            ("ec2.s3.amazonaws.com", Some("ec2")),
            ("bucket.s3.us-east-1.amazonaws.com", Some("ec2")),
            ("ec2.us-east-1.amazonaws.com", Some("elasticloadbalancing")),
        ] {
            assert_eq!(
                scope(rule, host, named),
                None,
                "rule {rule}: {host} {named:?}"
            );
        }
    }
    // One exact host: the provider names the service (an emulator, a proxy).
    assert!(aws(2).pinned);
    assert_eq!(
        scope(
            2,
            "ec2.us-east-1.amazonaws.com",
            Some("elasticloadbalancing")
        )
        .as_deref(),
        Some("elasticloadbalancing/us-east-1")
    );
}

/// `allowedActions` guards only services whose action the host reads: a rule signing
/// for a REST protocol service (S3, EKS, ...) with it is refused, naming the service.
#[test]
fn allowed_actions_only_for_query_and_json_services() {
    let rule = |services: &str, actions: &str| {
        format!(
            "credentials:\n- destination: https://*.eu-west-1.amazonaws.com\n  \
             aws: {{services: [{services}], accessKeyIdFile: i, secretAccessKeyFile: k}}\n  \
             allowedActions: [{actions}]\n"
        )
    };
    assert!(parse(&rule("ec2, elasticloadbalancing", "'ec2:Describe*'")).is_ok());
    for (services, actions, named) in [
        ("ec2, s3", "'ec2:Describe*'", "`s3`"),
        ("eks", "'eks:DescribeCluster'", "`eks`"),
        ("ec2", "'lambda:InvokeFunction'", "`lambda`"),
    ] {
        let err = parse(&rule(services, actions)).unwrap_err();
        assert!(
            err.contains("credentials[0].allowedActions") && err.contains(named),
            "{services}: {err}"
        );
    }
    // Without allowedActions a REST service may be signed for.
    assert!(
        parse(
            "credentials:\n- destination: https://*.eu-west-1.amazonaws.com\n  \
             aws: {services: [s3], accessKeyIdFile: i, secretAccessKeyFile: k}\n"
        )
        .is_ok()
    );
}
