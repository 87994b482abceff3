//! Starting the playground: the servers, the seeded cluster and cloud, the provider
//! directory, and the controller manager in-process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_double::store::{Change, EventType};
use kube_double::{ApiServer, Settings, resources};
use serde_json::{Value, json};
use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;

use wasm_ccm::controllers::TAINT_UNINITIALIZED;
use wasm_ccm_host::contract::types::Node;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::ProviderLoader;

/// Playground options (the CLI flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Nodes (and cloud instances) to seed.
    pub nodes: usize,
    /// Where the kubeconfig for kubectl is written.
    pub kubeconfig_out: PathBuf,
    /// Start only the API server double and the simulated cloud.
    pub without_ccm: bool,
    /// Address of the API server double.
    pub api_listen: String,
    /// Address of the simulated cloud.
    pub cloud_listen: String,
    /// The reference provider component to load and demonstrate.
    pub provider: PathBuf,
    /// Where the provider directory (component, policy, token, cloud config) is written.
    pub work_dir: PathBuf,
}

/// Errors starting the playground.
#[derive(Debug, thiserror::Error)]
pub enum PlaygroundError {
    /// A server could not bind its address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Seeding the API server failed.
    #[error("seeding the cluster: {0}")]
    Seed(#[source] kube_double::ApiError),
}

/// A Node as kubelet registers it with `--cloud-provider=external`, with the pod CIDR
/// the node IPAM controller would assign.
pub fn kubelet_node(name: &str, pod_cidr: &str) -> Value {
    let now = kube_double::time::now_rfc3339();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {
            "taints": [{"key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
        },
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    })
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), PlaygroundError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| PlaygroundError::Write {
            path: dir.to_owned(),
            source,
        })?;
    }
    std::fs::write(path, contents).map_err(|source| PlaygroundError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Runs until Ctrl-C.
pub async fn run(options: Options) -> Result<(), PlaygroundError> {
    let api = ApiServer::start(Settings {
        listen: options.api_listen.clone(),
        ..Settings::default()
    })
    .await
    .map_err(|source| PlaygroundError::Listen {
        addr: options.api_listen.clone(),
        source,
    })?;
    api.write_kubeconfig(&options.kubeconfig_out)
        .map_err(|source| PlaygroundError::Write {
            path: options.kubeconfig_out.clone(),
            source,
        })?;
    let token = format!("playground-{:x}", std::process::id() as u64 * 0x9E37_79B9);
    let cloud = SimCloud::start(&options.cloud_listen, &token)
        .await
        .map_err(|source| PlaygroundError::Listen {
            addr: options.cloud_listen.clone(),
            source,
        })?;

    // The cluster: N kubelet-registered nodes and a LoadBalancer Service.
    let nodes = resources::find("", "v1", "nodes").expect("nodes");
    let services = resources::find("", "v1", "services").expect("services");
    for i in 1..=options.nodes {
        let name = format!("node-{i}");
        cloud.with_state(|s| {
            s.create_instance(NewInstance {
                zone: Some(if i % 2 == 0 { "zone-b" } else { "zone-a" }.into()),
                labels: [(
                    "example.com/rack".to_string(),
                    format!("r{}", i.div_ceil(2)),
                )]
                .into_iter()
                .collect(),
                ..NewInstance::named(&name)
            })
        });
        api.store()
            .create(nodes, "", kubelet_node(&name, &format!("10.244.{i}.0/24")))
            .map_err(PlaygroundError::Seed)?;
    }
    api.store()
        .create(
            services,
            "default",
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                         "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
            }),
        )
        .map_err(PlaygroundError::Seed)?;

    // The provider directory the controller manager reads.
    let providers = options.work_dir.join("providers");
    let policy = format!(
        "allowedOutboundHosts:\n  - {url}\ncredentials:\n  - destination: {url}\n    bearerTokenFile: ../credentials/token\n",
        url = cloud.url()
    );
    write(&providers.join("simcloud.yaml"), &policy)?;
    write(&options.work_dir.join("credentials/token"), &token)?;
    let cloud_config = options.work_dir.join("cloud-config.json");
    write(
        &cloud_config,
        format!(r#"{{"endpoint": "{}"}}"#, cloud.url()),
    )?;

    println!("wasm-ccm playground");
    println!("  Kubernetes API (double):  {}", api.url());
    println!(
        "  kubeconfig:               {}",
        options.kubeconfig_out.display()
    );
    println!(
        "  simulated cloud:          {}  (admin API: {}/admin/...)",
        cloud.url(),
        cloud.url()
    );
    println!(
        "  cluster:                  {} nodes tainted {TAINT_UNINITIALIZED}, Service default/web (LoadBalancer)",
        options.nodes
    );
    println!();
    println!(
        "  try: kubectl --kubeconfig {} get nodes,services -o wide",
        options.kubeconfig_out.display()
    );
    println!(
        "       curl -X PATCH {}/admin/instances/i-00000001 -H 'content-type: application/json' -d '{{\"state\": \"stopped\"}}'",
        cloud.url()
    );
    println!(
        "       curl -X DELETE {}/admin/instances/i-00000002",
        cloud.url()
    );
    println!();

    if std::fs::metadata(&options.provider).is_ok() {
        let installed = providers.join("simcloud.wasm");
        std::fs::copy(&options.provider, &installed).map_err(|source| PlaygroundError::Write {
            path: installed.clone(),
            source,
        })?;
        demonstrate_provider(&installed, &cloud_config).await;
    } else {
        println!(
            "provider: {} not found; build it with scripts/build-guests.sh (or pass --provider)",
            options.provider.display()
        );
    }
    let installed = providers.join("simcloud.wasm");
    if options.without_ccm {
        println!(
            "controllers: not started (--without-ccm); run a controller manager against the kubeconfig above:"
        );
        println!(
            "  wasm-ccm --cloud-provider simcloud --providers-dir {} --credentials-dir {} --cloud-config {} --kubeconfig {} --leader-elect=false --cluster-cidr=10.244.0.0/16",
            providers.display(),
            options.work_dir.join("credentials").display(),
            cloud_config.display(),
            options.kubeconfig_out.display()
        );
    } else if installed.exists() {
        println!(
            "controllers: cloud-node, cloud-node-lifecycle, service and route running with the reference provider"
        );
        tokio::spawn(run_controllers(
            providers.clone(),
            options.work_dir.join("credentials"),
            cloud_config.clone(),
            options.kubeconfig_out.clone(),
        ));
    } else {
        println!("controllers: not started (no provider component to run)");
    }
    println!("provider directory: {}", providers.display());
    println!("watching the cluster; Ctrl-C to stop\n");

    let (_, mut changes) = api
        .store()
        .watch_from(api.store().resource_version())
        .expect("watching from now");
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            change = changes.recv() => match change {
                Ok(change) => println!("{}", describe(&change)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => println!("({n} changes not shown)"),
                Err(_) => break,
            },
        }
    }
    println!("stopped");
    Ok(())
}

