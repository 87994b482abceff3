//! [`ShadowCloud`]: the serving provider answers, a candidate version is asked the
//! same read-only questions on the side, and the two answers are compared.
//!
//! This is the hot swap canary's seam ([`crate::hot_swap`], `--provider-canary-period`):
//! only the serving version's answers reach the controllers, so a candidate that traps,
//! errs or says every instance is gone changes nothing in the cluster; its answers are
//! counted in a [`Comparison`] that decides whether it may serve. Calls that change the
//! cloud (ensure, update and delete a load balancer, create and delete a route) go to
//! the serving version only: they cannot be asked twice.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, NodeAddress, Service};

use super::{BatchFuture, Cloud, CloudFuture, Error, InstanceMetadata, Requirement, Route};

/// How the candidate's answers compared with the serving version's.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Both answered the same.
    pub agree: AtomicU64,
    /// Both answered, differently (for a batch: any Node differently).
    pub differ: AtomicU64,
    /// The candidate failed (error, trap, timeout) where the serving version answered.
    pub candidate_errors: AtomicU64,
    /// Both failed: says nothing about the candidate.
    pub both_errors: AtomicU64,
    /// The candidate answered where the serving version failed.
    pub serving_errors: AtomicU64,
}

/// What [`Comparison::record`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// See [`Comparison::agree`].
    Agree,
    /// See [`Comparison::differ`].
    Differ,
    /// See [`Comparison::candidate_errors`].
    CandidateError,
    /// See [`Comparison::both_errors`].
    BothErrors,
    /// See [`Comparison::serving_errors`].
    ServingError,
}

impl Verdict {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Agree => "agree",
            Verdict::Differ => "differ",
            Verdict::CandidateError => "candidate_error",
            Verdict::BothErrors => "both_errors",
            Verdict::ServingError => "serving_error",
        }
    }
}

