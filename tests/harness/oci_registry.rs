//! A real OCI registry (distribution's `registry`, `$OCI_REGISTRY`) on 127.0.0.1 with
//! TLS from a test CA and basic auth, and real cosign (`$COSIGN`) signing in it with a
//! key, offline. `scripts/ensure-go-tools.sh` builds both from their Go modules.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_apiserver_peer::pki::TestCa;

use crate::TempDir;

/// The user and password the registry accepts.
pub const USER: &str = "puller";
/// See [`USER`].
pub const PASSWORD: &str = "s3cret-pull";

/// A binary `scripts/ensure-go-tools.sh` builds: `$variable`, else
/// target/kube/bin/`name`; panics naming the script when it is missing.
pub fn go_tool(variable: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/kube/bin")
                .join(name)
        });
    assert!(
        path.is_file(),
        "{} is missing: run `source scripts/ensure-go-tools.sh {name}` (scripts/test.sh \
         does), which builds it from its Go module",
        path.display()
    );
    path
}

/// A running registry. Killed when dropped.
pub struct Registry {
    /// Its files: storage, configuration, CA, credentials.
    pub dir: TempDir,
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// The CA its certificate is issued by, PEM, at `dir/ca.pem`.
    pub ca_file: PathBuf,
    /// The CA, to issue certificates for [`FaultyRegistry`]s it trusts too.
    pub ca: TestCa,
    process: Option<tokio::process::Child>,
    port: u16,
}

impl Registry {
    /// Starts a registry on a free port of 127.0.0.1 and waits until it answers.
    pub async fn start() -> Self {
        let dir = TempDir::new("oci-registry");
        let port = loopback_port::reserve().expect("a free port");
        let ca = TestCa::new();
        let server = ca.server(&["127.0.0.1"]);
        let root = dir.path();
        std::fs::write(root.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(root.join("tls.crt"), &server.cert_pem).unwrap();
        std::fs::write(root.join("tls.key"), &server.key_pem).unwrap();
        let hash = bcrypt::hash(PASSWORD, 4).expect("bcrypt");
        std::fs::write(root.join("htpasswd"), format!("{USER}:{hash}\n")).unwrap();
        std::fs::create_dir_all(root.join("storage")).unwrap();
        let config = format!(
            "version: 0.1\n\
             log:\n  level: warn\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {root}/tls.crt\n    key: {root}/tls.key\n\
             auth:\n  htpasswd:\n    realm: wasm-ccm-tests\n    path: {root}/htpasswd\n",
            storage = root.join("storage").display(),
            root = root.display(),
        );
        std::fs::write(root.join("config.yml"), config).unwrap();
        let mut registry = Self {
            host: format!("127.0.0.1:{port}"),
            ca_file: root.join("ca.pem"),
            dir,
            ca,
            process: None,
            port,
        };
        registry.run().await;
        registry
    }

    /// (Re)starts the process on the same port and storage.
    pub async fn run(&mut self) {
        let mut command = tokio::process::Command::new(go_tool("OCI_REGISTRY", "registry"));
        command
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        crate::die_with_parent(&mut command);
        self.process = Some(command.spawn().expect("start the registry"));
        let client = self.https_client();
        let url = format!("https://{}/v2/", self.host);
        crate::wait_until(Duration::from_secs(60), "the registry answering", || {
            let request = client.get(&url);
            async move { request.send().await.is_ok_and(|r| r.status() == 401) }
        })
        .await;
    }

    /// Stops the process (the storage stays).
    pub async fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill().await;
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn https_client(&self) -> reqwest::Client {
        wasm_ccm_host::tls::install_crypto_provider();
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.ca_file).unwrap()).unwrap();
        reqwest::Client::builder()
            .tls_certs_merge([ca])
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }

    /// A Docker `config.json` with this registry's credentials (with `password`).
    pub fn docker_config(&self, password: &str) -> String {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
        serde_json::json!({"auths": {self.host.clone(): {"auth": auth}}}).to_string()
    }

    /// Pushes an image whose one layer (a gzipped tar) holds `files`, as `FROM
    /// scratch` + `COPY` builds it, to `repository:tag`: the reference pinned by
    /// digest (without `oci://`).
    pub async fn push_image(&self, repository: &str, tag: &str, files: &[(&str, &[u8])]) -> String {
        use oci_client::client::{ClientConfig, Config, ImageLayer};
        use oci_client::manifest::{IMAGE_CONFIG_MEDIA_TYPE, IMAGE_LAYER_GZIP_MEDIA_TYPE};
        use std::io::Write;
        wasm_ccm_host::tls::install_crypto_provider();
        let mut builder = tar::Builder::new(Vec::new());
        for (path, bytes) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, path, *bytes).unwrap();
        }
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&builder.into_inner().unwrap()).unwrap();
        let layer = gzip.finish().unwrap();
        let client = oci_client::Client::try_from(ClientConfig {
            extra_root_certificates: vec![oci_client::client::Certificate {
                encoding: oci_client::client::CertificateEncoding::Pem,
                data: std::fs::read(&self.ca_file).unwrap(),
            }],
            ..Default::default()
        })
        .unwrap();
        let reference: oci_client::Reference =
            format!("{}/{repository}:{tag}", self.host).parse().unwrap();
        let auth = oci_client::secrets::RegistryAuth::Basic(USER.into(), PASSWORD.into());
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        client
            .push(
                &reference,
                &[ImageLayer::new(
                    layer,
                    IMAGE_LAYER_GZIP_MEDIA_TYPE.into(),
                    None,
                )],
                Config::new(
                    serde_json::to_vec(&config).unwrap(),
                    IMAGE_CONFIG_MEDIA_TYPE.into(),
                    None,
                ),
                &auth,
                None,
            )
            .await
            .expect("push the image");
        let digest = client
            .fetch_manifest_digest(&reference, &auth)
            .await
            .unwrap();
        format!("{}/{repository}@{digest}", self.host)
    }

    /// The file holding a blob of the storage (to tamper with it).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Runs cosign in this registry's directory: see [`cosign`].
    pub fn cosign(&self, args: &[&str]) -> String {
        cosign(self.dir.path(), args)
    }

    /// A key pair in this registry's directory: see [`key_pair`].
    pub fn key_pair(&self, name: &str) -> (PathBuf, String) {
        key_pair(self.dir.path(), name)
    }

    /// Signs `reference` (`HOST/REPO@sha256:...`, without `oci://`) with `key`, as a
    /// user does: `cosign sign --key KEY --tlog-upload=false`.
    pub fn sign(&self, key: &Path, reference: &str) {
        let ca = self.ca_file.display().to_string();
        self.cosign(&[
            "sign",
            "--key",
            &key.display().to_string(),
            "--tlog-upload=false",
            "--yes",
            "--registry-cacert",
            &ca,
            "--registry-username",
            USER,
            "--registry-password",
            PASSWORD,
            reference,
        ]);
    }

    /// `cosign verify --key PUB --insecure-ignore-tlog REF`: whether cosign itself
    /// accepts `reference`'s signature by `public` (a PEM file).
    pub fn cosign_verifies(&self, public: &Path, reference: &str) -> bool {
        let ca = self.ca_file.display().to_string();
        std::process::Command::new(go_tool("COSIGN", "cosign"))
            .args([
                "verify",
                "--key",
                &public.display().to_string(),
                "--insecure-ignore-tlog=true",
                "--registry-cacert",
                &ca,
                "--registry-username",
                USER,
                "--registry-password",
                PASSWORD,
                reference,
            ])
            .env("HOME", self.dir.path())
            .env("TUF_ROOT", self.dir.path().join("tuf"))
            .output()
            .expect("run cosign")
            .status
            .success()
    }
}

