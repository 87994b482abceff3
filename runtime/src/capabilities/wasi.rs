//! The WASI context given to providers: Rust's standard library imports `wasi:cli`,
//! `wasi:filesystem`, `wasi:sockets` and friends, so the interfaces are linked, but
//! closed: no preopened directories, empty environment and arguments, no TCP, UDP or
//! name lookup. Clocks and randomness work.

use wasmtime_wasi::WasiCtx;

/// A WASI context with nothing to reach. `provider` is the only argument (argv[0]).
pub fn closed_context(provider: &str) -> WasiCtx {
    WasiCtx::builder()
        .arg(provider)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}
