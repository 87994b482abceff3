//! The hot swap canary (`--provider-canary-period`, off by default): a new version
//! that passed every load check does not serve at once. For the canary period it
//! shadows the serving version — asked the same read-only questions on the side
//! ([`crate::cloud::shadow`]), its answers compared, never used — and then serves only
//! if it failed and differed on few enough of them. Otherwise it is refused as any
//! broken version is (`ProviderReloadFailed`, `wasm_ccm_provider_reloads_total{result="canary"}`)
//! and the serving version — the last good one — keeps serving. A version failing or
//! differing on most calls is refused as soon as 20 calls were compared.
//!
//! Shadowing doubles the read-only cloud requests during the period; calls that
//! change the cloud are not shadowed, so what a new version does when it ensures a load
//! balancer is only seen once it serves.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Fingerprint, Provider};

use crate::cloud::shadow::{CanarySlot, Candidate, Comparison, Observer, Verdict};

/// Calls compared before a clearly bad version is refused early.
const EARLY_VERDICT_CALLS: u64 = 20;

/// `--provider-canary-*`.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryOptions {
    /// How long a new version shadows the serving one.
    pub period: Duration,
    /// The largest share of compared calls (percent) on which the new version may
    /// fail where the serving one answered.
    pub max_error_percent: f64,
    /// The largest share of compared calls (percent) it may answer differently.
    pub max_difference_percent: f64,
}

/// Labels of `wasm_ccm_provider_canary_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CanaryLabels {
    function: String,
    /// `agree`, `differ`, `candidate_error`, `both_errors`, `serving_error`.
    result: String,
}

/// The canary: options, the slot the cloud seam reads, the metric.
#[derive(Clone)]
pub struct Canary {
    pub(super) options: CanaryOptions,
    pub(super) slot: CanarySlot,
    calls: Family<CanaryLabels, Counter>,
}

impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canary")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Canary {
    /// A canary with `options`, its metric registered in `metrics`; the cloud seam
    /// reads `slot`.
    pub fn new(options: CanaryOptions, slot: CanarySlot, metrics: &Metrics) -> Self {
        let calls = Family::<CanaryLabels, Counter>::default();
        metrics.register(
            "provider_canary_calls",
            "Read-only provider calls asked of a new version under canary beside the serving one, by function and how the answers compared",
            calls.clone(),
        );
        Self {
            options,
            slot,
            calls,
        }
    }

    /// Starts the trial of `provider`.
    pub(super) fn start(
        &self,
        provider: Provider,
        fingerprint: Fingerprint,
        new_policy: Option<super::PolicyResult>,
    ) -> Trial {
        let comparison = Arc::new(Comparison::default());
        let calls = self.calls.clone();
        let observer: Observer = Arc::new(move |function, verdict: Verdict| {
            calls
                .get_or_create(&CanaryLabels {
                    function: function.into(),
                    result: verdict.label().into(),
                })
                .inc();
            if matches!(verdict, Verdict::Differ | Verdict::CandidateError) {
                tracing::warn!(
                    function,
                    result = verdict.label(),
                    "provider canary: the new version's answer is not the serving version's"
                );
            }
        });
        self.slot.set(Some(Candidate {
            provider: provider.clone(),
            comparison: comparison.clone(),
            observer,
        }));
        Trial {
            provider,
            fingerprint,
            new_policy,
            comparison,
            started: Instant::now(),
        }
    }

    /// Ends the trial: the slot is emptied.
    pub(super) fn end(&self) {
        self.slot.set(None);
    }
}

/// A version under trial.
pub(super) struct Trial {
    pub(super) provider: Provider,
    pub(super) fingerprint: Fingerprint,
    /// The policy it came with, when changed: applied to the serving version if the
    /// trial fails, as for any refused version.
    pub(super) new_policy: Option<super::PolicyResult>,
    pub(super) comparison: Arc<Comparison>,
    pub(super) started: Instant,
}

/// What the trial shows so far.
#[derive(Debug, PartialEq)]
pub(super) enum Judgement {
    /// Not yet decided.
    Pending,
    /// It may serve; the summary says what was compared.
    Pass(String),
    /// It is refused; the summary says why.
    Fail(String),
}

impl Trial {
    /// Judges the trial under `options` at `now`.
    pub(super) fn judge(&self, options: &CanaryOptions, now: Instant) -> Judgement {
        judge_counts(&self.comparison, self.started, options, now)
    }
}

/// Judges a trial started at `started` whose comparison is `c`.
fn judge_counts(
    c: &Comparison,
    started: Instant,
    options: &CanaryOptions,
    now: Instant,
) -> Judgement {
    let judged = c.judged();
    let errors = c.candidate_errors.load(Ordering::Relaxed);
    let differ = c.differ.load(Ordering::Relaxed);
    let percent = |n: u64| {
        if judged == 0 {
            0.0
        } else {
            n as f64 * 100.0 / judged as f64
        }
    };
    let summary = format!(
        "{judged} calls compared: {differ} answered differently ({:.0}%, at most {}% allowed), \
             {errors} failed where the serving version answered ({:.0}%, at most {}% allowed)",
        percent(differ),
        options.max_difference_percent,
        percent(errors),
        options.max_error_percent,
    );
    let bad = percent(errors) > options.max_error_percent
        || percent(differ) > options.max_difference_percent;
    let over = now.duration_since(started) >= options.period;
    match (bad, over, judged >= EARLY_VERDICT_CALLS) {
        (true, _, true) | (true, true, _) => Judgement::Fail(summary),
        (false, true, _) => Judgement::Pass(summary),
        _ => Judgement::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> CanaryOptions {
        CanaryOptions {
            period: Duration::from_secs(60),
            max_error_percent: 5.0,
            max_difference_percent: 5.0,
        }
    }

    fn judge(agree: u64, differ: u64, errors: u64, after: Duration) -> Judgement {
        let comparison = Comparison::default();
        comparison.agree.store(agree, Ordering::Relaxed);
        comparison.differ.store(differ, Ordering::Relaxed);
        comparison.candidate_errors.store(errors, Ordering::Relaxed);
        let started = Instant::now();
        judge_counts(&comparison, started, &options(), started + after)
    }

    #[test]
    fn a_good_version_passes_at_the_end_of_the_period() {
        assert_eq!(
            judge(100, 1, 1, Duration::from_secs(10)),
            Judgement::Pending
        );
        assert!(matches!(
            judge(100, 1, 1, Duration::from_secs(60)),
            Judgement::Pass(_)
        ));
        // Nothing compared: nothing against it.
        assert!(matches!(
            judge(0, 0, 0, Duration::from_secs(60)),
            Judgement::Pass(_)
        ));
    }

    #[test]
    fn a_bad_version_fails_early_or_at_the_end() {
        assert!(matches!(
            judge(0, 20, 0, Duration::from_secs(1)),
            Judgement::Fail(_)
        ));
        assert!(matches!(
            judge(10, 0, 10, Duration::from_secs(1)),
            Judgement::Fail(_)
        ));
        assert_eq!(judge(5, 2, 0, Duration::from_secs(1)), Judgement::Pending);
        let Judgement::Fail(summary) = judge(5, 2, 0, Duration::from_secs(60)) else {
            panic!("fails at the end");
        };
        assert!(
            summary.contains("7 calls compared: 2 answered differently (29%"),
            "{summary}"
        );
    }
}
