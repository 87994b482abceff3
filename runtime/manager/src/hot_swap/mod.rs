//! Hot swap: switching the running controller manager to a changed provider without a
//! restart, and never to a broken one.
//!
//! Start with [`Reloader::run`]. It watches the directories holding the component, its
//! policy and the cloud config ([`watch`]), debounces, reads a consistent version of
//! the three through kubelet's `..data` symlink (the host's one reader,
//! [`ProviderSource`]) and compares content hashes. A changed version goes live only after it compiled (off the async runtime),
//! matched the contract, instantiated, ran `initialize` under the policy's call
//! timeout, declared the same provider name and still exports every interface a
//! running controller uses (its [`Controller::needs`]). Then [`SharedProvider::replace`] switches new calls over
//! while calls in flight finish on the old version, whose instance pool is freed when
//! the last of them returns.
//!
//! A refused version is logged with the file and the reason, counted in
//! `wasm_ccm_provider_reloads_total{result=<reason>}` and published as a
//! `ProviderReloadFailed` Event on the controller manager's Pod ([`report`]); the
//! previous version keeps serving. The same content is not retried until it changes
//! again, except after a failure that may pass (`initialize` or instantiation, e.g.
//! the cloud API briefly down), which is retried every rescan period. A removed
//! component keeps the loaded version serving.
//!
//! Dropping an interface a running controller uses is refused rather than stopping
//! that controller: a provider upgrade silently ending, say, load balancer management
//! for every Service is worse than an upgrade that waits for the operator. To drop the
//! controller, restart with `--controllers` excluding it.
//!
//! A changed policy takes effect even when the component it came with is refused: its
//! egress rules (allowlist, credentials, request limits) are put in force on the
//! serving version, so a tightened or removed policy never leaves it on the older,
//! wider one; an invalid policy denies all egress until it is fixed (fail closed).
//! That is counted as `policy_applied` and published as a `ProviderPolicyApplied`
//! Event.
//!
//! Credential files named by the policy need no reload: the egress broker re-reads
//! them when they change.

pub mod canary;
pub mod report;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::EventType;
use tokio::sync::Notify;
use wasm_ccm_host::provider::{
    Fingerprint, LoadError, Provider, ProviderLoader, ProviderSource, SharedProvider, SourceError,
};

use crate::controllers::Controller;
pub use report::ReloadReporter;

/// Why a changed provider version was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The files could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Compiling, checking, instantiating or initializing the component failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The component no longer exports an interface a running controller uses, or its
    /// configuration declines it (`identity.declined-interfaces`).
    #[error(
        "{path}: {how} {interface}, which the running {controller} controller uses; \
         keeping the running version (to drop the controller, restart with --controllers=*,-{controller})"
    )]
    InterfaceDropped {
        path: PathBuf,
        /// `does not export`, or `its configuration declines`.
        how: &'static str,
        interface: &'static str,
        controller: &'static str,
    },
    /// The new version failed its canary: it answered differently from the serving
    /// version, or failed where it answered, on too many calls.
    #[error("{path}: failed its canary ({summary}); keeping the running version")]
    Canary { path: PathBuf, summary: String },
    /// The component answers `has-cluster-id` false and `--allow-untagged-cloud` is off.
    #[error(
        "{path}: has-cluster-id is false (the provider does not tag its resources with a \
         cluster ID); keeping the running version (start with --allow-untagged-cloud to \
         accept an untagged cloud)"
    )]
    UntaggedCloud { path: PathBuf },
}

impl ReloadError {
    /// Whether the same content may succeed later: `initialize` or instantiation can
    /// fail on a passing condition (the cloud API briefly unreachable). Such versions
    /// are retried on every rescan; the others only when the content changes.
    pub fn may_pass_later(&self) -> bool {
        match self {
            Self::Load(LoadError::Initialize { .. } | LoadError::Instantiate { .. }) => true,
            // The registry down, slow, or the signature not pushed yet.
            Self::Load(LoadError::Fetch(err)) => err.may_pass_later(),
            _ => false,
        }
    }

