//! Leader election on a coordination.k8s.io/v1 Lease, with upstream's semantics:
//! acquire when the Lease is free or its holder has not renewed within
//! `--leader-elect-lease-duration`; renew every `--leader-elect-retry-period`; give up
//! leadership when a renewal has not succeeded within `--leader-elect-renew-deadline`
//! (the process then exits non-zero, as upstream does). A replica stopped by SIGTERM
//! or SIGINT releases the Lease once its controllers have stopped, so the standby
//! takes over at its next retry.
//!
//! Like client-go's elector, the leader renews optimistically: while the Lease it last
//! wrote is still valid by its own clock, it writes the renewal over that version
//! without reading the Lease first (one request a retry period instead of two); when
//! that write fails (another writer, a conflict), it reads the Lease and decides as a
//! candidate does.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

/// Leader election settings (upstream flags).
#[derive(Debug, Clone)]
pub struct Settings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub name: String,
    pub namespace: String,
    /// This replica's identity (hostname + a unique suffix).
    pub identity: String,
}

/// A leader elector for one Lease.
pub struct Elector {
    api: Api<Lease>,
    settings: Settings,
    /// The Lease as this replica last wrote it while holding it, and when: the version
    /// an optimistic renewal is written over.
    written: Mutex<Option<(Lease, Instant)>>,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Elector {
    pub fn new(client: kube::Client, settings: Settings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            written: Mutex::new(None),
        }
    }

    /// The Lease this replica last wrote, while it is valid by this replica's clock.
    fn still_held(&self) -> Option<Lease> {
        let written = self.written.lock().expect("lease lock");
        let (lease, at) = written.as_ref()?;
        (at.elapsed() < self.settings.lease_duration).then(|| lease.clone())
    }

    /// The renewal written over the version this replica last wrote, without reading
    /// it first: `true` when written.
    async fn renew_optimistically(&self, mut lease: Lease) -> bool {
        let spec = lease.spec.take().unwrap_or_default();
        lease.spec = Some(LeaseSpec {
            renew_time: Some(now()),
            ..spec
        });
        match self.swap(&lease).await {
            Ok(true) => true,
            outcome => {
                tracing::debug!(lease = %self.settings.name, ?outcome, "optimistic renewal not written; reading the lease");
                false
            }
        }
    }

