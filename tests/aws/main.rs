//! The AWS provider (`guests/aws`) through the real controllers and the API server
//! double, against moto on 127.0.0.1 with request authentication on: every request the
//! provider makes must carry a SigV4 signature the host computed.

mod classic;
mod deploy;
mod nlb;
mod scripted;
mod slow_cloud;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm_tests::aws::{Auth, AwsStack, kubelet_node};
use wasm_ccm_tests::moto::{self, Keys, Moto, World};
use wasm_ccm_tests::{
    TempDir, default_load_balancer_name, guest, initialized, listening_port, set_ready, taint_keys,
    wait_until,
};

/// How long a condition may take: several provider calls on a loaded machine (the
/// documented policy's call is 30 s).
const TIMEOUT: Duration = Duration::from_secs(180);
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
const CLUSTER: &str = "test";

/// Network Load Balancer `name`'s ARN; `None` when it does not exist.
async fn nlb_arn(moto: &Moto, name: &str) -> Option<String> {
    let lbs = moto
        .try_call(
            moto::Service::Elbv2,
            "DescribeLoadBalancers",
            &[("Names.member.1", name)],
        )
        .await
        .ok()?;
    Some(moto::text(&lbs, "LoadBalancerArn"))
}

/// The `DescribeTargetGroupAttributes` answer of each target group of the NLB `arn`.
async fn target_group_attribute_answers(moto: &Moto, arn: &str) -> Vec<String> {
    let groups = moto
        .call(
            moto::Service::Elbv2,
            "DescribeTargetGroups",
            &[("LoadBalancerArn", arn)],
        )
        .await;
    let mut answers = Vec::new();
    for group in moto::texts(&groups, "TargetGroupArn") {
        answers.push(
            moto.call(
                moto::Service::Elbv2,
                "DescribeTargetGroupAttributes",
                &[("TargetGroupArn", &group)],
            )
            .await,
        );
    }
    answers
}

/// The instance IDs registered in the target groups of load balancer `name`, with
/// their ports; `None` when the load balancer does not exist.
async fn registered_targets(moto: &Moto, lb_name: &str) -> Option<Vec<(String, String)>> {
    let arn = nlb_arn(moto, lb_name).await?;
    // moto answers TargetGroupNotFound for a load balancer without groups.
    let groups = match moto
        .try_call(
            moto::Service::Elbv2,
            "DescribeTargetGroups",
            &[("LoadBalancerArn", &arn)],
        )
        .await
    {
        Ok(groups) => groups,
        Err(e) if e.contains("TargetGroupNotFound") => return Some(Vec::new()),
        // The controller deleted the load balancer between the two calls.
        Err(e) if e.contains("LoadBalancerNotFound") => return None,
        Err(e) => panic!("{e}"),
    };
    let mut targets = Vec::new();
    for group in moto::texts(&groups, "TargetGroupArn") {
        let health = match moto
            .try_call(
                moto::Service::Elbv2,
                "DescribeTargetHealth",
                &[("TargetGroupArn", &group)],
            )
            .await
        {
            Ok(health) => health,
            // Deleted (with its load balancer) between the two calls.
            Err(e) if e.contains("TargetGroupNotFound") => continue,
            Err(e) => panic!("{e}"),
        };
        let ids = moto::texts(&health, "Id");
        let ports = moto::texts(&health, "Port");
        targets.extend(ids.into_iter().zip(ports));
    }
    targets.sort();
    Some(targets)
}

/// `service.beta.kubernetes.io/aws-load-balancer-<suffix>` annotations (null: removed).
fn annotations(pairs: &[(&str, serde_json::Value)]) -> serde_json::Value {
    pairs
        .iter()
        .map(|(suffix, value)| {
            (
                format!("service.beta.kubernetes.io/aws-load-balancer-{suffix}"),
                value.clone(),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Service `name` in `default` (type LoadBalancer, TCP `port` → 8080, port name
/// `http`) with `annotations`.
fn service_with(name: &str, annotations: serde_json::Value, port: i32) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]},
    }))
    .unwrap()
}

