//! Classic Load Balancers, upstream's default, against moto with the documented IAM
//! policy.

use super::*;

/// The ID of Classic load balancer `lb`'s own security group (`k8s-elb-<lb>`).
pub async fn own_group(moto: &Moto, lb: &str) -> Option<String> {
    let xml = moto
        .call(
            moto::Service::Ec2,
            "DescribeSecurityGroups",
            &[
                ("Filter.1.Name", "group-name"),
                ("Filter.1.Value.1", &format!("k8s-elb-{lb}")),
            ],
        )
        .await;
    moto::texts(&xml, "groupId").into_iter().next()
}

/// Whether security group `group` admits every protocol from group `source`.
pub async fn admits(moto: &Moto, group: &str, source: &str) -> bool {
    moto.ingress(group)
        .await
        .unwrap_or_default()
        .iter()
        .any(|r| r.protocol == "-1" && r.source == source)
}

/// `(protocol, from, to, source)` of each rule of `group`.
async fn rules(moto: &Moto, group: &str) -> Vec<(String, String, String, String)> {
    moto.ingress(group)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.protocol, r.from, r.to, r.source))
        .collect()
}

/// The policy names set on `list` (`ListenerDescriptions` or
/// `BackendServerDescriptions`) of a load balancer description.
fn policies(xml: &str, list: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(xml).unwrap();
    doc.descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == list)
        .flat_map(|l| l.descendants())
        .filter(|n| n.is_element() && n.tag_name().name() == "PolicyNames")
        .flat_map(|p| p.children())
        .filter_map(|m| m.text().map(|t| t.trim().to_owned()))
        .filter(|t| !t.is_empty())
        .collect()
}

fn rule(protocol: &str, from: &str, to: &str, source: &str) -> (String, String, String, String) {
    (protocol.into(), from.into(), to.into(), source.into())
}

