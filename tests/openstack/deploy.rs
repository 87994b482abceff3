//! What the docs and `deploy/openstack/` give users, run as given: the README's Secret
//! commands, `import-occm-config`'s output serving, the kustomization rendering and
//! loading, `wasm-ccm conformance`, a wrong secret, and the documented policy keeping
//! the token to the provider's own requests.

use super::*;

/// The `kubectl ... create secret ...` commands of guests/openstack/README.md, each
/// joined into one line, in order.
fn documented_secret_commands() -> Vec<String> {
    let readme = include_str!("../../guests/openstack/README.md");
    let mut commands = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("kubectl -n kube-system create secret") {
            continue;
        }
        let mut command = line.trim_end_matches('\\').trim().to_owned();
        let mut continued = line.ends_with('\\');
        while continued {
            let next = lines.next().expect("a continued command goes on");
            continued = next.ends_with('\\');
            command.push(' ');
            command.push_str(next.trim_end_matches('\\').trim());
        }
        commands.push(command);
    }
    commands
}

/// Runs a documented `kubectl create secret` command in `dir`, as `kubectl` would make
/// the Secret (client-side, which refuses invalid key names): the Secret's keys.
fn secret_keys(command: &str, dir: &std::path::Path) -> Vec<String> {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[0], "kubectl", "{command}");
    let out = std::process::Command::new(kubectl)
        .args(&words[1..])
        .args(["--dry-run=client", "-o", "json"])
        .current_dir(dir)
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "`{command}` fails: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let secret: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<String> = secret["data"]
        .as_object()
        .map(|data| data.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

/// guests/openstack/README.md, "Migrating from occm": `wasm-ccm import-occm-config`
/// turns occm's cloud.conf (here a password login) into the provider's cloud.conf, its
/// policy and the credentials Secret's files; the controller manager runs on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_occm_cloud_conf_is_imported_and_serves() {
    let stack = OpenStackStack::start(|_| String::new()).await;
    let conf = format!(
        "[Global]\nauth-url = {}/v3\nregion = RegionOne\nusername = kubernetes-ccm\n\
         password = ccm-password\ntenant-name = kubernetes\ndomain-name = Default\n\
         [Networking]\ninternal-network-name = private\n",
        stack.keystone.url()
    );
    let policy = import_and_serve(&stack, &conf, &[], &[], "password").await;
    assert!(policy.contains("allowPlaintext: true"), "as occm: {policy}");
}

/// A Magnum cluster's cloud.conf: the trustee's ID and password and the trust
/// (`user-id`, `password`, `trust-id`, as Magnum writes them), imported as a trust rule;
/// the host logs in as the trustee scoped to the trust, and the cluster is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_magnum_trust_is_imported_and_serves() {
    let stack = OpenStackStack::start(|_| String::new()).await;
    let id_of = |path: &'static str, key: &'static str| {
        let keystone = stack.keystone.clone();
        async move {
            let found = keystone
                .admin(reqwest::Method::GET, path, None)
                .await
                .unwrap();
            found[key][0]["id"].as_str().unwrap().to_owned()
        }
    };
    let project = id_of("/v3/projects?name=kubernetes", "projects").await;
    let trustor = id_of("/v3/users?name=kubernetes-ccm", "users").await;
    let trustee = stack
        .keystone
        .create_user("magnum-trustee", "trustee-password", &project)
        .await;
    let trust = stack
        .keystone
        .create_trust(
            "kubernetes-ccm",
            &trustor,
            "ccm-password",
            "kubernetes",
            &project,
            &trustee,
        )
        .await;
    let conf = format!(
        "[Global]\nauth-url={}/v3\nuser-id={trustee}\npassword=trustee-password\n\
         trust-id={trust}\nregion=RegionOne\n\
         [Networking]\ninternal-network-name = private\n",
        stack.keystone.url()
    );
    let policy = import_and_serve(&stack, &conf, &[], &[], "password").await;
    assert!(
        policy.contains(&format!("trustId: \"{trust}\"")),
        "{policy}"
    );
}