/// Classic load balancer `name`'s description, `None` when it does not exist.
async fn classic_load_balancer(moto: &Moto, name: &str) -> Option<String> {
    match moto
        .try_call(
            moto::Service::Elb,
            "DescribeLoadBalancers",
            &[("LoadBalancerNames.member.1", name)],
        )
        .await
    {
        Ok(xml) => Some(xml),
        Err(e) if e.contains("LoadBalancerNotFound") => None,
        Err(e) => panic!("{e}"),
    }
}

/// The instances registered with Classic load balancer `name`, sorted; `None` when it
/// does not exist.
async fn classic_instances(moto: &Moto, name: &str) -> Option<Vec<String>> {
    let xml = classic_load_balancer(moto, name).await?;
    let mut ids = moto::texts(&xml, "InstanceId");
    ids.sort();
    ids.dedup();
    Some(ids)
}

/// Deletes Service `name` and waits until it is gone (its finalizer removed once the
/// load balancer was deleted).
async fn delete_and_wait(services: &Api<Service>, name: &str) {
    services
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, &format!("Service {name} gone"), || async {
        services.get_opt(name).await.unwrap().is_none()
    })
    .await;
}

/// Creates `service`; it, its node ports in port order, and its load balancer's name.
async fn create_service(
    services: &Api<Service>,
    service: &Service,
) -> (Service, Vec<String>, String) {
    let created = services
        .create(&PostParams::default(), service)
        .await
        .unwrap();
    let node_ports = created
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| p.node_port.unwrap_or_default().to_string())
        .collect();
    let name = default_load_balancer_name(&created);
    (created, node_ports, name)
}

/// Waits until the controller records `SyncLoadBalancerFailed` for Service `name`
/// with a message containing `message`.
async fn refused(client: kube::Client, name: &str, message: &str) {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    wait_until(TIMEOUT, &format!("{name}: refused ({message})"), || async {
        events.list(&Default::default()).await.is_ok_and(|list| {
            list.items.iter().any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                    && e.note.as_deref().is_some_and(|n| n.contains(message))
            })
        })
    })
    .await;
}

/// The names of every Network Load Balancer moto holds.
async fn load_balancer_names(moto: &Moto) -> Vec<String> {
    moto.load_balancer_names().await.unwrap()
}

async fn target_group_names(moto: &Moto) -> Vec<String> {
    moto.target_group_names().await.unwrap()
}

