//! An OpenStack for the tests and benches: the real Keystone with a project, a user and
//! the application credential the provider's host logs in with, the OpenStack API
//! double in its catalog, and `deploy/openstack`'s policy filled in for them.

use std::path::Path;
use std::sync::Arc;

use keystone_peer::Keystone;
use openstack_double::{OpenStackDouble, Settings};

/// The user the provider's application credential belongs to.
pub const USER: &str = "kubernetes-ccm";
/// That user's password (a password login uses it).
pub const PASSWORD: &str = "ccm-password";
/// The project.
pub const PROJECT: &str = "kubernetes";

/// Keystone, the double registered in its catalog, and an application credential.
pub struct OpenStackWorld {
    pub keystone: Arc<Keystone>,
    pub cloud: OpenStackDouble,
    /// The application credential's ID and secret.
    pub credential: String,
    pub secret: String,
}

impl OpenStackWorld {
    /// Everything up; the double behaves as `settings` say.
    pub async fn start(settings: Settings) -> Self {
        let keystone = Arc::new(Keystone::start().await);
        let project = keystone.create_project(PROJECT).await;
        let user = keystone.create_user(USER, PASSWORD, &project).await;
        let (credential, secret) = keystone
            .create_application_credential(USER, &user, PASSWORD, PROJECT, "wasm-ccm")
            .await;
        let cloud = OpenStackDouble::start_with(keystone.clone(), settings)
            .await
            .expect("the OpenStack double");
        cloud.register(&keystone).await;
        Self {
            keystone,
            cloud,
            credential,
            secret,
        }
    }

    /// Writes `deploy/openstack/providers/openstack.yaml` for this Keystone and
    /// credential as `dir/openstack.yaml`, and the secret where it names it (under
    /// `dir`, the credentials directory).
    pub fn install_documented_policy(&self, dir: &Path) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text = std::fs::read_to_string(root.join("deploy/openstack/providers/openstack.yaml"))
            .expect("deploy/openstack's policy");
        let policy = text
            .replace("https://keystone.example.com:5000", &self.keystone.url())
            .replace("21dced0fd20347869b93710d2b98aae0", &self.credential)
            .replace("/etc/wasm-ccm/credentials/", &format!("{}/", dir.display()));
        assert_ne!(policy, text, "the documented policy's placeholders changed");
        std::fs::write(dir.join("openstack.yaml"), policy).unwrap();
        std::fs::create_dir_all(dir.join("openstack")).unwrap();
        std::fs::write(dir.join("application-credential-secret"), &self.secret).unwrap();
    }
}

impl OpenStackWorld {
    /// occm's `cloud.conf` for this world: the application credential in `[Global]` as
    /// occm reads it, the double's private subnet for VIPs, its public network for
    /// floating IPs, health monitors, its router for routes, and `load_balancer` lines
    /// added to `[LoadBalancer]`.
    pub fn occm_cloud_conf(&self, load_balancer: &str) -> String {
        let (subnet, floating, router) = self.cloud.with_state(|s| {
            let private = s.network_id("private").expect("the private network");
            let subnet = s.subnet_of(&private).expect("its subnet").id.clone();
            let public = s.network_id("public").expect("the public network");
            (subnet, public, s.router_id())
        });
        format!(
            "[Global]\nauth-url = {}/v3\nregion = RegionOne\n\
             application-credential-id = {}\napplication-credential-secret = {}\n\
             [LoadBalancer]\nsubnet-id = {subnet}\nfloating-network-id = {floating}\n\
             create-monitor = true\n{load_balancer}\
             [Route]\nrouter-id = {router}\n",
            self.keystone.url(),
            self.credential,
            self.secret
        )
    }
}

/// `wasm-ccm import-occm-config <conf> --out <out>` as the README gives it, then the
/// credentials put where the Secret would hold them and the OpenStack provider beside
/// its policy: the providers directory (also the credentials directory) and the
/// converted cloud config.
pub async fn import_occm_config(
    conf: &Path,
    out: &Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let providers = out.join("providers");
    let imported = tokio::process::Command::new(crate::wasm_ccm_bin())
        .arg("import-occm-config")
        .arg(conf)
        .arg("--out")
        .arg(out)
        .arg("--credentials-dir")
        .arg(&providers)
        .output()
        .await
        .unwrap();
    assert!(
        imported.status.success(),
        "import-occm-config: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
    for file in std::fs::read_dir(out.join("credentials")).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(&file, providers.join(file.file_name().unwrap())).unwrap();
    }
    std::fs::copy(
        crate::guest("openstack_provider"),
        providers.join("openstack.wasm"),
    )
    .unwrap();
    (providers, out.join("cloud-config/cloud.conf"))
}
