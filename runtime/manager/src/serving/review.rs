//! Sending reviews (`TokenReview`, `SubjectAccessReview`) to the API server: through
//! the secure port's own client, at most [`Reviewer::IN_FLIGHT`] at once (a request
//! waiting longer than [`Reviewer::WAIT`] for a slot is answered 429, so a flood of
//! unknown tokens or paths cannot queue without bound on the API server), each counted
//! by the answer's HTTP status code.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

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
}

impl Reviewer {
    /// Reviews in flight at once.
    pub const IN_FLIGHT: usize = 16;
    /// How long a request waits for a free slot.
    pub const WAIT: Duration = Duration::from_secs(2);

    /// Reviews through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            slots: Arc::new(tokio::sync::Semaphore::new(Self::IN_FLIGHT)),
        }
    }

    /// Creates `review` (a cluster-scoped review object) and returns the API server's
    /// answer, counted in `requests` by status code (a created review is 201).
    pub async fn create<K>(
        &self,
        review: &K,
        requests: &Family<CodeLabel, Counter>,
    ) -> Result<K, ReviewError>
    where
        K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
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
