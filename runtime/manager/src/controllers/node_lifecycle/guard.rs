//! The node deletion guard: how many "does not exist" answers a Node needs before it
//! is deleted, and how many Nodes may be deleted in a window.
//!
//! Upstream deletes a NotReady Node the first time its provider says the instance does
//! not exist. One wrong answer — a cloud answering 404 for a while, a login against the
//! wrong project, a bad provider release — then deletes every NotReady Node at once.
//! The guard asks for more before it deletes:
//!
//! 1. **Confirmations.** A Node is deleted only after `confirmations` answers "does not
//!    exist" in passes at least one `--node-monitor-period` apart (1 = upstream). Any
//!    other answer ("exists", "cannot tell") starts the count again; an error (auth,
//!    throttling, 5xx, timeout, trap) neither counts nor resets it.
//! 2. **A fresh version's answers do not count.** For `swap_grace` after a hot swap
//!    brings another provider version, its "does not exist" answers are ignored, and
//!    counts made by the version before start again.
//! 3. **A limit per window.** At most `max(limit, ⌈limit_percent × Nodes / 100⌉)`
//!    Nodes are deleted per `window`. Confirmed Nodes over the limit are held: a
//!    Warning event `NodeDeletionHeld` on each, the `wasm_ccm_node_deletion_guard_*`
//!    metrics, and they are asked about again each pass, so a Node whose instance
//!    comes back is kept and one truly gone is deleted once the window allows.
//!
//! The guard is a plain state machine over explicit instants of tokio's clock
//! ([`DeletionGuard`]); the
//! controller ([`super::monitor`]) feeds it the provider's answers each pass.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

// tokio's clock, so the controller's paused-time tests can move it.
use tokio::time::Instant;

/// The guard's settings (flags `--node-deletion-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct GuardOptions {
    /// `--node-deletion-confirmations`: "does not exist" answers needed (≥ 1).
    pub confirmations: u32,
    /// The least time between two counted answers: `--node-monitor-period`.
    pub spacing: Duration,
    /// `--node-deletion-limit`: Nodes that may be deleted per window.
    pub limit: u32,
    /// `--node-deletion-limit-percent`: the same, as a share of all Nodes; the larger
    /// of the two applies.
    pub limit_percent: u32,
    /// `--node-deletion-window`.
    pub window: Duration,
    /// `--node-deletion-swap-grace`: how long a newly swapped-in provider version's
    /// "does not exist" answers are ignored.
    pub swap_grace: Duration,
}

impl Default for GuardOptions {
    fn default() -> Self {
        Self {
            confirmations: 2,
            spacing: Duration::from_secs(5),
            limit: 2,
            limit_percent: 10,
            window: Duration::from_secs(10 * 60),
            swap_grace: Duration::from_secs(3 * 60),
        }
    }
}

impl GuardOptions {
    /// Upstream's behaviour: one answer deletes, no limit.
    pub fn upstream() -> Self {
        Self {
            confirmations: 1,
            limit: u32::MAX,
            swap_grace: Duration::ZERO,
            ..Self::default()
        }
    }

    /// The most Nodes that may be deleted per window in a cluster of `nodes`.
    pub fn allowed(&self, nodes: usize) -> usize {
        let share = (nodes as u64 * u64::from(self.limit_percent)).div_ceil(100);
        (self.limit as usize).max(share as usize)
    }
}

/// A Node the provider said does not exist.
#[derive(Debug, Clone)]
struct Suspect {
    /// When it was first said.
    first: Instant,
    /// When the last counted answer came.
    last_counted: Instant,
    /// Counted answers so far.
    confirmations: u32,
    /// Whether it is held now (its Warning event has been recorded).
    held: bool,
}

/// What the guard says about a Node the provider answered "does not exist" for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Counted; `confirmations` so far, fewer than needed.
    Counted(u32),
    /// Not counted: too soon after the last counted answer.
    TooSoon,
    /// Not counted: the version answering was swapped in less than `swap_grace` ago.
    FreshVersion,
    /// Enough answers: the Node may be deleted if the limit allows ([`DeletionGuard::admit`]).
    Confirmed,
}

impl Answer {
    /// The values of `wasm_ccm_node_deletion_guard_answers_total`'s `answer` label, one
    /// per kind of answer: the daemon registers the metric with them, at 0.
    pub const LABELS: [&'static str; 4] = ["counted", "too_soon", "fresh_version", "confirmed"];

    /// Its value of the answers metric's `answer` label (one of [`Answer::LABELS`]).
    pub fn label(self) -> &'static str {
        Self::LABELS[match self {
            Answer::Counted(_) => 0,
            Answer::TooSoon => 1,
            Answer::FreshVersion => 2,
            Answer::Confirmed => 3,
        }]
    }
}

