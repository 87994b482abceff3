//! The WASI context given to providers: Rust's standard library imports `wasi:cli`,
//! `wasi:filesystem`, `wasi:sockets` and friends, so the interfaces are linked, but
//! closed: no preopened directories, empty environment, the provider name as the only
//! argument, no TCP, UDP or name lookup. Clocks and randomness work. stdout and
//! stderr become `tracing` events tagged with the provider name, rate-limited.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::AsyncWrite;
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use super::logging::LogLimiter;
use crate::metrics::{ProviderLabel, ProviderLabels, ProviderMetrics};

/// Longest line kept from a guest's stdout/stderr; longer lines are cut.
pub const MAX_LINE_BYTES: usize = 4096;

/// A WASI context with nothing to reach.
pub fn closed_context(
    provider: &Arc<ProviderLabel>,
    limiter: &Arc<Mutex<LogLimiter>>,
    metrics: &Arc<ProviderMetrics>,
) -> WasiCtx {
    let output = |stream: &'static str| GuestOutput {
        provider: provider.clone(),
        stream,
        limiter: limiter.clone(),
        metrics: metrics.clone(),
    };
    WasiCtx::builder()
        .arg(&*provider.get())
        .stdout(output("stdout"))
        .stderr(output("stderr"))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

/// A guest's stdout or stderr.
#[derive(Clone)]
struct GuestOutput {
    provider: Arc<ProviderLabel>,
    stream: &'static str,
    limiter: Arc<Mutex<LogLimiter>>,
    metrics: Arc<ProviderMetrics>,
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            out: self.clone(),
            line: Vec::new(),
        })
    }
}

/// Splits written bytes into lines and logs each.
struct LineWriter {
    out: GuestOutput,
    line: Vec<u8>,
}

impl LineWriter {
    fn emit(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let text = super::logging::sanitize(&String::from_utf8_lossy(&self.line));
        self.line.clear();
        let (admit, dropped) = self
            .out
            .limiter
            .lock()
            .expect("log limiter lock")
            .admit(Instant::now());
        let label = self.out.provider.get();
        let provider = &*label;
        if dropped > 0 {
            tracing::warn!(
                provider,
                dropped,
                "provider output lines dropped by rate limit"
            );
        }
        if !admit {
            self.out
                .metrics
                .guest_log_dropped
                .get_or_create(&ProviderLabels {
                    provider: provider.to_owned(),
                })
                .inc();
        }
        if admit {
            tracing::info!(target: "provider", provider, stream = self.out.stream, "{text}");
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        for &byte in buf {
            if byte == b'\n' {
                self.emit();
            } else if self.line.len() < MAX_LINE_BYTES {
                self.line.push(byte);
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.emit();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}
