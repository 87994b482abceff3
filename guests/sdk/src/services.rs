//! The cluster's Services of type `LoadBalancer`, read-only, through the host
//! (`wasm-ccm:provider/services`, contract 0.3): for a provider that hands out
//! addresses itself and must know which are taken, after a restart or beside its other
//! instances. The host shows each Service's namespace, name, UID, class, ports,
//! `spec.loadBalancerIP`, ingress addresses and only the annotations under the
//! provider's policy `serviceAnnotations` prefixes.
//!
//! [`list`] fails with [`ServicesError::NotReady`] until the host has listed the
//! Services (at start): nothing can then be said of which addresses are free, so a
//! provider fails its call with `retry-after` ([`not_ready`]) instead of assuming none.
//!
//! ```no_run
//! use wasm_ccm_guest::services;
//!
//! # fn f() -> Result<(), wasm_ccm_guest::types::CloudError> {
//! let taken: Vec<String> = services::list()
//!     .map_err(services::not_ready)?
//!     .into_iter()
//!     .flat_map(|s| s.ingress.into_iter().filter_map(|i| i.ip))
//!     .collect();
//! # Ok(()) }
//! ```
//!
//! Outside a component (native unit tests) the Services are set per thread with
//! [`set_for_test`].

pub use crate::bindings::wasm_ccm::provider::services::{LoadBalancerService, ServicesError};
use crate::types::{CloudError, Retry};

/// Every Service of type `LoadBalancer`, ordered by namespace and name.
pub fn list() -> Result<Vec<LoadBalancerService>, ServicesError> {
    imp::list()
}

/// The contract error for [`ServicesError`]: `retry-after` 5 s, saying why.
pub fn not_ready(error: ServicesError) -> CloudError {
    match error {
        ServicesError::NotReady => CloudError::RetryAfter(Retry {
            delay_ms: 5_000,
            message: "the host has not listed the cluster's Services yet".into(),
        }),
    }
}

/// Sets what [`list`] answers on this thread (native unit tests only): `None` is
/// `not-ready`.
#[cfg(not(target_arch = "wasm32"))]
pub fn set_for_test(services: Option<Vec<LoadBalancerService>>) {
    imp::SERVICES.with(|s| *s.borrow_mut() = services);
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::{LoadBalancerService, ServicesError};

    pub fn list() -> Result<Vec<LoadBalancerService>, ServicesError> {
        crate::bindings::wasm_ccm::provider::services::list_services()
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::RefCell;

    use super::{LoadBalancerService, ServicesError};

    thread_local! {
        pub static SERVICES: RefCell<Option<Vec<LoadBalancerService>>> =
            const { RefCell::new(Some(Vec::new())) };
    }

    pub fn list() -> Result<Vec<LoadBalancerService>, ServicesError> {
        SERVICES.with(|s| s.borrow().clone().ok_or(ServicesError::NotReady))
    }
}