/// The Nodes of one pass whose deletion the guard decided.
#[derive(Debug, Default, PartialEq)]
pub struct Admission {
    /// Delete these now (oldest suspicion first).
    pub delete: Vec<String>,
    /// Hold these: the limit is reached.
    pub hold: Vec<Held>,
}

/// A Node held by the limit.
#[derive(Debug, PartialEq)]
pub struct Held {
    /// The Node's key (UID).
    pub key: String,
    /// Whether it was not held in the previous pass (its event is due).
    pub newly: bool,
}

/// The guard's state across passes (one per controller).
#[derive(Debug)]
pub struct DeletionGuard {
    options: GuardOptions,
    suspects: HashMap<String, Suspect>,
    deletions: VecDeque<Instant>,
    /// The provider version answering (its serial), and when it replaced another one.
    version: Option<(u64, Option<Instant>)>,
}

impl DeletionGuard {
    /// A guard with `options`.
    pub fn new(options: GuardOptions) -> Self {
        Self {
            options,
            suspects: HashMap::new(),
            deletions: VecDeque::new(),
            version: None,
        }
    }

    /// The settings.
    pub fn options(&self) -> &GuardOptions {
        &self.options
    }

    /// Starts a pass answered by provider version `version` (its serial): a version
    /// other than the last one's is a swap; counts made before start again.
    pub fn begin_pass(&mut self, version: u64, now: Instant) {
        match &mut self.version {
            Some((current, _)) if *current == version => {}
            Some(_) => {
                self.version = Some((version, Some(now)));
                self.suspects.clear();
            }
            None => self.version = Some((version, None)),
        }
    }

    /// Whether the version answering now was swapped in less than `swap_grace` ago.
    pub fn fresh_version(&self, now: Instant) -> bool {
        matches!(&self.version, Some((_, Some(at))) if now.duration_since(*at) < self.options.swap_grace)
    }

    /// Records "does not exist" for the Node `key` at the pass that started at `now`.
    pub fn gone(&mut self, key: &str, now: Instant) -> Answer {
        if self.fresh_version(now) {
            return Answer::FreshVersion;
        }
        let suspect = self.suspects.entry(key.to_string()).or_insert(Suspect {
            first: now,
            last_counted: now,
            confirmations: 0,
            held: false,
        });
        if suspect.confirmations > 0
            && now.duration_since(suspect.last_counted) < self.options.spacing
        {
            return if suspect.confirmations >= self.options.confirmations {
                Answer::Confirmed
            } else {
                Answer::TooSoon
            };
        }
        suspect.confirmations = suspect.confirmations.saturating_add(1);
        suspect.last_counted = now;
        if suspect.confirmations >= self.options.confirmations {
            Answer::Confirmed
        } else {
            Answer::Counted(suspect.confirmations)
        }
    }

    /// Records an answer other than "does not exist" ("exists", "cannot tell"): the
    /// count starts again. (An error is not recorded: it keeps the count.)
    pub fn not_gone(&mut self, key: &str) {
        self.suspects.remove(key);
    }

    /// Forgets the Nodes not in `present` (Ready again, or deleted by someone else).
    pub fn retain(&mut self, present: &HashSet<String>) {
        self.suspects.retain(|key, _| present.contains(key));
    }

    /// Deletions within the window ending at `now`.
    pub fn recent_deletions(&mut self, now: Instant) -> usize {
        while self
            .deletions
            .front()
            .is_some_and(|at| now.duration_since(*at) >= self.options.window)
        {
            self.deletions.pop_front();
        }
        self.deletions.len()
    }

    /// Decides which `confirmed` Nodes are deleted now in a cluster of `nodes`, oldest
    /// suspicion first, within the window's limit; the rest are held.
    pub fn admit(&mut self, mut confirmed: Vec<String>, nodes: usize, now: Instant) -> Admission {
        confirmed.sort_by_key(|key| self.suspects.get(key).map(|s| s.first));
        confirmed.dedup();
        let budget = self
            .options
            .allowed(nodes)
            .saturating_sub(self.recent_deletions(now));
        let mut admission = Admission::default();
        for (i, key) in confirmed.into_iter().enumerate() {
            if i < budget {
                admission.delete.push(key);
            } else if let Some(suspect) = self.suspects.get_mut(&key) {
                admission.hold.push(Held {
                    newly: !suspect.held,
                    key,
                });
                suspect.held = true;
            }
        }
        admission
    }

    /// Records that the Node `key` was deleted at `now`.
    pub fn deleted(&mut self, key: &str, now: Instant) {
        self.suspects.remove(key);
        self.deletions.push_back(now);
    }

