//! Ports of 127.0.0.1 for servers that must be told their port before they bind it
//! and cannot be handed a bound socket (kube-apiserver, etcd, gunicorn, moto,
//! Prometheus).
//!
//! A port taken by binding port 0 and releasing it can be handed out again by the
//! kernel before the server binds it: to another test's `bind(0)`, or as the source
//! port of any outgoing connection. [`reserve`] takes ports below the kernel's
//! ephemeral range (`net.ipv4.ip_local_port_range`; above it when the range starts
//! too low), which the kernel never picks on its own, and never gives one twice: not
//! in a process, and not to two processes at once (test binaries run side by side),
//! as each port handed out is locked (`flock`) in a directory of lock files until the
//! process ends. Each process starts at its own offset in that range, and a port
//! something already listens on, or another process holds, is skipped.
//!
//! ```
//! let a = loopback_port::reserve().unwrap();
//! let b = loopback_port::reserve().unwrap();
//! assert_ne!(a, b);
//! std::net::TcpListener::bind(("127.0.0.1", a)).unwrap();
//! ```

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out (below it are well-known and registered services).
const FLOOR: u16 = 10_000;
/// How many ports below the ephemeral range are used at most.
const SPAN: u16 = 16_000;

/// A port of 127.0.0.1 nothing listens on now, which the kernel does not give to a
/// `bind(0)` or an outgoing connection, and which this process was not given before.
pub fn reserve() -> std::io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = range(ephemeral())?;
    // Neighbouring process IDs start far apart.
    let start = std::process::id().wrapping_mul(2_654_435_761);
    reserve_from(&NEXT, low, high, start, &locks_dir()?)
}

/// Where the ports' lock files are: one directory per user (by uid), shared by its
/// processes.
fn locks_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self")?.uid();
    let dir = std::env::temp_dir().join(format!("loopback-port-{uid}"));
    let made = std::fs::create_dir_all(&dir).and_then(|()| std::fs::metadata(&dir));
    match made {
        Ok(meta) if meta.uid() == uid => Ok(dir),
        Ok(meta) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "the port lock directory {} belongs to uid {}, not to this user ({uid})",
                dir.display(),
                meta.uid()
            ),
        )),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("cannot make the port lock directory {}: {e}", dir.display()),
        )),
    }
}

/// Takes `port` for this process until it ends: false when another process holds it.
fn lock(dir: &Path, port: u16) -> std::io::Result<bool> {
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    let path = dir.join(format!("{port}.lock"));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
        })?;
    match file.try_lock() {
        Ok(()) => {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push(file);
            Ok(true)
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(std::io::Error::new(
            e.kind(),
            format!("cannot lock {}: {e}", path.display()),
        )),
    }
}

/// The next port of [low, high) from `start` on, counting with `next`, that nothing
/// listens on and no other process holds (its lock file in `locks`).
fn reserve_from(
    next: &AtomicU32,
    low: u16,
    high: u16,
    start: u32,
    locks: &Path,
) -> std::io::Result<u16> {
    let span = u32::from(high - low);
    loop {
        let taken = next.fetch_add(1, Ordering::Relaxed);
        if taken >= span {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("all {span} ports of 127.0.0.1 from {low} to {high} were handed out"),
            ));
        }
        let port = low + ((start % span + taken) % span) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() && lock(locks, port)? {
            return Ok(port);
        }
    }
}

/// The kernel's ephemeral range, [low, high] (Linux's default when it cannot be read).
fn ephemeral() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(|b| b.parse::<u16>().ok());
            Some((bounds.next()??, bounds.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// The ports [`reserve`] hands out, [low, high): up to [`SPAN`] ports just below the
/// ephemeral range, else just above it, never below [`FLOOR`].
fn range((ephemeral_low, ephemeral_high): (u16, u16)) -> std::io::Result<(u16, u16)> {
    const ENOUGH: u16 = 1_000;
    if ephemeral_low >= FLOOR + ENOUGH {
        return Ok((ephemeral_low.saturating_sub(SPAN).max(FLOOR), ephemeral_low));
    }
    let above = ephemeral_high.saturating_add(1);
    if u16::MAX - above >= ENOUGH {
        return Ok((above, above.saturating_add(SPAN)));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        format!(
            "the kernel's ephemeral port range ({ephemeral_low}-{ephemeral_high}, \
             net.ipv4.ip_local_port_range) leaves no {ENOUGH} ports above {FLOOR} outside it"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_repeat() {
        let (low, high) = range(ephemeral()).unwrap();
        let ports: Vec<u16> = (0..200).map(|_| reserve().unwrap()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
        assert!(ports.iter().all(|p| (low..high).contains(p)), "{ports:?}");
    }

    #[test]
    fn a_port_something_listens_on_is_skipped() {
        let (low, high) = range(ephemeral()).unwrap();
        // A listener on the first port a fresh count from this start would give.
        let locks = tempdir();
        let first = reserve_from(&AtomicU32::new(0), low, high, 4242, &locks).unwrap();
        let _held = TcpListener::bind((Ipv4Addr::LOCALHOST, first)).unwrap();
        let others = tempdir();
        let next = reserve_from(&AtomicU32::new(0), low, high, 4242, &others).unwrap();
        assert_ne!(next, first);
        TcpListener::bind((Ipv4Addr::LOCALHOST, next)).expect("the port is free");
    }

    #[test]
    fn a_range_handed_out_is_an_error_naming_it() {
        let error = reserve_from(&AtomicU32::new(10), 20_000, 20_010, 0, &tempdir()).unwrap_err();
        assert!(error.to_string().contains("20000 to 20010"), "{error}");
    }

    /// A port another process holds is skipped: here a lock taken on a second open
    /// file description, as another process's would be.
    #[test]
    fn a_port_another_process_holds_is_skipped() {
        let (low, high) = range(ephemeral()).unwrap();
        let locks = tempdir();
        let probe = reserve_from(&AtomicU32::new(0), low, high, 777, &tempdir()).unwrap();
        let other = File::create(locks.join(format!("{probe}.lock"))).unwrap();
        other.try_lock().unwrap();
        let next = reserve_from(&AtomicU32::new(0), low, high, 777, &locks).unwrap();
        assert_ne!(next, probe);
    }

    /// A fresh directory for lock files, removed when dropped.
    struct TempDir(PathBuf);

    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tempdir() -> TempDir {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "loopback-port-test-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    #[test]
    fn the_range_is_outside_the_ephemeral_one() {
        assert_eq!(range((32_768, 60_999)).unwrap(), (16_768, 32_768));
        assert_eq!(range((15_000, 60_999)).unwrap(), (10_000, 15_000));
        // A range reaching low: the ports above it.
        assert_eq!(range((1_024, 49_151)).unwrap(), (49_152, 65_152));
        assert!(range((1_024, 65_000)).is_err());
    }
}