    /// One attempt to acquire or renew. `Ok(true)` when we hold the Lease.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        if let Some(lease) = self.still_held()
            && self.renew_optimistically(lease).await
        {
            return Ok(true);
        }
        let s = &self.settings;
        let duration = s.lease_duration.as_secs().max(1) as i32;
        let existing = match self.api.get(&s.name).await {
            Ok(lease) => lease,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(s.name.clone()),
                        namespace: Some(s.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(s.identity.clone()),
                        lease_duration_seconds: Some(duration),
                        acquire_time: Some(now()),
                        renew_time: Some(now()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(written) => {
                        self.remember(written);
                        Ok(true)
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let spec = existing.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == s.identity;
        if !ours && !holder.is_empty() {
            let expiry = spec.renew_time.as_ref().map(|t| t.0).and_then(|renewed| {
                let secs = i64::from(spec.lease_duration_seconds.unwrap_or(duration));
                renewed
                    .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
                    .ok()
            });
            if expiry.is_some_and(|e| e > Timestamp::now()) {
                self.forget();
                return Ok(false);
            }
        }
        let mut lease = existing;
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(s.identity.clone()),
            lease_duration_seconds: Some(duration),
            acquire_time: if ours { spec.acquire_time } else { Some(now()) },
            renew_time: Some(now()),
            lease_transitions: Some(if ours { transitions } else { transitions + 1 }),
            ..spec
        });
        self.swap(&lease).await
    }

    /// Writes `lease` back: the resourceVersion read with it makes this a
    /// compare-and-swap (`Ok(false)`: another replica wrote first). What is written is
    /// remembered when this replica holds it.
    async fn swap(&self, lease: &Lease) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), lease)
            .await
        {
            Ok(written) => {
                self.remember(written);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                self.forget();
                Ok(false)
            }
            Err(e) => {
                self.forget();
                Err(e)
            }
        }
    }

    /// Keeps `lease` for the next optimistic renewal when this replica holds it.
    fn remember(&self, lease: Lease) {
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.settings.identity.as_str());
        *self.written.lock().expect("lease lock") = ours.then(|| (lease, Instant::now()));
    }

    fn forget(&self) {
        *self.written.lock().expect("lease lock") = None;
    }

    /// Gives the Lease up, as client-go's `ReleaseOnCancel`: the holder is cleared
    /// and the duration set to one second, so a standby takes it on its next try
    /// instead of waiting out `--leader-elect-lease-duration`. Only while this replica
    /// holds it (`Ok(false)` otherwise).
    pub async fn release(&self) -> Result<bool, kube::Error> {
        let s = &self.settings;
        let mut lease = self.api.get(&s.name).await?;
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(s.identity.as_str()) {
            return Ok(false);
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            ..spec
        });
        self.swap(&lease).await
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.settings.name, identity = %self.settings.identity, "successfully acquired lease");
                    return;
                }
                Ok(false) => {}
                Err(err) => tracing::warn!(error = %err, "error acquiring the leader lease"),
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews until a renewal fails for longer than the renew deadline; returns then.
    /// A try still unanswered at the deadline is given up (client-go's renew loop runs
    /// under a context of the renew deadline): an API server that stops answering
    /// without closing the connection cannot keep this replica leading past it.
    pub async fn hold(&self) {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            let left = self
                .settings
                .renew_deadline
                .saturating_sub(last_renewed.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => last_renewed = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::error!(lease = %self.settings.name, "another replica holds the lease");
                    return;
                }
                Ok(Err(err)) => tracing::warn!(error = %err, "error renewing the leader lease"),
                Err(_) => {
                    self.forget();
                    tracing::warn!(lease = %self.settings.name, "no answer to the lease renewal within the renew deadline");
                }
            }
            if last_renewed.elapsed() > self.settings.renew_deadline {
                tracing::error!(lease = %self.settings.name, "failed to renew the lease within the renew deadline");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn double() -> (kube_double::ApiServer, kube::Client) {
        let api = kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("the API server double");
        let config = kube::Config::new(api.url().parse().expect("its URL"));
        let client = {
            wasm_ccm_host::tls::install_crypto_provider();
            kube::Client::try_from(config).expect("a client")
        };
        (api, client)
    }

    fn elector(client: &kube::Client, identity: &str) -> Elector {
        Elector::new(
            client.clone(),
            Settings {
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
                name: "cloud-controller-manager".into(),
                namespace: "kube-system".into(),
                identity: identity.into(),
            },
        )
    }

    /// The Lease requests served so far, by verb.
    fn lease_requests(api: &kube_double::ApiServer) -> std::collections::BTreeMap<String, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for (access, n) in api.request_counts() {
            if access.resource == "leases" {
                *counts.entry(access.verb).or_default() += n;
            }
        }
        counts
    }

    /// client-go's fast path: the leader writes each renewal over the version it last
    /// wrote, one request a retry period, and its renew time moves.
    #[tokio::test]
    async fn a_leader_renews_with_one_write_and_no_read() {
        let (api, client) = double().await;
        let leader = elector(&client, "a");
        assert!(leader.try_acquire_or_renew().await.unwrap());
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let renewed = |lease: Lease| lease.spec.unwrap().renew_time.unwrap().0;
        let first = renewed(leases.get("cloud-controller-manager").await.unwrap());
        let before = lease_requests(&api);
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(leader.try_acquire_or_renew().await.unwrap());
        }
        let after = lease_requests(&api);
        let delta = |verb: &str| after.get(verb).unwrap_or(&0) - before.get(verb).unwrap_or(&0);
        assert_eq!(
            (delta("get"), delta("update")),
            (0, 3),
            "{before:?} -> {after:?}"
        );
        let lease = leases.get("cloud-controller-manager").await.unwrap();
        let spec = lease.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert!(renewed(lease) > first);
    }

    /// When another writer changed the Lease (here: took it over), the optimistic
    /// write conflicts; the leader reads the Lease and, finding a valid holder, steps
    /// down instead of overwriting it.
    #[tokio::test]
    async fn a_conflicting_renewal_reads_the_lease_and_yields_to_its_new_holder() {
        let (api, client) = double().await;
        let leader = elector(&client, "a");
        assert!(leader.try_acquire_or_renew().await.unwrap());
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let mut lease = leases.get("cloud-controller-manager").await.unwrap();
        let spec = lease.spec.take().unwrap();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some("b".into()),
            renew_time: Some(now()),
            ..spec
        });
        leases
            .replace("cloud-controller-manager", &PostParams::default(), &lease)
            .await
            .unwrap();
        let before = lease_requests(&api);
        assert!(!leader.try_acquire_or_renew().await.unwrap());
        let after = lease_requests(&api);
        let delta = |verb: &str| after.get(verb).unwrap_or(&0) - before.get(verb).unwrap_or(&0);
        assert_eq!(
            (delta("update"), delta("get")),
            (1, 1),
            "{before:?} -> {after:?}"
        );
        let holder = leases.get("cloud-controller-manager").await.unwrap();
        assert_eq!(holder.spec.unwrap().holder_identity.as_deref(), Some("b"));
        // Not the leader any more: the next try reads first.
        let before = lease_requests(&api);
        assert!(!leader.try_acquire_or_renew().await.unwrap());
        let after = lease_requests(&api);
        assert_eq!(after.get("update"), before.get("update"));
    }
}
