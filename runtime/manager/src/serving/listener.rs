//! Accepting connections on the secure port: every connection is admitted
//! ([`admission`](super::admission): no small pool an attacker can fill), one that sends
//! nothing is closed after [`FIRST_BYTE_TIMEOUT`], TLS handshakes run in their own tasks
//! bounded in time, request headers are capped at [`MAX_HEADER_BYTES`] and must arrive
//! within [`HEADER_READ_TIMEOUT`], and idle connections close; each request carries its
//! client, for the filter.

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

/// A connection must send its first byte (a TLS client hello) within this: every
/// client of the port (kubelet's probes, Prometheus) sends at once.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(5);
/// A TLS handshake must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's headers must arrive within this, counted from when the connection is
/// ready for the request (upstream's servers use 32 s), so a client sending a byte now
/// and then cannot hold a connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// A request's line and headers may hold at most this (upstream's servers cap them with
/// `MaxHeaderBytes`); more is answered 431. A bearer token is a few KiB.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// What a connection reading TLS or headers holds at most: the headers' buffer (which
/// grows by doubling, so up to twice [`MAX_HEADER_BYTES`]), rustls's buffers (a record
/// of up to 16 KiB and 16 KiB of plaintext not yet read) and its connection state.
const PENDING_COST: usize = 96 * 1024;
/// What connections reading TLS or headers may hold together (341 of them at
/// [`PENDING_COST`]); past it the heaviest client's oldest gives way.
const PENDING_BYTES: usize = 32 * 1024 * 1024;
/// File descriptors kept for everything else the process opens (the API server, the
/// clouds, providers' files, logs).
const RESERVED_DESCRIPTORS: usize = 512;
/// The soft file descriptor limit asked for at start (within the hard limit).
const DESCRIPTORS_WANTED: libc::rlim_t = 65536;
/// The most connections held at once, whatever the file descriptor limit.
const MAX_CONNECTIONS: usize = 4096;
/// A connection with no byte read or written for this long is closed (upstream's
/// secure serving closes idle connections after 90 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The secure port's bounds: connections up to the file descriptor limit less
/// [`RESERVED_DESCRIPTORS`] (at most [`MAX_CONNECTIONS`], at least 64), and
/// [`PENDING_BYTES`] for those not yet served.
/// The soft limit is first raised to the hard limit (at most [`DESCRIPTORS_WANTED`]),
/// as Go's runtime raises it for upstream's controller managers.
pub fn limits() -> Limits {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct they are given.
    #[allow(unsafe_code)]
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let soft = if read == 0 {
        let wanted = limit.rlim_max.min(DESCRIPTORS_WANTED);
        if limit.rlim_cur < wanted {
            let raised = libc::rlimit {
                rlim_cur: wanted,
                rlim_max: limit.rlim_max,
            };
            #[allow(unsafe_code)]
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                limit.rlim_cur = wanted;
            }
        }
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    Limits {
        connections: soft
            .saturating_sub(RESERVED_DESCRIPTORS)
            .clamp(64, MAX_CONNECTIONS),
        pending_bytes: PENDING_BYTES,
        pending_cost: PENDING_COST,
    }
}

/// Serves `app` on `tcp` with `tls`'s current configuration per connection until the
/// task is aborted.
pub fn serve(
    tcp: TcpListener,
    tls: Arc<TlsState>,
    app: Router,
    metrics: ServingMetrics,
) -> tokio::task::JoinHandle<()> {
    let admission = Admission::new(limits());
    tracing::debug!(limits = ?admission.limits(), "secure port bounds");
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
            let (ticket, evicted) = admission.admit(addr.ip());
            count(&metrics, evicted);
            let tls = tls.clone();
            let app = app.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let evicted = ticket.evicted();
                tokio::select! {
                    _ = evicted => tracing::debug!(peer = %addr, "connection closed for another"),
                    () = silent(stream, addr, tls, ticket.clone(), app, metrics) => {}
                }
            });
        }
    })
}

/// Counts a connection closed for a newcomer.
fn count(metrics: &ServingMetrics, evicted: Option<Evicted>) {
    if let Some(evicted) = evicted {
        metrics.closed(evicted.reason());
    }
}

/// A connection that has sent nothing yet: a socket and this small future, until its
/// first byte; the rest of its life is boxed, so idle connections stay cheap.
async fn silent(
    stream: TcpStream,
    addr: SocketAddr,
    tls: Arc<TlsState>,
    ticket: Arc<Ticket>,
    app: Router,
    metrics: ServingMetrics,
) {
    // `peek` waits for a byte (or the end of the stream, which the handshake then
    // meets); `readable` may complete before anything arrived.
    let mut first = [0u8; 1];
    match tokio::time::timeout(FIRST_BYTE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1..)) => {}
        // Closed, or failed, before a byte: nothing to serve.
        Ok(_) => return,
        Err(_) => {
            tracing::debug!(peer = %addr, "connection sent nothing");
            metrics.closed("first-byte-timeout");
            return;
        }
    }
    count(&metrics, ticket.pending());
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
    Box::pin(connection(stream, addr, acceptor, ticket, app, &metrics)).await;
}

/// One connection: its handshake, then its requests.
async fn connection(
    stream: TcpStream,
    addr: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    ticket: Arc<Ticket>,
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
    let peer = Peer::of(&tls, addr);
    let served = ticket.clone();
    let service = hyper::service::service_fn(move |mut request| {
        // The request's headers are read: what they held is free.
        served.served();
        request.extensions_mut().insert(ConnectInfo(peer.clone()));
        let mut app = app.clone();
        async move { Ok::<_, Infallible>(app.call(request).await.unwrap_or_else(|e| match e {})) }
    });
    let io = Connection::new(tls, ticket.clone(), metrics.clone());
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(err) = served {
        let ticket_served = ticket.is_served();
        let idle = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
        if err.is_timeout() && ticket_served {
            // No byte of a next request came: an idle kept-alive connection.
            metrics.closed("idle");
        } else if err.is_timeout() {
            metrics.closed("header-timeout");
        } else if err.is_parse_too_large() {
            metrics.closed("header-too-large");
        } else if idle {
            metrics.closed("idle");
        }
        tracing::debug!(peer = %addr, error = %err, "connection closed");
    }
}

/// A TLS connection that fails its reads and writes once idle for [`IDLE_TIMEOUT`],
/// and counts as pending again when a served one reads its next request.
struct Connection {
    tls: TlsStream<TcpStream>,
    idle: Pin<Box<Sleep>>,
    ticket: Arc<Ticket>,
    metrics: ServingMetrics,
}

impl Connection {
    fn new(tls: TlsStream<TcpStream>, ticket: Arc<Ticket>, metrics: ServingMetrics) -> Self {
        Self {
            tls,
            idle: Box::pin(tokio::time::sleep(IDLE_TIMEOUT)),
            ticket,
            metrics,
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
        let before = buf.filled().len();
        match Pin::new(&mut this.tls).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                if buf.filled().len() > before {
                    count(&this.metrics, this.ticket.pending());
                }
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