/// The controller manager in-process, against the playground's cluster and cloud.
async fn run_controllers(
    providers_dir: PathBuf,
    credentials_dir: PathBuf,
    cloud_config: PathBuf,
    kubeconfig: PathBuf,
) {
    // The same flags as the command line (so defaults never drift), for this cluster.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        daemon: wasm_ccm::daemon::DaemonArgs,
    }
    let argv: Vec<std::ffi::OsString> = vec![
        "wasm-ccm".into(),
        "--cloud-provider=simcloud".into(),
        "--providers-dir".into(),
        providers_dir.into(),
        "--cloud-config".into(),
        cloud_config.into(),
        "--kubeconfig".into(),
        kubeconfig.into(),
        "--credentials-dir".into(),
        credentials_dir.into(),
        "--leader-elect=false".into(),
        "--cluster-cidr=10.244.0.0/16".into(),
        "--concurrent-node-syncs=4".into(),
        "--concurrent-service-syncs=2".into(),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
    ];
    let args = match <Flags as clap::Parser>::try_parse_from(argv) {
        Ok(flags) => flags.daemon,
        Err(err) => {
            println!("controllers not started: {err}");
            return;
        }
    };
    if let Err(err) = wasm_ccm::daemon::run(args).await {
        println!("controllers stopped: {err}");
    }
}