/// occm with `use-clouds`: its clouds.yaml (given with `--clouds-file`), whose entry
/// holds the application credential and the region, is kept in the Secret with only
/// that entry; the host logs in with it and the cluster is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_occm_clouds_yaml_is_imported_and_serves() {
    let stack = OpenStackStack::start(|_| String::new()).await;
    let users = stack
        .keystone
        .admin(reqwest::Method::GET, "/v3/users?name=kubernetes-ccm", None)
        .await
        .unwrap();
    let user = users["users"][0]["id"].as_str().unwrap();
    let (id, secret) = stack
        .keystone
        .create_application_credential(
            "kubernetes-ccm",
            user,
            "ccm-password",
            "kubernetes",
            "from-clouds-yaml",
        )
        .await;
    let clouds = format!(
        "clouds:\n  openstack:\n    auth_type: v3applicationcredential\n    \
         region_name: RegionOne\n    auth:\n      auth_url: {}/v3\n      \
         application_credential_id: {id}\n      application_credential_secret: {secret}\n  \
         admin:\n    auth:\n      auth_url: {}/v3\n      username: admin\n      \
         password: admin-secret-never-copied\n",
        stack.keystone.url(),
        stack.keystone.url()
    );
    let conf = "[Global]\nuse-clouds = true\nclouds-file = /etc/openstack/clouds.yaml\n\
                cloud = openstack\n[Networking]\ninternal-network-name = private\n";
    let policy = import_and_serve(
        &stack,
        conf,
        &[("clouds.yaml", clouds.as_str())],
        &["--clouds-file", "clouds.yaml"],
        "clouds.yaml",
    )
    .await;
    assert!(policy.contains("cloud: \"openstack\""), "{policy}");
    assert!(policy.contains("region: \"RegionOne\""), "{policy}");
}

/// Runs the README's move on occm's `conf` (with `files` beside it, and `args` added to
/// `import-occm-config`, run where they are), expects the Secret's one key `key`, and
/// runs the controller manager on what was written until a Node is initialized: the
/// policy written.
async fn import_and_serve(
    stack: &OpenStackStack,
    conf: &str,
    files: &[(&str, &str)],
    args: &[&str],
    key: &str,
) -> String {
    stack
        .cloud
        .with_state(|s| s.add_server(NewServer::named("node-a", "10.0.0.11")));
    let out = TempDir::new("occm-import");
    let occm = out.path().join("occm-cloud.conf");
    std::fs::write(&occm, conf).unwrap();
    for (name, content) in files {
        std::fs::write(out.path().join(name), content).unwrap();
    }
    // The README's layout: `--out ./openstack`, the Secret made from its credentials/.
    let imported = out.path().join("openstack");
    let credentials = imported.join("credentials");
    let run = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin())
        .current_dir(out.path())
        .arg("import-occm-config")
        .arg(&occm)
        .arg("--out")
        .arg(&imported)
        .arg("--credentials-dir")
        .arg(&credentials)
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        run.status.success(),
        "import-occm-config: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    // The README's command makes a Secret whose keys, mounted at --credentials-dir, are
    // the files the policy names.
    let commands = documented_secret_commands();
    let keys = secret_keys(&commands[1], out.path());
    assert_eq!(keys, [key]);
    let policy = std::fs::read_to_string(imported.join("providers/openstack.yaml")).unwrap();
    assert!(
        policy.contains(&credentials.join(key).display().to_string()),
        "{policy}"
    );
    let cloud_conf = imported.join("cloud-config/cloud.conf");
    let text = std::fs::read_to_string(&cloud_conf).unwrap();
    let kept = std::fs::read_to_string(credentials.join(key)).unwrap();
    for secret in [
        "ccm-password",
        "trustee-password",
        "admin-secret-never-copied",
    ] {
        assert!(
            !text.contains(secret) && !policy.contains(secret),
            "{secret}"
        );
    }
    assert!(!kept.contains("admin-secret-never-copied"), "{kept}");
    assert!(text.contains("internal-network-name"), "{text}");
    let providers = imported.join("providers");
    std::fs::copy(
        guest("openstack_provider"),
        providers.join("openstack.wasm"),
    )
    .unwrap();

    let nodes: Api<Node> = Api::all(stack.client());
    nodes
        .create(&PostParams::default(), &kubelet_node("node-a"))
        .await
        .unwrap();
    let port = listening_port();
    // As deployed: the providers, the cloud config and the Secret in their own places.
    let mut command = tokio::process::Command::new(wasm_ccm_tests::wasm_ccm_bin());
    let _ccm = wasm_ccm_tests::serve_on(&mut command, port)
        .args(["--cloud-provider", "openstack", "--leader-elect=false"])
        // No [Route] router-id: no routes, as occm.
        .arg("--configure-cloud-routes=false")
        .arg("--serve-plain-http=true")
        .arg("--providers-dir")
        .arg(&providers)
        .arg("--credentials-dir")
        .arg(&credentials)
        .arg("--cloud-config")
        .arg(&cloud_conf)
        .arg("--kubeconfig")
        .arg(&stack.kubeconfig)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until(TIMEOUT, "node-a initialized", || {
        initialized(&nodes, "node-a")
    })
    .await;
    policy
}

