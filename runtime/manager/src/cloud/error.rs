//! Errors of cloud calls, as the controllers see them.

use std::time::Duration;

use wasm_ccm_host::provider::{CloudError, ProviderError};

/// Why a cloud call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The provider failed: it answered with a cloud error, trapped or timed out.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The provider does not export the interface the call needs.
    #[error("the provider exports no {0}")]
    NotExported(&'static str),
    /// The provider returned no provider ID and the Node has none.
    #[error("cloud provider does not set node provider ID for node {0}")]
    MissingProviderId(String),
    /// The provider answered something the cluster must not get (an invalid address,
    /// a provider ID of another scheme, a label the API server would reject, ...).
    #[error("the provider's answer is refused: {field}: {reason}")]
    InvalidAnswer {
        /// The field of the answer (`provider-id`, `addresses`, `zone`, ...).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A batched call failed as a whole: every Node of the batch gets this error.
    #[error("batched call: {0}")]
    Batch(#[source] std::sync::Arc<Error>),
}

impl Error {
    /// The provider's cloud error, when it answered with one.
    pub fn cloud(&self) -> Option<&CloudError> {
        match self {
            Error::Provider(e) => e.cloud(),
            Error::Batch(e) => e.cloud(),
            _ => None,
        }
    }

    /// The field of a refused answer ([`Error::InvalidAnswer`]).
    pub fn invalid_answer(&self) -> Option<&'static str> {
        match self {
            Error::InvalidAnswer { field, .. } => Some(field),
            Error::Batch(e) => e.invalid_answer(),
            _ => None,
        }
    }

    /// True only when the provider said the instance definitely does not exist.
    pub fn is_instance_not_found(&self) -> bool {
        matches!(self.cloud(), Some(CloudError::InstanceNotFound))
    }

    /// True when the provider does not implement the call.
    pub fn is_not_implemented(&self) -> bool {
        matches!(self.cloud(), Some(CloudError::NotImplemented))
    }

    /// True when another controller implements this (upstream `ImplementedElsewhere`).
    pub fn is_implemented_elsewhere(&self) -> bool {
        matches!(self.cloud(), Some(CloudError::ImplementedElsewhere))
    }

    /// The delay the provider asked for, if any (upstream `RetryError`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self.cloud() {
            Some(CloudError::RetryAfter { delay, .. }) => Some(*delay),
            _ => None,
        }
    }
}
