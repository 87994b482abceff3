//! The secure ports of the controller managers the tests start: bound here, by the
//! kernel's choice (port 0), and the socket handed down to the process as systemd's
//! socket activation does (`LISTEN_FDS`, docs/controllers.md). No port is chosen, let
//! go and bound again later, so a test running beside others never finds its port
//! taken, and a controller manager never serves another test's.
//!
//! Servers that cannot take a socket (moto, Keystone, kube-apiserver, Prometheus) get
//! a port from [`loopback_port::reserve`] instead.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

/// The sockets bound for controller managers, by port. Kept until the test process
/// ends, so a controller manager started again on the same port serves on it again;
/// meanwhile a connection to it is accepted and waits (not refused), which is why
/// [`crate::http_get`] and [`crate::https::https_get`] give up after
/// [`crate::REQUEST_TIMEOUT`].
static BOUND: Mutex<BTreeMap<u16, TcpListener>> = Mutex::new(BTreeMap::new());

/// A port of 127.0.0.1 bound now, for a controller manager's secure port: a command
/// given it with [`serve_on`] (or built by [`crate::Stack::controller_manager`]) is
/// handed the socket.
pub fn listening_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("the bound address").port();
    BOUND
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(port, listener);
    port
}

/// Serves the secure port of the controller manager `command` starts on `port`, a
/// [`listening_port`]: `--secure-port port --bind-address 127.0.0.1`, with the socket
/// handed down ([`hand_down`]). Port 0 serves nothing (`--secure-port 0`).
pub fn serve_on(command: &mut tokio::process::Command, port: u16) -> &mut tokio::process::Command {
    command
        .args(["--secure-port", &port.to_string()])
        .args(["--bind-address", "127.0.0.1"]);
    if port == 0 {
        return command
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDS_FIRST_FD");
    }
    hand_down(command, port)
}

/// Hands the socket of `port`, a [`listening_port`], to the process `command` starts:
/// as file descriptor 3, with `LISTEN_FDS=1`. Panics for a port [`listening_port`] did
/// not bind.
pub fn hand_down(command: &mut tokio::process::Command, port: u16) -> &mut tokio::process::Command {
    let fd = BOUND
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&port)
        .unwrap_or_else(|| panic!("port {port} was not bound by listening_port()"))
        .as_raw_fd();
    command
        .env("LISTEN_FDS", "1")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS_FIRST_FD");
    // SAFETY: dup2(2) and fcntl(2) only, between fork and exec: async-signal-safe. The
    // socket stays open in this process (BOUND keeps it), so `fd` is valid.
    unsafe {
        command.pre_exec(move || {
            let done = if fd == 3 {
                // dup2 onto itself would keep close-on-exec.
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if done == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}
