//! The playground's K3s: no cloud but the cluster. Each Node is annotated as the K3s
//! agent annotates its own (`k3s.io/internal-ip`, `k3s.io/hostname`), and the K3s
//! provider runs under `deploy/k3s`'s policy (no host) and cloud config, with the flags
//! deploy/k3s gives the controller manager.

use std::path::Path;

use crate::cluster::Cluster;
use crate::seeding::{Options, PlaygroundError, Seeded, kubelet_node, web_service, write};

/// deploy/k3s's policy and cloud config.
const DOCUMENTED_POLICY: &str = include_str!("../../../deploy/k3s/providers/k3s.yaml");
const DOCUMENTED_CLOUD_CONFIG: &str = include_str!("../../../deploy/k3s/cloud-config/cloud.conf");

/// The K3s agent's annotations of node `i`.
fn agent_annotations(i: usize, name: &str) -> Vec<(String, String)> {
    vec![
        ("k3s.io/internal-ip".into(), format!("10.0.0.{}", 10 + i)),
        ("k3s.io/hostname".into(), name.into()),
    ]
}

pub(crate) async fn seed(
    cluster: &Cluster,
    options: &Options,
    providers: &Path,
) -> Result<Seeded, PlaygroundError> {
    for i in 1..=options.nodes {
        let name = format!("node-{i}");
        let mut node = kubelet_node(&name, &format!("10.244.{i}.0/24"));
        node["metadata"]["annotations"] = agent_annotations(i, &name)
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        cluster.create_node(node).await?;
    }
    cluster.create_service("default", web_service()).await?;
    write(&providers.join("k3s.yaml"), DOCUMENTED_POLICY)?;
    let cloud_config = options.work_dir.join("cloud.conf");
    write(&cloud_config, DOCUMENTED_CLOUD_CONFIG)?;
    Ok(Seeded {
        cloud_config,
        demo_node: "node-1".into(),
        demo_annotations: agent_annotations(1, "node-1"),
        about: vec![
            "cloud:                    none: the Nodes, annotated as the K3s agent annotates them (k3s.io/internal-ip)".into(),
            "load balancers:           addresses from deploy/k3s's pool (range-global 192.0.2.10-192.0.2.20), recorded in kube-vip.io/loadbalancerIPs".into(),
        ],
        try_lines: Vec::new(),
        flags: vec![
            "--allow-untagged-cloud".into(),
            "--configure-cloud-routes=false".into(),
        ],
        _cloud: Box::new(()),
    })
}