/// What users of cloud-provider-aws put on a Classic load balancer, as upstream does
/// it: an SSL listener on the `ssl-ports` with the certificate and the negotiation
/// policy, a plain TCP one elsewhere, the proxy protocol on the node ports, the
/// attributes, an SSL health check for an `ssl` backend, the load balancer's own group
/// admitting only the source ranges (and ICMP "fragmentation needed"), the nodes' group
/// admitting the load balancer's. Changing the ranges and dropping the proxy protocol
/// follow; changing the kind afterwards is refused, and deleting the Service then
/// still leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_proxy_protocol_attributes_and_source_ranges_as_upstream() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let (a, _ccm) = one_node_initialized(&stack).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let cert = "arn:aws:iam::123456789012:server-certificate/web";
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "tls", "namespace": "default", "annotations": annotations(&[
            ("ssl-cert", json!(cert)),
            ("ssl-ports", json!("https")),
            ("backend-protocol", json!("ssl")),
            ("ssl-negotiation-policy", json!("ELBSecurityPolicy-TLS-1-2-2017-01")),
            ("proxy-protocol", json!("*")),
            ("connection-draining-enabled", json!("true")),
            ("connection-draining-timeout", json!("30")),
            ("connection-idle-timeout", json!("120")),
            ("cross-zone-load-balancing-enabled", json!("true")),
        ])},
        "spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["203.0.113.7/24"],
                 "ports": [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"},
                           {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    }))
    .unwrap();
    let (_, node_ports, lb_name) = create_service(&services, &service).await;
    let (https_node_port, http_node_port) = (node_ports[0].clone(), node_ports[1].clone());
    wait_until(TIMEOUT, "the load balancer with its instance", || async {
        classic_instances(moto, &lb_name).await == Some(vec![a.id.clone()])
    })
    .await;
    let lb = classic_load_balancer(moto, &lb_name).await.unwrap();
    // Upper case, as AWS answers (moto repeats the listener protocol as the instance
    // protocol, so only the front end is checked here).
    let listeners: Vec<(String, String, String)> = moto::texts(&lb, "Protocol")
        .into_iter()
        .zip(moto::texts(&lb, "LoadBalancerPort"))
        .zip(moto::texts(&lb, "InstancePort"))
        .map(|((p, l), i)| (p.to_ascii_uppercase(), l, i))
        .collect();
    assert!(
        listeners.contains(&("SSL".into(), "443".into(), https_node_port.clone())),
        "{lb}"
    );
    assert!(
        listeners.contains(&("TCP".into(), "80".into(), http_node_port.clone())),
        "{lb}"
    );
    assert_eq!(moto::texts(&lb, "SSLCertificateId"), [cert]);
    assert_eq!(
        moto::text(&lb, "Target"),
        format!("SSL:{https_node_port}"),
        "the first listener's node port, SSL for an ssl backend"
    );
    let policy = "k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01";
    wait_until(TIMEOUT, "policies and attributes set", || async {
        let Some(lb) = classic_load_balancer(moto, &lb_name).await else {
            return false;
        };
        let a = moto
            .call(
                moto::Service::Elb,
                "DescribeLoadBalancerAttributes",
                &[("LoadBalancerName", &lb_name)],
            )
            .await;
        policies(&lb, "ListenerDescriptions") == [policy]
            && policies(&lb, "BackendServerDescriptions")
                == ["k8s-proxyprotocol-enabled", "k8s-proxyprotocol-enabled"]
            && moto::text_at(&a, &["ConnectionSettings", "IdleTimeout"]) == "120"
            && moto::text_at(&a, &["ConnectionDraining", "Enabled"]) == "true"
            && moto::text_at(&a, &["ConnectionDraining", "Timeout"]) == "30"
            && moto::text_at(&a, &["CrossZoneLoadBalancing", "Enabled"]) == "true"
            && moto::text_at(&a, &["AccessLog", "Enabled"]) == "false"
    })
    .await;
    let lb_group = own_group(moto, &lb_name)
        .await
        .expect("the load balancer's group");
    let range = "203.0.113.0/24";
    assert_eq!(
        rules(moto, &lb_group).await,
        [
            rule("icmp", "3", "4", range),
            rule("tcp", "443", "443", range),
            rule("tcp", "80", "80", range),
        ]
    );
    assert!(admits(moto, &world.node_security_group, &lb_group).await);

    // Other ranges replace the old ones; the proxy protocol removed is cleared.
    services
        .patch(
            "tls",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": annotations(&[("proxy-protocol", json!(null))])},
                "spec": {"loadBalancerSourceRanges": ["198.51.100.0/24"]}})),
        )
        .await
        .unwrap();
    let range = "198.51.100.0/24";
    wait_until(TIMEOUT, "new ranges, no proxy protocol", || async {
        let proxied = classic_load_balancer(moto, &lb_name)
            .await
            .is_some_and(|lb| !policies(&lb, "BackendServerDescriptions").is_empty());
        rules(moto, &lb_group).await
            == [
                rule("icmp", "3", "4", range),
                rule("tcp", "443", "443", range),
                rule("tcp", "80", "80", range),
            ]
            && !proxied
    })
    .await;

    // The kind is fixed once made (upstream's validation).
    services
        .patch(
            "tls",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": annotations(&[("type", json!("nlb"))])}}),
            ),
        )
        .await
        .unwrap();
    refused(stack.client(), "tls", "cannot update Load Balancer Type").await;
    assert!(classic_load_balancer(moto, &lb_name).await.is_some());
    assert!(load_balancer_names(moto).await.is_empty(), "no NLB made");

    // Deleted while it asks for the other kind: the Classic load balancer goes all the
    // same.
    delete_and_wait(&services, "tls").await;
    assert_eq!(classic_load_balancer(moto, &lb_name).await, None);
    assert_eq!(moto.ingress(&lb_group).await, None);
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start())
    );
}