    /// Nodes held now.
    pub fn held(&self) -> usize {
        self.suspects.values().filter(|s| s.held).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of answer counts under its own label of [`Answer::LABELS`], which the
    /// metric is created with (at 0).
    #[test]
    fn every_answer_has_a_label_of_the_metric() {
        let answers = [
            Answer::Counted(1),
            Answer::TooSoon,
            Answer::FreshVersion,
            Answer::Confirmed,
        ];
        let labels: Vec<&str> = answers.iter().map(|a| a.label()).collect();
        assert_eq!(labels, Answer::LABELS);
    }

    fn guard() -> (DeletionGuard, Instant) {
        (DeletionGuard::new(GuardOptions::default()), Instant::now())
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn two_spaced_answers_confirm() {
        let (mut g, t0) = guard();
        g.begin_pass(1, t0);
        assert_eq!(g.gone("a", t0), Answer::Counted(1));
        // A second answer within the same period does not count.
        assert_eq!(g.gone("a", t0 + 2 * S), Answer::TooSoon);
        assert_eq!(g.gone("a", t0 + 5 * S), Answer::Confirmed);
    }

    #[test]
    fn another_answer_starts_again_and_an_error_does_not() {
        let (mut g, t0) = guard();
        g.begin_pass(1, t0);
        assert_eq!(g.gone("a", t0), Answer::Counted(1));
        g.not_gone("a");
        assert_eq!(g.gone("a", t0 + 5 * S), Answer::Counted(1));
        // An error in between: the controller neither calls gone nor not_gone.
        assert_eq!(g.gone("a", t0 + 15 * S), Answer::Confirmed);
    }

    #[test]
    fn upstream_deletes_at_the_first_answer_without_limit() {
        let mut g = DeletionGuard::new(GuardOptions::upstream());
        let t0 = Instant::now();
        g.begin_pass(1, t0);
        let keys: Vec<String> = (0..50).map(|i| format!("n{i}")).collect();
        for k in &keys {
            assert_eq!(g.gone(k, t0), Answer::Confirmed);
        }
        let a = g.admit(keys.clone(), 50, t0);
        assert_eq!(a.delete.len(), 50);
        assert!(a.hold.is_empty());
    }

    #[test]
    fn the_limit_is_the_larger_of_count_and_share() {
        let o = GuardOptions::default();
        assert_eq!(o.allowed(10), 2);
        assert_eq!(o.allowed(0), 2);
        assert_eq!(o.allowed(21), 3);
        assert_eq!(o.allowed(1000), 100);
        let none = GuardOptions {
            limit: 0,
            limit_percent: 0,
            ..o
        };
        assert_eq!(none.allowed(1000), 0);
    }

    #[test]
    fn over_the_limit_nodes_are_held_until_the_window_passes() {
        let (mut g, t0) = guard();
        g.begin_pass(1, t0);
        let keys: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            g.gone(k, t0 + Duration::from_millis(i as u64));
        }
        let t1 = t0 + 5 * S;
        for k in &keys {
            g.gone(k, t1);
        }
        let a = g.admit(keys.clone(), 10, t1);
        assert_eq!(a.delete, ["n0", "n1"], "oldest suspicion first");
        assert_eq!(a.hold.len(), 8);
        assert!(a.hold.iter().all(|h| h.newly));
        for k in &a.delete {
            g.deleted(k, t1);
        }
        assert_eq!(g.held(), 8);
        // Next pass: still held, no new events.
        let t2 = t1 + 5 * S;
        let rest: Vec<String> = keys[2..].to_vec();
        for k in &rest {
            assert_eq!(g.gone(k, t2), Answer::Confirmed);
        }
        let a = g.admit(rest.clone(), 8, t2);
        assert!(a.delete.is_empty());
        assert!(a.hold.iter().all(|h| !h.newly));
        // The storm ends: the instances exist again.
        for k in &rest[..6] {
            g.not_gone(k);
        }
        assert_eq!(g.held(), 2);
        // After the window, the two truly gone are deleted.
        let t3 = t1 + Duration::from_secs(600);
        for k in &rest[6..] {
            g.gone(k, t3);
        }
        let a = g.admit(rest[6..].to_vec(), 8, t3);
        assert_eq!(a.delete.len(), 2);
    }

    #[test]
    fn a_fresh_version_is_not_believed() {
        let (mut g, t0) = guard();
        g.begin_pass(1, t0);
        assert_eq!(g.gone("a", t0), Answer::Counted(1));
        let t1 = t0 + 5 * S;
        g.begin_pass(2, t1);
        assert_eq!(g.gone("a", t1), Answer::FreshVersion);
        let t2 = t1 + Duration::from_secs(180);
        g.begin_pass(2, t2);
        // The count made by v1 started again.
        assert_eq!(g.gone("a", t2), Answer::Counted(1));
        // The first version at start is not a swap.
        let (mut g, t0) = guard();
        g.begin_pass(1, t0);
        assert!(!g.fresh_version(t0));
    }
}
