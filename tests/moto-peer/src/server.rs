//! Starting moto's server (with AWS's defaults moto lacks) on 127.0.0.1, and the
//! calls to its own API (`/moto-api/`).

use std::time::{Duration, Instant};

use crate::{Keys, Moto, ensure_crypto_provider};

/// The moto server program run with AWS's defaults that moto lacks.
const AWS_DEFAULTS: &str = include_str!("aws_defaults.py");

impl Moto {
    /// The moto server program: `$MOTO_SERVER`, else the tools venv's.
    pub fn program() -> std::path::PathBuf {
        std::env::var_os("MOTO_SERVER")
            .map(Into::into)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/tools-venv/bin/moto_server")
            })
    }

    /// Starts [`Moto::program`] on a free port of 127.0.0.1 and waits until it answers.
    /// Panics when it cannot (a test peer).
    pub async fn start() -> Self {
        Self::try_start().await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts [`Moto::program`] on a free port of 127.0.0.1 and waits until it answers.
    pub async fn try_start() -> Result<Self, String> {
        let server = Self::program();
        if !server.exists() {
            return Err(format!(
                "{} is missing: install moto with `source scripts/ensure-moto.sh` (scripts/test.sh does), or set MOTO_SERVER",
                server.display()
            ));
        }
        let port =
            loopback_port::reserve().map_err(|e| format!("no free port on 127.0.0.1: {e}"))?;
        // moto's server through the Python next to it, with AWS's defaults moto lacks
        // (aws_defaults.py).
        let python = server.with_file_name("python");
        let mut command = tokio::process::Command::new(if python.exists() {
            python.as_os_str()
        } else {
            std::ffi::OsStr::new("python3")
        });
        // SIGKILL when the thread that started it ends, so a test killed on a timeout
        // (whose drops never run) leaves no moto_server behind. SAFETY: prctl(2) only,
        // between fork and exec: async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args([
                "-c",
                AWS_DEFAULTS,
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", server.display()))?;
        // reqwest is built without a default TLS provider (as the host's is).
        ensure_crypto_provider();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let moto = Self {
            child,
            port,
            client,
            keys: Keys::anonymous(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = moto
                .client
                .get(format!("{}/moto-api/", moto.url()))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(moto);
            }
            if Instant::now() > deadline {
                return Err("moto did not start within 60s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Answers every later API request after a delay spread over `low..=high`, once
    /// its work is done (zero turns it off); moto's own API is not slowed.
    pub async fn set_latency(&self, low: Duration, high: Duration) {
        let response = self
            .client
            .post(format!("{}/moto-peer/latency", self.url()))
            .body(format!("{} {}", low.as_secs_f64(), high.as_secs_f64()))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "latency");
    }

    /// The API requests served so far by access key ID and action
    /// (`"<key ID> <Action>"`, `-` for an unsigned request); moto's own API is not
    /// counted.
    pub async fn requests(&self) -> std::collections::BTreeMap<String, u64> {
        let response = self
            .client
            .get(format!("{}/moto-peer/requests", self.url()))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "requests");
        serde_json::from_str(&response.text().await.unwrap()).unwrap()
    }

    /// Turns request authentication on: after `free` more requests, every request
    /// must be signed with a key moto's IAM knows and be allowed by its policies.
    pub async fn enable_auth(&self, free: u32) {
        let response = self
            .client
            .post(format!("{}/moto-api/reset-auth", self.url()))
            .body(free.to_string())
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "reset-auth");
    }
}
