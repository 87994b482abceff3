//! One side of the comparison: a fresh moto world, a fresh kube-apiserver, the Nodes as
//! kubelet registers them, one controller manager (cloud-provider-aws or wasm-ccm with
//! the AWS provider) with the same cloud config file, and the scenarios' phases; in
//! the last, the controller manager is restarted with the shared health probe.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use wasm_ccm_tests::aws::{install_static_policy, kubelet_node};
use wasm_ccm_tests::kube_apiserver::KubeApiServer;
use wasm_ccm_tests::moto::{self, Moto, World};
use wasm_ccm_tests::{TempDir, guest, initialized, set_ready, spawn_logged, wait_until};

use crate::snapshot;
use wasm_ccm_tests::oracle::{self, Flat, Names, Running, steady};
use wasm_ccm_tests::upstream;

const CLUSTER: &str = "oracle";
/// Both controller managers converge within this (moto answers one request at a time).
const TIMEOUT: Duration = Duration::from_secs(300);
/// How long the cloud and the cluster must stay unchanged to count as converged.
const STEADY: Duration = Duration::from_secs(6);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Upstream,
    WasmCcm,
}

/// A Service of a scenario: its name (the scenario's), `service.beta.kubernetes.io/
/// aws-load-balancer-<suffix>` annotations, and spec fields beyond one TCP port (a
/// port's `protocol` is TCP unless it says).
struct Scenario {
    name: &'static str,
    annotations: Value,
    spec: Value,
    /// `Some(message)`: the Service gets no load balancer; each side records
    /// `SyncLoadBalancerFailed` with a message containing this (upstream's refusal).
    refused: Option<&'static str>,
}

/// What the per-run IDs a scenario names are replaced with before the Service is
/// made: `{extra-sg}`, `{own-sg}`, `{shared-sg}`, `{eip-1}`, `{eip-2}`.
struct Placeholders {
    extra_sg: String,
    own_sg: String,
    shared_sg: String,
    eips: Vec<String>,
}

/// The Classic load balancer deleted while another one behind the same group of the
/// user's (`clb-shared-a`) stays: upstream revokes the nodes' rule admitting that group,
/// wasm-ccm keeps it, described for `clb-shared-a` (guests/aws/README.md lists it).
const SHARED_DELETED: &str = "clb-shared-b";

