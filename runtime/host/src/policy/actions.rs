//! Action allowlists: the cloud API actions a credential rule may be used for.
//!
//! IAM (or Keystone's roles) is the cloud's guard; `allowedActions` on a credential
//! rule is the host's own: a request whose action is not listed is refused before the
//! credential is added or the request signed, so a compromised or buggy provider
//! cannot call `TerminateInstances` even when the keys it is given could.
//!
//! ```yaml
//! credentials:
//!   - destination: https://ec2.eu-west-1.amazonaws.com
//!     aws: { ... }
//!     allowedActions: [ec2:DescribeInstances, "ec2:Describe*", ec2:CreateRoute]
//!   - destination: https://keystone.example.net:5000/v3
//!     keystone: { ... }
//!     allowedActions: ["GET **/servers/detail", "PUT **/v2.0/routers/*/add_extraroutes"]
//! ```
//!
//! - **AWS rules** list IAM action names, `service:Action` (the signing service, as in
//!   an IAM policy: `ec2`, `elasticloadbalancing`), with `*` at the end of the action as
//!   a prefix wildcard. A request's action is read where its service reads it
//!   ([`aws_protocol`](super::aws::actions::aws_protocol)): the Query protocol's `Action` (the query string or a form
//!   body) or the JSON protocol's `X-Amz-Target`; a request naming no action, several,
//!   or one another reader could see differently is refused
//!   ([`aws_action`](super::aws::actions::aws_action)). Services
//!   of REST protocols (S3, EKS, Route 53, Lambda, ...) name their action by method and
//!   path, which the host does not map: a rule may list them only without
//!   `allowedActions`.
//! - **Other rules** list `METHOD /path` patterns: the method (or `*` for any), then
//!   path segments, each literal, `*` for exactly one (non-empty) segment or `**` for any number
//!   (none included); the query string is not matched. Paths with an encoded `/`, `\`
//!   or `.` are refused, so a `*` cannot stand for a path a server would decode into
//!   several segments.
//!
//! Names compare case-sensitively, as the cloud APIs compare them, except AWS service
//! prefixes and HTTP methods, which are case-insensitive as IAM and HTTP read them.

use http::{HeaderMap, Method};

use super::aws::actions::aws_action;

/// What a credential rule may be used for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedActions {
    /// IAM action names (an `aws` rule).
    Aws(Vec<AwsAction>),
    /// Method and path patterns (every other kind).
    Requests(Vec<RequestPattern>),
}

/// `service:Action`, `service:Prefix*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsAction {
    service: String,
    action: String,
    prefix: bool,
}

/// `METHOD /segment/*/**`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPattern {
    method: Option<Method>,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    One,
    Any,
}

/// Why a request is refused by an action allowlist (its text names the action).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ActionDenied(pub String);

impl AllowedActions {
    /// Parses an `aws` rule's list; the error names the entry's index and why.
    pub fn parse_aws(entries: &[String]) -> Result<Self, (usize, String)> {
        entries
            .iter()
            .enumerate()
            .map(|(i, entry)| AwsAction::parse(entry).map_err(|e| (i, e)))
            .collect::<Result<_, _>>()
            .map(Self::Aws)
    }

    /// Parses another rule's list of `METHOD /path` patterns.
    pub fn parse_requests(entries: &[String]) -> Result<Self, (usize, String)> {
        entries
            .iter()
            .enumerate()
            .map(|(i, entry)| RequestPattern::parse(entry).map_err(|e| (i, e)))
            .collect::<Result<_, _>>()
            .map(Self::Requests)
    }

    /// The services an `aws` rule's list names.
    pub fn aws_services(&self) -> impl Iterator<Item = &str> {
        let actions = match self {
            Self::Aws(actions) => actions.as_slice(),
            Self::Requests(_) => &[],
        };
        actions.iter().map(|a| a.service.as_str())
    }

