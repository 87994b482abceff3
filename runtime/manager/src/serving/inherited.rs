//! A listening socket handed down by whoever starts the controller manager, in
//! systemd's socket activation protocol: `LISTEN_FDS=1` (and `LISTEN_PID`, when set,
//! this process's ID) with the socket as file descriptor 3. The secure port then serves
//! on that socket instead of binding `--bind-address:--secure-port` itself, so the port
//! is held from before the process starts, with no moment when another program could
//! take it (a systemd `.socket` unit, or a test that binds port 0 and passes the socket).
//!
//! The socket must listen where the flags say: `--bind-address` and `--secure-port`
//! name its address, and `--secure-port=0` with a socket handed down is refused rather
//! than leaving it open unserved.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use super::ServingError;

/// The socket the environment handed down, read once at start.
#[derive(Clone, Default)]
pub struct InheritedSocket(Arc<Mutex<Option<std::io::Result<TcpListener>>>>);

impl std::fmt::Debug for InheritedSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let what = match &*held {
            None => "none".to_owned(),
            Some(Ok(listener)) => match listener.local_addr() {
                Ok(addr) => addr.to_string(),
                Err(e) => format!("unknown address: {e}"),
            },
            Some(Err(e)) => format!("unusable: {e}"),
        };
        f.debug_tuple("InheritedSocket").field(&what).finish()
    }
}

impl InheritedSocket {
    /// Takes the socket `LISTEN_FDS` hands down, if any, and unsets `LISTEN_FDS` and
    /// `LISTEN_PID` so the processes this one starts do not take it too. Variables
    /// that hand nothing down to this process (`LISTEN_PID` naming another one, a
    /// `LISTEN_FDS` that is not a number) are logged as a warning and ignored.
    ///
    /// # Safety
    ///
    /// Call it before the process starts a thread: it changes the environment, which
    /// another thread reading it at the same time could see half changed.
    #[allow(unsafe_code)]
    pub unsafe fn from_env() -> Self {
        let fds = std::env::var("LISTEN_FDS").ok();
        let pid = std::env::var("LISTEN_PID").ok();
        let mut handed = listenfd::ListenFd::from_env();
        let socket = match handed.len() {
            0 => {
                if let Some(fds) = fds.filter(|v| !v.is_empty() && v != "0") {
                    let why = match fds.parse::<u32>() {
                        Err(_) => format!("LISTEN_FDS={fds:?} is not a number"),
                        Ok(_) => format!(
                            "LISTEN_PID={} is not this process ({})",
                            pid.unwrap_or_default(),
                            std::process::id()
                        ),
                    };
                    tracing::warn!(
                        "{why}: no socket is taken from the environment; the secure port \
                         binds --bind-address:--secure-port itself"
                    );
                }
                None
            }
            1 => handed.take_tcp_listener(0).transpose(),
            n => Some(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("LISTEN_FDS={n}: the secure port takes one socket"),
            ))),
        };
        Self(Arc::new(Mutex::new(socket)))
    }

    /// A socket already bound: what [`from_env`](Self::from_env) gives when one is
    /// handed down.
    pub fn from_listener(listener: TcpListener) -> Self {
        Self(Arc::new(Mutex::new(Some(Ok(listener)))))
    }

    /// The socket, once: `None` when none was handed down or it was taken.
    fn take(&self) -> Option<std::io::Result<TcpListener>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The listener the secure port serves on, and its address: the socket handed down
