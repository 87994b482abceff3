//! Accepting connections on the secure port: each client gets its share of slots
//! ([`admission`](super::admission)), TLS handshakes run in their own tasks bounded in
//! time, request headers must arrive within [`HEADER_READ_TIMEOUT`] and idle
//! connections close; each request carries its client, for the filter.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tower_service::Service;

use super::ServingMetrics;
use super::admission::{Admission, Evicted, Limits, Ticket};
use super::authn::{UserInfo, certificate_user};
use super::tls::TlsState;

/// A TLS handshake must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's headers must arrive within this, counted from when the connection is
/// ready for the request (upstream's servers use 32 s), so a client sending a byte now
/// and then cannot hold a connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// A connection with no byte read or written for this long is closed (upstream's
/// secure serving closes idle connections after 90 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Serves `app` on `tcp` with `tls`'s current configuration per connection until the
/// task is aborted.
pub fn serve(
    tcp: TcpListener,
    tls: Arc<TlsState>,
    app: Router,
    metrics: ServingMetrics,
) -> tokio::task::JoinHandle<()> {
    let admission = Admission::new(Limits::SECURE_PORT);
    tokio::spawn(async move {
        loop {
            let (stream, addr) = match tcp.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::debug!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let ticket = match admission.admit(addr.ip()) {
                Ok((ticket, evicted)) => {
                    match evicted {
                        Evicted::None => {}
                        Evicted::Handshake => metrics.closed("evicted-handshake"),
                        Evicted::Connection => metrics.closed("evicted-connection"),
                    }
                    ticket
                }
                Err(refused) => {
                    tracing::debug!(peer = %addr, reason = refused.reason(), "connection refused");
                    metrics.closed(refused.reason());
                    continue;
                }
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
            let app = app.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let evicted = ticket.evicted();
                tokio::select! {
                    _ = evicted => tracing::debug!(peer = %addr, "connection evicted for another client"),
                    () = connection(stream, addr, acceptor, &ticket, app, &metrics) => {}
                }
            });
        }
    })
}

/// One connection: its handshake, then its requests.
async fn connection(
    stream: TcpStream,
    addr: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    ticket: &Ticket,
    app: Router,
    metrics: &ServingMetrics,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            tracing::debug!(peer = %addr, error = %err, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(peer = %addr, "TLS handshake timed out");
            metrics.closed("handshake-timeout");
            return;
        }
    };
    ticket.handshaken();
    let peer = Peer::of(&tls, addr);
    let service = hyper::service::service_fn(move |mut request| {
        request.extensions_mut().insert(ConnectInfo(peer.clone()));
        let mut app = app.clone();
        async move { Ok::<_, Infallible>(app.call(request).await.unwrap_or_else(|e| match e {})) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(Connection::new(tls)), service)
        .await;
    if let Err(err) = served {
        let idle = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
        if err.is_timeout() {
            metrics.closed("header-timeout");
        } else if idle {
            metrics.closed("idle");
        }
        tracing::debug!(peer = %addr, error = %err, "connection closed");
    }
}

/// A TLS connection that fails its reads and writes once idle for [`IDLE_TIMEOUT`].
struct Connection {
    tls: TlsStream<TcpStream>,
    idle: Pin<Box<Sleep>>,
}

impl Connection {
    fn new(tls: TlsStream<TcpStream>) -> Self {
        Self {
            tls,
            idle: Box::pin(tokio::time::sleep(IDLE_TIMEOUT)),
        }
    }

    /// Progress was made: the idle clock starts again.
    fn active(&mut self) {
        self.idle.as_mut().reset(Instant::now() + IDLE_TIMEOUT);
    }

    /// `Ready(Err)` once the connection has been idle too long.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        match self.idle.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "idle connection closed",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.tls).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.expired(cx).map(Err),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.tls).poll_write(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.expired(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

/// The client of a request on the secure port: its address and the certificate
/// chain it presented, if any (verified again for every request by the filter), read
/// once per connection: requests share the chain and its user.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The client certificate chain, end entity first, and the user it names.
    pub certificate: Option<Arc<ClientCertificate>>,
}

/// A connection's client certificate chain and the user its end entity names.
#[derive(Debug)]
pub struct ClientCertificate {
    pub chain: Vec<CertificateDer<'static>>,
    /// The last Common Name and the Organizations, as Go reads them; `None` without a
    /// Common Name.
    pub user: Option<UserInfo>,
}

impl Peer {
    /// The client of `tls`, from `addr`.
    fn of(tls: &TlsStream<TcpStream>, addr: SocketAddr) -> Self {
        let certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .filter(|chain| !chain.is_empty())
            .map(|chain| {
                Arc::new(ClientCertificate {
                    chain: chain.to_vec(),
                    user: certificate_user(&chain[0]),
                })
            });
        Peer { addr, certificate }
    }
}
