//! Starting the playground: the servers, the seeded cluster and cloud, the provider
//! directory, and the controller manager in-process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_double::store::EventType;
use serde_json::Value;
use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;

use wasm_ccm::controllers::TAINT_UNINITIALIZED;
use wasm_ccm_host::contract::types::Node;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::provider::{CredentialFiles, ProviderLoader, ToolLoader};

use crate::cluster::{Change, Cluster, Followed};
use crate::kubelets::{Instances, Kubelets};
pub use crate::seeding::{Cloud, Options, PlaygroundError};
use crate::seeding::{Seeded, kubelet_node, web_service, write};

/// Runs until Ctrl-C or SIGTERM.
pub async fn run(options: Options) -> Result<(), PlaygroundError> {
    let cluster = Cluster::start(options.apiserver, &options.api_listen, &options.work_dir).await?;
    cluster.write_kubeconfig(&options.kubeconfig_out)?;
    let providers = options.work_dir.join("providers");
    let pulled = match crate::oci::reference(&options) {
        Some(reference) => Some(crate::oci::pull(reference, &options).await?),
        None => None,
    };
    let component = pulled
        .as_ref()
        .map(|p| p.file.clone())
        .or_else(|| options.provider.clone())
        .or_else(|| options.cloud.default_provider())
        .ok_or_else(|| {
            PlaygroundError::Usage(
                "--cloud none runs the provider given with --provider (and --policy, --cloud-config)"
                    .into(),
            )
        })?;
    let name = match options.cloud.provider_name() {
        Some(name) => name.to_owned(),
        None => provider_name(&component).await?,
    };
    let credentials = credentials_dir(&options, &component, &providers)?;
    let seeded = match options.cloud {
        Cloud::Simcloud => seed_simcloud(&cluster, &options, &providers).await?,
        Cloud::Aws => crate::aws::seed(&cluster, &options, &providers).await?,
        Cloud::Openstack => crate::openstack::seed(&cluster, &options, &providers).await?,
        Cloud::Huaweicloud => crate::huaweicloud::seed(&cluster, &options, &providers).await?,
        Cloud::K3s => crate::k3s::seed(&cluster, &options, &providers).await?,
        Cloud::None => seed_nodes_only(&cluster, &options).await?,
    };
    // The author's own policy and cloud config replace the generated ones.
    if let Some(policy) = &options.policy {
        install_policy(policy, &providers.join(format!("{name}.yaml")))?;
    }
    let cloud_config = options
        .cloud_config
        .clone()
        .unwrap_or_else(|| seeded.cloud_config.clone());

    println!("wasm-ccm playground");
    println!(
        "  Kubernetes API:           {}  ({})",
        cluster.url(),
        cluster.label()
    );
    println!(
        "  kubeconfig:               {}",
        options.kubeconfig_out.display()
    );
    for line in &seeded.about {
        println!("  {line}");
    }
    for line in pulled.iter().flat_map(|p| &p.about) {
        println!("  {line}");
    }
    println!(
        "  cluster:                  {} nodes tainted {TAINT_UNINITIALIZED}, Service default/web (LoadBalancer)",
        options.nodes
    );
    println!();
    println!(
        "  try: kubectl --kubeconfig {} get nodes,services -o wide",
        options.kubeconfig_out.display()
    );
    for line in &seeded.try_lines {
        println!("       {line}");
    }
    println!();

    let installed = providers.join(format!("{name}.wasm"));
    let mut serving = false;
    if let Some(pulled) = &pulled {
        // The controllers pull it themselves, as in a cluster.
        crate::oci::install(pulled, &name, &providers, &credentials, &options)?;
        serving = true;
        demonstrate_provider(
            &installed,
            &cloud_config,
            &seeded.demo_node,
            &seeded.demo_annotations,
            &credentials,
        )
        .await;
    } else if std::fs::metadata(&component).is_ok() {
        std::fs::copy(&component, &installed).map_err(|source| PlaygroundError::Write {
            path: installed.clone(),
            source,
        })?;
        serving = true;
        demonstrate_provider(
            &installed,
            &cloud_config,
            &seeded.demo_node,
            &seeded.demo_annotations,
            &credentials,
        )
        .await;
    } else {
        println!(
            "provider: {} not found; build it with scripts/build-guests.sh (or pass --provider)",
            component.display()
        );
    }
    let mut flags = seeded.flags.clone();
    if pulled.is_some() {
        let cache = options.work_dir.join("provider-cache");
        flags.push(format!("--provider-cache-dir={}", cache.display()));
    }
    let mut controllers = None;
    if options.without_ccm {
        println!(
            "controllers: not started (--without-ccm); run a controller manager against the kubeconfig above:"
        );
        println!(
            "  wasm-ccm --cloud-provider {name} --providers-dir {} --credentials-dir {} --cloud-config {} --kubeconfig {} --leader-elect=false --cluster-cidr=10.244.0.0/16{}",
            providers.display(),
            credentials.display(),
            cloud_config.display(),
            options.kubeconfig_out.display(),
            flags.iter().map(|f| format!(" {f}")).collect::<String>()
        );
    } else if serving {
        println!(
            "controllers: cloud-node, cloud-node-lifecycle, service and route running with the {name} provider"
        );
        controllers = Some(tokio::spawn(run_controllers(
            name.clone(),
            providers.clone(),
            credentials.clone(),
            cloud_config.clone(),
            options.kubeconfig_out.clone(),
            flags,
        )));
    } else {
        println!("controllers: not started (no provider component to run)");
    }
    println!("provider directory: {}", providers.display());
    println!("watching the cluster; Ctrl-C (or SIGTERM) to stop\n");

    let mut changes = cluster.follow();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| PlaygroundError::Signal { source })?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
            followed = changes.recv() => match followed {
                Some(Followed::Change(change)) => println!("{}", describe(&change)),
                Some(Followed::Lagged(n)) => println!("({n} changes not shown)"),
                None => break,
            },
        }
    }
    // The controllers stop before the servers they talk to.
    if let Some(controllers) = controllers {
        controllers.abort();
        let _ = controllers.await;
    }
    drop(changes);
    drop(seeded);
    drop(cluster);
    println!("stopped");
    Ok(())
}

