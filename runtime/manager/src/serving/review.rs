//! Sending reviews (`TokenReview`, `SubjectAccessReview`) to the API server: through
//! the secure port's own client, at most [`Reviewer::IN_FLIGHT`] at once and
//! [`Reviewer::PER_CLIENT`] for one client (a request waiting longer than
//! [`Reviewer::WAIT`] for a slot, or beyond its client's share, is answered 429, so a
//! flood of unknown tokens or paths neither queues without bound on the API server nor
//! takes every slot from the others), each counted by the answer's HTTP status code.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::admission::ClientKey;

/// Labels of the review counters: the API server's HTTP status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// The HTTP status code, or `<error>` when no answer came.
    pub code: String,
}

/// Why a review has no answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Too many reviews are in flight.
    #[error("too many reviews in flight")]
    Busy,
    /// The API server could not be asked, or refused.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// The client and the slots the secure port's reviews share. Cheap to clone.
#[derive(Clone)]
pub struct Reviewer {
    client: kube::Client,
    slots: Arc<tokio::sync::Semaphore>,
    per_client: Arc<Mutex<HashMap<ClientKey, usize>>>,
}

/// One of a client's reviews in flight; released when dropped.
struct ClientSlot {
    per_client: Arc<Mutex<HashMap<ClientKey, usize>>>,
    key: ClientKey,
}

impl ClientSlot {
    fn take(per_client: &Arc<Mutex<HashMap<ClientKey, usize>>>, client: IpAddr) -> Option<Self> {
        let key = ClientKey::from(client);
        let mut held = per_client.lock().unwrap_or_else(|p| p.into_inner());
        let count = held.entry(key).or_default();
        if *count >= Reviewer::PER_CLIENT {
            return None;
        }
        *count += 1;
        Some(Self {
            per_client: per_client.clone(),
            key,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl Reviewer {
    /// Reviews in flight at once.
    pub const IN_FLIGHT: usize = 16;
    /// Reviews one client (an address, an IPv6 /64) has in flight at once.
    pub const PER_CLIENT: usize = 4;
    /// How long a request waits for a free slot.
    pub const WAIT: Duration = Duration::from_secs(2);

    /// Reviews through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            slots: Arc::new(tokio::sync::Semaphore::new(Self::IN_FLIGHT)),
            per_client: Arc::default(),
        }
    }

    /// Creates `review` (a cluster-scoped review object) for a request of `client` and
    /// returns the API server's answer, counted in `requests` by status code (a created
    /// review is 201).
    pub async fn create<K>(
        &self,
        review: &K,
        requests: &Family<CodeLabel, Counter>,
        client: IpAddr,
    ) -> Result<K, ReviewError>
    where
        K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        let Some(_client_slot) = ClientSlot::take(&self.per_client, client) else {
            return Err(ReviewError::Busy);
        };
        let Ok(Ok(_slot)) =
            tokio::time::timeout(Self::WAIT, self.slots.clone().acquire_owned()).await
        else {
            return Err(ReviewError::Busy);
        };
        let answer = Api::<K>::all(self.client.clone())
            .create(&PostParams::default(), review)
            .await;
        let code = match &answer {
            Ok(_) => "201".into(),
            Err(kube::Error::Api(status)) => status.code.to_string(),
            Err(_) => "<error>".into(),
        };
        requests.get_or_create(&CodeLabel { code }).inc();
        Ok(answer?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_holds_at_most_its_share_of_review_slots() {
        let per_client = Arc::default();
        let (flood, scraper): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let held: Vec<_> = (0..Reviewer::PER_CLIENT)
            .map(|_| ClientSlot::take(&per_client, flood).unwrap())
            .collect();
        assert!(ClientSlot::take(&per_client, flood).is_none());
        assert!(ClientSlot::take(&per_client, scraper).is_some());
        drop(held);
        assert!(ClientSlot::take(&per_client, flood).is_some());
        assert!(
            per_client.lock().unwrap().is_empty(),
            "released slots are forgotten"
        );
    }
}
