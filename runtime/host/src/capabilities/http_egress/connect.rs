//! The last check: the address every new connection actually reached.
//!
//! The destination is checked when parsed (IP literals) and when resolved (names), but
//! a connection to an IP literal never meets the resolver, and nothing else sees the
//! peer. This connector layer reads the peer address of each new connection — after
//! TCP connect (and the TLS handshake), before any byte of the request is written —
//! and drops the connection when the address is never reachable
//! ([`crate::policy::address::never_reachable`]). The loopback rule needs the
//! destination, which a connector does not see: it is applied when the request is
//! authorized (literals) and resolved (names).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connection, HttpInfo};
use tower_layer::Layer;
use tower_service::Service;

use crate::policy::address;

/// reqwest's connector error type.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connection reached an address providers may never reach.
#[derive(Debug, Clone, thiserror::Error)]
#[error("connected to {addr}, {what}, which providers may never reach")]
pub struct RefusedPeer {
    /// The peer address.
    pub addr: SocketAddr,
    /// The metric label of the refusal.
    pub label: &'static str,
    /// What the address is.
    pub what: &'static str,
}

/// A connection whose peer address cannot be read (refused: fail closed).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the connection's peer address is unknown")]
pub struct UnknownPeer;

/// Wraps reqwest's connector with [`PeerGuard`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerGuardLayer;

impl<S> Layer<S> for PeerGuardLayer {
    type Service = PeerGuard<S>;

    fn layer(&self, inner: S) -> PeerGuard<S> {
        PeerGuard { inner }
    }
}

/// A connector that refuses connections to forbidden addresses.
#[derive(Debug, Clone)]
pub struct PeerGuard<S> {
    inner: S,
}

impl<S, Req> Service<Req> for PeerGuard<S>
where
    S: Service<Req, Error = BoxError>,
    S::Future: Send + 'static,
    S::Response: Connection + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let connecting = self.inner.call(request);
        Box::pin(async move {
            let connection = connecting.await?;
            let mut extras = http::Extensions::new();
            connection.connected().get_extras(&mut extras);
            let addr = extras
                .get::<HttpInfo>()
                .map(HttpInfo::remote_addr)
                .ok_or_else(|| Box::new(UnknownPeer) as BoxError)?;
            if let Some(never) = address::never_reachable(addr.ip()) {
                // Dropping the connection closes it; it never reaches the pool.
                return Err(Box::new(RefusedPeer {
                    addr,
                    label: never.label,
                    what: never.what,
                }) as BoxError);
            }
            Ok(connection)
        })
    }
}