/// What neither kind can serve is refused with upstream's message before anything is
/// made: a UDP port on a Classic load balancer, a source range that is not one, a proxy
/// protocol other than `*`, a health check AWS would refuse, target group attributes
/// on a Classic load balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_before_anything_is_made() {
    let stack = AwsStack::start(CLUSTER).await;
    let moto = &stack.moto;
    let _ccm = one_node_initialized(&stack).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let udp: Service = serde_json::from_value(json!({
        "metadata": {"name": "udp", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "dns", "port": 53, "targetPort": 53, "protocol": "UDP"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &udp).await.unwrap();
    refused(
        stack.client(),
        "udp",
        "Protocol UDP not supported by LoadBalancer",
    )
    .await;
    let mut ranged = service_with("ranged", json!({}), 80);
    ranged.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["203.0.113.0".into()]);
    services
        .create(&PostParams::default(), &ranged)
        .await
        .unwrap();
    refused(
        stack.client(),
        "ranged",
        "spec.loadBalancerSourceRanges: 203.0.113.0 is not valid",
    )
    .await;
    for (name, suffix, value, message) in [
        (
            "proxy",
            "proxy-protocol",
            "80",
            "the only value supported currently is '*'",
        ),
        (
            "health",
            "healthcheck-timeout",
            "1",
            "HealthCheck validation errors",
        ),
        (
            "groups",
            "target-group-attributes",
            "preserve_client_ip.enabled=true",
            "target group attributes annotation is only supported for NLB",
        ),
    ] {
        services
            .create(
                &PostParams::default(),
                &service_with(name, annotations(&[(suffix, json!(value))]), 80),
            )
            .await
            .unwrap();
        refused(stack.client(), name, message).await;
    }
    let classic = moto.classic_load_balancer_names().await.unwrap();
    assert!(classic.is_empty(), "{classic:?}");
    assert!(load_balancer_names(moto).await.is_empty());
    for name in ["udp", "ranged", "proxy", "health", "groups"] {
        let service = services.get(name).await.unwrap();
        let lb = default_load_balancer_name(&service);
        assert_eq!(
            own_group(moto, &lb).await,
            None,
            "{name}: no security group"
        );
    }
}

/// `security-groups` replaces the load balancer's own group (none is made) and
/// `extra-security-groups` adds to it, as upstream: the nodes' group admits the first
/// annotated group. Two Services behind one group share the nodes' rule: moving one to
/// another group or deleting it leaves the shared rule (described for the other once
/// the one it named moved), deleting the other revokes it; the user's groups and rules
/// stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_security_groups_are_used_as_they_are() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let mut groups = Vec::new();
    for name in ["users-lb", "users-extra"] {
        groups.push(world.security_group(moto, name, "the user's").await);
    }
    let (a, _ccm) = one_node_initialized(&stack).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let (_, _, lb_name) = create_service(
        &services,
        &service_with(
            "annotated",
            annotations(&[
                ("security-groups", json!(format!(" {} ,", groups[0]))),
                ("extra-security-groups", json!(groups[1])),
            ]),
            80,
        ),
    )
    .await;
    wait_until(TIMEOUT, "the load balancer with its instance", || async {
        classic_instances(moto, &lb_name).await == Some(vec![a.id.clone()])
    })
    .await;
    let lb = classic_load_balancer(moto, &lb_name).await.unwrap();
    for group in &groups {
        assert!(lb.contains(&format!("<member>{group}</member>")), "{lb}");
    }
    assert_eq!(own_group(moto, &lb_name).await, None, "no group of its own");
    let node_rules = moto.ingress(&world.node_security_group).await.unwrap();
    let mut expected = world.node_rules_at_start();
    expected.push(moto::IngressRule {
        protocol: "-1".into(),
        from: String::new(),
        to: String::new(),
        source: groups[0].clone(),
        description: format!("kubernetes.io/rule/elb={lb_name}"),
    });
    expected.sort();
    assert_eq!(node_rules, expected);

    // A second Service behind the same group: the nodes need the one rule for both,
    // and it stays while either load balancer is there.
    let (_, _, second_lb) = create_service(
        &services,
        &service_with(
            "annotated-2",
            annotations(&[("security-groups", json!(groups[0]))]),
            81,
        ),
    )
    .await;
    wait_until(TIMEOUT, "the second load balancer", || async {
        classic_instances(moto, &second_lb).await == Some(vec![a.id.clone()])
    })
    .await;

    // The first moves to the other group: the nodes admit it too, and keep admitting
    // the shared one for the second.
    services
        .patch(
            "annotated",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations(&[
                ("security-groups", json!(groups[1])),
                ("extra-security-groups", json!(null)),
            ])}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the nodes admit the first's new group", || async {
        admits(moto, &world.node_security_group, &groups[1]).await
    })
    .await;
    assert!(admits(moto, &world.node_security_group, &groups[0]).await);
    let kept_for_second = format!("kubernetes.io/rule/elb={second_lb}");
    wait_until(
        TIMEOUT,
        "the shared rule described for the second",
        || async {
            moto.ingress(&world.node_security_group)
                .await
                .unwrap_or_default()
                .iter()
                .any(|r| r.source == groups[0] && r.description == kept_for_second)
        },
    )
    .await;
    assert_eq!(
        moto.ingress(&groups[0]).await,
        Some(Vec::new()),
        "left as it was"
    );

    delete_and_wait(&services, "annotated").await;
    assert_eq!(classic_load_balancer(moto, &lb_name).await, None);
    assert!(
        admits(moto, &world.node_security_group, &groups[0]).await,
        "the other Service's load balancer still reaches the nodes"
    );
    assert!(
        !admits(moto, &world.node_security_group, &groups[1]).await,
        "the first's own rule went with it"
    );
    delete_and_wait(&services, "annotated-2").await;
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start())
    );
    for group in &groups {
        assert_eq!(moto.ingress(group).await, Some(Vec::new()), "{group} stays");
    }
}