/// `kubectl kustomize deploy/openstack/` renders, and the provider loads with its
/// policy and cloud config (initialize parses the cloud config; nothing is sent).
#[tokio::test]
async fn the_deploy_openstack_example_renders_and_loads() {
    let wasm_ccm_tests::RenderedExample {
        policy,
        cloud_conf,
        deployment,
    } = wasm_ccm_tests::rendered_example("openstack", "openstack");

    // The token goes only with the requests the provider makes (the guest's list).
    let parsed: serde_json::Value = serde_saphyr::from_str(&policy).unwrap();
    let listed: Vec<&str> = wasm_ccm::cli::import_occm_config::provider_actions().collect();
    assert_eq!(
        parsed["credentials"][0]["allowedActions"],
        serde_json::json!(listed)
    );

    // The README's Secret, mounted where the Deployment mounts it, holds the file the
    // policy names.
    let dir = TempDir::new("deploy-openstack");
    std::fs::write(dir.path().join("secret"), "the-secret").unwrap();
    let keys = secret_keys(&documented_secret_commands()[0], dir.path());
    let pod = &deployment["spec"]["template"]["spec"];
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "credentials")
        .unwrap()["mountPath"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "credentials"
                && v["secret"]["secretName"] == "wasm-ccm-credentials"
                && v["secret"]["items"].is_null()),
        "the whole Secret mounted"
    );
    let named = parsed["credentials"][0]["keystone"]["applicationCredentialSecretFile"]
        .as_str()
        .unwrap();
    assert_eq!(keys, ["application-credential-secret"]);
    assert_eq!(named, format!("{mount}/{}", keys[0]));
    std::fs::copy(
        guest("openstack_provider"),
        dir.path().join("openstack.wasm"),
    )
    .unwrap();
    std::fs::write(dir.path().join("openstack.yaml"), policy).unwrap();
    let provider = wasm_ccm_tests::loader()
        .load(&dir.path().join("openstack.wasm"), cloud_conf.into_bytes())
        .await
        .unwrap_or_else(|e| {
            panic!("loading the OpenStack provider with deploy/openstack's files: {e}")
        });
    assert_eq!(provider.name(), "openstack");
}

/// `wasm-ccm conformance` on the OpenStack provider against Keystone and the double,
/// with deploy/openstack's policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_passes_for_the_openstack_provider() {
    let stack = OpenStackStack::start(|cloud| {
        cloud.with_state(|s| {
            let private = s.network_id("private").unwrap();
            let subnet = s.subnet_of(&private).unwrap().id.clone();
            let public = s.network_id("public").unwrap();
            format!(
                "[LoadBalancer]\nsubnet-id = {subnet}\nfloating-network-id = {public}\n\
                 [Route]\nrouter-id = {}\n",
                s.router_id()
            )
        })
    })
    .await;
    stack.cloud.with_state(|s| {
        s.add_server(NewServer::named("node-a", "10.0.0.11"));
        s.add_server(NewServer::named("node-b", "10.0.0.12"));
    });
    let service = stack.dir.path().join("service.json");
    std::fs::write(
        &service,
        json!({"metadata": {"name": "conformance", "namespace": "default"},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}})
        .to_string(),
    )
    .unwrap();
    // The secret in a credentials directory of its own (one holding the component or
    // its policy is refused), where the policy names it.
    let credentials = TempDir::new("openstack-credentials");
    let (beside, secret) = (
        stack.dir.path().join("application-credential-secret"),
        credentials.path().join("application-credential-secret"),
    );
    std::fs::rename(&beside, &secret).unwrap();
    let policy = stack.dir.path().join("openstack.yaml");
    let text = std::fs::read_to_string(&policy)
        .unwrap()
        .replace(&beside.display().to_string(), &secret.display().to_string());
    std::fs::write(&policy, text).unwrap();
    let stdout = wasm_ccm_tests::conformance(
        &stack.dir.path().join("openstack.wasm"),
        [
            "--cloud-config".as_ref(),
            stack.cloud_config.as_os_str(),
            "--credentials-dir".as_ref(),
            credentials.path().as_os_str(),
            "--node".as_ref(),
            "node-a".as_ref(),
            "--node".as_ref(),
            "node-b".as_ref(),
            "--service".as_ref(),
            service.as_os_str(),
            "--route-cidr".as_ref(),
            std::ffi::OsStr::new("10.244.200.0/24"),
        ],
    )
    .await;
    assert!(stdout.trim_end().ends_with(" 0 failed"), "{stdout}");
    stack.cloud.with_state(|s| {
        assert_eq!(s.load_balancer_resources(), 0, "conformance cleans up");
        assert!(s.floating_ips.is_empty());
        assert!(s.routers.values().all(|r| r.routes.is_empty()));
    });
}

