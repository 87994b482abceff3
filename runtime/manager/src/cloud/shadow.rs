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

use super::methods::shadow_impl;
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

super::methods::cloud_methods!(shadow_impl);

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
