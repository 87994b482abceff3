//! Kubernetes Events through the host (`wasm-ccm:provider/events`), on the object the
//! current call is about: the Service of a load balancer call, the Node of an
//! instance call (a batched call names one of its Nodes). The host checks the reason
//! is CamelCase, cuts the message at 1,024 bytes and rate-limits each provider; the
//! event's source names the provider.
//!
//! ```no_run
//! use wasm_ccm_guest::events;
//!
//! // In ensure-load-balancer, as cloud-provider-aws records it:
//! events::warning("LoadBalancerSubnetsChanged", "subnets changed; recreating", None);
//! ```
//!
//! Outside a component (native unit tests) events are kept per thread and read back
//! with [`recorded`].

pub use crate::bindings::wasm_ccm::provider::events::{EventError, EventType};

/// Records a Normal event; `node` names one Node of a batched call, else `None`.
pub fn normal(reason: &str, message: &str, node: Option<&str>) -> Result<(), EventError> {
    imp::emit(EventType::Normal, reason, message, node)
}

/// Records a Warning event; `node` names one Node of a batched call, else `None`.
pub fn warning(reason: &str, message: &str, node: Option<&str>) -> Result<(), EventError> {
    imp::emit(EventType::Warning, reason, message, node)
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::{EventError, EventType};

    pub fn emit(
        kind: EventType,
        reason: &str,
        message: &str,
        node: Option<&str>,
    ) -> Result<(), EventError> {
        crate::bindings::wasm_ccm::provider::events::emit(kind, reason, message, node)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::RefCell;

    use super::{EventError, EventType};

    thread_local! {
        pub static RECORDED: RefCell<Vec<(EventType, String, String)>> = const { RefCell::new(Vec::new()) };
    }

    pub fn emit(
        kind: EventType,
        reason: &str,
        message: &str,
        _node: Option<&str>,
    ) -> Result<(), EventError> {
        if !reason.starts_with(|c: char| c.is_ascii_uppercase())
            || !reason.chars().all(|c| c.is_ascii_alphanumeric())
        {
            return Err(EventError::InvalidReason);
        }
        RECORDED.with(|r| r.borrow_mut().push((kind, reason.into(), message.into())));
        Ok(())
    }
}

/// The events recorded on this thread, and forgets them (native unit tests only).
#[cfg(not(target_arch = "wasm32"))]
pub fn recorded() -> Vec<(EventType, String, String)> {
    imp::RECORDED.with(|r| std::mem::take(&mut *r.borrow_mut()))
}