fn scenarios() -> Vec<Scenario> {
    let plain = json!({});
    let nlb = json!({"type": "nlb"});
    let s = |name, annotations: Value, spec: Value| Scenario {
        name,
        annotations,
        spec,
        refused: None,
    };
    vec![
        s("clb-default", json!({}), plain.clone()),
        s("nlb", nlb.clone(), plain.clone()),
        s(
            "clb-ssl",
            json!({"ssl-cert": "arn:aws:iam::123456789012:server-certificate/web",
                   "ssl-ports": "443", "backend-protocol": "http"}),
            json!({"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}),
        ),
        s("clb-proxy", json!({"proxy-protocol": "*"}), plain.clone()),
        s(
            "clb-ranges",
            json!({}),
            json!({"loadBalancerSourceRanges": ["192.0.2.0/24", "198.51.100.0/24"]}),
        ),
        s(
            "clb-extra-sg",
            json!({"extra-security-groups": "{extra-sg}"}),
            plain.clone(),
        ),
        s(
            "clb-own-sg",
            json!({"security-groups": "{own-sg}"}),
            plain.clone(),
        ),
        s("clb-internal", json!({"internal": "true"}), plain.clone()),
        s(
            "nlb-eip",
            json!({"type": "nlb", "eip-allocations": "{eip-1},{eip-2}"}),
            plain.clone(),
        ),
        s(
            "nlb-tg-attrs",
            json!({"type": "nlb", "target-group-attributes": "preserve_client_ip.enabled=false,proxy_protocol_v2.enabled=true"}),
            plain.clone(),
        ),
        s(
            "nlb-local",
            nlb.clone(),
            json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32100}),
        ),
        s(
            "clb-health",
            json!({"healthcheck-healthy-threshold": "3", "healthcheck-unhealthy-threshold": "4",
                   "healthcheck-timeout": "6", "healthcheck-interval": "11"}),
            plain.clone(),
        ),
        s(
            "nlb-health",
            json!({"type": "nlb", "healthcheck-protocol": "http", "healthcheck-path": "/ready",
                   "healthcheck-port": "8081", "healthcheck-interval": "30"}),
            plain.clone(),
        ),
        s(
            "clb-logs",
            json!({"access-log-enabled": "true", "access-log-emit-interval": "5",
                   "access-log-s3-bucket-name": "logs", "access-log-s3-bucket-prefix": "elb"}),
            plain.clone(),
        ),
        s(
            "clb-attrs",
            json!({"cross-zone-load-balancing-enabled": "true",
                   "connection-draining-enabled": "true", "connection-draining-timeout": "120",
                   "connection-idle-timeout": "90", "additional-resource-tags": "team=web,tier=front"}),
            plain.clone(),
        ),
        // Two Classic load balancers behind one group of the user's; `clb-shared-b` is
        // deleted in the third phase.
        s(
            "clb-shared-a",
            json!({"security-groups": "{shared-sg}"}),
            plain.clone(),
        ),
        s(
            SHARED_DELETED,
            json!({"security-groups": "{shared-sg}"}),
            plain,
        ),
        // TCP 53 and UDP 53 on an NLB: upstream's `checkMixedProtocol` refuses it in
        // `EnsureLoadBalancer`, before anything is made.
        Scenario {
            name: "nlb-mixed",
            annotations: nlb,
            spec: json!({"ports": [{"name": "dns-tcp", "port": 53},
                                   {"name": "dns-udp", "port": 53, "protocol": "UDP"}]}),
            refused: Some("mixed protocol is not supported for LoadBalancer"),
        },
    ]
}

/// The scenarios' names (each a Service in `default`).
pub fn scenario_names() -> Vec<String> {
    scenarios().into_iter().map(|s| s.name.to_owned()).collect()
}

/// Scenario `index`'s Service: TCP ports with fixed node ports (`30000 + 10 * index`
/// on), so both sides' Services are alike.
fn service(index: usize, scenario: &Scenario, ids: &Placeholders) -> Service {
    let mut annotations = serde_json::Map::new();
    for (suffix, value) in scenario.annotations.as_object().unwrap() {
        let value = value
            .as_str()
            .unwrap()
            .replace("{extra-sg}", &ids.extra_sg)
            .replace("{own-sg}", &ids.own_sg)
            .replace("{shared-sg}", &ids.shared_sg)
            .replace("{eip-1}", &ids.eips[0])
            .replace("{eip-2}", &ids.eips[1]);
        annotations.insert(
            format!("service.beta.kubernetes.io/aws-load-balancer-{suffix}"),
            value.into(),
        );
    }
    let mut spec = json!({
        "type": "LoadBalancer",
        "selector": {"app": scenario.name},
        "ports": [{"name": "http", "port": 80}],
    });
    for (k, v) in scenario.spec.as_object().unwrap() {
        spec[k] = v.clone();
    }
    for (i, port) in spec["ports"].as_array_mut().unwrap().iter_mut().enumerate() {
        if port.get("protocol").is_none() {
            port["protocol"] = "TCP".into();
        }
        port["targetPort"] = 8080.into();
        port["nodePort"] = (30000 + 10 * index + i).into();
    }
    serde_json::from_value(json!({
        "metadata": {"name": scenario.name, "namespace": "default", "annotations": annotations},
        "spec": spec,
    }))
    .unwrap()
}

