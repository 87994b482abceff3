//! A vendor's provider run by an operator from their home directory: the hostile
//! fixture as `vendor.wasm`, a `vendor.yaml` whose credential rule names a file of the
//! operator's (a stand-in for `~/.kube/config`), a cloud config making `initialize` send
//! one request, and the vendor's host on 127.0.0.1 recording what reaches it. The tools
//! (`check --cloud-config`, `call`, `conformance`) must send nothing of that file unless
//! `--credentials-dir` names a directory holding it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::{RawBehavior, RawServer, TempDir, guest, wasm_ccm_bin};

/// What the operator's file holds: a request carrying it took it to the vendor.
pub const OPERATOR_SECRET: &str = "operator-kubeconfig-3f9c1e";

/// How the vendor's policy names the operator's file.
#[derive(Debug, Clone, Copy)]
pub enum Named {
    /// By its absolute path, in a directory of its own.
    Absolute,
    /// `.kube/config`, relative: read from the directory the operator runs in.
    Relative,
}

/// The operator's home holding the vendor's files, and the vendor's host.
pub struct VendorHome {
    /// The directory the commands run in: `vendor.wasm`, `vendor.yaml`, `cloud.conf`
    /// and `.kube/config`.
    pub home: TempDir,
    /// A directory holding only a copy of the operator's file, `config` (the one the
    /// policy names with [`Named::Absolute`]).
    pub elsewhere: TempDir,
    named: Named,
    _host: RawServer,
    received: Arc<Mutex<Vec<String>>>,
}

impl VendorHome {
    /// The home, its files, and the vendor's host answering every request `200 ok`.
    pub async fn start(named: Named) -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let host = RawServer::start(RawBehavior::Respond(Arc::new(move |request: &str| {
            log.lock().unwrap().push(request.to_owned());
            (200, "ok".to_owned())
        })))
        .await;
        let home = TempDir::new("operator-home");
        let elsewhere = TempDir::new("operator-file");
        std::fs::create_dir_all(home.path().join(".kube")).unwrap();
        for file in [
            home.path().join(".kube/config"),
            elsewhere.path().join("config"),
        ] {
            std::fs::write(file, OPERATOR_SECRET).unwrap();
        }
        std::fs::copy(guest("fixture_hostile"), home.path().join("vendor.wasm")).unwrap();
        let file = match named {
            Named::Absolute => elsewhere.path().join("config").display().to_string(),
            Named::Relative => ".kube/config".to_owned(),
        };
        let url = host.url();
        std::fs::write(
            home.path().join("vendor.yaml"),
            format!(
                "allowedOutboundHosts: ['{url}']\n\
                 credentials:\n\
                 - destination: '{url}'\n\
                 \x20 header: {{name: x-operator-file, valueFile: '{file}'}}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            home.path().join("cloud.conf"),
            format!("fetch {url}/initialize"),
        )
        .unwrap();
        Self {
            home,
            elsewhere,
            named,
            _host: host,
            received,
        }
    }

    /// The directory holding only the operator's file, as `--credentials-dir` names it
    /// from the home directory.
    pub fn credentials_dir(&self) -> PathBuf {
        match self.named {
            Named::Absolute => self.elsewhere.path().to_owned(),
            Named::Relative => PathBuf::from(".kube"),
        }
    }

    /// Runs `wasm-ccm ARGS` in the home directory: (exit code, stdout, stderr).
    pub async fn wasm_ccm(&self, args: &[&str]) -> (i32, String, String) {
        let out = tokio::process::Command::new(wasm_ccm_bin())
            .current_dir(self.home.path())
            .args(args)
            .output()
            .await
            .expect("run wasm-ccm");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The requests the vendor's host received since the last look, as text.
    pub fn received(&self) -> Vec<String> {
        std::mem::take(&mut *self.received.lock().unwrap())
    }

    /// Runs `command` (`SUBCOMMAND vendor.wasm ...`, whose `initialize` gets
    /// `--cloud-config cloud.conf`) three ways:
    /// - as given: `initialize`'s request reaches the vendor's host without the
    ///   operator's file;
    /// - with `--credentials-dir` naming the directory that holds only that file: with
    ///   it (the policy works where its files are given);
    /// - with the home directory, which holds the component and its policy, as
    ///   `--credentials-dir`: refused, naming the flag, before anything is sent.
    ///
    /// Returns the first run's stdout and stderr.
    pub async fn assert_confined(&self, command: &[&str]) -> (String, String) {
        let what = format!("{:?} {}", self.named, command.join(" "));
        let (_, stdout, stderr) = self.wasm_ccm(command).await;
        let requests = self.received();
        assert!(
            !requests.is_empty(),
            "{what}: initialize sent nothing\n{stdout}\n{stderr}"
        );
        assert!(
            !carries_the_secret(&requests),
            "{what}: the operator's file reached the vendor: {requests:?}"
        );

        let dir = self.credentials_dir();
        let (code, given, given_err) = self.wasm_ccm(&with_credentials_dir(command, &dir)).await;
        let requests = self.received();
        assert!(
            carries_the_secret(&requests),
            "{what} --credentials-dir {}: the file was not used (exit {code}): {requests:?}\n\
             {given}\n{given_err}",
            dir.display()
        );

        let home = self.home.path();
        let (code, refused, refused_err) =
            self.wasm_ccm(&with_credentials_dir(command, home)).await;
        assert_ne!(code, 0, "{what}: {refused}");
        assert!(
            refused_err.contains(&format!("--credentials-dir {}", home.display()))
                && refused_err.contains("holds the provider's component"),
            "{what}: {refused_err}"
        );
        assert_eq!(self.received(), Vec::<String>::new(), "{what}");
        (stdout, stderr)
    }
}

/// `command` with `--credentials-dir dir` after its component.
fn with_credentials_dir<'a>(command: &[&'a str], dir: &'a std::path::Path) -> Vec<&'a str> {
    let dir = dir.to_str().expect("a UTF-8 path");
    let (head, tail) = command.split_at(2);
    head.iter()
        .copied()
        .chain(["--credentials-dir", dir])
        .chain(tail.iter().copied())
        .collect()
}

/// Whether any of `requests` carried the operator's file.
fn carries_the_secret(requests: &[String]) -> bool {
    requests.iter().any(|r| r.contains(OPERATOR_SECRET))
}