/// (`inherited`) when it listens at `wanted` (`--bind-address:--secure-port`), else
/// `wanted` bound now. `None` with `--secure-port=0` (`wanted`'s port 0) and no socket.
pub(super) async fn listener(
    wanted: SocketAddr,
    inherited: &InheritedSocket,
) -> Result<Option<(tokio::net::TcpListener, SocketAddr)>, ServingError> {
    let Some(inherited) = inherited.take() else {
        if wanted.port() == 0 {
            return Ok(None);
        }
        let tcp = tokio::net::TcpListener::bind(wanted)
            .await
            .map_err(|source| ServingError::Listen {
                addr: wanted,
                source,
            })?;
        return Ok(Some((tcp, wanted)));
    };
    let listener = inherited.map_err(ServingError::Inherited)?;
    let addr = listener.local_addr().map_err(ServingError::Inherited)?;
    let listening = socket2::SockRef::from(&listener)
        .is_listener()
        .map_err(ServingError::Inherited)?;
    if !listening {
        return Err(ServingError::Inherited(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the socket (bound to {addr}) is not listening: listen(2) was not called"),
        )));
    }
    if wanted.port() == 0 {
        return Err(ServingError::InheritedElsewhere(format!(
            "the listening socket handed down (LISTEN_FDS) listens on {addr}, but \
             --secure-port=0 serves nothing: set --bind-address and --secure-port to its \
             address, or do not hand a socket down"
        )));
    }
    // Address and port only: an IPv6 socket's scope and flow label are not flags.
    if (addr.ip(), addr.port()) != (wanted.ip(), wanted.port()) {
        return Err(ServingError::InheritedElsewhere(format!(
            "the listening socket handed down (LISTEN_FDS) listens on {addr}, but \
             --bind-address and --secure-port say {wanted}"
        )));
    }
    listener
        .set_nonblocking(true)
        .map_err(ServingError::Inherited)?;
    let tcp = tokio::net::TcpListener::from_std(listener).map_err(ServingError::Inherited)?;
    tracing::info!(%addr, "serving on the listening socket handed down (LISTEN_FDS)");
    Ok(Some((tcp, addr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--bind-address ip --secure-port port`.
    fn flags(ip: &str, port: &str) -> SocketAddr {
        format!("{ip}:{port}").parse().expect("an address")
    }

    #[tokio::test]
    async fn a_socket_handed_down_is_served_where_the_flags_say() {
        let socket = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port().to_string();
        let handed = InheritedSocket::from_listener(socket);
        let (tcp, addr) = listener(flags("127.0.0.1", &port), &handed)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(addr, tcp.local_addr().unwrap());
        assert_eq!(addr.port().to_string(), port);
        // Taken once: a second start would bind the flags' address itself.
        assert!(handed.take().is_none());
    }

    #[tokio::test]
    async fn a_socket_elsewhere_than_the_flags_say_is_refused_naming_both() {
        let socket = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let other = addr.port().checked_add(1).unwrap_or(1_024).to_string();
        let handed = InheritedSocket::from_listener(socket);
        let err = listener(flags("127.0.0.1", &other), &handed)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("LISTEN_FDS")
                && err.contains(&addr.to_string())
                && err.contains(&format!("127.0.0.1:{other}")),
            "{err}"
        );

        let socket = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port().to_string();
        let handed = InheritedSocket::from_listener(socket);
        // The default address, every interface, is not the socket's.
        let err = listener(flags("0.0.0.0", &port), &handed)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("0.0.0.0:{port}")), "{err}");

        let handed = InheritedSocket::from_listener(TcpListener::bind("127.0.0.1:0").unwrap());
        let err = listener(flags("0.0.0.0", "0"), &handed)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("--secure-port=0 serves nothing"), "{err}");
    }

    #[tokio::test]
    async fn a_socket_not_listening_is_refused() {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        let port = socket.local_addr().unwrap().as_socket().unwrap().port();
        let handed = InheritedSocket::from_listener(socket.into());
        let err = listener(flags("127.0.0.1", &port.to_string()), &handed)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("LISTEN_FDS")
                && err.contains(&format!("bound to 127.0.0.1:{port}) is not listening")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn without_a_socket_the_flags_address_is_bound_or_nothing_served() {
        let none = InheritedSocket::default();
        assert!(
            listener(flags("0.0.0.0", "0"), &none)
                .await
                .unwrap()
                .is_none()
        );
        // Port 0 in the flags means "serve nothing"; a bound address is another test's.
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port().to_string();
        let err = listener(flags("127.0.0.1", &port), &none)
            .await
            .unwrap_err();
        assert!(matches!(err, ServingError::Listen { .. }), "{err}");
    }
}