/// Runs one side through every phase; a snapshot after each ([`crate::PHASES`]).
pub async fn run(side: Side) -> Vec<Flat> {
    let mut moto = Moto::start().await;
    let world = World::create(&mut moto, CLUSTER).await;
    let server = KubeApiServer::start().await;
    let client = server.client().await;
    let dir = TempDir::new("aws-oracle");
    let mut names = Names::new();
    names.add(world.vpc.clone(), "<vpc>");
    names.add(world.route_table.clone(), "<route table>");
    for (i, subnet) in world.subnets.iter().enumerate() {
        names.add(subnet.clone(), format!("<subnet-{i}>"));
    }
    names.add(world.node_security_group.clone(), "<sg:nodes>".to_owned());
    let ids = Placeholders {
        extra_sg: world
            .security_group(&moto, "user-extra", "the user's extra group")
            .await,
        own_sg: world
            .security_group(&moto, "user-own", "the user's own group")
            .await,
        shared_sg: world
            .security_group(&moto, "user-shared", "a group two load balancers share")
            .await,
        eips: {
            let mut eips = Vec::new();
            for i in 0..2 {
                let answer = moto
                    .call(moto::Service::Ec2, "AllocateAddress", &[("Domain", "vpc")])
                    .await;
                let id = moto::text(&answer, "allocationId");
                names.add(id.clone(), format!("<eip-{}>", i + 1));
                names.add(
                    moto::text(&answer, "publicIp"),
                    format!("<eip-{} address>", i + 1),
                );
                eips.push(id);
            }
            eips
        },
    };

    // Two nodes, one per subnet; a third joins in the second phase.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut instances = Vec::new();
    for i in 0..2 {
        // node-1 is of a type EC2 gives an instance topology: its network node labels.
        let instance_type = if i == 1 { "p4d.24xlarge" } else { "m5.large" };
        let instance = world.launch_typed(&moto, i, instance_type).await;
        add_instance_names(&mut names, &instance, i);
        add_network_node_names(&moto, &mut names, &instance, i).await;
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node(&instance, &format!("10.244.{}.0/24", i + 1)),
            )
            .await
            .unwrap();
        instances.push(instance);
    }

    // The same cloud config file for both: upstream needs SubnetID (with VPC and the
    // cluster ID) to start without the instance metadata service.
    let cloud_config = dir.path().join("cloud.conf");
    let config = world.cloud_config(&moto).replacen(
        "[Global]\n",
        &format!(
            "[Global]\nSubnetID = {}\nRouteTableID = {}\n",
            world.subnets[0], world.route_table
        ),
        1,
    );
    std::fs::write(&cloud_config, &config).unwrap();
    let mut ccm = Running::new(
        side,
        start(side, &moto, &world, &server, &dir, &cloud_config),
    );

    let mut snapshots = Vec::new();

    // 1. Created: the nodes initialized first (upstream's service controller leaves a
    // node without a provider ID out: load balancers made before would be updated
    // when the nodes are, in an order that differs from run to run), then every
    // Service has its address.
    for instance in &instances {
        wait_until(TIMEOUT, "the node initialized", || async {
            ccm.alive();
            initialized(&nodes, &instance.private_dns_name).await
        })
        .await;
    }
    // Both sides label the p4d node with its network nodes (its type needs them).
    wait_until(
        TIMEOUT,
        &format!("{side:?}: node-1's network node labels"),
        || async {
            nodes
                .get(&instances[1].private_dns_name)
                .await
                .is_ok_and(|n| {
                    (1..=3).all(|layer| {
                        n.labels()
                            .contains_key(&format!("topology.k8s.aws/network-node-layer-{layer}"))
                    })
                })
        },
    )
    .await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let all = scenarios();
    let mut classic_default = String::new();
    for (index, scenario) in all.iter().enumerate() {
        services
            .create(&PostParams::default(), &service(index, scenario, &ids))
            .await
            .unwrap();
        let uid = services
            .get(scenario.name)
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap();
        let lb: String = format!("a{}", uid.replace('-', ""))
            .chars()
            .take(32)
            .collect();
        if scenario.name == "clb-default" {
            classic_default = lb.clone();
        }
        names.add(lb, format!("<lb:{}>", scenario.name));
        names.add(uid, format!("<uid:{}>", scenario.name));
    }
    for scenario in &all {
        if let Some(message) = scenario.refused {
            wait_until(
                TIMEOUT,
                &format!("{side:?}: {} refused ({message})", scenario.name),
                || async {
                    ccm.alive();
                    refused(&client, scenario.name, message).await
                },
            )
            .await;
            continue;
        }
        wait_until(
            TIMEOUT,
            &format!("{side:?}: {} has an address", scenario.name),
            || async {
                services.get(scenario.name).await.is_ok_and(|s| {
                    s.status
                        .and_then(|s| s.load_balancer)
                        .and_then(|l| l.ingress)
                        .is_some_and(|i| !i.is_empty())
                })
            },
        )
        .await;
    }
    snapshots.push(
        steady(&ccm, TIMEOUT, STEADY, async || {
            take(&moto, &world, &client, &mut names).await
        })
        .await,
    );

    // 2. Changed: a node joined, then a port changed and a type changed. The node's
    // load balancer updates settle first: a Service's own sync racing the node sync of
    // the same load balancer once left upstream's Classic load balancer without the new
    // node for longer than a comparison waits, so the outcome depended on timing.
    let third = world.launch(&moto, 0).await;
    add_instance_names(&mut names, &third, 2);
    nodes
        .create(
            &PostParams::default(),
            &kubelet_node(&third, "10.244.3.0/24"),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the third node initialized", || async {
        ccm.alive();
        initialized(&nodes, &third.private_dns_name).await
    })
    .await;
    steady(&ccm, TIMEOUT, STEADY, async || {
        take(&moto, &world, &client, &mut names).await
    })
    .await;
    services
        .patch(
            "clb-default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 8080,
                "targetPort": 8080, "nodePort": 30000, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    services
        .patch(
            "nlb",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"type": "ClusterIP", "ports": [{"name": "http",
                "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": null}]}}),
            ),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, &format!("{side:?}: nlb released"), || async {
        services.get("nlb").await.is_ok_and(|s| {
            s.status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .is_none_or(|i| i.is_empty())
        })
    })
    .await;
    snapshots.push(
        steady(&ccm, TIMEOUT, STEADY, async || {
            take(&moto, &world, &client, &mut names).await
        })
        .await,
    );

    // 3. Removed: a node's instance terminated (its Node deleted by the lifecycle
    // controller), a Service deleted.
    moto.call(
        moto::Service::Ec2,
        "TerminateInstances",
        &[("InstanceId.1", &instances[0].id)],
    )
    .await;
    set_ready(&nodes, &instances[0].private_dns_name, "Unknown").await;
    services
        .delete("clb-proxy", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        &format!("{side:?}: the terminated instance's node deleted"),
        || async {
            nodes
                .get_opt(&instances[0].private_dns_name)
                .await
                .unwrap()
                .is_none()
        },
    )
    .await;
    wait_until(TIMEOUT, &format!("{side:?}: clb-proxy gone"), || async {
        ccm.alive();
        services.get_opt("clb-proxy").await.unwrap().is_none()
    })
    .await;
    // One of the two load balancers behind the user's shared group deleted, once the
    // node's deletion has been synced: upstream's node sync would otherwise add the
    // rule it revokes back (the other load balancer's update), or not, by timing.
    steady(&ccm, TIMEOUT, STEADY, async || {
        take(&moto, &world, &client, &mut names).await
    })
    .await;
    services
        .delete(SHARED_DELETED, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        &format!("{side:?}: {SHARED_DELETED} gone"),
        || async {
            ccm.alive();
            services.get_opt(SHARED_DELETED).await.unwrap().is_none()
        },
    )
    .await;
    snapshots.push(
        steady(&ccm, TIMEOUT, STEADY, async || {
            take(&moto, &world, &client, &mut names).await
        })
        .await,
    );

    // 4. The shared health probe: the controller manager restarted with
    // `ClusterServiceLoadBalancerHealthProbeMode = Shared`; every Service is ensured
    // again on start, and the load balancers of Cluster traffic are probed on
    // kube-proxy's port (Network Load Balancers get new target groups: the health
    // check's protocol is part of a group's name).
    std::fs::write(
        &cloud_config,
        config.replacen(
            "[Global]\n",
            "[Global]\nClusterServiceLoadBalancerHealthProbeMode = Shared\n",
            1,
        ),
    )
    .unwrap();
    ccm.restart(start(side, &moto, &world, &server, &dir, &cloud_config))
        .await;
    wait_until(
        TIMEOUT,
        &format!("{side:?}: clb-default probed on the shared port"),
        || async {
            ccm.alive();
            let answer = moto
                .call(
                    moto::Service::Elb,
                    "DescribeLoadBalancers",
                    &[("LoadBalancerNames.member.1", &classic_default)],
                )
                .await;
            moto::text(&answer, "Target") == "HTTP:10256/healthz"
        },
    )
    .await;
    snapshots.push(
        steady(&ccm, TIMEOUT, STEADY, async || {
            take(&moto, &world, &client, &mut names).await
        })
        .await,
    );
    snapshots
}

