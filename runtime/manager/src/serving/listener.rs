//! Accepting connections on the secure port: TLS handshakes in their own tasks (a
//! slow client delays no other), bounded in number and time; connections bounded in
//! number and closed when idle (a client that sends nothing, or a request's headers
//! too slowly, does not hold a connection); each request's client, for the filter.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;

use super::authn::{UserInfo, certificate_user};
use super::tls::TlsState;

/// A TLS handshake must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; a connection beyond them is closed at once.
const MAX_HANDSHAKES: usize = 64;
/// Connections open at once (handshakes included); more are closed at once.
const MAX_CONNECTIONS: usize = 256;
/// A connection with no byte read or written for this long is closed (upstream's
/// secure serving closes idle connections after 90 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Hands axum the connections whose handshake finished.
pub struct TlsListener {
    handshaken: tokio::sync::mpsc::Receiver<(Connection, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `tcp` with `tls`'s current configuration per connection.
    pub fn new(tcp: TcpListener, tls: Arc<TlsState>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, handshaken) = tokio::sync::mpsc::channel(MAX_HANDSHAKES);
        let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let acceptor = tokio::spawn(async move {
            loop {
                let (stream, addr) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::debug!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (Ok(open), Ok(handshake)) = (
                    connections.clone().try_acquire_owned(),
                    handshakes.clone().try_acquire_owned(),
                ) else {
                    tracing::debug!(peer = %addr, "too many connections; closed");
                    continue;
                };
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
                let tx = tx.clone();
                tokio::spawn(async move {
                    let accepted =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    drop(handshake);
                    match accepted {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((Connection::new(tls, open), addr)).await;
                        }
                        Ok(Err(err)) => {
                            tracing::debug!(peer = %addr, error = %err, "TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(peer = %addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            handshaken,
            local,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(accepted) => accepted,
            // The acceptor stopped (its task was cancelled): nothing comes any more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// A TLS connection that counts against [`MAX_CONNECTIONS`] while open and fails
/// its reads and writes once idle for [`IDLE_TIMEOUT`].
pub struct Connection {
    tls: TlsStream<TcpStream>,
    _open: OwnedSemaphorePermit,
    idle: Pin<Box<Sleep>>,
}

impl Connection {
    fn new(tls: TlsStream<TcpStream>, open: OwnedSemaphorePermit) -> Self {
        Self {
            tls,
            _open: open,
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

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let certificate = stream
            .io()
            .tls
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
        Peer {
            addr: *stream.remote_addr(),
            certificate,
        }
    }
}
