//! Guest-side helpers for wasm-ccm providers.
//!
//! A provider reaches the cloud only through the host: [`http`] sends requests over
//! `wasi:http/outgoing-handler` (the host applies the allowlist and injects
//! credentials), and [`log`] writes records the host logs with the provider's name.
//!
//! Providers generate their own export bindings with `wit_bindgen::generate!` for a
//! world that includes `wasm-ccm:provider/host-capabilities`, and use this crate for
//! the imports:
//!
//! ```ignore
//! let response = wasm_ccm_guest::http::Request::get("http://127.0.0.1:8080/v1/instances")
//!     .header("accept", "application/json")
//!     .send()?;
//! wasm_ccm_guest::log::info("listed instances", &[("status", &response.status.to_string())]);
//! ```

#![forbid(unsafe_code)]

pub mod http;
pub mod log;
pub mod url;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "wasm-ccm:provider/host-capabilities",
        generate_all,
    });
}