/// Whether the controller recorded `SyncLoadBalancerFailed` for Service `name` (in
/// `default`) with a message containing `message`.
async fn refused(client: &kube::Client, name: &str, message: &str) -> bool {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events.list(&ListParams::default()).await.is_ok_and(|list| {
        list.items.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                && e.note.as_deref().is_some_and(|n| n.contains(message))
        })
    })
}

/// The network nodes EC2 lists above `instance` stand for `node-<i>`'s layers.
async fn add_network_node_names(
    moto: &Moto,
    names: &mut Names,
    instance: &moto::LaunchedInstance,
    i: usize,
) {
    let answer = moto
        .call(
            moto::Service::Ec2,
            "DescribeInstanceTopology",
            &[("InstanceId.1", &instance.id)],
        )
        .await;
    let nodes = moto::texts(&answer, "item")
        .into_iter()
        .filter(|t| t.starts_with("nn-"));
    for (layer, node) in nodes.enumerate() {
        names.add(node, format!("<nn-{}:node-{i}>", layer + 1));
    }
}

/// Instance `i`'s IDs, addresses and names stand for `node-<i>`.
fn add_instance_names(names: &mut Names, instance: &moto::LaunchedInstance, i: usize) {
    names.add(instance.id.clone(), format!("<i:node-{i}>"));
    names.add(instance.private_dns_name.clone(), format!("node-{i}"));
    // The short host name (`ip-10-0-1-2`) kubelet may report.
    if let Some(short) = instance.private_dns_name.split('.').next() {
        names.add(short.to_owned(), format!("node-{i}-host"));
    }
    names.add(instance.private_ip.clone(), format!("<ip:node-{i}>"));
}

