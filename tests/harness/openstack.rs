//! An OpenStack for the tests and benches: the real Keystone with a project, a user and
//! the application credential the provider's host logs in with, the OpenStack API
//! double in its catalog, and `deploy/openstack`'s policy filled in for them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keystone_peer::Keystone;
use openstack_double::state::{HealthMonitor, Listener, Member, Pool};
use openstack_double::{OpenStackDouble, Settings, State};

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
pub async fn import_occm_config(conf: &Path, out: &Path) -> (PathBuf, PathBuf) {
    let imported = import_occm(conf, out, None).await;
    (imported.providers, imported.cloud_config)
}

/// What [`import_occm`] made of occm's configuration.
#[derive(Debug, Clone)]
pub struct ImportedOccm {
    /// The providers directory (also the credentials directory): the policy, the
    /// credentials and the OpenStack provider.
    pub providers: PathBuf,
    /// The converted cloud config.
    pub cloud_config: PathBuf,
    /// The cluster name `cluster-name.yaml` gives the Deployment (`CLUSTER_NAME`, which
    /// deploy/openstack passes as `--cluster-name=$(CLUSTER_NAME)`), as kubelet expands
    /// it (`$$` is `$`).
    pub cluster_name: String,
}

/// [`import_occm_config`], given occm's flags when `occm_flags` names a file of them
/// (`--occm-deployment`, which reads occm's `--cluster-name` there), and the cluster
/// name the import wrote to `cluster-name.yaml`.
pub async fn import_occm(conf: &Path, out: &Path, occm_flags: Option<&Path>) -> ImportedOccm {
    let providers = out.join("providers");
    let mut command = tokio::process::Command::new(crate::wasm_ccm_bin());
    command
        .arg("import-occm-config")
        .arg(conf)
        .arg("--out")
        .arg(out)
        .arg("--credentials-dir")
        .arg(&providers);
    if let Some(flags) = occm_flags {
        command.arg("--occm-deployment").arg(flags);
    }
    let imported = command.output().await.unwrap();
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
    ImportedOccm {
        providers,
        cloud_config: out.join("cloud-config/cloud.conf"),
        cluster_name: imported_cluster_name(&out.join("cluster-name.yaml")),
    }
}

/// The value `cluster-name.yaml` (the Deployment patch `import-occm-config` writes)
/// gives `CLUSTER_NAME` in the wasm-ccm container, `$$` read as kubelet reads it.
fn imported_cluster_name(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let patch: serde_json::Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()));
    let containers = patch["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    containers
        .iter()
        .filter(|c| c["name"] == "wasm-ccm")
        .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
        .find(|e| e["name"] == "CLUSTER_NAME")
        .and_then(|e| e["value"].as_str().map(|v| v.replace("$$", "$")))
        .unwrap_or_else(|| panic!("{} gives no CLUSTER_NAME:\n{text}", path.display()))
}

/// What occm left in the cloud for one Service (see [`occm_left`]): the IDs of its load
/// balancer, listener, pool, health monitor and members, and its floating IP's ID and
/// address.
#[derive(Debug, Clone)]
pub struct OccmLeft {
    pub lb: String,
    pub listener: String,
    pub pool: String,
    pub monitor: String,
    pub members: Vec<String>,
    pub fip: String,
    pub address: String,
}

/// A member of the pool of [`occm_left`]: its Node's name and address, and the
/// Service's node port.
pub type OccmMember<'a> = (&'a str, &'a str, u16);

/// The load balancer occm, run with `--cluster-name=<cluster>`, made for Service
/// `default/<service>` (one TCP port, 80) with a `cloud.conf` whose `subnet-id` is the
/// `private` network's subnet, `floating-network-id` the `public` network and
/// `create-monitor = true`, as occm's `createOctaviaLoadBalancer` and
/// `ensureOctaviaLoadBalancer` leave it: named and tagged
/// `kube_service_<cluster>_default_<service>` (its description occm's), its VIP on
/// `private`, `ACTIVE`; a TCP listener on port 80 (`listener_0_<lb>`, tagged `<lb>`, the
/// connection limit, timeouts and source range `0.0.0.0/0` occm sends by default); its
/// pool (`pool_0_<lb>`, TCP, `ROUND_ROBIN`) with `members` (named for their Node, on the
/// VIP's subnet, as occm's batch member update makes them); its TCP health monitor
/// (`monitor_0_<lb>`, occm's default settings); and a floating IP from `public` on the
/// VIP, with occm's description.
pub fn occm_left(
    s: &mut State,
    cluster: &str,
    service: &str,
    members: &[OccmMember<'_>],
) -> OccmLeft {
    let name = format!("kube_service_{cluster}_default_{service}");
    let lb = s.add_load_balancer(&name);
    let subnet = {
        let made = s
            .load_balancers
            .get_mut(&lb)
            .expect("the load balancer just made");
        made.description =
            format!("Kubernetes external service default/{service} from cluster {cluster}");
        made.vip_subnet_id.clone()
    };
    let (listener, pool, monitor) = (s.id(), s.id(), s.id());
    // What occm's buildListenerCreateOpt sends with no annotation.
    let settings: BTreeMap<String, i64> = [
        ("connection_limit", -1),
        ("timeout_client_data", 50000),
        ("timeout_member_connect", 5000),
        ("timeout_member_data", 50000),
        ("timeout_tcp_inspect", 0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    s.listeners.insert(
        listener.clone(),
        Listener {
            id: listener.clone(),
            name: format!("listener_0_{name}"),
            loadbalancer_id: lb.clone(),
            protocol: "TCP".into(),
            protocol_port: 80,
            default_pool_id: Some(pool.clone()),
            // occm's default source range (amphora has Octavia's VIP ACL).
            allowed_cidrs: vec!["0.0.0.0/0".to_owned()],
            tags: vec![name.clone()],
            insert_headers: Default::default(),
            default_tls_container_ref: None,
            settings,
        },
    );
    s.pools.insert(
        pool.clone(),
        Pool {
            id: pool.clone(),
            name: format!("pool_0_{name}"),
            loadbalancer_id: lb.clone(),
            listener_id: Some(listener.clone()),
            protocol: "TCP".into(),
            lb_algorithm: "ROUND_ROBIN".into(),
            healthmonitor_id: Some(monitor.clone()),
            session_persistence: None,
        },
    );
    let mut made = Vec::new();
    for &(node, address, node_port) in members {
        let id = s.id();
        s.members.insert(
            id.clone(),
            Member {
                id: id.clone(),
                pool_id: pool.clone(),
                name: node.to_owned(),
                address: address.to_owned(),
                protocol_port: node_port,
                subnet_id: Some(subnet.clone()),
                monitor_port: None,
            },
        );
        made.push(id);
    }
    s.monitors.insert(
        monitor.clone(),
        HealthMonitor {
            id: monitor.clone(),
            name: format!("monitor_0_{name}"),
            pool_id: pool.clone(),
            kind: "TCP".into(),
            delay: 5,
            timeout: 3,
            max_retries: 1,
            max_retries_down: 3,
            url_path: None,
            http_method: None,
            expected_codes: None,
        },
    );
    let port = s.load_balancers[&lb].vip_port_id.clone();
    let fip = s.add_floating_ip(
        &port,
        &format!(
            "Floating IP for Kubernetes external service default/{service} from cluster {cluster}"
        ),
    );
    OccmLeft {
        lb,
        listener,
        pool,
        monitor,
        members: made,
        fip: fip.id,
        address: fip.floating_ip_address,
    }
}
