//! What the docs and `deploy/aws/` give users, run as given: a wrong secret, web
//! identity credentials through STS, the kustomization rendering and loading,
//! `wasm-ccm conformance`, the documented IAM policy, and actions outside it refused
//! before signing.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_refused_by_aws_and_nothing_is_deleted() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let a = world.launch(moto, 0).await;
    moto.call(
        moto::Service::Ec2,
        "TerminateInstances",
        &[("InstanceId.1", &a.id)],
    )
    .await;
    // A NotReady node of a terminated instance: a working provider would delete it.
    let nodes: Api<Node> = Api::all(stack.client());
    let mut node = kubelet_node(&a, "10.244.1.0/24");
    node.spec.as_mut().unwrap().taints = None;
    node.spec.as_mut().unwrap().provider_id = Some(format!("aws:///{}/{}", a.zone, a.id));
    nodes.create(&PostParams::default(), &node).await.unwrap();
    set_ready(&nodes, &a.private_dns_name, "False").await;
    let wrong = Keys {
        secret: "not-the-secret".into(),
        ..world.provider.clone()
    };
    stack.policy(Auth::Static(&wrong));
    moto.enable_auth(0).await;
    let port = listening_port();
    let (_ccm, log) = stack.controller_manager_logged(port);
    wait_until(TIMEOUT, "AWS refusing the signature", || async {
        log.lock().unwrap().contains("AuthFailure")
    })
    .await;
    // Several lifecycle passes later, the node is still there.
    let metrics_port = port;
    wait_until(TIMEOUT, "several failed lifecycle passes", || async {
        let text = wasm_ccm_tests::metrics(metrics_port).await;
        wasm_ccm_tests::reconciles(&text, "cloud-node-lifecycle", "error") >= 3.0
    })
    .await;
    assert!(nodes.get_opt(&a.private_dns_name).await.unwrap().is_some());
    let log = log.lock().unwrap().clone();
    assert!(
        !log.contains("not-the-secret"),
        "the secret the host held leaked into the log"
    );
    // A log written to a pipe carries no terminal colour codes.
    assert!(log.contains("ERROR"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "colour codes in a piped log: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_identity_credentials_come_from_sts() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let a = world.launch(moto, 0).await;
    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node(&a, "10.244.1.0/24"))
        .await
        .unwrap();
    let token = "eyJhbGciOiJSUzI1NiJ9.web-identity-token.sig";
    stack.policy(Auth::WebIdentity {
        role_arn: &world.role_arn,
        token,
    });
    // AssumeRoleWithWebIdentity is unsigned (the token is the proof), which moto's
    // authentication cannot tell apart: the one free request is the host's exchange.
    moto.enable_auth(1).await;
    let port = listening_port();
    let (_ccm, log) = stack.controller_manager_logged(port);
    wait_until(
        TIMEOUT,
        "node initialized with temporary credentials",
        || initialized(&nodes, &a.private_dns_name),
    )
    .await;
    let node = nodes.get(&a.private_dns_name).await.unwrap();
    assert_eq!(
        node.spec.unwrap().provider_id.as_deref(),
        Some(format!("aws:///{}/{}", a.zone, a.id).as_str())
    );
    assert!(
        !log.lock().unwrap().contains(token),
        "the token leaked into the log"
    );
}

/// `kubectl kustomize deploy/aws/` renders, and the provider loads with its policy and
/// cloud config (initialize parses the cloud config; nothing is sent).
#[tokio::test]
async fn the_deploy_aws_example_renders_and_loads() {
    let wasm_ccm_tests::RenderedExample {
        policy,
        cloud_conf,
        deployment,
    } = wasm_ccm_tests::rendered_example("aws", "aws");
    let sources = &deployment["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"];
    assert_eq!(
        sources[1]["serviceAccountToken"]["audience"],
        "sts.amazonaws.com"
    );

    let dir = TempDir::new("deploy-aws");
    std::fs::copy(guest("aws_provider"), dir.path().join("aws.wasm")).unwrap();
    std::fs::write(dir.path().join("aws.yaml"), policy).unwrap();
    let provider = wasm_ccm_tests::loader()
        .load(&dir.path().join("aws.wasm"), cloud_conf.into_bytes())
        .await
        .unwrap_or_else(|e| panic!("loading the AWS provider with deploy/aws's files: {e}"));
    assert_eq!(provider.name(), "aws");
}

