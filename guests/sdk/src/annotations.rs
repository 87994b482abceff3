//! Annotations on the Service of the current load-balancer call, through the host
//! (`wasm-ccm:provider/annotations`), as upstream providers record what they made on
//! the Service (cloud-provider-openstack's `loadbalancer.openstack.org/load-balancer-id`).
//!
//! The host takes only keys under the prefixes the provider's policy lists in
//! `serviceAnnotations`, values up to 4,096 bytes and 16 keys per call, and writes them
//! when the call returns, whatever it returns: an ID recorded before a later step
//! failed is kept. [`ensure`] sets a key only when the Service does not already hold
//! the value, so a steady state writes nothing.
//!
//! ```no_run
//! use wasm_ccm_guest::annotations;
//! # let service: wasm_ccm_guest::types::Service = unimplemented!();
//!
//! // In ensure-load-balancer, once the load balancer exists:
//! annotations::ensure(&service, "loadbalancer.example.org/load-balancer-id", "lb-123");
//! ```
//!
//! Outside a component (native unit tests) annotations are kept per thread and read
//! back with [`recorded`].

pub use crate::bindings::wasm_ccm::provider::annotations::AnnotationError;
use crate::types::Service;

/// Sets `key` to `value` on the call's Service.
pub fn set(key: &str, value: &str) -> Result<(), AnnotationError> {
    imp::set(key, value)
}

/// Sets `key` to `value` unless `service` already has that value (what the call was
/// given); `Ok(false)` when nothing needed writing.
pub fn ensure(service: &Service, key: &str, value: &str) -> Result<bool, AnnotationError> {
    let current = service
        .metadata
        .annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str());
    if current == Some(value) {
        return Ok(false);
    }
    set(key, value).map(|()| true)
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::AnnotationError;

    pub fn set(key: &str, value: &str) -> Result<(), AnnotationError> {
        crate::bindings::wasm_ccm::provider::annotations::set(key, value)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::RefCell;

    use super::AnnotationError;

    thread_local! {
        pub static RECORDED: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
    }

    pub fn set(key: &str, value: &str) -> Result<(), AnnotationError> {
        if value.len() > 4096 {
            return Err(AnnotationError::TooLong);
        }
        RECORDED.with(|r| {
            let mut r = r.borrow_mut();
            match r.iter_mut().find(|(k, _)| k == key) {
                Some(entry) => entry.1 = value.to_owned(),
                None => r.push((key.to_owned(), value.to_owned())),
            }
        });
        Ok(())
    }
}

/// The annotations set on this thread, and forgets them (native unit tests only).
#[cfg(not(target_arch = "wasm32"))]
pub fn recorded() -> Vec<(String, String)> {
    imp::RECORDED.with(|r| std::mem::take(&mut *r.borrow_mut()))
}
