//! Leader election on a coordination.k8s.io/v1 Lease, with upstream's semantics:
//! acquire when the Lease is free or its holder has not renewed within
//! `--leader-elect-lease-duration`; renew every `--leader-elect-retry-period`; give up
//! leadership when a renewal has not succeeded within `--leader-elect-renew-deadline`
//! (the process then exits non-zero, as upstream does). A replica stopped by SIGTERM
//! or SIGINT releases the Lease once its controllers have stopped, so the standby
//! takes over at its next retry.

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
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Elector {
    pub fn new(client: kube::Client, settings: Settings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
        }
    }

    /// One attempt to acquire or renew. `Ok(true)` when we hold the Lease.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
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
                    Ok(_) => Ok(true),
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
    /// compare-and-swap (`Ok(false)`: another replica wrote first).
    async fn swap(&self, lease: &Lease) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
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
    pub async fn hold(&self) {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewed = Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.settings.name, "another replica holds the lease");
                    return;
                }
                Err(err) => tracing::warn!(error = %err, "error renewing the leader lease"),
            }
            if last_renewed.elapsed() > self.settings.renew_deadline {
                tracing::error!(lease = %self.settings.name, "failed to renew the lease within the renew deadline");
                return;
            }
        }
    }
}
