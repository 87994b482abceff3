//! What the docs and `deploy/huaweicloud/` give users, run as given: the kustomization
//! rendering and loading, `wasm-ccm conformance` with the documented policy, and the
//! key confined to the documented requests even though the account would allow more.

use super::*;

/// `kubectl kustomize deploy/huaweicloud/` renders, and the provider loads with its
/// policy and cloud config (initialize parses the cloud config; nothing is sent). The
/// Secret's keys are the files the policy names.
#[tokio::test]
async fn the_deploy_huaweicloud_example_renders_and_loads() {
    let wasm_ccm_tests::RenderedExample {
        policy, cloud_conf, ..
    } = wasm_ccm_tests::rendered_example("huaweicloud", "huaweicloud");
    let dir = TempDir::new("deploy-huaweicloud");
    std::fs::copy(
        guest("huaweicloud_provider"),
        dir.path().join("huaweicloud.wasm"),
    )
    .unwrap();
    std::fs::write(dir.path().join("huaweicloud.yaml"), &policy).unwrap();
    let provider = wasm_ccm_tests::loader()
        .load(
            &dir.path().join("huaweicloud.wasm"),
            cloud_conf.into_bytes(),
        )
        .await
        .unwrap_or_else(|e| {
            panic!("loading the Huawei Cloud provider with deploy/huaweicloud's files: {e}")
        });
    assert_eq!(provider.name(), "huaweicloud");
    // The kustomization's Secret command names the files the policy reads.
    let kustomization = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/huaweicloud/kustomization.yaml"),
    )
    .unwrap();
    for key in ["access-key-id", "secret-access-key"] {
        assert!(
            kustomization.contains(&format!("--from-file={key}=")),
            "{key}"
        );
        assert!(
            policy.contains(&format!("/etc/wasm-ccm/credentials/{key}")),
            "{key}"
        );
    }
}