/// The directory credential files must lie in, for the demonstration and the
/// controllers alike: `--credentials-dir` (for the files of the author's `--policy`),
/// else the work directory's `credentials/`, where the generated policies' files are.
/// It must hold neither the component nor a policy: their files are a vendor's choice.
fn credentials_dir(
    options: &Options,
    component: &Path,
    providers: &Path,
) -> Result<PathBuf, PlaygroundError> {
    let dir = match (&options.credentials_dir, &options.policy) {
        (Some(dir), Some(_)) => dir.clone(),
        (Some(_), None) => {
            return Err(PlaygroundError::Usage(
                "--credentials-dir is the directory of the credential files --policy names; \
                 the generated policies' files are in the work directory's credentials/"
                    .into(),
            ));
        }
        (None, _) => {
            let dir = options.work_dir.join("credentials");
            std::fs::create_dir_all(&dir).map_err(|source| PlaygroundError::Write {
                path: dir.clone(),
                source,
            })?;
            dir
        }
    };
    let mut held = vec![("component", component), ("providers directory", providers)];
    if let Some(policy) = &options.policy {
        held.push(("policy", policy.as_path()));
    }
    CredentialFiles::new(Some(dir.as_path()), &held)?;
    Ok(dir)
}

/// The provider name a component declares.
async fn provider_name(component: &Path) -> Result<String, PlaygroundError> {
    let fail = |message: String| PlaygroundError::Provider {
        path: component.to_owned(),
        message,
    };
    let loader = ProviderLoader::new(&EngineSettings {
        max_instances: 2,
        ..EngineSettings::default()
    })
    .map_err(|err| fail(err.to_string()))?;
    let inspection = loader
        .inspect(component)
        .await
        .map_err(|err| fail(err.to_string()))?;
    Ok(inspection.provider_name)
}

/// Installs the author's policy as `dest`: validated first (errors name the author's
/// file and field), with relative `...File` paths made absolute, since they are read
/// relative to the policy file and the copy lives elsewhere. (JSON is YAML.)
fn install_policy(source: &Path, dest: &Path) -> Result<(), PlaygroundError> {
    let text = std::fs::read_to_string(source).map_err(|err| {
        PlaygroundError::Policy(format!("cannot read {}: {err}", source.display()))
    })?;
    wasm_ccm_host::policy::Policy::parse(&text, source)
        .map_err(|err| PlaygroundError::Policy(err.to_string()))?;
    let mut value: Value = serde_saphyr::from_str(&text)
        .map_err(|err| PlaygroundError::Policy(format!("{}: {err}", source.display())))?;
    let base = std::path::absolute(source)
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_default();
    absolutize_files(&mut value, &base);
    write(dest, value.to_string())
}

fn absolutize_files(value: &mut Value, base: &Path) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(path)
                        if key.ends_with("File") && Path::new(path).is_relative() =>
                    {
                        *path = base.join(&*path).display().to_string();
                    }
                    other => absolutize_files(other, base),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| absolutize_files(v, base)),
        _ => {}
    }
}

