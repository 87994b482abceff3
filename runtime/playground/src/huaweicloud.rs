//! The playground's Huawei Cloud: tests/huaweicloud-double on 127.0.0.1 (ECS, shared
//! ELB, VPC and EIPs, each request's signature verified), one ECS server per node, and
//! the Huawei Cloud provider under `deploy/huaweicloud`'s policy (an access key the
//! host signs with), made for the double's endpoints.

use std::path::Path;
use std::sync::Arc;

use huaweicloud_double::state::NewServer;
use huaweicloud_double::{HuaweiCloudDouble, Key, Service, Settings};

use crate::cluster::Cluster;
use crate::kubelets::{Instances, Kubelets};
use crate::seeding::{Options, PlaygroundError, Seeded, kubelet_node, web_service, write};

/// deploy/huaweicloud's policy, made for the double.
const DOCUMENTED_POLICY: &str =
    include_str!("../../../deploy/huaweicloud/providers/huaweicloud.yaml");
/// Its placeholders.
const DOCUMENTED_PROJECT: &str = "0f5b3e2c8a4d4b7f9e1c2d3a4b5c6d7e";
const DOCUMENTED_CREDENTIALS: &str = "/etc/wasm-ccm/credentials/";
const PROJECT: &str = "5d3e9a8b7c6f4e2d1a0b9c8d7e6f5a4b";
const REGION: &str = "ap-southeast-1";

pub(crate) async fn seed(
    cluster: &Cluster,
    options: &Options,
    providers: &Path,
) -> Result<Seeded, PlaygroundError> {
    let key = Key::new("HPUAKPLAYGROUND00001", "playground-secret-access-key");
    let mut settings = Settings::new(PROJECT, REGION);
    settings.keys.push(key.clone());
    let cloud = HuaweiCloudDouble::start(settings)
        .await
        .map_err(|e| PlaygroundError::Emulator(format!("the Huawei Cloud double: {e}")))?;
    let subnet = cloud.with_state(|s| s.default_subnet().id.clone());
    for i in 1..=options.nodes {
        let name = format!("node-{i}");
        cloud.with_state(|s| {
            s.add_server(NewServer::named(&name, &format!("192.168.0.{}", 10 + i)))
        });
        cluster
            .create_node(kubelet_node(&name, &format!("10.244.{i}.0/24")))
            .await?;
    }
    let mut web = web_service();
    // The node port the ELB's members listen on (the API server double allocates none).
    web["spec"]["ports"][0]["nodePort"] = serde_json::json!(30080);
    web["metadata"]["annotations"] = serde_json::json!({
        "kubernetes.io/elb.class": "shared",
        "kubernetes.io/elb.eip-auto-create-option":
            r#"{"ip_type": "5_bgp", "bandwidth_size": 5, "share_type": "PER"}"#,
    });
    cluster.create_service("default", web).await?;

    let credentials = options.work_dir.join("credentials");
    write(&credentials.join("access-key-id"), &key.access_key_id)?;
    write(
        &credentials.join("secret-access-key"),
        &key.secret_access_key,
    )?;
    let documented: serde_json::Value = serde_saphyr::from_str(
        &DOCUMENTED_POLICY
            .replace(DOCUMENTED_PROJECT, PROJECT)
            .replace(DOCUMENTED_CREDENTIALS, "../credentials/"),
    )
    .map_err(|e| PlaygroundError::Emulator(format!("deploy/huaweicloud's policy: {e}")))?;
    write(
        &providers.join("huaweicloud.yaml"),
        // JSON is YAML.
        serde_json::to_string_pretty(&cloud.policy_for(&documented)).unwrap_or_default(),
    )?;
    let (ecs, elb, vpc) = (
        cloud.endpoint(Service::Ecs),
        cloud.endpoint(Service::Elb),
        cloud.endpoint(Service::Vpc),
    );
    let cloud_config = options.work_dir.join("cloud.conf");
    write(
        &cloud_config,
        format!(
            "[Global]\nregion = {REGION}\nproject-id = {PROJECT}\n[Vpc]\nsubnet-id = {subnet}\n\
             [Endpoints]\necs = {ecs}\nelb = {elb}\nvpc = {vpc}\n"
        ),
    )?;
    let cloud = Arc::new(cloud);
    let kubelets = Kubelets::start(
        cluster.nodes(),
        Instances::HuaweiCloud(cloud.clone()),
        options.node_monitor_grace_period,
    );
    // Huawei's own Python SDK (scripts/ensure-huaweicloud-sdk.sh), with the key.
    let python = std::env::var_os("HUAWEICLOUD_SDK_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::current_dir()
                .unwrap_or_default()
                .join("target/tools-venv/bin/python")
        });
    let python = python.display();
    let sdk = format!(
        "{python} -c \"from huaweicloudsdkcore.auth.credentials import BasicCredentials as B; \
         from huaweicloudsdkecs.v2 import EcsClient, ListServersDetailsRequest as S; \
         from huaweicloudsdkelb.v2 import ElbClient, ListLoadbalancersRequest as L; \
         c = B('{}', '{}', '{PROJECT}'); \
         e = EcsClient.new_builder().with_credentials(c).with_endpoints(['{ecs}']).build(); \
         l = ElbClient.new_builder().with_credentials(c).with_endpoints(['{elb}']).build(); \
         print([(s.name, s.status) for s in e.list_servers_details(S()).servers]); \
         print([(b.name, b.provisioning_status) for b in l.list_loadbalancers(L()).loadbalancers])\"",
        key.access_key_id, key.secret_access_key,
    );
    Ok(Seeded {
        cloud_config,
        demo_node: "node-1".into(),
        demo_annotations: Vec::new(),
        flags: Vec::new(),
        about: vec![format!(
            "Huawei Cloud double:      ECS {ecs}, ELB {elb}, VPC {vpc}  (project {PROJECT})"
        )],
        try_lines: vec![sdk, kubelets.note()],
        _cloud: Box::new((cloud, kubelets)),
    })
}
