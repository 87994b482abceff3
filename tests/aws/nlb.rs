//! Network Load Balancers (`aws-load-balancer-type: nlb`) against moto with the
//! documented IAM policy.

use super::*;

/// A controller manager stopped (SIGKILL) in the middle of deleting a Service's
/// Network Load Balancer leaves nothing behind in AWS: the load balancer went, its
/// target group could not (the provider's user is denied `DeleteTargetGroup` for a
/// while), the Service kept its finalizer; the next start deletes the target group
/// (found by its tags) and releases the Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_delete_leaves_nothing_behind() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let a = world.launch(moto, 0).await;
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node(&a, "10.244.1.0/24"))
        .await
        .unwrap();
    // Deleting target groups is denied for now (set before moto checks signatures: its
    // check of a signed policy document fails).
    let deny = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"elasticloadbalancing:DeleteTargetGroup","Resource":"*"}]}"#;
    moto.call(
        moto::Service::Iam,
        "PutUserPolicy",
        &[
            ("UserName", "wasm-ccm"),
            ("PolicyName", "deny-delete-target-group"),
            ("PolicyDocument", deny),
        ],
    )
    .await;
    stack.policy(Auth::Static(&world.provider));
    moto.enable_auth(0).await;
    let port = listening_port();
    let mut ccm = stack
        .controller_manager(port, &["--leader-elect=false"])
        .spawn()
        .unwrap();
    wait_until(TIMEOUT, "the node initialized", || {
        initialized(&nodes, &a.private_dns_name)
    })
    .await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let (_, _, lb_name) = create_service(
        &services,
        &service_with("web", annotations(&[("type", json!("nlb"))]), 80),
    )
    .await;
    wait_until(
        TIMEOUT,
        "the load balancer and its target group",
        || async {
            registered_targets(moto, &lb_name)
                .await
                .is_some_and(|t| !t.is_empty())
        },
    )
    .await;

    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "the load balancer deleted, its target group not",
        || async {
            registered_targets(moto, &lb_name).await.is_none()
                && !target_group_names(moto).await.is_empty()
        },
    )
    .await;
    ccm.kill().await.unwrap();
    assert!(
        services.get("web").await.is_ok(),
        "the finalizer holds the Service"
    );
    moto.call(
        moto::Service::Iam,
        "DeleteUserPolicy",
        &[
            ("UserName", "wasm-ccm"),
            ("PolicyName", "deny-delete-target-group"),
        ],
    )
    .await;
    let mut ccm = stack
        .controller_manager(port, &["--leader-elect=false"])
        .spawn()
        .unwrap();
    wait_until(
        TIMEOUT,
        "the Service gone and nothing left in AWS",
        || async {
            services.get("web").await.is_err() && target_group_names(moto).await.is_empty()
        },
    )
    .await;
    ccm.kill().await.unwrap();
}

/// The attributes (`Key`/`Value` pairs) of a `Describe…Attributes` answer.
fn attributes(xml: &str) -> Vec<(String, String)> {
    moto::texts(xml, "Key")
        .into_iter()
        .zip(moto::texts(xml, "Value"))
        .collect()
}