/// No emulated cloud: the Nodes (named `node-1`...) and the Service only; the author's
/// cloud config is required.
async fn seed_nodes_only(cluster: &Cluster, options: &Options) -> Result<Seeded, PlaygroundError> {
    let Some(cloud_config) = options.cloud_config.clone() else {
        return Err(PlaygroundError::Usage(
            "--cloud none needs --cloud-config (and --policy for the provider to reach its cloud)"
                .into(),
        ));
    };
    for i in 1..=options.nodes {
        cluster
            .create_node(kubelet_node(
                &format!("node-{i}"),
                &format!("10.244.{i}.0/24"),
            ))
            .await?;
    }
    cluster.create_service("default", web_service()).await?;
    Ok(Seeded {
        cloud_config,
        demo_node: "node-1".into(),
        demo_annotations: Vec::new(),
        flags: Vec::new(),
        about: vec![
            "cloud:                    none emulated; the provider reaches its own under --policy"
                .into(),
        ],
        try_lines: Vec::new(),
        _cloud: Box::new(()),
    })
}

/// The simulated cloud with one instance per node, and the reference provider's files.
async fn seed_simcloud(
    cluster: &Cluster,
    options: &Options,
    providers: &Path,
) -> Result<Seeded, PlaygroundError> {
    let token = format!("playground-{:x}", std::process::id() as u64 * 0x9E37_79B9);
    let cloud = SimCloud::start(&options.cloud_listen, &token)
        .await
        .map_err(|source| PlaygroundError::Listen {
            addr: options.cloud_listen.clone(),
            source,
        })?;
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
        cluster
            .create_node(kubelet_node(&name, &format!("10.244.{i}.0/24")))
            .await?;
    }
    cluster.create_service("default", web_service()).await?;
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
    let url = cloud.url();
    let cloud = std::sync::Arc::new(cloud);
    let kubelets = Kubelets::start(
        cluster.nodes(),
        Instances::Sim(cloud.clone()),
        options.node_monitor_grace_period,
    );
    Ok(Seeded {
        cloud_config,
        demo_node: "node-1".into(),
        demo_annotations: Vec::new(),
        flags: Vec::new(),
        about: vec![format!(
            "simulated cloud:          {url}  (admin API: {url}/admin/...)"
        )],
        try_lines: vec![
            format!(
                "curl -X PATCH {url}/admin/instances/i-00000001 -H 'content-type: application/json' -d '{{\"state\": \"stopped\"}}'"
            ),
            format!("curl -X DELETE {url}/admin/instances/i-00000002"),
            kubelets.note(),
        ],
        _cloud: Box::new((cloud, kubelets)),
    })
}

/// The controller manager in-process, against the playground's cluster and cloud.
async fn run_controllers(
    provider: String,
    providers_dir: PathBuf,
    credentials_dir: PathBuf,
    cloud_config: PathBuf,
    kubeconfig: PathBuf,
    flags: Vec<String>,
) {
    // The same flags as the command line (so defaults never drift), for this cluster.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        daemon: wasm_ccm::daemon::DaemonArgs,
    }
    let mut argv: Vec<std::ffi::OsString> = vec![
        "wasm-ccm".into(),
        format!("--cloud-provider={provider}").into(),
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
    argv.extend(flags.into_iter().map(Into::into));
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

/// Loads the provider against its cloud, its policy's files read only inside
/// `credentials` as the controllers read them, and shows its answer for `node`.
async fn demonstrate_provider(
    wasm: &Path,
    cloud_config: &Path,
    node: &str,
    annotations: &[(String, String)],
    credentials: &Path,
) {
    let config = std::fs::read(cloud_config).unwrap_or_default();
    let engine = EngineSettings {
        max_instances: 8,
        ..EngineSettings::default()
    };
    let loader = match ToolLoader::new(&engine, wasm, None, Some(credentials)) {
        Ok(loader) => loader,
        Err(err) => {
            println!("provider: cannot load: {err}");
            return;
        }
    };
    match loader.load(config).await {
        Ok(provider) => {
            println!(
                "provider: {} loaded from {} (exports: {})",
                provider.name(),
                wasm.display(),
                provider.exports().names().join(", ")
            );
            if let Some(v2) = provider.instances_v2() {
                let mut view = Node::named(node);
                view.metadata.annotations = annotations.to_vec();
                match tokio::time::timeout(Duration::from_secs(10), v2.instance_metadata(&view))
                    .await
                {
                    Ok(Ok(meta)) => println!(
                        "provider: instance-metadata({node}) -> {} type={} zone={} region={} labels={:?}",
                        meta.provider_id,
                        meta.instance_type,
                        meta.zone,
                        meta.region,
                        meta.additional_labels
                    ),
                    Ok(Err(err)) => println!("provider: instance-metadata({node}) failed: {err}"),
                    Err(_) => println!("provider: instance-metadata({node}) timed out"),
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