    /// Checks an AWS request signed for `service`.
    pub fn check_aws(
        &self,
        service: &str,
        url: &url::Url,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), ActionDenied> {
        let Self::Aws(actions) = self else {
            return Err(ActionDenied(
                "the rule's allowedActions are not AWS actions".into(),
            ));
        };
        let action = aws_action(service, url, headers, body).map_err(ActionDenied)?;
        if actions.iter().any(|a| a.matches(service, &action)) {
            Ok(())
        } else {
            Err(ActionDenied(format!(
                "action {service}:{action} is not in the credential rule's allowedActions"
            )))
        }
    }

    /// Checks a request by method and path.
    pub fn check_request(&self, method: &Method, url: &url::Url) -> Result<(), ActionDenied> {
        let Self::Requests(patterns) = self else {
            return Err(ActionDenied(
                "the rule's allowedActions are AWS actions; this request is not signed".into(),
            ));
        };
        let path = url.path();
        let lower = path.to_ascii_lowercase();
        if ["%2f", "%5c", "%2e"].iter().any(|e| lower.contains(e)) {
            return Err(ActionDenied(format!(
                "{method} {path}: an encoded `/`, `\\` or `.` in a path is refused under allowedActions"
            )));
        }
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        if patterns.iter().any(|p| p.matches(method, &segments)) {
            Ok(())
        } else {
            Err(ActionDenied(format!(
                "{method} {path} is not in the credential rule's allowedActions"
            )))
        }
    }
}

impl AwsAction {
    fn parse(entry: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            Err(format!(
                "`{entry}`: {why}; write `service:Action`, e.g. `ec2:DescribeInstances` or `ec2:Describe*`"
            ))
        };
        let Some((service, action)) = entry.split_once(':') else {
            return bad("no `:`");
        };
        let (action, prefix) = match action.strip_suffix('*') {
            Some(head) => (head, true),
            None => (action, false),
        };
        let name_ok = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if service.is_empty() || !name_ok(service) {
            return bad("the service is not a name");
        }
        if (action.is_empty() && !prefix) || !action.chars().all(|c| c.is_ascii_alphanumeric()) {
            return bad("the action is not a name (a `*` may only end it)");
        }
        Ok(Self {
            service: service.to_ascii_lowercase(),
            action: action.to_string(),
            prefix,
        })
    }

    fn matches(&self, service: &str, action: &str) -> bool {
        self.service.eq_ignore_ascii_case(service)
            && if self.prefix {
                action.starts_with(&self.action)
            } else {
                action == self.action
            }
    }
}

impl RequestPattern {
    fn parse(entry: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            Err(format!(
                "`{entry}`: {why}; write `METHOD /path`, e.g. `GET /v2.1/servers/*` or `PUT **/routers/*/add_extraroutes`"
            ))
        };
        let Some((method, path)) = entry.trim().split_once(' ') else {
            return bad("no method");
        };
        let method = match method {
            "*" => None,
            m => match Method::from_bytes(m.to_ascii_uppercase().as_bytes()) {
                Ok(m) => Some(m),
                Err(_) => return bad("not an HTTP method"),
            },
        };
        let path = path.trim();
        let path = if path.starts_with("**") {
            path
        } else if let Some(rest) = path.strip_prefix('/') {
            rest
        } else {
            return bad("the path does not start with `/` or `**`");
        };
        let mut segments = Vec::new();
        for segment in path.split('/') {
            segments.push(match segment {
                "**" => Segment::Any,
                "*" => Segment::One,
                s if s.contains('*') => return bad("`*` stands for a whole segment only"),
                s if s.contains(['?', '#', '%']) => {
                    return bad("the path is matched without query or encoding");
                }
                s => Segment::Literal(s.to_string()),
            });
        }
        Ok(Self { method, segments })
    }

    fn matches(&self, method: &Method, path: &[&str]) -> bool {
        self.method.as_ref().is_none_or(|m| m == method) && matches(&self.segments, path)
    }
}

