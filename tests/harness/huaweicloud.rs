//! Huawei Cloud as a test peer: tests/huaweicloud-double with an access key,
//! deploy/huaweicloud's policy made for it, and Huawei's official Python SDK
//! (scripts/ensure-huaweicloud-sdk.sh) as the judge of what the host signs.

use std::path::{Path, PathBuf};

use huaweicloud_double::{HuaweiCloudDouble, Key, Service, Settings};
use serde_json::Value;

/// The region the double serves and the cloud configs name.
pub const REGION: &str = "ap-southeast-1";
/// The project the access key belongs to.
pub const PROJECT: &str = "5d3e9a8b7c6f4e2d1a0b9c8d7e6f5a4b";
/// deploy/huaweicloud's placeholders.
const DOCUMENTED_PROJECT: &str = "0f5b3e2c8a4d4b7f9e1c2d3a4b5c6d7e";
const DOCUMENTED_DESTINATION: &str = "https://*.ap-southeast-1.myhuaweicloud.com";
const DOCUMENTED_CREDENTIALS: &str = "/etc/wasm-ccm/credentials/";

/// The three services, as the provider's `[Endpoints]` and the policy's `service` name
/// them.
pub const SERVICES: [(Service, &str); 3] = [
    (Service::Ecs, "ecs"),
    (Service::Elb, "elb"),
    (Service::Vpc, "vpc"),
];

/// The double and the access key the provider's host signs with.
pub struct HuaweiWorld {
    pub cloud: HuaweiCloudDouble,
    pub key: Key,
}

impl HuaweiWorld {
    /// The double, with one access key (allowed everything: the policy confines it).
    pub async fn start() -> Self {
        let key = Key {
            access_key_id: "HPUAKEXAMPLE7QF3XN2B".into(),
            secret_access_key: "sk-Xm3pQ9vR2tL8wY5zK1nB6cD4fG7hJ0aS".into(),
            security_token: None,
        };
        let mut settings = Settings::new(PROJECT, REGION);
        settings.keys.push(key.clone());
        let cloud = HuaweiCloudDouble::start(settings)
            .await
            .expect("the Huawei Cloud double");
        Self { cloud, key }
    }

    /// deploy/huaweicloud's policy for this double: its rule once per service, each
    /// for the service's endpoint (a destination of one host names its `service`),
    /// with the documented keys, project and `allowedActions`; the key files in
    /// `credentials` (written there by [`Self::install_documented_policy`]).
    pub fn documented_policy(&self, credentials: &Path) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text =
            std::fs::read_to_string(root.join("deploy/huaweicloud/providers/huaweicloud.yaml"))
                .expect("deploy/huaweicloud's policy");
        assert!(
            text.contains(DOCUMENTED_DESTINATION)
                && text.contains(DOCUMENTED_PROJECT)
                && text.contains(DOCUMENTED_CREDENTIALS),
            "the documented policy's placeholders changed"
        );
        let text = text.replace(DOCUMENTED_PROJECT, PROJECT).replace(
            DOCUMENTED_CREDENTIALS,
            &format!("{}/", credentials.display()),
        );
        let documented: Value = serde_saphyr::from_str(&text).expect("deploy/huaweicloud's policy");
        assert_eq!(
            documented["credentials"][0]["destination"],
            DOCUMENTED_DESTINATION
        );
        let policy = self.cloud.policy_for(&documented);
        // JSON is YAML.
        serde_json::to_string_pretty(&policy).unwrap()
    }

    /// Writes [`Self::documented_policy`] as `dir/huaweicloud.yaml` and the key files
    /// it names in `dir/credentials/` (the Secret's mount: a directory of its own, as
    /// `wasm-ccm conformance` wants one); that directory.
    pub fn install_documented_policy(&self, dir: &Path) -> PathBuf {
        let credentials = dir.join("credentials");
        std::fs::create_dir_all(&credentials).unwrap();
        std::fs::write(
            dir.join("huaweicloud.yaml"),
            self.documented_policy(&credentials),
        )
        .unwrap();
        self.write_keys(&credentials, &self.key);
        credentials
    }

    /// Writes `key` into the files the documented policy reads under `dir` (the
    /// credentials Secret's keys, as the docs create it).
    pub fn write_keys(&self, dir: &Path, key: &Key) {
        std::fs::write(dir.join("access-key-id"), &key.access_key_id).unwrap();
        std::fs::write(dir.join("secret-access-key"), &key.secret_access_key).unwrap();
    }

    /// The provider's cloud config for this double: `[Global]` region and project,
    /// `[Endpoints]` the double's, then `extra`.
    pub fn cloud_conf(&self, extra: &str) -> String {
        let mut text =
            format!("[Global]\nregion = {REGION}\nproject-id = {PROJECT}\n[Endpoints]\n");
        for (service, name) in SERVICES {
            text.push_str(&format!("{name} = {}\n", self.cloud.endpoint(service)));
        }
        text.push_str(extra);
        text
    }
}

/// The tools venv's python with Huawei's SDK (scripts/ensure-huaweicloud-sdk.sh).
pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("HUAWEICLOUD_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools-venv/bin/python")
        });
    assert!(
        path.exists(),
        "{} not found: run `source scripts/ensure-huaweicloud-sdk.sh` (scripts/test.sh does)",
        path.display()
    );
    path
}

/// Runs tests/huaweicloud/sdk_judge.py `command` with `input` as JSON on stdin and
/// returns what it prints (JSON).
pub async fn sdk_judge(command: &str, args: &[&str], input: &Value) -> Value {
    use tokio::io::AsyncWriteExt;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("huaweicloud/sdk_judge.py");
    let mut child = tokio::process::Command::new(sdk_python())
        .arg(script)
        .arg(command)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the SDK's python");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "sdk_judge.py {command}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "sdk_judge.py {command} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}