/// Two Classic load balancers behind one group of the user's share the nodes' rule
/// admitting it, described for the first. Deleting the first keeps the rule for the
/// second (cloud-provider-aws revokes it, and the second loses the nodes until its next
/// sync: a difference guests/aws/README.md lists) and describes it for the second, so
/// the description names a load balancer that is there; deleting the second revokes
/// it. The user's group stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_groups_rule_is_kept_and_described_for_the_load_balancer_left() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let shared = world
        .security_group(moto, "users-shared", "the user's, for two load balancers")
        .await;
    let (a, _ccm) = one_node_initialized(&stack).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let behind_shared = |name: &str, port: i32| {
        service_with(
            name,
            annotations(&[("security-groups", json!(shared))]),
            port,
        )
    };
    // The nodes' rule from the shared group, described for load balancer `lb`, beside
    // the rules the world made.
    let nodes_admit_shared_for = |lb: &str| {
        let mut rules = world.node_rules_at_start();
        rules.push(moto::IngressRule {
            protocol: "-1".into(),
            from: String::new(),
            to: String::new(),
            source: shared.clone(),
            description: format!("kubernetes.io/rule/elb={lb}"),
        });
        rules.sort();
        Some(rules)
    };
    let (_, _, first) = create_service(&services, &behind_shared("first", 80)).await;
    wait_until(TIMEOUT, "the nodes admit the shared group", || async {
        moto.ingress(&world.node_security_group).await == nodes_admit_shared_for(&first)
    })
    .await;
    let (_, _, second) = create_service(&services, &behind_shared("second", 81)).await;
    wait_until(TIMEOUT, "the second load balancer", || async {
        classic_instances(moto, &second).await == Some(vec![a.id.clone()])
    })
    .await;
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        nodes_admit_shared_for(&first),
        "one rule for both"
    );

    delete_and_wait(&services, "first").await;
    assert_eq!(classic_load_balancer(moto, &first).await, None);
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        nodes_admit_shared_for(&second),
        "kept for the second, and described for it"
    );

    delete_and_wait(&services, "second").await;
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start())
    );
    assert_eq!(
        moto.ingress(&shared).await,
        Some(Vec::new()),
        "the user's group stays as it was"
    );
}

/// The cloud config's `ElbSecurityGroup` and `DisableSecurityGroupIngress`, as the
/// README gives them: every Classic load balancer uses the named group as it is (none of
/// its own), and the nodes' groups are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_configs_group_and_no_ingress_changes() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let group = world
        .security_group(moto, "all-elbs", "every load balancer's")
        .await;
    stack.add_global(&format!(
        "ElbSecurityGroup = {group}\nDisableSecurityGroupIngress = true\n"
    ));
    let (a, _ccm) = one_node_initialized(&stack).await;
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    let (_, _, lb_name) = create_service(&services, &service_with("plain", json!({}), 80)).await;
    wait_until(TIMEOUT, "the load balancer with its instance", || async {
        classic_instances(moto, &lb_name).await == Some(vec![a.id.clone()])
    })
    .await;
    let lb = classic_load_balancer(moto, &lb_name).await.unwrap();
    assert!(lb.contains(&format!("<member>{group}</member>")), "{lb}");
    assert_eq!(own_group(moto, &lb_name).await, None);
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start())
    );
    delete_and_wait(&services, "plain").await;
    assert_eq!(classic_load_balancer(moto, &lb_name).await, None);
    assert_eq!(
        moto.ingress(&group).await,
        Some(Vec::new()),
        "the group stays"
    );
}