/// A cloud config with a key in it is refused by name, without quoting the key, and
/// points at the credentials Secret.
#[tokio::test]
async fn a_key_in_the_cloud_config_is_refused_naming_the_secret() {
    let world = HuaweiWorld::start().await;
    let dir = TempDir::new("huaweicloud-key-in-config");
    std::fs::copy(
        guest("huaweicloud_provider"),
        dir.path().join("huaweicloud.wasm"),
    )
    .unwrap();
    world.install_documented_policy(dir.path());
    let loader = wasm_ccm_tests::loader();
    for (key, value, field) in [
        (
            "access-key",
            world.key.access_key_id.as_str(),
            "accessKeyIdFile",
        ),
        (
            "secret-key",
            world.key.secret_access_key.as_str(),
            "secretAccessKeyFile",
        ),
    ] {
        let config = world.cloud_conf("").replacen(
            "[Endpoints]",
            &format!("{key} = {value}\n[Endpoints]"),
            1,
        );
        let error = match loader
            .load(&dir.path().join("huaweicloud.wasm"), config.into_bytes())
            .await
        {
            Ok(_) => panic!("a cloud config with {key} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(error.contains(key), "{error}");
        assert!(error.contains(field), "{error}");
        assert!(!error.contains(value), "{error}");
    }
}

/// `wasm-ccm conformance` on the Huawei Cloud provider against the double, with
/// deploy/huaweicloud's policy: instances, a shared ELB created, updated and deleted,
/// a Service served elsewhere left alone; nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_passes_for_the_huaweicloud_provider() {
    let stack = HuaweiStack::start(|world| {
        let subnet = world.cloud.with_state(|s| s.default_subnet().id.clone());
        format!("[Vpc]\nsubnet-id = {subnet}\n")
    })
    .await;
    stack.world.cloud.with_state(|s| {
        s.add_server(NewServer::named("node-a", "192.168.0.11"));
        s.add_server(NewServer::named("node-b", "192.168.0.12"));
    });
    let write = |name: &str, value: serde_json::Value| {
        let path = stack.dir.path().join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path
    };
    let service = write(
        "service.json",
        json!({"metadata": {"name": "conformance", "namespace": "default",
                            "annotations": {"kubernetes.io/elb.class": "shared"}},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}}),
    );
    let elsewhere = write(
        "elsewhere.json",
        json!({"metadata": {"name": "elsewhere", "namespace": "default",
                            "annotations": {"kubernetes.io/elb.class": "shared"}},
               "spec": {"type": "LoadBalancer", "loadBalancerClass": "example.com/other",
                        "ports": [{"port": 80, "nodePort": 30081, "protocol": "TCP"}]}}),
    );
    let stdout = wasm_ccm_tests::conformance(
        &stack.dir.path().join("huaweicloud.wasm"),
        [
            "--cloud-config".as_ref(),
            stack.cloud_config.as_os_str(),
            "--credentials-dir".as_ref(),
            stack.credentials.as_os_str(),
            "--node".as_ref(),
            "node-a".as_ref(),
            "--node".as_ref(),
            "node-b".as_ref(),
            "--service".as_ref(),
            service.as_os_str(),
            "--elsewhere-service".as_ref(),
            elsewhere.as_os_str(),
        ],
    )
    .await;
    for check in [
        "| update-load-balancer to 1 of 2 nodes works | pass |",
        "| instance-metadata of a node that does not exist is an error | pass |",
        "| nothing is created for a Service served elsewhere | pass |",
    ] {
        assert!(stdout.contains(check), "{check}:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with(" 0 failed"), "{stdout}");
    stack.world.cloud.with_state(|s| {
        assert!(s.load_balancers().is_empty(), "conformance cleans up");
        assert!(s.listeners().is_empty());
        assert!(s.eips().is_empty());
    });
}

/// The host's own guard beside IAM: under deploy/huaweicloud's policy, a provider (the
/// hostile fixture) holding a key its account allows everything cannot delete a
/// server, reach a path the documented list does not name, or set a signing header
/// itself: each is refused before signing and never reaches the cloud, while a
/// documented request is signed and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_confined_to_the_documented_requests() {
    let world = HuaweiWorld::start().await;
    let server = world
        .cloud
        .with_state(|s| s.add_server(NewServer::named("node-a", "192.168.0.11")));
    let dir = wasm_ccm_tests::ProviderDir::new("fixture_hostile", "hostile", "", "");
    let credentials = world.install_documented_policy(dir.dir.path());
    assert!(credentials.join("access-key-id").exists());
    std::fs::rename(
        dir.dir.path().join("huaweicloud.yaml"),
        dir.dir.path().join("hostile.yaml"),
    )
    .unwrap();
    let loader = wasm_ccm_tests::loader();
    let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
    let ecs = world.cloud.endpoint(huaweicloud_double::Service::Ecs);
    let fetch = |method: &'static str, url: String, extra: Option<(&'static str, &'static str)>| {
        let provider = &provider;
        async move {
            let mut annotations = vec![
                ("hostile/action", "fetch"),
                ("hostile/method", method),
                ("hostile/url", url.as_str()),
            ];
            if let Some(extra) = extra {
                annotations.push(extra);
            }
            wasm_ccm_tests::act(provider, &annotations).await
        }
    };
    // Documented: signed and answered.
    let shown = fetch(
        "GET",
        format!("{ecs}/v1/{PROJECT}/cloudservers/{}", server.id),
        None,
    )
    .await
    .unwrap();
    assert!(
        shown
            .additional_labels
            .iter()
            .any(|(k, v)| k == "status" && v == "200"),
        "{shown:?}"
    );
    let received = world.cloud.journal().len();
    assert_eq!(received, 1);
    // Deleting servers: refused before signing.
    let delete = fetch(
        "POST",
        format!("{ecs}/v1/{PROJECT}/cloudservers/delete"),
        Some((
            "hostile/json",
            r#"{"servers": [{"id": "x"}], "delete_publicip": true}"#,
        )),
    )
    .await;
    assert!(delete.is_err(), "{delete:?}");
    // A signing header of the provider's own: refused.
    let forged = fetch(
        "GET",
        format!("{ecs}/v1/{PROJECT}/cloudservers/{}", server.id),
        Some((
            "hostile/header",
            "Authorization: SDK-HMAC-SHA256 Access=x, SignedHeaders=host, Signature=00",
        )),
    )
    .await;
    assert!(forged.is_err(), "{forged:?}");
    assert_eq!(
        world.cloud.journal().len(),
        received,
        "nothing more reached the cloud"
    );
    assert!(world.cloud.with_state(|s| s.server(&server.id).is_some()));
    let metrics = loader.metrics().encode();
    assert!(
        metrics.contains("reason=\"action\"} 1"),
        "the delete refused as an action: {metrics}"
    );
}
