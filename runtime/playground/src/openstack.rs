//! The playground's OpenStack: the real Keystone (from the tools venv) and the
//! OpenStack API double on 127.0.0.1, one Nova server per node, a router for pod
//! routes, a floating network for load balancers, and the OpenStack provider under
//! `deploy/openstack`'s policy (an application credential the host logs in with).

use std::path::Path;
use std::sync::Arc;

use crate::cluster::Cluster;
use keystone_peer::Keystone;
use openstack_double::OpenStackDouble;
use openstack_double::state::NewServer;

use crate::kubelets::{Instances, Kubelets};
use crate::seeding::{Options, PlaygroundError, Seeded, kubelet_node, web_service, write};

/// deploy/openstack's policy, filled in for the playground's Keystone.
const DOCUMENTED_POLICY: &str = include_str!("../../../deploy/openstack/providers/openstack.yaml");

pub(crate) async fn seed(
    cluster: &Cluster,
    options: &Options,
    providers: &Path,
) -> Result<Seeded, PlaygroundError> {
    let keystone = Arc::new(
        Keystone::start_with(keystone_peer::Settings::default())
            .await
            .map_err(PlaygroundError::Emulator)?,
    );
    let project = keystone.create_project("kubernetes").await;
    let user = keystone
        .create_user("kubernetes-ccm", "playground-password", &project)
        .await;
    let (credential, secret) = keystone
        .create_application_credential(
            "kubernetes-ccm",
            &user,
            "playground-password",
            "kubernetes",
            "wasm-ccm-playground",
        )
        .await;
    let cloud = OpenStackDouble::start(keystone.clone())
        .await
        .map_err(|e| PlaygroundError::Emulator(format!("the OpenStack double: {e}")))?;
    cloud.register(&keystone).await;
    let (subnet, floating, router) = cloud.with_state(|s| {
        let private = s.network_id("private").expect("seeded");
        let subnet = s.subnet_of(&private).expect("seeded").id.clone();
        (
            subnet,
            s.network_id("public").expect("seeded"),
            s.router_id(),
        )
    });
    for i in 1..=options.nodes {
        let name = format!("node-{i}");
        cloud.with_state(|s| s.add_server(NewServer::named(&name, &format!("10.0.0.{}", 10 + i))));
        cluster
            .create_node(kubelet_node(&name, &format!("10.244.{i}.0/24")))
            .await?;
    }
    cluster.create_service("default", web_service()).await?;
    let credentials = options.work_dir.join("credentials");
    write(&credentials.join("application-credential-secret"), &secret)?;
    write(
        &providers.join("openstack.yaml"),
        DOCUMENTED_POLICY
            .replace("https://keystone.example.com:5000", &keystone.url())
            .replace("21dced0fd20347869b93710d2b98aae0", &credential)
            .replace("/etc/wasm-ccm/credentials/", "../credentials/"),
    )?;
    let cloud_config = options.work_dir.join("cloud.conf");
    write(
        &cloud_config,
        format!(
            "[Global]\nauth-url = {}/v3\nregion = RegionOne\n\
             [LoadBalancer]\nsubnet-id = {subnet}\nfloating-network-id = {floating}\ncreate-monitor = true\n\
             [Route]\nrouter-id = {router}\n",
            keystone.url()
        ),
    )?;
    let cloud = Arc::new(cloud);
    let kubelets = Kubelets::start(
        cluster.nodes(),
        Instances::OpenStack(cloud.clone()),
        options.node_monitor_grace_period,
    );
    let python = keystone_peer::venv().join("bin/python");
    let sdk = format!(
        "{} -c \"import openstack; c = openstack.connect(auth_url='{}/v3', application_credential_id='{credential}', application_credential_secret='{secret}', auth_type='v3applicationcredential', region_name='RegionOne'); print([(s.name, s.status) for s in c.compute.servers()]); print([(l.name, l.provisioning_status) for l in c.load_balancer.load_balancers()])\"",
        python.display(),
        keystone.url()
    );
    Ok(Seeded {
        cloud_config,
        demo_node: "node-1".into(),
        demo_annotations: Vec::new(),
        flags: Vec::new(),
        about: vec![
            format!(
                "Keystone:                 {}/v3  (admin / {})",
                keystone.url(),
                keystone_peer::ADMIN_PASSWORD
            ),
            format!(
                "OpenStack double:         {}  (Nova, Neutron, Octavia; router {router})",
                cloud.url()
            ),
        ],
        try_lines: vec![sdk, kubelets.note()],
        _cloud: Box::new((keystone, cloud, kubelets)),
    })
}