/// Loads the reference provider against the simulated cloud and shows its answers.
async fn demonstrate_provider(wasm: &Path, cloud_config: &Path) {
    let config = std::fs::read(cloud_config).unwrap_or_default();
    let loader = match ProviderLoader::new(&EngineSettings {
        max_instances: 8,
        ..EngineSettings::default()
    }) {
        Ok(loader) => loader,
        Err(err) => {
            println!("provider: cannot create the engine: {err}");
            return;
        }
    };
    match loader.load(wasm, config).await {
        Ok(provider) => {
            println!(
                "provider: {} loaded from {} (exports: {})",
                provider.name(),
                wasm.display(),
                provider.exports().names().join(", ")
            );
            if let Some(v2) = provider.instances_v2() {
                let node = Node::named("node-1");
                match tokio::time::timeout(Duration::from_secs(10), v2.instance_metadata(&node))
                    .await
                {
                    Ok(Ok(meta)) => println!(
                        "provider: instance-metadata(node-1) -> {} type={} zone={} region={} labels={:?}",
                        meta.provider_id,
                        meta.instance_type,
                        meta.zone,
                        meta.region,
                        meta.additional_labels
                    ),
                    Ok(Err(err)) => println!("provider: instance-metadata(node-1) failed: {err}"),
                    Err(_) => println!("provider: instance-metadata(node-1) timed out"),
                }
            }
        }
        Err(err) => println!("provider: cannot load: {err}"),
    }
}

/// One line per change: what, which object, and which parts changed.
pub fn describe(change: &Change) -> String {
    let obj = &change.object;
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let id = if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    };
    let verb = match change.kind {
        EventType::Added => "created",
        EventType::Modified => "changed",
        EventType::Deleted => "deleted",
    };
    if kind == "Event" {
        let reason = obj.get("reason").and_then(Value::as_str).unwrap_or("");
        let message = obj.get("message").and_then(Value::as_str).unwrap_or("");
        let about = obj
            .pointer("/involvedObject/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        return format!("event    {about}: {reason}: {message}");
    }
    let mut details = Vec::new();
    if let Some(old) = &change.old {
        for (label, pointer) in [
            ("providerID", "/spec/providerID"),
            ("labels", "/metadata/labels"),
            ("taints", "/spec/taints"),
            ("addresses", "/status/addresses"),
            ("conditions", "/status/conditions"),
            ("podCIDRs", "/spec/podCIDRs"),
            ("finalizers", "/metadata/finalizers"),
            ("loadBalancer", "/status/loadBalancer"),
            ("deletionTimestamp", "/metadata/deletionTimestamp"),
        ] {
            let (before, after) = (old.pointer(pointer), obj.pointer(pointer));
            if before == after {
                continue;
            }
            let shown = match (before, after) {
                // Maps (labels): only what changed.
                (_, Some(Value::Object(a))) if label == "labels" => {
                    let empty = serde_json::Map::new();
                    let b = match before {
                        Some(Value::Object(b)) => b,
                        _ => &empty,
                    };
                    let mut parts: Vec<String> = a
                        .iter()
                        .filter(|(k, v)| b.get(*k) != Some(v))
                        .map(|(k, v)| format!("+{k}={}", v.as_str().unwrap_or("")))
                        .collect();
                    parts.extend(
                        b.keys()
                            .filter(|k| !a.contains_key(*k))
                            .map(|k| format!("-{k}")),
                    );
                    parts.join(",")
                }
                (_, Some(after)) => after.to_string(),
                (_, None) => "(removed)".into(),
            };
            let shown: String = shown.chars().take(400).collect();
            details.push(format!("{label}={shown}"));
        }
    }
    format!("{:<8} {kind} {id} {}", verb, details.join(" "))
}