/// Network Load Balancer options as upstream applies them, against moto with the
/// documented IAM policy: cross-zone load balancing and access logs set on the load
/// balancer and turned off again when the annotations go, proxy protocol v2 on its
/// target group; Elastic IPs that do not match the subnets, target group attributes
/// upstream does not allow, and TCP 53 with UDP 53 (on an NLB or a Classic load
/// balancer: upstream's `checkMixedProtocol`) are refused before anything is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nlb_options_reach_the_load_balancer_and_its_target_groups() {
    let stack = AwsStack::start(CLUSTER).await;
    let moto = &stack.moto;
    let _ccm = one_node_initialized(&stack).await;

    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let service = |name: &str, mut annotations: serde_json::Value| -> Service {
        annotations["service.beta.kubernetes.io/aws-load-balancer-type"] = json!("nlb");
        service_with(name, annotations, 80)
    };
    let (_, _, lb_name) = create_service(
        &services,
        &service(
            "options",
            annotations(&[
                ("cross-zone-load-balancing-enabled", json!("true")),
                ("access-log-enabled", json!("true")),
                ("access-log-s3-bucket-name", json!("lb-logs")),
                ("access-log-s3-bucket-prefix", json!("options")),
                (
                    "target-group-attributes",
                    json!("proxy_protocol_v2.enabled=true"),
                ),
            ]),
        ),
    )
    .await;
    let lb_attributes = || async {
        let Some(arn) = nlb_arn(moto, &lb_name).await else {
            return Vec::new();
        };
        moto.try_call(
            moto::Service::Elbv2,
            "DescribeLoadBalancerAttributes",
            &[("LoadBalancerArn", &arn)],
        )
        .await
        .map(|xml| attributes(&xml))
        .unwrap_or_default()
    };
    let has = |attributes: &[(String, String)], key: &str, value: &str| {
        attributes.iter().any(|(k, v)| k == key && v == value)
    };
    wait_until(TIMEOUT, "cross-zone and access logs on", || async {
        let current = lb_attributes().await;
        has(&current, "load_balancing.cross_zone.enabled", "true")
            && has(&current, "access_logs.s3.enabled", "true")
            && has(&current, "access_logs.s3.bucket", "lb-logs")
            && has(&current, "access_logs.s3.prefix", "options")
    })
    .await;
    let arn = nlb_arn(moto, &lb_name).await.unwrap();
    let group_attributes = target_group_attribute_answers(moto, &arn).await.remove(0);
    assert!(
        has(
            &attributes(&group_attributes),
            "proxy_protocol_v2.enabled",
            "true"
        ),
        "{group_attributes}"
    );

    // The annotations removed: cross-zone and access logs off again (upstream's
    // defaults); the bucket is left as it was.
    services
        .patch(
            "options",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations(&[
                ("cross-zone-load-balancing-enabled", json!(null)),
                ("access-log-enabled", json!(null)),
            ])}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "cross-zone and access logs off", || async {
        let current = lb_attributes().await;
        has(&current, "load_balancing.cross_zone.enabled", "false")
            && has(&current, "access_logs.s3.enabled", "false")
    })
    .await;

    // Refused before anything is created, with upstream's messages.
    for (name, annotation, value, message) in [
        (
            "eips",
            "eip-allocations",
            "eipalloc-1,eipalloc-2,eipalloc-3,eipalloc-4,eipalloc-5,eipalloc-6,eipalloc-7",
            "Must have same number of EIP AllocationIDs (7) and SubnetIDs",
        ),
        (
            "attributes",
            "target-group-attributes",
            "deregistration_delay.timeout_seconds=10",
            "is not supported by the controller or is invalid",
        ),
    ] {
        services
            .create(
                &PostParams::default(),
                &service(name, annotations(&[(annotation, json!(value))])),
            )
            .await
            .unwrap();
        refused(stack.client(), name, message).await;
    }
    let mut mixed_classic = String::new();
    for (name, kind) in [("dns", Some("nlb")), ("dns-classic", None)] {
        let mut dns: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "LoadBalancer",
                     "ports": [{"name": "dns-tcp", "port": 53, "targetPort": 53, "protocol": "TCP"},
                               {"name": "dns-udp", "port": 53, "targetPort": 53, "protocol": "UDP"}]},
        }))
        .unwrap();
        if let Some(kind) = kind {
            dns.metadata.annotations = Some(
                [(
                    "service.beta.kubernetes.io/aws-load-balancer-type".to_owned(),
                    kind.to_owned(),
                )]
                .into(),
            );
        }
        let (_, _, lb) = create_service(&services, &dns).await;
        refused(
            stack.client(),
            name,
            "mixed protocol is not supported for LoadBalancer",
        )
        .await;
        if kind.is_none() {
            mixed_classic = lb;
        }
    }
    assert_eq!(load_balancer_names(moto).await, [lb_name]);
    assert_eq!(classic_load_balancer(moto, &mixed_classic).await, None);
    assert_eq!(classic::own_group(moto, &mixed_classic).await, None);
}

