//! [`SharedProvider`]: the provider the controllers call, replaceable while they run.
//!
//! Each reconcile takes a snapshot with [`SharedProvider::current`] and makes all its
//! calls on it, so calls in flight finish on the version they started on while new
//! reconciles get the replacement. A replaced version is freed (its instance pool
//! dropped) when its last snapshot is.

use std::sync::{Arc, RwLock};

use super::Provider;

/// A cheaply cloned handle to the provider currently serving.
#[derive(Clone, Debug)]
pub struct SharedProvider {
    current: Arc<RwLock<Provider>>,
}

impl From<Provider> for SharedProvider {
    fn from(provider: Provider) -> Self {
        Self {
            current: Arc::new(RwLock::new(provider)),
        }
    }
}

impl SharedProvider {
    /// The version serving now.
    pub fn current(&self) -> Provider {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Makes `provider` serve new calls; returns the version it replaces.
    pub fn replace(&self, provider: Provider) -> Provider {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::replace(&mut *current, provider)
    }
}