impl Comparison {
    /// Compares two answers (each `None` when it failed) and counts the verdict.
    pub fn record<T: PartialEq>(&self, serving: Option<&T>, candidate: Option<&T>) -> Verdict {
        let verdict = match (serving, candidate) {
            (Some(a), Some(b)) if a == b => Verdict::Agree,
            (Some(_), Some(_)) => Verdict::Differ,
            (Some(_), None) => Verdict::CandidateError,
            (None, None) => Verdict::BothErrors,
            (None, Some(_)) => Verdict::ServingError,
        };
        let counter = match verdict {
            Verdict::Agree => &self.agree,
            Verdict::Differ => &self.differ,
            Verdict::CandidateError => &self.candidate_errors,
            Verdict::BothErrors => &self.both_errors,
            Verdict::ServingError => &self.serving_errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        verdict
    }

    /// Calls compared where the serving version answered (the base of the rates).
    pub fn judged(&self) -> u64 {
        self.agree.load(Ordering::Relaxed)
            + self.differ.load(Ordering::Relaxed)
            + self.candidate_errors.load(Ordering::Relaxed)
    }
}

/// Called with each comparison: the function and the verdict (metrics, logs).
pub type Observer = Arc<dyn Fn(&'static str, Verdict) + Send + Sync>;

/// The serving cloud, with `candidate` asked the same read-only questions.
pub struct ShadowCloud {
    serving: Arc<dyn Cloud>,
    candidate: Arc<dyn Cloud>,
    comparison: Arc<Comparison>,
    observer: Observer,
}

impl ShadowCloud {
    /// `serving` answers; `candidate` is compared into `comparison`.
    pub fn new(
        serving: Arc<dyn Cloud>,
        candidate: Arc<dyn Cloud>,
        comparison: Arc<Comparison>,
        observer: Observer,
    ) -> Self {
        Self {
            serving,
            candidate,
            comparison,
            observer,
        }
    }

    /// Asks the candidate on the side (its own task: the serving answer never waits for
    /// it) and compares its answer with `serving`'s.
    fn compare<T, F>(&self, function: &'static str, serving: Option<T>, candidate: F)
    where
        T: PartialEq + Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let comparison = self.comparison.clone();
        let observer = self.observer.clone();
        tokio::spawn(async move {
            let answer = candidate.await.ok();
            let verdict = comparison.record(serving.as_ref(), answer.as_ref());
            observer(function, verdict);
        });
    }
}

fn each_ok<T: Clone>(answers: &Result<Vec<Result<T, Error>>, Error>) -> Option<Vec<Option<T>>> {
    answers
        .as_ref()
        .ok()
        .map(|v| v.iter().map(|a| a.as_ref().ok().cloned()).collect())
}

/// A batch answer as compared: each Node's answer, `None` where it failed.
fn per_node<T>(answers: Result<Vec<Result<T, Error>>, Error>) -> Result<Vec<Option<T>>, Error> {
    answers.map(|v| v.into_iter().map(Result::ok).collect())
}

fn owned(nodes: &[Arc<Node>]) -> Vec<Arc<Node>> {
    nodes.to_vec()
}

impl Cloud for ShadowCloud {
    fn name(&self) -> &str {
        self.serving.name()
    }

    fn version(&self) -> u64 {
        self.serving.version()
    }

    fn candidate_version(&self) -> Option<u64> {
        Some(self.candidate.version())
    }

    fn meets(&self, requirement: Requirement) -> bool {
        self.serving.meets(requirement)
    }

    fn batches(&self) -> bool {
        self.serving.batches()
    }

    fn instance_metadata<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, InstanceMetadata> {
        Box::pin(async move {
            let answer = self.serving.instance_metadata(node).await;
            let (candidate, node) = (self.candidate.clone(), node.clone());
            self.compare(
                "instance-metadata",
                answer.as_ref().ok().cloned(),
                async move { candidate.instance_metadata(&node).await },
            );
            answer
        })
    }

    fn node_addresses<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<Vec<NodeAddress>>> {
        Box::pin(async move {
            let answer = self.serving.node_addresses(node).await;
            let (candidate, node) = (self.candidate.clone(), node.clone());
            self.compare(
                "node-addresses",
                answer.as_ref().ok().cloned(),
                async move { candidate.node_addresses(&node).await },
            );
            answer
        })
    }

    fn instance_exists<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        Box::pin(async move {
            let answer = self.serving.instance_exists(node).await;
            let (candidate, node) = (self.candidate.clone(), node.clone());
            self.compare(
                "instance-exists",
                answer.as_ref().ok().cloned(),
                async move { candidate.instance_exists(&node).await },
            );
            answer
        })
    }

    fn instance_shutdown<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        Box::pin(async move {
            let answer = self.serving.instance_shutdown(node).await;
            let (candidate, node) = (self.candidate.clone(), node.clone());
            self.compare(
                "instance-shutdown",
                answer.as_ref().ok().cloned(),
                async move { candidate.instance_shutdown(&node).await },
            );
            answer
        })
    }