/// Runs cosign with `args` in `dir` (its home, key password `key-password`),
/// offline: what it printed, or a panic with its errors.
pub fn cosign(dir: &Path, args: &[&str]) -> String {
    let out = cosign_command(dir).args(args).output().expect("run cosign");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cosign {} failed: {text}",
        args.join(" ")
    );
    text
}

fn cosign_command(dir: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(go_tool("COSIGN", "cosign"));
    command
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "key-password")
        .env("HOME", dir)
        // No sigstore TUF root is fetched: nothing here needs one.
        .env("TUF_ROOT", dir.join("tuf"))
        .env_remove("SSL_CERT_FILE");
    command
}

/// A key pair made by `cosign generate-key-pair` in `dir`: (private key file, public
/// key PEM).
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, String) {
    cosign(dir, &["generate-key-pair", "--output-key-prefix", name]);
    let public = std::fs::read_to_string(dir.join(format!("{name}.pub"))).unwrap();
    (dir.join(format!("{name}.key")), public)
}

/// `cosign sign-blob --key KEY --tlog-upload=false --output-signature SIG FILE`, as the
/// docs tell a user to sign a component for the providers ConfigMap: the signature.
pub fn sign_blob(dir: &Path, key: &Path, file: &Path) -> Vec<u8> {
    let signature = dir.join("signature.tmp");
    cosign(
        dir,
        &[
            "sign-blob",
            "--key",
            &key.display().to_string(),
            "--tlog-upload=false",
            "--yes",
            "--output-signature",
            &signature.display().to_string(),
            &file.display().to_string(),
        ],
    );
    let bytes = std::fs::read(&signature).unwrap();
    std::fs::remove_file(&signature).unwrap();
    bytes
}

/// `cosign verify-blob --key PUB --signature SIG --insecure-ignore-tlog FILE`: whether
/// cosign itself accepts `signature` of `file` by `public` (a PEM file).
pub fn cosign_verifies_blob(dir: &Path, public: &Path, signature: &[u8], file: &Path) -> bool {
    let sig = dir.join("verify.sig");
    std::fs::write(&sig, signature).unwrap();
    cosign_command(dir)
        .args([
            "verify-blob",
            "--key",
            &public.display().to_string(),
            "--signature",
            &sig.display().to_string(),
            "--insecure-ignore-tlog=true",
            &file.display().to_string(),
        ])
        .output()
        .expect("run cosign")
        .status
        .success()
}

/// How a [`FaultyRegistry`] fails.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Completes the TLS handshake, then answers every request `500 Internal Server
    /// Error`.
    Status500,
    /// Completes the TLS handshake, reads, and never answers.
    Hang,
}

/// A registry that fails, over TLS with a certificate from a [`Registry`]'s CA (so
/// only its answers are at fault). Stops when dropped.
pub struct FaultyRegistry {
    /// `127.0.0.1:PORT`.
    pub host: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultyRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultyRegistry {
    /// Serves `fault` on a free port of 127.0.0.1.
    pub async fn start(ca: &TestCa, fault: Fault) -> Self {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let issued = ca.server(&["127.0.0.1"]);
        let certs = CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 16 << 10];
                    loop {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if let Fault::Status500 = fault {
                            let body =
                                r#"{"errors":[{"code":"UNKNOWN","message":"injected failure"}]}"#;
                            let answer = format!(
                                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if tls.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Self { host, task }
    }
}