/// `wasm-ccm conformance` on the AWS provider against moto with authentication on:
/// instances, a Classic and a Network Load Balancer each created, updated and deleted
/// twice, and a route created and deleted twice, all passing; nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_passes_for_the_aws_provider() {
    let stack = AwsStack::start(CLUSTER).await;
    let (moto, world) = (&stack.moto, &stack.world);
    let a = world.launch(moto, 0).await;
    let b = world.launch(moto, 1).await;
    stack.policy(Auth::Static(&world.provider));
    moto.enable_auth(0).await;
    // cloud-provider-aws leaves `aws-load-balancer-type: external` to the AWS Load
    // Balancer Controller.
    let elsewhere = stack.dir.path().join("elsewhere.json");
    std::fs::write(
        &elsewhere,
        serde_json::json!({"metadata": {"name": "elsewhere", "namespace": "default",
               "annotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "external"}},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30081, "protocol": "TCP"}]}})
        .to_string(),
    )
    .unwrap();
    // Both kinds: upstream's default (Classic) and `type: nlb`.
    for (kind, annotations) in [
        ("classic", json!({})),
        (
            "nlb",
            json!({"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}),
        ),
    ] {
        let service = stack.dir.path().join(format!("{kind}.json"));
        std::fs::write(
            &service,
            serde_json::json!({"metadata": {"name": kind, "namespace": "default", "annotations": annotations},
                   "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}})
            .to_string(),
        )
        .unwrap();
        eprintln!("{kind}:");
        let cloud_config = stack.cloud_config.as_os_str();
        // The keys' directory only: a credentials directory holding the component or
        // its policy is refused.
        let credentials = stack.dir.path().join("aws");
        let stdout = wasm_ccm_tests::conformance(
            &stack.dir.path().join("aws.wasm"),
            [
                "--cloud-config".as_ref(),
                cloud_config,
                "--credentials-dir".as_ref(),
                credentials.as_os_str(),
                "--node".as_ref(),
                a.private_dns_name.as_ref(),
                "--node".as_ref(),
                b.private_dns_name.as_ref(),
                "--service".as_ref(),
                service.as_os_str(),
                "--elsewhere-service".as_ref(),
                elsewhere.as_os_str(),
                "--route-cidr".as_ref(),
                "10.244.200.0/24".as_ref(),
            ],
        )
        .await;
        for check in [
            "| get-load-balancer then says none (ensure made one load balancer) | pass |",
            "| update-load-balancer to 1 of 2 nodes works | pass |",
            "| instance-metadata of a node that does not exist is an error | pass |",
            "| list-routes no longer has it | pass |",
            "| a 429 with Retry-After: 7 s is retry-after, no sooner | pass |",
            "| ensure-load-balancer for a Service served elsewhere is implemented-elsewhere | pass |",
            "| nothing is created for a Service served elsewhere | pass |",
        ] {
            assert!(stdout.contains(check), "{kind}: {check}:\n{stdout}");
        }
        assert!(stdout.trim_end().ends_with(" 0 failed"), "{kind}: {stdout}");
    }
    // Nothing is left behind: no load balancer of either kind, the nodes' group as the
    // world made it.
    assert!(load_balancer_names(moto).await.is_empty());
    let classic = moto.classic_load_balancer_names().await.unwrap();
    assert!(classic.is_empty(), "{classic:?}");
    assert_eq!(
        moto.ingress(&world.node_security_group).await,
        Some(world.node_rules_at_start())
    );
}

/// The IAM policy the README gives users is the provider's declared one
/// (`guests/aws/iam-policy.json`), which moto enforces in every test here.
#[test]
fn the_documented_iam_policy_is_the_declared_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let declared: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("guests/aws/iam-policy.json")).unwrap(),
    )
    .unwrap();
    let readme = std::fs::read_to_string(root.join("guests/aws/README.md")).unwrap();
    let block = readme
        .split("```json")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a JSON block in guests/aws/README.md");
    let documented: serde_json::Value = serde_json::from_str(block).unwrap();
    assert_eq!(documented, declared);
    let actions = declared["Statement"][0]["Action"].as_array().unwrap();
    assert!(
        actions.iter().all(|a| !a.as_str().unwrap().contains('*')),
        "no wildcard grants"
    );
    let deploy =
        std::fs::read_to_string(root.join("deploy/aws/serviceaccount-patch.yaml")).unwrap();
    assert!(deploy.contains("guests/aws/iam-policy.json"), "{deploy}");
    // deploy/aws's policy lets the host sign for exactly those actions.
    let policy: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root.join("deploy/aws/providers/aws.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        &policy["credentials"][0]["allowedActions"],
        &declared["Statement"][0]["Action"]
    );
}

/// The host's own guard beside IAM: a provider (the hostile fixture here) holding keys
/// allowed everything cannot call an action its credential rule's `allowedActions`
/// (deploy/aws's list, the provider's IAM policy) does not name. The request is refused
/// before it is signed, moto never sees it, and the instance keeps running; the same
/// request under a rule without `allowedActions` terminates the instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_outside_the_allowlist_are_refused_before_signing() {
    let mut moto = Moto::start().await;
    let world = World::create(&mut moto, CLUSTER).await;
    let guarded = world.launch(&moto, 0).await;
    let open = world.launch(&moto, 1).await;
    moto.enable_auth(0).await;
    let loader = wasm_ccm_tests::loader();
    for (instance, allowlist) in [(&guarded, true), (&open, false)] {
        let keys = "accessKeyIdFile: aws/access-key-id, secretAccessKeyFile: aws/secret-access-key";
        let mut policy = World::policy(&moto, keys);
        if !allowlist {
            policy = policy
                .lines()
                .filter(|l| !l.contains("allowedActions"))
                .map(|l| format!("{l}\n"))
                .collect();
        }
        let dir = wasm_ccm_tests::ProviderDir::new("fixture_hostile", "hostile", &policy, "");
        let secrets = dir.dir.path().join("aws");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::write(secrets.join("access-key-id"), &world.admin.id).unwrap();
        std::fs::write(secrets.join("secret-access-key"), &world.admin.secret).unwrap();
        let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
        let url = format!("{}/", moto.url());
        let form = format!(
            "Action=TerminateInstances&InstanceId.1={}&Version=2016-11-15",
            instance.id
        );
        let answer = wasm_ccm_tests::act(
            &provider,
            &[
                ("hostile/action", "fetch"),
                ("hostile/method", "POST"),
                ("hostile/url", &url),
                ("hostile/form", &form),
                ("hostile/header", "x-wasm-ccm-aws-service: ec2"),
            ],
        )
        .await;
        let running = moto.running_instances().await.unwrap();
        if allowlist {
            assert!(answer.is_err(), "refused: {answer:?}");
            assert!(
                running.contains(&instance.private_dns_name),
                "still running"
            );
            let metrics = loader.metrics().encode();
            assert!(
                metrics.contains(
                    "wasm_ccm_egress_denied_total{provider=\"hostile\",host=\"\",reason=\"action\"} 1"
                ),
                "{metrics}"
            );
        } else {
            let answer = answer.unwrap();
            assert_eq!(
                wasm_ccm_tests::label(&answer, "status"),
                "200",
                "{answer:?}"
            );
            wait_until(TIMEOUT, "the open rule's instance stopping", || async {
                !moto
                    .running_instances()
                    .await
                    .unwrap()
                    .contains(&instance.private_dns_name)
            })
            .await;
        }
    }
}
