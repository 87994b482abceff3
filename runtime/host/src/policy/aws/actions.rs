//! Reading the action of an AWS request where its service reads it, for a rule's
//! `allowedActions` ([`super::super::actions`]).

use http::HeaderMap;

/// How an AWS service's requests name their API action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwsProtocol {
    /// The Query protocol: an `Action` form parameter (EC2, ELB).
    Query,
    /// The JSON protocol: the `X-Amz-Target` header (`Prefix_Version.Action`).
    Json,
}

/// The protocol of the services whose action the host can read; `None` for the
/// others (REST protocols name the action by method and path: S3, EKS, Route 53,
/// Lambda, ...), for which an `allowedActions` list is refused when the policy is read.
pub fn aws_protocol(service: &str) -> Option<AwsProtocol> {
    match service {
        "ec2"
        | "elasticloadbalancing"
        | "autoscaling"
        | "cloudformation"
        | "monitoring"
        | "sns"
        | "rds"
        | "elasticache"
        | "redshift" => Some(AwsProtocol::Query),
        "kms" | "logs" | "ssm" | "secretsmanager" | "dynamodb" | "ecr" | "ecs" | "kinesis"
        | "events" | "cloudtrail" => Some(AwsProtocol::Json),
        _ => None,
    }
}

/// The action of a request signed for `service`, read where the service reads it and
/// refused when another reading could find another: for the Query protocol exactly one
/// `Action` parameter, in the query string or a form body, all of it plain `&`-separated
/// form data (no `;`, no `Content-Encoding`, a body only as
/// `application/x-www-form-urlencoded`, no other spelling of `Action`, no
/// `X-Amz-Target`); for the JSON protocol exactly one `X-Amz-Target` and no `Action`.
pub fn aws_action(
    service: &str,
    url: &url::Url,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<String, String> {
    let Some(protocol) = aws_protocol(service) else {
        return Err(format!(
            "the host cannot read the action of a `{service}` request (not a Query or JSON protocol service)"
        ));
    };
    if headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        return Err("a request with a `Content-Encoding` is refused under allowedActions".into());
    }
    let query = url.query().unwrap_or_default();
    let actions_in = |form: &[u8], where_: &str| -> Result<usize, String> {
        let mut count = 0;
        for (key, _) in url::form_urlencoded::parse(form) {
            if key == "Action" {
                count += 1;
            } else if key.eq_ignore_ascii_case("action") {
                return Err(format!(
                    "an `{key}` parameter in the {where_} (only `Action` is read)"
                ));
            }
        }
        Ok(count)
    };
    let targets = headers.get_all("x-amz-target").iter().count();
    match protocol {
        AwsProtocol::Json => {
            if actions_in(query.as_bytes(), "query")? > 0 {
                return Err(format!(
                    "an `Action` parameter on a JSON protocol request to `{service}`"
                ));
            }
            if targets != 1 {
                return Err(format!(
                    "a JSON protocol request names its action in exactly one `X-Amz-Target` ({targets} here)"
                ));
            }
            headers
                .get("x-amz-target")
                .and_then(|v| v.to_str().ok())
                .and_then(|t| t.rsplit_once('.'))
                .map(|(_, action)| action.to_string())
                .filter(|action| !action.is_empty())
                .ok_or_else(|| "an `X-Amz-Target` that names no action".to_string())
        }
        AwsProtocol::Query => {
            if targets > 0 {
                return Err(format!(
                    "an `X-Amz-Target` on a Query protocol request to `{service}` (its action is `Action`)"
                ));
            }
            if query.contains(';') || body.contains(&b';') {
                return Err(
                    "a `;` in the query or the form body (only `&` separates parameters)".into(),
                );
            }
            if !body.is_empty() {
                let form = headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.split(';').next())
                    .is_some_and(|essence| {
                        essence
                            .trim()
                            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
                    });
                if !form {
                    return Err(
                        "a Query protocol body must be `application/x-www-form-urlencoded`".into(),
                    );
                }
            }
            let in_query = actions_in(query.as_bytes(), "query")?;
            let in_body = actions_in(body, "body")?;
            if in_query + in_body != 1 {
                return Err(match in_query + in_body {
                    0 => "the request names no AWS action (no `Action`)".to_string(),
                    n => format!("the request has {n} `Action` parameters (exactly one is read)"),
                });
            }
            let source: &[u8] = if in_query == 1 {
                query.as_bytes()
            } else {
                body
            };
            Ok(url::form_urlencoded::parse(source)
                .find(|(key, _)| key == "Action")
                .map(|(_, value)| value.into_owned())
                .unwrap_or_default())
        }
    }
}
