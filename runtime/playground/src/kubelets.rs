//! Simulated kubelets for the simulated cloud and for moto: each Node's kubelet posts
//! `Ready=True` while its instance runs; when the instance is stopped or deleted, the
//! kubelet stops posting and, after the grace period, the Node turns `Ready=Unknown` as
//! the node lifecycle controller marks it in a real cluster (`NodeStatusUnknown`). A
//! started instance makes its Node Ready again. Only transitions are written.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sim_cloud::SimCloud;
use sim_cloud::model::InstanceState;

use crate::cluster::Nodes;

/// How often the kubelets look at their instances.
const TICK: Duration = Duration::from_millis(500);

/// Where the kubelets learn whether their Node's instance runs.
pub enum Instances {
    /// The simulated cloud: the instance named as the Node.
    Sim(Arc<SimCloud>),
    /// moto: the EC2 instance whose private DNS name is the Node's name.
    Moto(Arc<moto_peer::Moto>),
    /// The OpenStack double: the `ACTIVE` Nova server named as the Node.
    OpenStack(Arc<openstack_double::OpenStackDouble>),
    /// The Huawei Cloud double: the `ACTIVE` ECS server named as the Node.
    HuaweiCloud(Arc<huaweicloud_double::HuaweiCloudDouble>),
}

impl Instances {
    /// The names of the Nodes whose instance runs; `None` when the cloud cannot say.
    async fn running(&self) -> Option<HashSet<String>> {
        match self {
            Instances::Sim(cloud) => Some(cloud.with_state(|s| {
                s.list_instances(None)
                    .into_iter()
                    .filter(|i| i.state == InstanceState::Running)
                    .map(|i| i.name)
                    .collect()
            })),
            Instances::Moto(moto) => moto.running_instances().await,
            Instances::OpenStack(cloud) => Some(cloud.with_state(|s| {
                s.servers
                    .values()
                    .filter(|server| server.status == "ACTIVE")
                    .map(|server| server.name.clone())
                    .collect()
            })),
            Instances::HuaweiCloud(cloud) => Some(cloud.with_state(|s| {
                s.servers()
                    .into_iter()
                    .filter(|server| server.status == "ACTIVE")
                    .map(|server| server.name)
                    .collect()
            })),
        }
    }
}

/// The kubelets of a playground, running until dropped.
pub struct Kubelets {
    task: tokio::task::JoinHandle<()>,
    grace: Duration,
}

impl Kubelets {
    /// Starts the kubelets of every Node in `nodes`, following `instances`.
    pub fn start(nodes: Nodes, instances: Instances, grace: Duration) -> Self {
        Self {
            task: tokio::spawn(run(nodes, instances, grace)),
            grace,
        }
    }

    /// What the playground prints about them.
    pub fn note(&self) -> String {
        format!(
            "(each node's simulated kubelet stops when its instance stops: NotReady after {:?})",
            self.grace
        )
    }
}

impl Drop for Kubelets {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs the kubelets of every Node in `nodes`: one look at the cloud per tick.
async fn run(nodes: Nodes, instances: Instances, grace: Duration) {
    // When each Node's instance was last seen running.
    let mut last_running: HashMap<String, Instant> = HashMap::new();
    loop {
        let Some(running_now) = instances.running().await else {
            tokio::time::sleep(TICK).await;
            continue;
        };
        let Some(items) = nodes.list().await else {
            tokio::time::sleep(TICK).await;
            continue;
        };
        for node in items {
            let name = node["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let running = running_now.contains(&name);
            let now = Instant::now();
            let seen = *last_running.entry(name.clone()).or_insert(now);
            let ready = ready_status(&node);
            let want = if running {
                last_running.insert(name.clone(), now);
                "True"
            } else if now.duration_since(seen) >= grace {
                "Unknown"
            } else {
                continue;
            };
            if ready.as_deref() == Some(want) {
                continue;
            }
            let (reason, message) = if want == "True" {
                ("KubeletReady", "kubelet is posting ready status")
            } else {
                ("NodeStatusUnknown", "Kubelet stopped posting node status.")
            };
            let stamp = kube_double::time::now_rfc3339();
            let patch = json!({"status": {"conditions": [{
                "type": "Ready", "status": want, "reason": reason, "message": message,
                "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
            }]}});
            if let Err(err) = nodes.patch_status(&name, &patch).await {
                tracing::warn!(node = %name, error = ?err, "simulated kubelet could not post status");
            }
        }
        tokio::time::sleep(TICK).await;
    }
}

fn ready_status(node: &Value) -> Option<String> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}