/// Starts the side's controller manager; its log.
fn start(
    side: Side,
    moto: &Moto,
    world: &World,
    server: &KubeApiServer,
    dir: &TempDir,
    cloud_config: &std::path::Path,
) -> (
    tokio::process::Child,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    match side {
        Side::Upstream => {
            let mut command = upstream::command(
                &upstream::aws_ccm(),
                "aws",
                cloud_config,
                &server.kubeconfig(),
            );
            command.args(["--v=2", &format!("--cluster-name={CLUSTER}")]);
            upstream::aws_ccm_environment(&mut command, &moto.url(), &world.provider);
            spawn_logged(command)
        }
        Side::WasmCcm => {
            let providers = dir.path().join("providers");
            std::fs::create_dir_all(&providers).unwrap();
            std::fs::copy(guest("aws_provider"), providers.join("aws.wasm")).unwrap();
            install_static_policy(&providers, moto, &world.provider);
            let mut command =
                upstream::wasm_ccm_command("aws", &providers, cloud_config, &server.kubeconfig());
            command.arg(format!("--cluster-name={CLUSTER}"));
            spawn_logged(command)
        }
    }
}

async fn take(moto: &Moto, world: &World, client: &kube::Client, names: &mut Names) -> Flat {
    let answers = snapshot::cloud(moto, world, names).await;
    let mut flat = answers.flatten(names);
    flat.extend(oracle::cluster(client, names).await);
    flat
}
