//! A mock transport for testing provider logic natively (`cargo test` on the host
//! target): answers requests from canned responses and records what was sent.
//!
//! ```
//! use wasm_ccm_guest::http::{Request, Response};
//! use wasm_ccm_guest::testing::MockTransport;
//!
//! let cloud = MockTransport::new();
//! cloud.on("GET", "/v1/instances/i-1", Response::with_json(200, &serde_json::json!({"id": "i-1"})));
//! cloud.on("GET", "/v1/instances/i-2", Response::new(404));
//! let _installed = cloud.install();
//!
//! let found = Request::get("http://cloud.test/v1/instances/i-1").send().unwrap();
//! assert_eq!(found.status, 200);
//! assert_eq!(Request::get("http://cloud.test/v1/instances/i-2").send().unwrap().status, 404);
//! // A request nothing answers is a transport error, and recorded.
//! assert!(Request::delete("http://cloud.test/v1/instances/i-1").send().is_err());
//! assert_eq!(cloud.requests().len(), 3);
//! assert_eq!(cloud.requests()[2].method().as_str(), "DELETE");
//! ```
//!
//! [`node`] and [`service`] make the contract's objects for a test, every field empty
//! but the name; set what the test is about on them:
//!
//! ```
//! use wasm_ccm_guest::testing::{node, service};
//!
//! let mut web = service("default", "web");
//! web.metadata.uid = "1234-5678".into();
//! let worker = wasm_ccm_guest::types::Node {
//!     provider_id: Some("openstack:///4f2c".into()),
//!     ..node("worker-1")
//! };
//! assert_eq!(worker.metadata.name, "worker-1");
//! ```

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use crate::http::{Error, ErrorKind, Request, Response};
use crate::transport::{self, Installed, Transport};
use crate::types::{
    LoadBalancerStatus, Node, ObjectMeta, Service, ServiceType, SessionAffinity, TrafficPolicy,
};

/// A computed answer.
type Responder = Box<dyn Fn(&Request) -> Result<Response, Error>>;

/// What a rule answers.
enum Answer {
    /// The same response every time.
    Always(Response),
    /// These responses in order, then the last one again.
    Sequence(VecDeque<Result<Response, Error>>),
    /// Computed from the request.
    With(Responder),
}

struct Rule {
    method: String,
    path: String,
    answer: Answer,
}

/// Canned answers keyed by method and path (with the query when the rule's path has
/// one), and the requests sent, in order. Cheap to clone: clones share state.
#[derive(Clone, Default)]
pub struct MockTransport {
    rules: Rc<RefCell<Vec<Rule>>>,
    sent: Rc<RefCell<Vec<Request>>>,
}

impl MockTransport {
    /// A transport with no answers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `method path` with `response`. `path` matches the request's path, or
    /// its path and query when `path` contains `?`. Later rules win.
    pub fn on(&self, method: &str, path: &str, response: Response) -> &Self {
        self.rule(method, path, Answer::Always(response))
    }

    /// Answers `method path` with each of `responses` in turn (the last one repeats):
    /// for throttling then success, or a transport error then success.
    pub fn on_sequence(
        &self,
        method: &str,
        path: &str,
        responses: Vec<Result<Response, Error>>,
    ) -> &Self {
        self.rule(method, path, Answer::Sequence(responses.into()))
    }

    /// Answers `method path` with what `answer` computes from the request.
    pub fn on_with(
        &self,
        method: &str,
        path: &str,
        answer: impl Fn(&Request) -> Result<Response, Error> + 'static,
    ) -> &Self {
        self.rule(method, path, Answer::With(Box::new(answer)))
    }

    fn rule(&self, method: &str, path: &str, answer: Answer) -> &Self {
        self.rules.borrow_mut().push(Rule {
            method: method.to_ascii_uppercase(),
            path: path.to_owned(),
            answer,
        });
        self
    }

    /// Routes this thread's requests here until the guard is dropped.
    pub fn install(&self) -> Installed {
        transport::install(Rc::new(self.clone()))
    }

