//! Fixtures on disk: the workspace's built artefacts (guest components, binaries),
//! temporary directories, provider directories, ConfigMap volumes as kubelet publishes
//! them, and deploy/ rendered with kubectl.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The bearer token every test cloud requires.
pub const TOKEN: &str = "test-token-7f3a9c";

/// The workspace's `target/` directory.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// The target directory of the crates the tests build outside the workspace: the
/// crate `wasm-ccm new` generates (tests/new_provider.rs) and the SDK as `cargo package`
/// makes it (tests/layout.rs). One for both, so the SDK's dependencies, which both build
/// natively with cargo's default profile, compile once; apart from the workspace's, so
/// these builds do not wait on its lock.
pub fn outside_target_dir() -> PathBuf {
    target_dir().join("scaffold")
}

/// A guest component built by `scripts/build-guests.sh`, e.g. `reference_provider`.
///
/// `WASM_CCM_GUESTS_DIR` points the tests at components built another way, e.g.
/// `target/wasm32-wasip1/release` after `cargo component build --release`.
pub fn guest(name: &str) -> PathBuf {
    let dir = std::env::var_os("WASM_CCM_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("wasm32-wasip2/release"));
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the guests first with scripts/build-guests.sh",
        path.display()
    );
    path
}

/// The `wasm-ccm` binary next to the running test (built by `cargo build`).
pub fn wasm_ccm_bin() -> PathBuf {
    built_bin("wasm-ccm")
}

/// A workspace binary next to the running test (built by `cargo build`), e.g.
/// `wasm-ccm-playground`.
pub fn built_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // target/debug/deps/<test>-<hash> -> target/debug/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build` before the tests (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "wasm-ccm-test-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A provider directory holding one component and its policy.
pub struct ProviderDir {
    pub dir: TempDir,
    pub wasm: PathBuf,
}

impl ProviderDir {
    /// Copies guest `guest_name` into a fresh directory as `file_stem.wasm`, with
    /// `policy` as `file_stem.yaml` and `token` in a `token` file next to them.
    pub fn new(guest_name: &str, file_stem: &str, policy: &str, token: &str) -> Self {
        let dir = TempDir::new(file_stem);
        let wasm = dir.path().join(format!("{file_stem}.wasm"));
        std::fs::copy(guest(guest_name), &wasm).expect("copy guest");
        std::fs::write(dir.path().join(format!("{file_stem}.yaml")), policy).expect("policy");
        std::fs::write(dir.path().join("token"), token).expect("token");
        Self { dir, wasm }
    }
}

/// Publishes `files` into `dir` the way kubelet updates a ConfigMap volume: a new
/// timestamped directory, a `..data_tmp` symlink renamed over `..data`, a symlink per
/// file (`NAME -> ..data/NAME`; links of files no longer present are removed), and
/// the previous timestamped directory removed.
#[cfg(unix)]
pub fn kubelet_publish(dir: &Path, files: &[(&str, &[u8])]) {
    use std::os::unix::fs::symlink;
    static VERSION: AtomicU64 = AtomicU64::new(0);
    let version = format!(
        "..2026_11_22_{:06}.{}",
        VERSION.fetch_add(1, Ordering::SeqCst),
        std::process::id()
    );
    std::fs::create_dir(dir.join(&version)).expect("version dir");
    for (name, bytes) in files {
        std::fs::write(dir.join(&version).join(name), bytes).expect("write file");
    }
    let previous = std::fs::read_link(dir.join("..data")).ok();
    let _ = std::fs::remove_file(dir.join("..data_tmp"));
    symlink(&version, dir.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("rename ..data");
    for (name, _) in files {
        let link = dir.join(name);
        if link.symlink_metadata().is_err() {
            symlink(Path::new("..data").join(name), link).expect("file symlink");
        }
    }
    if let Some(previous) = &previous {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let name = entry.file_name();
            let target = std::fs::read_link(entry.path()).ok();
            let points_into_data = target.is_some_and(|t| t.starts_with("..data"));
            let still_published = files.iter().any(|(f, _)| std::ffi::OsStr::new(f) == name);
            if points_into_data && !still_published {
                std::fs::remove_file(entry.path()).expect("remove stale link");
            }
        }
        std::fs::remove_dir_all(dir.join(previous)).expect("remove previous version");
    }
}

/// A copy of a component that differs only by a custom section: a new version with
/// the same behaviour (a different SHA-256).
pub fn with_custom_section(component: &[u8], tag: &str) -> Vec<u8> {
    fn leb128(mut value: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"wasm-ccm-test-version";
    let mut payload = Vec::new();
    leb128(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = component.to_vec();
    out.push(0);
    leb128(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

/// `kubectl kustomize DIR` (`$KUBECTL`, else `kubectl`), parsed document by document.
pub fn kustomize(dir: &Path) -> Vec<serde_json::Value> {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {kubectl} kustomize: {e} (set KUBECTL)"));
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("rendered YAML"))
        .collect()
}

/// The ConfigMap `name` among rendered `docs`.
pub fn config_map(docs: &[serde_json::Value], name: &str) -> serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("ConfigMap {name}"))
        .clone()
}

/// A provider's example under `deploy/` as `kubectl kustomize` renders it.
pub struct RenderedExample {
    /// The policy in the providers ConfigMap (`<provider>.yaml`).
    pub policy: String,
    /// `cloud.conf` of the cloud-config ConfigMap.
    pub cloud_conf: String,
    /// The Deployment.
    pub deployment: serde_json::Value,
}

/// Renders `deploy/<dir>` and checks what every provider example has: the component
/// and policy of `provider` in the providers ConfigMap, a `cloud.conf`, and a
/// Deployment running `--cloud-provider=<provider>`.
pub fn rendered_example(dir: &str, provider: &str) -> RenderedExample {
    let docs = kustomize(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy")
            .join(dir),
    );
    let providers = config_map(&docs, "wasm-ccm-providers");
    assert!(
        providers["binaryData"][format!("{provider}.wasm")].is_string(),
        "the component {provider}.wasm in the providers ConfigMap"
    );
    let text = |value: &serde_json::Value, what: &str| {
        value
            .as_str()
            .unwrap_or_else(|| panic!("{what} in deploy/{dir}"))
            .to_owned()
    };
    let policy = text(&providers["data"][format!("{provider}.yaml")], "the policy");
    let cloud_conf = text(
        &config_map(&docs, "wasm-ccm-cloud-config")["data"]["cloud.conf"],
        "cloud.conf",
    );
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment")
        .clone();
    let flag = format!("--cloud-provider={provider}");
    assert!(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("the container's args")
            .iter()
            .any(|a| *a == *flag),
        "the Deployment runs {flag}"
    );
    RenderedExample {
        policy,
        cloud_conf,
        deployment,
    }
}