async fn routes(moto: &Moto, table: &str) -> Vec<(String, String)> {
    let tables = moto
        .call(
            moto::Service::Ec2,
            "DescribeRouteTables",
            &[("RouteTableId.1", table)],
        )
        .await;
    let doc = roxmltree::Document::parse(&tables).unwrap();
    let mut routes: Vec<(String, String)> = doc
        .descendants()
        .filter(|n| {
            n.tag_name().name() == "item"
                && n.children()
                    .any(|c| c.tag_name().name() == "destinationCidrBlock")
        })
        .filter_map(|route| {
            let get = |name: &str| {
                route
                    .children()
                    .find(|c| c.tag_name().name() == name)
                    .and_then(|c| c.text())
                    .map(str::to_owned)
            };
            Some((get("destinationCidrBlock")?, get("instanceId")?))
        })
        .collect();
    routes.sort();
    routes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_load_balancers_routes_and_lifecycle_against_moto() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let a = world.launch(moto, 0).await;
    let b = world.launch(moto, 1).await;
    let nodes: Api<Node> = Api::all(stack.client());
    for (instance, cidr) in [(&a, "10.244.1.0/24"), (&b, "10.244.2.0/24")] {
        nodes
            .create(&PostParams::default(), &kubelet_node(instance, cidr))
            .await
            .unwrap();
    }
    stack.policy(Auth::Static(&world.provider));
    // From here on moto checks every signature and the provider user's IAM policy.
    moto.enable_auth(0).await;
    let anonymous = moto
        .call_as(
            &Keys::anonymous(),
            moto::Service::Ec2,
            "DescribeInstances",
            &[],
        )
        .await;
    assert!(
        anonymous.is_err_and(|e| e.contains("AuthFailure")),
        "moto must refuse keys it does not know"
    );
    let port = listening_port();
    let _ccm = stack
        .controller_manager(port, &["--leader-elect=false"])
        .spawn()
        .unwrap();

    // cloud-node: provider IDs, types, zones, addresses, zone IDs.
    for instance in [&a, &b] {
        // Initialized (taint gone), then the addresses written to the status.
        wait_until(TIMEOUT, "node initialized with its addresses", || async {
            initialized(&nodes, &instance.private_dns_name).await
                && nodes.get(&instance.private_dns_name).await.is_ok_and(|n| {
                    n.status
                        .and_then(|s| s.addresses)
                        .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP"))
                })
        })
        .await;
        let node = nodes.get(&instance.private_dns_name).await.unwrap();
        assert_eq!(
            node.spec.as_ref().unwrap().provider_id.as_deref(),
            Some(format!("aws:///{}/{}", instance.zone, instance.id).as_str())
        );
        let labels = node.metadata.labels.clone().unwrap();
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
        assert_eq!(labels["topology.kubernetes.io/zone"], instance.zone);
        assert_eq!(labels["topology.kubernetes.io/region"], "us-east-1");
        assert!(
            labels.contains_key("topology.k8s.aws/zone-id"),
            "{labels:?}"
        );
        let addresses: Vec<(String, String)> = node
            .status
            .unwrap()
            .addresses
            .unwrap()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        assert!(
            addresses.contains(&("InternalIP".into(), instance.private_ip.clone())),
            "{addresses:?}"
        );
        assert!(
            addresses.contains(&("InternalDNS".into(), instance.private_dns_name.clone())),
            "{addresses:?}"
        );
        assert!(
            addresses.contains(&("Hostname".into(), instance.private_dns_name.clone())),
            "{addresses:?}"
        );
    }

    // routes: each node's pod CIDR routed to its instance in the cluster's table.
    wait_until(TIMEOUT, "routes for both nodes", || async {
        let routes = routes(moto, &world.route_table).await;
        routes.contains(&("10.244.1.0/24".into(), a.id.clone()))
            && routes.contains(&("10.244.2.0/24".into(), b.id.clone()))
    })
    .await;

    // load balancers: upstream's default, a Classic ELB with the nodes' instances, a
    // listener on the node port, its own security group, and the nodes' group
    // admitting it.
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let (_, node_ports, lb_name) =
        create_service(&services, &service_with("web", json!({}), 80)).await;
    let node_port = node_ports[0].clone();
    wait_until(TIMEOUT, "a load balancer hostname", || async {
        services.get("web").await.is_ok_and(|s| {
            s.status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .and_then(|i| i.first().and_then(|i| i.hostname.clone()))
                .is_some_and(|h| h.ends_with(".elb.amazonaws.com"))
        })
    })
    .await;
    let both = {
        let mut both = vec![a.id.clone(), b.id.clone()];
        both.sort();
        both
    };
    wait_until(TIMEOUT, "both instances registered", || async {
        classic_instances(moto, &lb_name).await == Some(both.clone())
    })
    .await;
    let lb = classic_load_balancer(moto, &lb_name).await.unwrap();
    assert_eq!(moto::texts(&lb, "LoadBalancerPort"), ["80"]);
    assert_eq!(moto::texts(&lb, "InstancePort"), [node_port.as_str()]);
    let lb_group = classic::own_group(moto, &lb_name)
        .await
        .expect("k8s-elb- group");
    assert!(lb.contains(&format!("<member>{lb_group}</member>")), "{lb}");
    wait_until(
        TIMEOUT,
        "the nodes' group admits the load balancer's",
        || async { classic::admits(moto, &world.node_security_group, &lb_group).await },
    )
    .await;

    // Scaling: a third node joins; once cloud-node has set its provider ID (a change
    // of the node set, as upstream's nodesSufficientlyEqual sees it), it is registered.
    let c = world.launch(moto, 0).await;
    nodes
        .create(&PostParams::default(), &kubelet_node(&c, "10.244.3.0/24"))
        .await
        .unwrap();
    wait_until(TIMEOUT, "the new node's instance registered", || async {
        classic_instances(moto, &lb_name)
            .await
            .is_some_and(|t| t.contains(&c.id) && t.len() == 3)
    })
    .await;

    // Lifecycle: a terminated instance's NotReady node is deleted, a stopped one tainted.
    moto.call(
        moto::Service::Ec2,
        "TerminateInstances",
        &[("InstanceId.1", &a.id)],
    )
    .await;
    moto.call(
        moto::Service::Ec2,
        "StopInstances",
        &[("InstanceId.1", &b.id)],
    )
    .await;
    set_ready(&nodes, &a.private_dns_name, "False").await;
    set_ready(&nodes, &b.private_dns_name, "False").await;
    wait_until(
        TIMEOUT,
        "the terminated instance's node deleted",
        || async { nodes.get_opt(&a.private_dns_name).await.unwrap().is_none() },
    )
    .await;
    wait_until(TIMEOUT, "the stopped instance's node tainted", || async {
        nodes
            .get(&b.private_dns_name)
            .await
            .is_ok_and(|n| taint_keys(&n).contains(&SHUTDOWN.to_string()))
    })
    .await;
    wait_until(
        TIMEOUT,
        "the deleted node's instance deregistered",
        || async {
            classic_instances(moto, &lb_name)
                .await
                .is_some_and(|t| !t.contains(&a.id))
        },
    )
    .await;

    // A Service that stops being a LoadBalancer (its node ports gone) loses its load
    // balancer and security group.
    let (_, _, api_lb) = create_service(&services, &service_with("api", json!({}), 443)).await;
    wait_until(TIMEOUT, "the second Service's load balancer", || async {
        classic_instances(moto, &api_lb)
            .await
            .is_some_and(|t| !t.is_empty())
    })
    .await;
    let api_group = classic::own_group(moto, &api_lb).await.unwrap();
    services
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 443, "targetPort": 8080, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "the ClusterIP Service's load balancer and group deleted",
        || async {
            classic_instances(moto, &api_lb).await.is_none()
                && moto.ingress(&api_group).await.is_none()
        },
    )
    .await;
    assert!(!classic::admits(moto, &world.node_security_group, &api_group).await);
    assert!(
        classic::admits(moto, &world.node_security_group, &lb_group).await,
        "the other Service's rule stays"
    );

    // Deleting the Service removes the load balancer, its group and the nodes' rule.
    delete_and_wait(&services, "web").await;
    assert_eq!(classic_instances(moto, &lb_name).await, None);
    assert_eq!(moto.ingress(&lb_group).await, None);
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start()),
        "the nodes' group is as the world made it"
    );
}

/// One instance with its Node, moto checking signatures against the provider's
/// declared policy, and the controller manager running until the Node is initialized.
async fn one_node_initialized(stack: &AwsStack) -> (moto::LaunchedInstance, tokio::process::Child) {
    let (moto, world) = (&stack.moto, &stack.world);
    let a = world.launch(moto, 0).await;
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node(&a, "10.244.1.0/24"))
        .await
        .unwrap();
    stack.policy(Auth::Static(&world.provider));
    moto.enable_auth(0).await;
    let ccm = stack
        .controller_manager(listening_port(), &["--leader-elect=false"])
        .spawn()
        .unwrap();
    wait_until(TIMEOUT, "node initialized", || {
        initialized(&nodes, &a.private_dns_name)
    })
    .await;
    (a, ccm)
}