/// An NLB as upstream secures it: a TLS listener with the certificate and policy on
/// the `ssl-ports`, proxy protocol v2 on the target groups, and the nodes' group
/// admitting the source ranges on each node port (described as this load balancer's
/// client rules), the load balancer's subnets on the health check ports, and ICMP
/// "fragmentation needed" from the clients. Opening the Service to everyone replaces
/// the client rules and drops the health rules the client rules now cover; deleting
/// leaves the nodes' group as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nlb_node_security_group_rules_tls_and_proxy_protocol() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let _ccm = one_node_initialized(&stack).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let cert = "arn:aws:iam::123456789012:server-certificate/web";
    let policy = "ELBSecurityPolicy-TLS13-1-2-2021-06";
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "secure", "namespace": "default", "annotations": annotations(&[
            ("type", json!("nlb")),
            ("ssl-cert", json!(cert)),
            ("ssl-ports", json!("443")),
            ("ssl-negotiation-policy", json!(policy)),
            ("proxy-protocol", json!("*")),
        ])},
        "spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["203.0.113.0/24"],
                 "ports": [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"},
                           {"name": "dns", "port": 53, "targetPort": 53, "protocol": "TCP"}]},
    }))
    .unwrap();
    let (_, node_ports, lb_name) = create_service(&services, &service).await;
    // One protocol: upstream refuses a Service mixing TCP and UDP.
    let (tcp, dns) = (node_ports[0].clone(), node_ports[1].clone());
    let client = format!("kubernetes.io/rule/nlb/client={lb_name}");
    let health = format!("kubernetes.io/rule/nlb/health={lb_name}");
    let mtu = "kubernetes.io/rule/nlb/mtu";
    let rule = |protocol: &str, port: &str, source: &str, description: &str| moto::IngressRule {
        protocol: protocol.into(),
        from: port.into(),
        to: port.into(),
        source: source.into(),
        description: description.into(),
    };
    let icmp = |source: &str| moto::IngressRule {
        protocol: "icmp".into(),
        from: "3".into(),
        to: "4".into(),
        source: source.into(),
        description: mtu.into(),
    };
    let mut expected = world.node_rules_at_start();
    expected.extend([
        rule("tcp", &tcp, "203.0.113.0/24", &client),
        rule("tcp", &dns, "203.0.113.0/24", &client),
        icmp("203.0.113.0/24"),
    ]);
    for cidr in &world.subnet_cidrs {
        expected.push(rule("tcp", &tcp, cidr, &health));
        expected.push(rule("tcp", &dns, cidr, &health));
    }
    expected.sort();
    wait_until(
        TIMEOUT,
        "the nodes' group admits clients and health checks",
        || async { moto.ingress(&world.node_security_group).await == Some(expected.clone()) },
    )
    .await;
    let arn = nlb_arn(moto, &lb_name).await.unwrap();
    let params = [("LoadBalancerArn", arn.as_str())];
    let describe_listeners = || moto.call(moto::Service::Elbv2, "DescribeListeners", &params);
    wait_until(TIMEOUT, "both listeners", || async {
        moto::texts(&describe_listeners().await, "ListenerArn").len() == 2
    })
    .await;
    let listeners = describe_listeners().await;
    let protocols: Vec<(String, String)> = moto::texts(&listeners, "Port")
        .into_iter()
        .zip(moto::texts(&listeners, "Protocol"))
        .collect();
    assert!(
        protocols.contains(&("443".into(), "TLS".into())),
        "{listeners}"
    );
    assert!(
        protocols.contains(&("53".into(), "TCP".into())),
        "{listeners}"
    );
    assert_eq!(moto::texts(&listeners, "CertificateArn"), [cert]);
    assert!(moto::texts(&listeners, "SslPolicy").contains(&policy.to_owned()));
    for group_attributes in target_group_attribute_answers(moto, &arn).await {
        assert!(
            attributes(&group_attributes)
                .contains(&("proxy_protocol_v2.enabled".into(), "true".into())),
            "{group_attributes}"
        );
    }

    // Open to everyone: the client rules follow; each port's health rule is covered by
    // its client rule now.
    services
        .patch(
            "secure",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"loadBalancerSourceRanges": null}})),
        )
        .await
        .unwrap();
    let mut expected = world.node_rules_at_start();
    expected.extend([
        rule("tcp", &tcp, "0.0.0.0/0", &client),
        rule("tcp", &dns, "0.0.0.0/0", &client),
        icmp("0.0.0.0/0"),
    ]);
    expected.sort();
    wait_until(TIMEOUT, "the rules follow the Service", || async {
        moto.ingress(&world.node_security_group).await == Some(expected.clone())
    })
    .await;

    delete_and_wait(&services, "secure").await;
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start())
    );
    assert!(load_balancer_names(moto).await.is_empty());
}

/// The cloud config's `ClusterServiceLoadBalancerHealthProbeMode = Shared`, as the README
/// gives it: both kinds check kube-proxy's health port (10256, `/healthz`) over HTTP
/// instead of the node ports, and the nodes' group admits the NLB's subnets on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_health_probe_from_the_cloud_config() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    stack.add_global("ClusterServiceLoadBalancerHealthProbeMode = Shared\n");
    let _ccm = one_node_initialized(&stack).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let (_, _, nlb) = create_service(
        &services,
        &service_with("probed-nlb", annotations(&[("type", json!("nlb"))]), 80),
    )
    .await;
    let (_, _, classic) =
        create_service(&services, &service_with("probed-classic", json!({}), 80)).await;
    wait_until(
        TIMEOUT,
        "the Classic health check on the shared probe",
        || async {
            classic_load_balancer(moto, &classic)
                .await
                .is_some_and(|lb| lb.contains("<Target>HTTP:10256/healthz</Target>"))
        },
    )
    .await;
    let health = format!("kubernetes.io/rule/nlb/health={nlb}");
    wait_until(
        TIMEOUT,
        "the NLB's target group and the nodes' health rules",
        || async {
            let groups = match moto
                .try_call(moto::Service::Elbv2, "DescribeTargetGroups", &[])
                .await
            {
                Ok(xml) => xml,
                Err(_) => return false,
            };
            let rules = moto
                .ingress(&world.node_security_group)
                .await
                .unwrap_or_default();
            moto::texts(&groups, "HealthCheckPort").contains(&"10256".to_owned())
                && moto::texts(&groups, "HealthCheckProtocol").contains(&"HTTP".to_owned())
                && world.subnet_cidrs.iter().all(|cidr| {
                    rules
                        .iter()
                        .any(|r| r.from == "10256" && r.source == *cidr && r.description == health)
                })
        },
    )
    .await;
}