    /// A short, stable name of the failure, for metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Source(SourceError::Remote(err)) => err.reason(),
            Self::Source(_) => "read",
            Self::Load(err) => err.reason(),
            Self::InterfaceDropped { .. } => "interface_dropped",
            Self::UntaggedCloud { .. } => "untagged_cloud",
            Self::Canary { .. } => "canary",
        }
    }
}

/// The default quiet time after a change notification: kubelet's update of a volume
/// (new directory, files, `..data_tmp` symlink, rename, removal) is a burst of
/// syscalls well inside it.
pub const DEBOUNCE: Duration = Duration::from_millis(10);

/// A policy as read with a new version.
pub(crate) type PolicyResult =
    Result<wasm_ccm_host::policy::Policy, wasm_ccm_host::policy::PolicyError>;

/// How often a version on trial is judged.
const TRIAL_TICK: Duration = Duration::from_millis(250);

/// What the reloader watches and what a new version must satisfy.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The component in the providers directory, e.g. `/etc/wasm-ccm/providers/simcloud.wasm`.
    pub component: PathBuf,
    /// `--cloud-config`, passed to `initialize`.
    pub cloud_config: Option<PathBuf>,
    /// `--cloud-provider`: a new version must declare this name.
    pub provider_name: String,
    /// The running controllers; what they need must stay exported.
    pub controllers: Vec<&'static Controller>,
    /// Full re-read period, in case a change notification was missed.
    pub rescan_period: Duration,
    /// Quiet time after a change notification before reading.
    pub debounce: Duration,
    /// `--allow-untagged-cloud`: a version answering `has-cluster-id` false may serve.
    pub allow_untagged_cloud: bool,
    /// `--provider-canary-period` and co.: a new version shadows the serving one first.
    pub canary: Option<canary::Canary>,
}

/// What one check of the watched files found.
#[derive(Debug)]
pub enum Outcome {
    /// Same content as the serving (or the last refused) version.
    Unchanged,
    /// The component file is gone; the loaded version keeps serving.
    Missing,
    /// A new version is serving.
    Swapped { sha256: String },
    /// A new version is on trial beside the serving one (the canary).
    OnTrial { sha256: String },
    /// The changed version was refused; the previous one keeps serving.
    Refused(ReloadError),
}

/// Watches a provider's files and swaps in good new versions.
pub struct Reloader {
    settings: Settings,
    loader: ProviderLoader,
    shared: SharedProvider,
    reporter: Arc<ReloadReporter>,
    serving: Fingerprint,
    refused: Option<Fingerprint>,
    /// The refused version may pass on a retry ([`ReloadError::may_pass_later`]).
    retry_refused: bool,
    /// The note of the last refusal event, so retries do not repeat it.
    last_refusal: Option<String>,
    missing_reported: bool,
    /// The policy file could not be read as text, and all egress is denied until it can.
    policy_unreadable: bool,
    /// The version under canary, if any.
    trial: Option<canary::Trial>,
    changed: Arc<Notify>,
}

impl Reloader {
    /// A reloader for `shared`, whose serving version was read as `serving`.
    pub fn new(
        settings: Settings,
        loader: ProviderLoader,
        shared: SharedProvider,
        serving: Fingerprint,
        reporter: Arc<ReloadReporter>,
    ) -> Self {
        Self {
            settings,
            loader,
            shared,
            reporter,
            serving,
            refused: None,
            retry_refused: false,
            last_refusal: None,
            missing_reported: false,
            policy_unreadable: false,
            trial: None,
            changed: Arc::new(Notify::new()),
        }
    }

    /// The directories to watch: the component's and the cloud config's.
    fn watched_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![parent(&self.settings.component)];
        if let Some(config) = &self.settings.cloud_config {
            let dir = parent(config);
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs
    }

