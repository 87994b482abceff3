//! Interceptors: the embedder's own code seeing each request the policy allowed,
//! before its credential is added, and answering it itself if it wants (as Spin's
//! `OutboundHttpInterceptor`). The controller manager registers none, so its requests
//! take no detour; `wasm-ccm conformance` registers one that answers with throttling
//! to check how a provider handles it.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use wasm_ccm_host::capabilities::http_egress::EgressInterceptor;
//!
//! /// Answers every request to `/maintenance` with 503 itself.
//! struct Maintenance;
//!
//! impl EgressInterceptor for Maintenance {
//!     fn intercept(&self, _method: &http::Method, url: &url::Url) -> Option<http::Response<Bytes>> {
//!         (url.path() == "/maintenance").then(|| {
//!             http::Response::builder()
//!                 .status(503)
//!                 .body(Bytes::from_static(b"down for maintenance"))
//!                 .unwrap()
//!         })
//!     }
//! }
//!
//! let interceptor: Arc<dyn EgressInterceptor> = Arc::new(Maintenance);
//! let url = url::Url::parse("https://api.example.com/maintenance").unwrap();
//! assert_eq!(interceptor.intercept(&http::Method::GET, &url).unwrap().status(), 503);
//! ```

use bytes::Bytes;
use http::Method;

/// Sees each allowed request of every provider of a broker before it is forwarded.
pub trait EgressInterceptor: Send + Sync {
    /// The answer to give the provider instead of forwarding the request, or `None` to
    /// forward it. Requests the policy denies never get here.
    fn intercept(&self, method: &Method, url: &url::Url) -> Option<http::Response<Bytes>>;
}