/// A wrong secret (a bad rotation) makes every call fail with the login's error: a
/// NotReady Node whose server is gone is not deleted on it; once the Secret holds the
/// right secret again, the next login succeeds and the Node goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_deletes_nothing_until_it_is_fixed() {
    let stack = OpenStackStack::start(|_| String::new()).await;
    let secret_file = stack.dir.path().join("application-credential-secret");
    std::fs::write(&secret_file, "not-the-secret").unwrap();
    let nodes: Api<Node> = Api::all(stack.client());
    // Initialized earlier; its server is gone and the Node is NotReady.
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-gone"},
        "spec": {"providerID": "openstack:///0a5e0000-0000-4000-8000-00000000ffff"},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let port = listening_port();
    let (_ccm, log) = stack.controller_manager(port);
    let failures = || async {
        let text = wasm_ccm_tests::http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        wasm_ccm_tests::metric(
            &text,
            r#"wasm_ccm_credential_logins_total{provider="openstack",kind="keystone",result="failure"}"#,
        )
    };
    // Two failed logins (held 5 s apart): the lifecycle pass has asked many times.
    wait_until(TIMEOUT, "two failed logins", || async {
        failures().await >= 2.0
    })
    .await;
    assert!(nodes.get_opt("node-gone").await.unwrap().is_some());
    let text = log.lock().unwrap().clone();
    assert!(text.contains("Keystone login at"), "{text}");
    assert!(!text.contains("not-the-secret"), "{text}");

    // The Secret is fixed (rotated in place): the next login works, the Node goes.
    std::fs::write(&secret_file, &stack.secret).unwrap();
    wait_until(TIMEOUT, "node-gone deleted", || async {
        nodes.get_opt("node-gone").await.is_ok_and(|n| n.is_none())
    })
    .await;
}

/// deploy/openstack's `allowedActions`: a provider (the hostile fixture) under the
/// documented policy gets the token added to the requests the OpenStack provider
/// makes, and cannot delete a server: that request is refused before the token is
/// added (`reason="action"`) and never reaches Nova.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_policy_sends_the_token_only_with_the_providers_requests() {
    let world = OpenStackWorld::start(openstack_double::Settings::default()).await;
    let server = world
        .cloud
        .with_state(|s| s.add_server(NewServer::named("node-a", "10.0.0.11")))
        .id;
    let dir = wasm_ccm_tests::ProviderDir::new("fixture_hostile", "hostile", "", "");
    world.install_documented_policy(dir.dir.path());
    std::fs::rename(
        dir.dir.path().join("openstack.yaml"),
        dir.dir.path().join("hostile.yaml"),
    )
    .unwrap();
    let loader = wasm_ccm_tests::loader();
    let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
    let nova = format!("{}/compute/v2.1", world.cloud.url());
    let fetch = |method: &'static str, url: String| {
        let provider = provider.clone();
        async move {
            wasm_ccm_tests::act(
                &provider,
                &[
                    ("hostile/action", "fetch"),
                    ("hostile/method", method),
                    ("hostile/url", &url),
                ],
            )
            .await
        }
    };
    // The catalog first (the host logs in), then a request the provider makes.
    let catalog = fetch("GET", format!("{}/v3/auth/catalog", world.keystone.url()))
        .await
        .unwrap();
    assert_eq!(wasm_ccm_tests::label(&catalog, "status"), "200");
    let listed = fetch("GET", format!("{nova}/servers/detail"))
        .await
        .unwrap();
    assert_eq!(
        wasm_ccm_tests::label(&listed, "status"),
        "200",
        "{listed:?}"
    );
    assert!(wasm_ccm_tests::label(&listed, "body").contains(&server));
    let deleted = fetch("DELETE", format!("{nova}/servers/{server}")).await;
    assert!(deleted.is_err(), "{deleted:?}");
    let metrics = loader.metrics().encode();
    assert!(
        metrics.contains(
            "wasm_ccm_egress_denied_total{provider=\"hostile\",host=\"\",reason=\"action\"} 1"
        ),
        "{metrics}"
    );
    assert!(world.cloud.with_state(|s| s.servers.contains_key(&server)));
}