    /// Runs until `shutdown` turns true: on every change notification (debounced) and
    /// every rescan period, [`Self::check`].
    pub async fn run(mut self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let dirs = self.watched_dirs();
        let _watcher = match watch::watch(&dirs, self.changed.clone()) {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                tracing::warn!(dirs = ?dirs, error = %err, period = ?self.settings.rescan_period,
                    "cannot watch the provider's directories; changes are picked up by the periodic rescan only");
                None
            }
        };
        tracing::info!(dirs = ?dirs, "watching for provider changes");
        let mut rescan = tokio::time::interval(self.settings.rescan_period);
        rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        rescan.tick().await;
        loop {
            let notified = tokio::select! {
                _ = self.changed.notified() => true,
                _ = rescan.tick() => false,
                _ = tokio::time::sleep(TRIAL_TICK), if self.trial.is_some() => {
                    self.judge_trial();
                    continue;
                }
                _ = shutdown.wait_for(|stop| *stop) => {
                    if let Some(canary) = &self.settings.canary {
                        canary.end();
                    }
                    return;
                }
            };
            if notified {
                self.debounce().await;
            } else if self.retry_refused {
                self.refused = None;
            }
            self.check().await;
        }
    }

    /// Waits until no notification arrived for the debounce time (at most ten times it).
    async fn debounce(&self) {
        let limit = tokio::time::Instant::now() + self.settings.debounce * 10;
        loop {
            tokio::select! {
                _ = self.changed.notified() => {}
                _ = tokio::time::sleep(self.settings.debounce) => return,
                _ = tokio::time::sleep_until(limit) => return,
            }
        }
    }

    /// Reads the files once and swaps if they hold a new, good version.
    pub async fn check(&mut self) -> Outcome {
        let path = self.settings.component.clone();
        let snapshot = match self.read().await {
            Ok(snapshot) => snapshot,
            Err(SourceError::Missing { .. }) => {
                if !self.missing_reported {
                    self.missing_reported = true;
                    let current = self.shared.current();
                    tracing::warn!(file = %path.display(), sha256 = current.sha256(),
                        "provider component removed; the loaded version keeps serving until a replacement appears");
                    self.reporter.event(
                        EventType::Warning,
                        report::REASON_MISSING,
                        format!(
                            "{} was removed; provider {} (sha256 {}) keeps serving until a replacement appears",
                            path.display(),
                            current.name(),
                            short(current.sha256())
                        ),
                    );
                }
                return Outcome::Missing;
            }
            Err(err) => {
                // A policy that cannot even be read denies all egress (fail closed).
                if let SourceError::PolicyNotText { path } = &err
                    && !self.policy_unreadable
                {
                    self.policy_unreadable = true;
                    let unreadable = wasm_ccm_host::policy::PolicyError::Read {
                        path: path.clone(),
                        source: std::io::Error::other("not UTF-8 text"),
                    };
                    self.apply_policy(Err(unreadable), None);
                    // Whatever readable policy comes next is a change, even the old one.
                    self.serving.policy = Some("unreadable".into());
                }
                return self.refuse(err.into(), None);
            }
        };
        self.policy_unreadable = false;
        self.missing_reported = false;
        let fingerprint = snapshot.fingerprint.clone();
        if self.trial.as_ref().map(|t| &t.fingerprint) == Some(&fingerprint) {
            return Outcome::Unchanged;
        }
        // The files no longer hold the version on trial (a newer one, or the serving
        // one again): its trial ends without a verdict.
        self.end_trial();
        if fingerprint == self.serving || Some(&fingerprint) == self.refused.as_ref() {
            return Outcome::Unchanged;
        }
        tracing::info!(file = %path.display(), sha256 = %fingerprint.component, "provider files changed; loading the new version");
        // A changed policy applies even if its component is refused (fail closed).
        let new_policy =
            (fingerprint.policy != self.serving.policy).then(|| snapshot.policy(&path));
        match self.load(snapshot).await {
            Ok(provider) => match self.settings.canary.clone() {
                Some(canary) => self.start_trial(&canary, provider, fingerprint, new_policy),
                None => self.swap(provider, fingerprint),
            },
            Err(err) => {
                if let Some(policy) = new_policy {
                    self.apply_policy(policy, Some(&fingerprint));
                }
                self.refuse(err, Some(fingerprint))
            }
        }
    }

    /// Reads a snapshot, retrying briefly when a file vanished mid-read (kubelet removes
    /// the previous version's directory right after switching `..data`).
    async fn read(&self) -> Result<ProviderSource, SourceError> {
        let mut attempts = 0;
        loop {
            let component = self.settings.component.clone();
            let config = self.settings.cloud_config.clone();
            let result = tokio::task::spawn_blocking(move || {
                ProviderSource::read(&component, config.as_deref())
            })
            .await
            .expect("snapshot read panicked");
            match result {
                Err(SourceError::Read { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && attempts < 3 =>
                {
                    attempts += 1;
                    tokio::time::sleep(self.settings.debounce).await;
                }
                other => return other,
            }
        }
    }

    /// Builds the new version and checks it may replace the serving one.
    async fn load(&self, source: ProviderSource) -> Result<Provider, ReloadError> {
        let path = &self.settings.component;
        // A candidate declaring another name is refused before it runs; until it is
        // accepted its metrics and logs say provider="candidate".
        let provider = self
            .loader
            .load_candidate(path, source, &self.settings.provider_name)
            .await?;
        for controller in &self.settings.controllers {
            if !controller.needs.met_by(provider.exports()) {
                let declined = provider
                    .declined()
                    .iter()
                    .fold(provider.exports(), wasm_ccm_host::provider::Exports::with);
                return Err(ReloadError::InterfaceDropped {
                    path: path.clone(),
                    how: if controller.needs.met_by(declined) {
                        "its configuration declines"
                    } else {
                        "does not export"
                    },
                    interface: controller.needs.interface(),
                    controller: controller.name,
                });
            }
        }
        if !provider.has_cluster_id() && !self.settings.allow_untagged_cloud {
            return Err(ReloadError::UntaggedCloud { path: path.clone() });
        }
        Ok(provider)
    }

    /// Puts a changed policy's egress in force on the serving version whose new
    /// component was refused: a tightened or removed policy must never leave it on the
    /// older, wider one. An invalid policy denies all egress until it is fixed.
    fn apply_policy(&mut self, policy: PolicyResult, fingerprint: Option<&Fingerprint>) {
        let current = self.shared.current();
        let name = current.name().to_owned();
        let file = self.settings.component.display().to_string();
        // Held to this host's limits with the serving version's instance limits.
        let policy = policy.map_err(|e| e.to_string()).and_then(|mut policy| {
            policy.instance_limits = current.limits().clone();
            self.loader
                .check_policy(&self.settings.component, &policy)
                .map(|()| policy)
                .map_err(|e| e.to_string())
        });
        let outcome = match policy {
            Ok(policy) => current
                .apply_egress_policy(policy)
                .map_err(|err| format!("{err}; all egress is denied until the policy is fixed")),
            Err(err) => {
                let _ = current.apply_egress_policy(wasm_ccm_host::policy::Policy::default());
                Err(format!(
                    "{err}; all egress is denied until the policy is fixed"
                ))
            }
        };
        if let Some(fingerprint) = fingerprint {
            self.serving.policy = fingerprint.policy.clone();
        }
        self.reporter.count(&name, "policy_applied");
        let note = match &outcome {
            Ok(()) => format!(
                "{file}: the changed policy now applies to the serving provider {name} (sha256 {}), whose new component was refused",
                short(current.sha256())
            ),
            Err(reason) => format!(
                "{file}: the changed policy cannot apply to the serving provider {name}: {reason}"
            ),
        };
        tracing::warn!(provider = %name, file = %file, "{note}");
        self.reporter
            .event(EventType::Warning, report::REASON_POLICY_APPLIED, note);
    }

    /// Puts `provider` on trial beside the serving version.
    fn start_trial(
        &mut self,
        canary: &canary::Canary,
        provider: Provider,
        fingerprint: Fingerprint,
        new_policy: Option<PolicyResult>,
    ) -> Outcome {
        let sha256 = provider.sha256().to_owned();
        let current = self.shared.current();
        let note = format!(
            "{}: provider {} sha256 {} shadows the serving sha256 {} for {:?} before it may serve",
            self.settings.component.display(),
            current.name(),
            short(&sha256),
            short(current.sha256()),
            canary.options.period
        );
        tracing::info!(provider = current.name(), to = %sha256, "{note}");
        self.reporter
            .event(EventType::Normal, report::REASON_CANARY, note);
        self.trial = Some(canary.start(provider, fingerprint, new_policy));
        Outcome::OnTrial { sha256 }
    }

    /// Stops a trial without a verdict (its files changed again).
    fn end_trial(&mut self) {
        if let (Some(canary), Some(trial)) = (&self.settings.canary, self.trial.take()) {
            canary.end();
            tracing::info!(
                sha256 = trial.provider.sha256(),
                "the provider files changed during the canary; that version's trial ends"
            );
        }
    }

    /// Judges the version on trial: it serves, or it is refused.
    fn judge_trial(&mut self) {
        let (Some(canary), Some(trial)) = (self.settings.canary.clone(), self.trial.as_ref())
        else {
            return;
        };
        match trial.judge(&canary.options, std::time::Instant::now()) {
            canary::Judgement::Pending => {}
            canary::Judgement::Pass(summary) => {
                let trial = self.trial.take().expect("a trial");
                canary.end();
                tracing::info!(summary = %summary, "provider canary passed");
                self.swap(trial.provider, trial.fingerprint);
            }
            canary::Judgement::Fail(summary) => {
                let trial = self.trial.take().expect("a trial");
                canary.end();
                let err = ReloadError::Canary {
                    path: self.settings.component.clone(),
                    summary,
                };
                // As for any refused version, its changed policy applies (fail closed).
                if let Some(policy) = trial.new_policy {
                    self.apply_policy(policy, Some(&trial.fingerprint));
                }
                self.refuse(err, Some(trial.fingerprint));
            }
        }
    }

    fn swap(&mut self, provider: Provider, fingerprint: Fingerprint) -> Outcome {
        provider.accept();
        let sha256 = provider.sha256().to_owned();
        let old = self.shared.replace(provider.clone());
        crate::allocator::release_free_memory();
        self.serving = fingerprint;
        self.refused = None;
        self.retry_refused = false;
        self.last_refusal = None;
        let name = provider.name();
        self.reporter.serving(name, &sha256, Some(old.sha256()));
        self.reporter.count(name, "success");
        tracing::info!(
            provider = name,
            file = %self.settings.component.display(),
            from = old.sha256(),
            to = %sha256,
            exports = ?provider.exports().names(),
            "provider reloaded; new calls use the new version"
        );
        self.reporter.event(
            EventType::Normal,
            report::REASON_RELOADED,
            format!(
                "{}: provider {} now serving sha256 {} (was {}); exports: {}",
                self.settings.component.display(),
                name,
                short(&sha256),
                short(old.sha256()),
                provider.exports().names().join(", ")
            ),
        );
        Outcome::Swapped { sha256 }
    }

    fn refuse(&mut self, err: ReloadError, fingerprint: Option<Fingerprint>) -> Outcome {
        let current = self.shared.current();
        let name = current.name().to_owned();
        self.reporter.count(&name, err.reason());
        tracing::error!(
            provider = %name,
            file = %self.settings.component.display(),
            reason = err.reason(),
            error = %err,
            serving = current.sha256(),
            "provider version refused; the previous version keeps serving"
        );
        let note = format!(
            "{err}; provider {name} (sha256 {}) keeps serving",
            short(current.sha256())
        );
        // A retry failing the same way is counted and logged, not published again.
        if self.last_refusal.as_ref() != Some(&note) {
            self.reporter.event(
                EventType::Warning,
                report::REASON_RELOAD_FAILED,
                note.clone(),
            );
            self.last_refusal = Some(note);
        }
        // A read error has no fingerprint: the next notification or rescan retries.
        if fingerprint.is_some() {
            self.refused = fingerprint;
            self.retry_refused = err.may_pass_later();
        }
        Outcome::Refused(err)
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned()
}

/// The first 12 hex digits of a SHA-256, as in image digests shown to people.
fn short(sha256: &str) -> &str {
    &sha256[..sha256.len().min(12)]
}