    fn instances_metadata<'a>(
        &'a self,
        nodes: &'a [Arc<Node>],
    ) -> BatchFuture<'a, InstanceMetadata> {
        Box::pin(async move {
            let answers = self.serving.instances_metadata(nodes).await;
            let (candidate, nodes) = (self.candidate.clone(), owned(nodes));
            self.compare("instances-metadata", each_ok(&answers), async move {
                per_node(candidate.instances_metadata(&nodes).await)
            });
            answers
        })
    }

    fn nodes_addresses<'a>(
        &'a self,
        nodes: &'a [Arc<Node>],
    ) -> BatchFuture<'a, Option<Vec<NodeAddress>>> {
        Box::pin(async move {
            let answers = self.serving.nodes_addresses(nodes).await;
            let (candidate, nodes) = (self.candidate.clone(), owned(nodes));
            self.compare("nodes-addresses", each_ok(&answers), async move {
                per_node(candidate.nodes_addresses(&nodes).await)
            });
            answers
        })
    }

    fn instances_exist<'a>(&'a self, nodes: &'a [Arc<Node>]) -> BatchFuture<'a, Option<bool>> {
        Box::pin(async move {
            let answers = self.serving.instances_exist(nodes).await;
            let (candidate, nodes) = (self.candidate.clone(), owned(nodes));
            self.compare("instances-exist", each_ok(&answers), async move {
                per_node(candidate.instances_exist(&nodes).await)
            });
            answers
        })
    }

    fn instances_shutdown<'a>(&'a self, nodes: &'a [Arc<Node>]) -> BatchFuture<'a, Option<bool>> {
        Box::pin(async move {
            let answers = self.serving.instances_shutdown(nodes).await;
            let (candidate, nodes) = (self.candidate.clone(), owned(nodes));
            self.compare("instances-shutdown", each_ok(&answers), async move {
                per_node(candidate.instances_shutdown(&nodes).await)
            });
            answers
        })
    }

    fn get_load_balancer<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
    ) -> CloudFuture<'a, Option<LoadBalancerStatus>> {
        Box::pin(async move {
            let answer = self.serving.get_load_balancer(cluster, service).await;
            let (candidate, cluster, service) =
                (self.candidate.clone(), cluster.to_owned(), service.clone());
            self.compare(
                "get-load-balancer",
                answer.as_ref().ok().cloned(),
                async move { candidate.get_load_balancer(&cluster, &service).await },
            );
            answer
        })
    }

    fn ensure_load_balancer<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
        nodes: &'a [Arc<Node>],
    ) -> CloudFuture<'a, LoadBalancerStatus> {
        self.serving.ensure_load_balancer(cluster, service, nodes)
    }

    fn update_load_balancer<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
        nodes: &'a [Arc<Node>],
    ) -> CloudFuture<'a, ()> {
        self.serving.update_load_balancer(cluster, service, nodes)
    }

    fn ensure_load_balancer_deleted<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
    ) -> CloudFuture<'a, ()> {
        self.serving.ensure_load_balancer_deleted(cluster, service)
    }

    fn list_routes<'a>(&'a self, cluster: &'a str) -> CloudFuture<'a, Vec<Route>> {
        Box::pin(async move {
            let answer = self.serving.list_routes(cluster).await;
            let (candidate, cluster) = (self.candidate.clone(), cluster.to_owned());
            self.compare("list-routes", answer.as_ref().ok().cloned(), async move {
                candidate.list_routes(&cluster).await
            });
            answer
        })
    }

    fn create_route<'a>(
        &'a self,
        cluster: &'a str,
        name_hint: &'a str,
        route: &'a Route,
    ) -> CloudFuture<'a, ()> {
        self.serving.create_route(cluster, name_hint, route)
    }

    fn delete_route<'a>(&'a self, cluster: &'a str, route: &'a Route) -> CloudFuture<'a, ()> {
        self.serving.delete_route(cluster, route)
    }
}

/// The version under trial, as the cloud seam sees it.
#[derive(Clone)]
pub struct Candidate {
    /// The new version.
    pub provider: wasm_ccm_host::provider::Provider,
    /// Its answers compared with the serving version's.
    pub comparison: Arc<Comparison>,
    /// Counts each comparison.
    pub observer: Observer,
}

/// Where the reloader puts a version under trial ([`crate::hot_swap::canary`]) and the
/// cloud seam finds it.
#[derive(Clone, Default)]
pub struct CanarySlot(Arc<RwLock<Option<Candidate>>>);

impl std::fmt::Debug for CanarySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CanarySlot")
    }
}

impl CanarySlot {
    /// The version under trial, if any.
    pub fn get(&self) -> Option<Candidate> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `candidate` on trial, or none.
    pub(crate) fn set(&self, candidate: Option<Candidate>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = candidate;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_compared_where_the_serving_version_answered() {
        let c = Comparison::default();
        assert_eq!(c.record(Some(&1), Some(&1)), Verdict::Agree);
        assert_eq!(c.record(Some(&1), Some(&2)), Verdict::Differ);
        assert_eq!(c.record(Some(&1), None), Verdict::CandidateError);
        assert_eq!(c.record::<i32>(None, None), Verdict::BothErrors);
        assert_eq!(c.record(None, Some(&1)), Verdict::ServingError);
        assert_eq!(c.judged(), 3);
    }
}
