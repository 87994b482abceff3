//! How long the current call may still run (`wasm-ccm:provider/deadline`). The host
//! ends a call at the policy's `limits.callTimeout`; a provider waiting for a slow
//! cloud operation (a load balancer provisioning for minutes) checks the time left,
//! returns `retry-after` before it runs out, and resumes on the next call.
//!
//! ```
//! use std::time::Duration;
//! use wasm_ccm_guest::deadline;
//!
//! // Poll only while more than two seconds are left.
//! if deadline::remaining() > Duration::from_secs(2) {
//!     // ... one more status request ...
//! }
//! ```
//!
//! Outside a component (native unit tests) the time left is what [`set_remaining`]
//! said, one hour by default.

use std::time::Duration;

/// The time left before the host ends the current call.
pub fn remaining() -> Duration {
    Duration::from_millis(imp::remaining_ms())
}

#[cfg(target_arch = "wasm32")]
mod imp {
    pub fn remaining_ms() -> u64 {
        crate::bindings::wasm_ccm::provider::deadline::remaining_ms()
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::Cell;

    thread_local! {
        pub static REMAINING_MS: Cell<u64> = const { Cell::new(3_600_000) };
    }

    pub fn remaining_ms() -> u64 {
        REMAINING_MS.with(Cell::get)
    }
}

/// Sets the time [`remaining`] answers on this thread (native unit tests only).
#[cfg(not(target_arch = "wasm32"))]
pub fn set_remaining(left: Duration) {
    imp::REMAINING_MS.with(|r| r.set(left.as_millis() as u64));
}
