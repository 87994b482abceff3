//! An AWS for the tests and the chaos run: moto with the provider's world (VPC,
//! subnets, route table, IAM users allowed exactly the provider's IAM policy), the API
//! server double and a provider directory holding the AWS provider.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Node;
use serde_json::json;

use crate::moto::{Keys, LaunchedInstance, Moto, World};
use crate::{TempDir, controller_manager_command, guest};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// How the provider gets its keys.
pub enum Auth<'a> {
    Static(&'a Keys),
    WebIdentity { role_arn: &'a str, token: &'a str },
}

/// moto, its world, the API server double and a provider directory for `aws`.
pub struct AwsStack {
    pub moto: Moto,
    pub world: World,
    pub api: kube_double::ApiServer,
    pub dir: TempDir,
    pub kubeconfig: PathBuf,
    pub cloud_config: PathBuf,
}

impl AwsStack {
    /// moto with the world for cluster `cluster`, the API server double and a provider
    /// directory holding the AWS provider and its cloud config.
    pub async fn start(cluster: &str) -> Self {
        let mut moto = Moto::start().await;
        let world = World::create(&mut moto, cluster).await;
        let api = kube_double::ApiServer::start(kube_double::Settings::default())
            .await
            .expect("API server double");
        let dir = TempDir::new("aws");
        std::fs::copy(guest("aws_provider"), dir.path().join("aws.wasm")).unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();
        let cloud_config = dir.path().join("cloud.conf");
        std::fs::write(&cloud_config, world.cloud_config(&moto)).unwrap();
        Self {
            moto,
            world,
            api,
            dir,
            kubeconfig,
            cloud_config,
        }
    }

    /// Adds `lines` to the cloud config's `[Global]` section (before the provider
    /// starts).
    pub fn add_global(&self, lines: &str) {
        let config = std::fs::read_to_string(&self.cloud_config)
            .unwrap()
            .replacen("[Global]\n", &format!("[Global]\n{lines}"), 1);
        std::fs::write(&self.cloud_config, config).unwrap();
    }

    /// Writes the provider policy (and the Secret files) for `auth`.
    pub fn policy(&self, auth: Auth<'_>) {
        let (role_arn, token) = match auth {
            Auth::Static(keys) => return install_static_policy(self.dir.path(), &self.moto, keys),
            Auth::WebIdentity { role_arn, token } => (role_arn, token),
        };
        let secrets = self.dir.path().join("aws");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::write(secrets.join("token"), token).unwrap();
        let keys = format!(
            "webIdentity: {{roleArn: '{role_arn}', webIdentityTokenFile: aws/token, \
             stsEndpoint: 'http://127.0.0.1:{}'}}",
            self.moto.port
        );
        let policy = World::policy(&self.moto, &keys);
        std::fs::write(self.dir.path().join("aws.yaml"), policy).unwrap();
    }

    /// `wasm-ccm` for the AWS provider with fast periods and `extra` flags.
    pub fn controller_manager(&self, port: u16, extra: &[&str]) -> tokio::process::Command {
        controller_manager_command(
            "aws",
            self.dir.path(),
            &self.cloud_config,
            &self.kubeconfig,
            port,
            extra,
        )
    }

    /// Starts `wasm-ccm` and collects its log.
    pub fn controller_manager_logged(
        &self,
        port: u16,
    ) -> (
        tokio::process::Child,
        std::sync::Arc<std::sync::Mutex<String>>,
    ) {
        crate::spawn_logged(self.controller_manager(port, &["--leader-elect=false"]))
    }

    /// A kube client for the double.
    pub fn client(&self) -> kube::Client {
        {
            wasm_ccm_host::tls::install_crypto_provider();
            kube::Client::try_from(kube::Config::new(self.api.url().parse().unwrap())).unwrap()
        }
    }
}

/// In a providers directory (also the credentials directory): the policy for `moto`
/// signing with `keys`, read from `aws/access-key-id` and `aws/secret-access-key` as the
/// credentials Secret holds them.
pub fn install_static_policy(dir: &std::path::Path, moto: &Moto, keys: &Keys) {
    let secrets = dir.join("aws");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("access-key-id"), &keys.id).unwrap();
    std::fs::write(secrets.join("secret-access-key"), &keys.secret).unwrap();
    let policy = World::policy(
        moto,
        "accessKeyIdFile: aws/access-key-id, secretAccessKeyFile: aws/secret-access-key",
    );
    std::fs::write(dir.join("aws.yaml"), policy).unwrap();
}

/// A Node as kubelet registers it on AWS: named by its private DNS name.
pub fn kubelet_node(instance: &LaunchedInstance, pod_cidr: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": instance.private_dns_name, "labels": {"kubernetes.io/hostname": instance.private_dns_name}},
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": instance.private_dns_name}]
        }
    }))
    .unwrap()
}