fn matches(pattern: &[Segment], path: &[&str]) -> bool {
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(Segment::Any), _) => {
            (0..=path.len()).any(|skip| matches(&pattern[1..], &path[skip..]))
        }
        (Some(Segment::One), Some(s)) if !s.is_empty() => matches(&pattern[1..], &path[1..]),
        (Some(Segment::Literal(l)), Some(s)) if l == s => matches(&pattern[1..], &path[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn url(s: &str) -> url::Url {
        s.parse().unwrap()
    }

    fn form() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded; charset=utf-8"
                .parse()
                .unwrap(),
        );
        h
    }

    #[test]
    fn aws_actions_match_as_iam() {
        let a =
            AllowedActions::parse_aws(&list(&["ec2:DescribeInstances", "EC2:Create*"])).unwrap();
        let u = url("https://ec2.eu-west-1.amazonaws.com/");
        let ok = |body: &str| a.check_aws("ec2", &u, &form(), body.as_bytes());
        assert!(ok("Action=DescribeInstances&Version=2016-11-15").is_ok());
        assert!(ok("Action=CreateRoute").is_ok());
        let denied = ok("Action=TerminateInstances&InstanceId.1=i-1").unwrap_err();
        assert!(denied.0.contains("ec2:TerminateInstances"), "{denied}");
        assert!(ok("Version=1").is_err(), "no action");
        assert!(ok("Action=DescribeInstances&Action=TerminateInstances").is_err());
        // Another service with the same action name.
        assert!(
            a.check_aws(
                "elasticloadbalancing",
                &u,
                &form(),
                b"Action=DescribeInstances"
            )
            .is_err()
        );
        // One `Action` in all: not one in the query and another (or the same) in the body.
        let q = url("https://ec2.eu-west-1.amazonaws.com/?Action=DescribeInstances");
        assert!(a.check_aws("ec2", &q, &form(), b"").is_ok());
        assert!(
            a.check_aws("ec2", &q, &form(), b"Action=DescribeInstances")
                .is_err()
        );
        assert!(
            a.check_aws("ec2", &q, &form(), b"Action=TerminateInstances")
                .is_err()
        );
        // A body only as a form.
        let plain = HeaderMap::new();
        assert!(
            a.check_aws("ec2", &u, &plain, b"Action=DescribeInstances")
                .is_err()
        );
        // A Query protocol service reads no X-Amz-Target.
        let mut target = form();
        target.insert(
            "x-amz-target",
            "AmazonEC2.DescribeInstances".parse().unwrap(),
        );
        assert!(
            a.check_aws("ec2", &u, &target, b"Action=DescribeInstances")
                .is_err()
        );
        // JSON protocol.
        let k = AllowedActions::parse_aws(&list(&["kms:Decrypt"])).unwrap();
        let kms = url("https://kms.eu-west-1.amazonaws.com/");
        let mut json = HeaderMap::new();
        json.insert("x-amz-target", "TrentService.Decrypt".parse().unwrap());
        assert!(k.check_aws("kms", &kms, &json, b"{}").is_ok());
        json.insert(
            "x-amz-target",
            "TrentService.ScheduleKeyDeletion".parse().unwrap(),
        );
        assert!(k.check_aws("kms", &kms, &json, b"{}").is_err());
        assert!(k.check_aws("kms", &kms, &HeaderMap::new(), b"{}").is_err());
        // Two targets: refused, whichever the server would read.
        let mut two = HeaderMap::new();
        two.append("x-amz-target", "TrentService.Decrypt".parse().unwrap());
        two.append(
            "x-amz-target",
            "TrentService.ScheduleKeyDeletion".parse().unwrap(),
        );
        assert!(k.check_aws("kms", &kms, &two, b"{}").is_err());
    }

    /// Form data another parser could read differently is refused: another spelling of
    /// `Action`, `;` separators, an encoded body, multipart.
    #[test]
    fn query_actions_are_plain_form_data_with_one_action() {
        let a = AllowedActions::parse_aws(&list(&["ec2:Describe*"])).unwrap();
        let u = url("https://ec2.eu-west-1.amazonaws.com/");
        let check = |url: &url::Url, headers: &HeaderMap, body: &str| {
            a.check_aws("ec2", url, headers, body.as_bytes())
        };
        assert!(check(&u, &form(), "Action=DescribeInstances&Version=2016-11-15").is_ok());
        for body in [
            "Action=DescribeInstances&action=TerminateInstances",
            "ACTION=TerminateInstances",
            "Action=DescribeInstances;Action=TerminateInstances",
            "Version=1;Action=DescribeInstances",
        ] {
            assert!(check(&u, &form(), body).is_err(), "{body}");
        }
        for query in [
            "https://ec2.eu-west-1.amazonaws.com/?Action=DescribeInstances;Action=TerminateInstances",
            "https://ec2.eu-west-1.amazonaws.com/?action=TerminateInstances&Action=DescribeInstances",
        ] {
            assert!(check(&url(query), &form(), "").is_err(), "{query}");
        }
        let mut gzip = form();
        gzip.insert(http::header::CONTENT_ENCODING, "gzip".parse().unwrap());
        assert!(check(&u, &gzip, "Action=DescribeInstances").is_err());
        let mut multipart = HeaderMap::new();
        multipart.insert(
            http::header::CONTENT_TYPE,
            "multipart/form-data; boundary=x".parse().unwrap(),
        );
        assert!(check(&u, &multipart, "Action=DescribeInstances").is_err());
    }

    /// REST protocol services read no `Action` nor `X-Amz-Target`: a request to one is
    /// never taken for an allowed action.
    #[test]
    fn rest_protocol_services_have_no_readable_action() {
        let a = AllowedActions::parse_aws(&list(&["eks:Describe*"])).unwrap();
        let mut target = HeaderMap::new();
        target.insert("x-amz-target", "Any.DescribeCluster".parse().unwrap());
        let denied = a
            .check_aws(
                "eks",
                &url("https://eks.eu-west-1.amazonaws.com/clusters/prod"),
                &target,
                b"",
            )
            .unwrap_err();
        assert!(denied.0.contains("eks"), "{denied}");
    }

    #[test]
    fn aws_entries_are_checked() {
        for bad in [
            "DescribeInstances",
            "ec2:",
            "ec2:*Instances",
            "ec2:Describe Instances",
            ":X",
        ] {
            assert!(AllowedActions::parse_aws(&list(&[bad])).is_err(), "{bad}");
        }
        assert!(AllowedActions::parse_aws(&list(&["ec2:*"])).is_ok());
    }

    #[test]
    fn request_patterns() {
        let a = AllowedActions::parse_requests(&list(&[
            "GET **/servers/detail",
            "GET /v2.0/ports",
            "put **/routers/*/add_extraroutes",
            "* /healthz",
        ]))
        .unwrap();
        let ok = |m: Method, u: &str| a.check_request(&m, &url(u)).is_ok();
        assert!(ok(
            Method::GET,
            "http://h/compute/v2.1/servers/detail?limit=5"
        ));
        assert!(ok(Method::GET, "http://h/servers/detail"));
        assert!(ok(Method::GET, "http://h/v2.0/ports?device_id=x"));
        assert!(!ok(Method::GET, "http://h/x/v2.0/ports"));
        assert!(ok(
            Method::PUT,
            "http://h/network/v2.0/routers/r1/add_extraroutes"
        ));
        assert!(!ok(
            Method::PUT,
            "http://h/v2.0/routers/r1/x/add_extraroutes"
        ));
        assert!(!ok(
            Method::DELETE,
            "http://h/v2.0/routers/r1/add_extraroutes"
        ));
        assert!(ok(Method::DELETE, "http://h/healthz"));
        assert!(!ok(Method::DELETE, "http://h/compute/v2.1/servers/s1"));
        // `*` is one segment, never an empty one.
        assert!(!ok(Method::PUT, "http://h/v2.0/routers//add_extraroutes"));
        // Encoded separators cannot hide a path behind `*`.
        assert!(!ok(
            Method::PUT,
            "http://h/v2.0/routers/r1%2F..%2Fx/add_extraroutes"
        ));
        assert!(!ok(Method::GET, "http://h/servers/%2e%2e/detail"));
        for bad in [
            "GET",
            "GET servers",
            "GET /serv*",
            "FOO BAR /x",
            "GET /a?b=1",
        ] {
            assert!(
                AllowedActions::parse_requests(&list(&[bad])).is_err(),
                "{bad}"
            );
        }
    }
}