    /// Every request sent so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.sent.borrow().clone()
    }

    /// How many requests were sent with `method` to `path` (path only, no query).
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.sent
            .borrow()
            .iter()
            .filter(|r| r.method().as_str().eq_ignore_ascii_case(method))
            .filter(|r| r.url().is_ok_and(|u| split(&u.path_and_query).0 == path))
            .count()
    }
}

fn split(path_and_query: &str) -> (&str, &str) {
    path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""))
}

impl Transport for MockTransport {
    fn send(&self, request: &Request) -> Result<Response, Error> {
        self.sent.borrow_mut().push(request.clone());
        let url = request.url()?;
        let (path, _) = split(&url.path_and_query);
        let mut rules = self.rules.borrow_mut();
        let rule = rules.iter_mut().rev().find(|rule| {
            rule.method == request.method().as_str()
                && if rule.path.contains('?') {
                    rule.path == url.path_and_query
                } else {
                    rule.path == path
                }
        });
        let Some(rule) = rule else {
            return Err(Error::new(
                ErrorKind::Unreachable,
                format!(
                    "mock transport: nothing answers {} {}",
                    request.method().as_str(),
                    url.path_and_query
                ),
            ));
        };
        match &mut rule.answer {
            Answer::Always(response) => Ok(response.clone()),
            Answer::Sequence(queue) => {
                if queue.len() > 1 {
                    queue.pop_front().expect("not empty")
                } else {
                    queue.front().cloned().unwrap_or_else(|| {
                        Err(Error::new(
                            ErrorKind::Other,
                            "mock transport: empty sequence",
                        ))
                    })
                }
            }
            Answer::With(answer) => answer(request),
        }
    }
}

/// Object metadata with only a name and namespace.
fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.into(),
        namespace: namespace.into(),
        uid: String::new(),
        labels: Vec::new(),
        annotations: Vec::new(),
        deletion_timestamp: None,
    }
}

/// Node `name`, every other field empty: no provider ID, address, label or condition.
pub fn node(name: &str) -> Node {
    Node {
        metadata: meta("", name),
        provider_id: None,
        pod_cidrs: Vec::new(),
        taints: Vec::new(),
        addresses: Vec::new(),
        conditions: Vec::new(),
        unschedulable: false,
    }
}

/// Service `namespace/name` of type LoadBalancer, every other field empty or the API
/// server's default: no port, UID or annotation, no affinity, `Cluster` traffic.
pub fn service(namespace: &str, name: &str) -> Service {
    Service {
        metadata: meta(namespace, name),
        service_type: ServiceType::LoadBalancer,
        ports: Vec::new(),
        session_affinity: SessionAffinity::None,
        load_balancer_source_ranges: Vec::new(),
        external_traffic_policy: TrafficPolicy::Cluster,
        health_check_node_port: 0,
        ip_families: Vec::new(),
        load_balancer_class: None,
        load_balancer_ip: None,
        status: LoadBalancerStatus {
            ingress: Vec::new(),
        },
        external_ips: Vec::new(),
        cluster_ips: Vec::new(),
        ip_family_policy: None,
        session_affinity_timeout_seconds: None,
        allocate_load_balancer_node_ports: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_queries_and_uninstall() {
        let cloud = MockTransport::new();
        cloud.on_sequence(
            "GET",
            "/x",
            vec![
                Err(Error::new(ErrorKind::Timeout, "slow")),
                Ok(Response::new(200)),
            ],
        );
        cloud.on("GET", "/x?page=2", Response::new(201));
        {
            let _installed = cloud.install();
            let first = Request::get("http://c/x").send().unwrap_err();
            assert!(first.is_timeout());
            assert_eq!(Request::get("http://c/x").send().unwrap().status, 200);
            assert_eq!(Request::get("http://c/x").send().unwrap().status, 200);
            let page = Request::get("http://c/x").query("page", "2").send();
            assert_eq!(page.unwrap().status, 201);
            assert_eq!(cloud.count("GET", "/x"), 4);
        }
        // Uninstalled: no transport outside a component.
        let error = Request::get("http://c/x").send().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unreachable);
        assert_eq!(cloud.requests().len(), 4);
    }
}
