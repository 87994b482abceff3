//! The AWS Query protocol (EC2 and ELBv2): `Action=...&Version=...` form posts, XML
//! answers, error codes mapped to the contract, and paginated lists.
//!
//! The request leaves without credentials: the host signs it (SigV4) under the
//! provider policy's `aws` credential rule.

use std::time::SystemTime;

use wasm_ccm_guest::cloud_error;
use wasm_ccm_guest::http::{self, Request};
use wasm_ccm_guest::paginate::{self, Page};
use wasm_ccm_guest::types::CloudError;

use crate::xml;

/// Error codes AWS uses for throttling (the SDK's list).
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Request parameters, in order.
#[derive(Debug, Default, Clone)]
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name=value`.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.push((name.into(), value.into()));
        self
    }

    /// Adds `prefix.1=a`, `prefix.2=b`, ... (the Query protocol's lists).
    pub fn list<S: AsRef<str>>(mut self, prefix: &str, values: &[S]) -> Self {
        for (i, value) in values.iter().enumerate() {
            self.0
                .push((format!("{prefix}.{}", i + 1), value.as_ref().to_owned()));
        }
        self
    }

    /// Adds an EC2 filter `Filter.N.Name` with its values.
    pub fn filter<S: AsRef<str>>(self, name: &str, values: &[S]) -> Self {
        let n = self
            .0
            .iter()
            .filter(|(k, _)| k.starts_with("Filter.") && k.ends_with(".Name"))
            .count()
            + 1;
        self.set(format!("Filter.{n}.Name"), name)
            .list(&format!("Filter.{n}.Value"), values)
    }

    /// Adds tags as `prefix.N.Key` / `prefix.N.Value`.
    pub fn tags(mut self, prefix: &str, tags: &[(String, String)]) -> Self {
        for (i, (key, value)) in tags.iter().enumerate() {
            self.0
                .push((format!("{prefix}.{}.Key", i + 1), key.clone()));
            self.0
                .push((format!("{prefix}.{}.Value", i + 1), value.clone()));
        }
        self
    }

    /// The form fields of a call: `Action`, `Version`, then the parameters.
    fn fields(&self, action: &str, version: &str) -> Vec<(String, String)> {
        let mut fields = vec![
            ("Action".to_owned(), action.to_owned()),
            ("Version".to_owned(), version.to_owned()),
        ];
        fields.extend(self.0.iter().cloned());
        fields
    }
}

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// AWS answered with an error code.
    Aws {
        /// The action called.
        action: String,
        /// The error code, e.g. `InvalidInstanceID.NotFound`.
        code: String,
        /// AWS's message.
        message: String,
        /// The HTTP status.
        status: u16,
        /// A `Retry-After` in milliseconds, if AWS sent one.
        retry_after_ms: Option<u64>,
    },
    /// The request did not complete, or the answer could not be read.
    Transport {
        /// The action called.
        action: String,
        /// What happened.
        reason: String,
    },
    /// The host did not start the request (too little of the call's deadline was
    /// left), which the SDK reads as `retry-after`: nothing reached AWS, and the call
    /// is repeated after the delay instead of backing off as after a failure.
    Deferred {
        /// The action called.
        action: String,
        /// The delay the SDK asked for.
        delay_ms: u64,
        /// What happened.
        reason: String,
    },
}

impl ApiError {
    /// The AWS error code, or "" for transport failures.
    pub fn code(&self) -> &str {
        match self {
            ApiError::Aws { code, .. } => code,
            ApiError::Transport { .. } | ApiError::Deferred { .. } => "",
        }
    }

    /// Whether AWS asked to slow down.
    pub fn is_throttling(&self) -> bool {
        match self {
            ApiError::Aws { code, status, .. } => {
                THROTTLING_CODES.contains(&code.as_str()) || *status == 429 || *status == 503
            }
            ApiError::Transport { .. } | ApiError::Deferred { .. } => false,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Aws {
                action,
                code,
                message,
                status,
                ..
            } => write!(f, "{action}: {code}: {message} (HTTP {status})"),
            ApiError::Transport { action, reason } => write!(f, "{action}: {reason}"),
            ApiError::Deferred { action, reason, .. } => write!(f, "{action}: {reason}"),
        }
    }
}

impl From<ApiError> for CloudError {
    fn from(error: ApiError) -> Self {
        if let ApiError::Deferred { delay_ms, .. } = &error {
            return cloud_error::retry_after(*delay_ms, format!("AWS {error}"));
        }
        if error.is_throttling() {
            let delay_ms = match &error {
                ApiError::Aws {
                    retry_after_ms: Some(ms),
                    ..
                } => *ms,
                _ => cloud_error::DEFAULT_RETRY_MS,
            };
            return cloud_error::retry_after(
                delay_ms,
                format!("AWS throttled the request: {error}"),
            );
        }
        CloudError::Other(format!("AWS {error}"))
    }
}

/// A request that produced no answer, as [`ApiError::Deferred`] when the SDK reads it
/// as `retry-after` (the host would not start it so late in the call); `None` for any
/// other failure, which AWS may have acted on.
fn deferred(action: &str, error: &http::Error) -> Option<ApiError> {
    match CloudError::from(error.clone()) {
        CloudError::RetryAfter(retry) => Some(ApiError::Deferred {
            action: action.to_owned(),
            delay_ms: retry.delay_ms,
            reason: retry.message,
        }),
        _ => None,
    }
}

/// The header naming the AWS service of a request, read (and removed) by the host.
pub const SERVICE_HEADER: &str = "x-wasm-ccm-aws-service";

/// One AWS service endpoint.
#[derive(Debug, Clone)]
pub struct Api {
    endpoint: String,
    /// The IAM prefix of the service's actions (`ec2`, `elasticloadbalancing`).
    service: &'static str,
    version: &'static str,
}

impl Api {
    /// A client for the service at `endpoint` with API `version`:
    /// an API of `service` (its IAM prefix, e.g. `ec2`) at `endpoint`.
    pub fn new(endpoint: String, service: &'static str, version: &'static str) -> Self {
        Self {
            endpoint,
            service,
            version,
        }
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Calls `action` and returns the answer's XML text.
    pub fn call(&self, action: &str, params: &Params) -> Result<String, ApiError> {
        let transport = |reason: String| ApiError::Transport {
            action: action.to_owned(),
            reason,
        };
        if !crate::actions::allowed(self.service, action) {
            return Err(transport(format!(
                "{}:{action} is not in the provider's IAM policy (guests/aws/iam-policy.json)",
                self.service
            )));
        }
        let response = Request::post(&format!("{}/", self.endpoint))
            .header("accept", "text/xml")
            // The service this request is for, so the host signs for it even where the
            // endpoint's name does not say (an emulator serving every service on one
            // address); the host signs only for services its rule lists, and drops it.
            .header(SERVICE_HEADER, self.service)
            .form(&params.fields(action, self.version))
            .send()
            .map_err(|e| {
                if let Some(not_sent) = deferred(action, &e) {
                    return not_sent;
                }
                transport(if e.is_denied() {
                    "the host refused the request: the endpoint is not in the provider \
                     policy's allowedOutboundHosts, or its AWS credentials are unavailable \
                     (the host log says which)"
                        .into()
                } else {
                    e.to_string()
                })
            })?;
        let text = String::from_utf8_lossy(&response.body).into_owned();
        if response.is_success() {
            return Ok(text);
        }
        let retry_after_ms = cloud_error::retry_after_ms(&response, SystemTime::now());
        let (code, message) = match xml::parse(&text) {
            Ok(doc) => {
                let root = doc.root_element();
                let code = xml::find(root, "Code")
                    .and_then(|n| n.text())
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                let message = xml::find(root, "Message")
                    .and_then(|n| n.text())
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                (code, message)
            }
            Err(_) => (String::new(), text.chars().take(200).collect()),
        };
        let code = if code.is_empty() {
            format!("HTTP{}", response.status)
        } else {
            code
        };
        Err(ApiError::Aws {
            action: action.to_owned(),
            code,
            message,
            status: response.status,
            retry_after_ms,
        })
    }

    /// Calls a list action until its pages run out: `read` gets each page's root
    /// element; `token_param` is the request parameter and `token_element` the answer
    /// element that carry the page token (`NextToken`/`nextToken` for EC2,
    /// `Marker`/`NextMarker` for ELBv2).
    pub fn pages(
        &self,
        action: &str,
        params: &Params,
        token_param: &str,
        token_element: &str,
        mut read: impl FnMut(xml::Node<'_, '_>) -> Result<(), String>,
    ) -> Result<(), ApiError> {
        let transport = |reason: String| ApiError::Transport {
            action: action.to_owned(),
            reason,
        };
        paginate::collect::<(), _>(
            |token| {
                let mut page = params.clone();
                if let Some(token) = token {
                    page = page.set(token_param, token);
                }
                let text = self.call(action, &page)?;
                let doc = xml::parse(&text).map_err(transport)?;
                let root = doc.root_element();
                read(root).map_err(transport)?;
                let mut next = xml::text(root, token_element);
                if next.is_empty() {
                    // ELBv2 nests it in the result element.
                    next = xml::find(root, token_element)
                        .and_then(|n| n.text())
                        .unwrap_or_default()
                        .trim()
                        .to_owned();
                }
                Ok(Page {
                    items: Vec::new(),
                    next: Some(next),
                })
            },
            transport,
        )
        .map(drop)
    }

    /// Calls `action` and parses the answer with `read`.
    pub fn call_read<T>(
        &self,
        action: &str,
        params: &Params,
        read: impl FnOnce(xml::Node<'_, '_>) -> Result<T, String>,
    ) -> Result<T, ApiError> {
        let text = self.call(action, params)?;
        let doc = xml::parse(&text).map_err(|reason| ApiError::Transport {
            action: action.to_owned(),
            reason,
        })?;
        read(doc.root_element()).map_err(|reason| ApiError::Transport {
            action: action.to_owned(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_form_encoded_in_order() {
        let body = Params::new()
            .filter("private-dns-name", &["ip-10-0-0-1.ec2.internal"])
            .filter("instance-state-name", &["running", "stopped"])
            .list("InstanceId", &["i-1"])
            .tags(
                "Tags.member",
                &[("kubernetes.io/service-name".into(), "a b".into())],
            )
            .fields("DescribeInstances", "2016-11-15");
        let request = Request::post("https://ec2.us-east-1.amazonaws.com/").form(&body);
        assert_eq!(
            String::from_utf8_lossy(request.body_bytes()),
            "Action=DescribeInstances&Version=2016-11-15\
             &Filter.1.Name=private-dns-name&Filter.1.Value.1=ip-10-0-0-1.ec2.internal\
             &Filter.2.Name=instance-state-name&Filter.2.Value.1=running&Filter.2.Value.2=stopped\
             &InstanceId.1=i-1\
             &Tags.member.1.Key=kubernetes.io%2Fservice-name&Tags.member.1.Value=a+b"
        );
    }

    #[test]
    fn throttling_becomes_retry_after() {
        let error = |code: &str, status: u16, retry_after_ms: Option<u64>| ApiError::Aws {
            action: "DescribeInstances".into(),
            code: code.into(),
            message: "slow down".into(),
            status,
            retry_after_ms,
        };
        use wasm_ccm_guest::types::Retry;
        assert!(matches!(
            CloudError::from(error("RequestLimitExceeded", 503, None)),
            CloudError::RetryAfter(Retry {
                delay_ms: 5_000,
                ..
            })
        ));
        assert!(matches!(
            CloudError::from(error("Throttling", 400, Some(7_000))),
            CloudError::RetryAfter(Retry {
                delay_ms: 7_000,
                ..
            })
        ));
        assert!(matches!(
            CloudError::from(error("AuthFailure", 401, None)),
            CloudError::Other(m) if m.contains("AuthFailure")
        ));
    }

    /// A request the host would not start (the SDK's `retry-after`) stays `retry-after`
    /// with the SDK's delay, so the controller calls again after it rather than backing
    /// off; a request without an answer for any other reason (AWS may have acted on it)
    /// is an error naming the action.
    #[test]
    fn a_request_the_host_did_not_start_is_retried_after_the_delay() {
        use wasm_ccm_guest::http::{Error, ErrorKind};
        use wasm_ccm_guest::testing::MockTransport;
        use wasm_ccm_guest::types::Retry;
        let deferred = ApiError::Deferred {
            action: "CreateListener".into(),
            delay_ms: 2_000,
            reason: "too little of the call left".into(),
        };
        assert_eq!(deferred.code(), "");
        assert!(matches!(
            CloudError::from(deferred),
            CloudError::RetryAfter(Retry { delay_ms: 2_000, ref message })
                if message.contains("CreateListener: too little of the call left")
        ));
        for kind in [
            ErrorKind::Deadline,
            ErrorKind::Timeout,
            ErrorKind::Denied,
            ErrorKind::Unreachable,
        ] {
            let failure = Error::new(kind, "no answer");
            let cloud = MockTransport::new();
            cloud.on_sequence("POST", "/", vec![Err(failure.clone())]);
            let _installed = cloud.install();
            let api = Api::new(
                "https://ec2.us-east-1.amazonaws.com".into(),
                "ec2",
                "2016-11-15",
            );
            let error =
                CloudError::from(api.call("DescribeInstances", &Params::new()).unwrap_err());
            if kind == ErrorKind::Deadline {
                let CloudError::RetryAfter(sdk) = CloudError::from(failure) else {
                    panic!("the SDK reads a request not sent for the deadline as retry-after");
                };
                assert!(
                    matches!(&error, CloudError::RetryAfter(r)
                        if r.delay_ms == sdk.delay_ms && r.message.contains("DescribeInstances")),
                    "{error:?}"
                );
            } else {
                assert!(
                    matches!(&error, CloudError::Other(m) if m.contains("DescribeInstances")),
                    "{kind:?}: {error:?}"
                );
            }
        }
    }
}
