//! `wasm-ccm new` as a provider author runs it (guests/README.md, steps 1 to 5): the
//! generated crate builds for `wasm32-wasip2`, its own unit test passes natively
//! against the SDK's mock transport, `wasm-ccm check` passes with its policy and cloud
//! config, `wasm-ccm call` runs it under the sandbox against an API on 127.0.0.1, and
//! the playground runs it: its Nodes get the provider's IDs.
//!
//! The crate builds with the workspace's `Cargo.lock` (so offline, with the versions
//! CI already has) in `target/scaffold` (the tests' `outside_target_dir()`), kept
//! between runs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use wasm_ccm_tests::{
    RawBehavior, RawServer, TempDir, built_bin, outside_target_dir, wait_until, wasm_ccm_bin,
};

/// Runs `command`, failing the test with its output unless it succeeds; returns
/// stdout and stderr.
fn run_both(command: &mut Command, what: &str) -> (String, String) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// [`run_both`]'s stdout.
fn run(command: &mut Command, what: &str) -> String {
    run_both(command, what).0
}

/// Generates `name` with `exports` (`None`: the default) in `dir` and builds it for
/// wasm32-wasip2 without a warning; returns the component's path.
fn generate_and_build(name: &str, dir: &Path, exports: Option<&str>) -> std::path::PathBuf {
    let mut new = Command::new(wasm_ccm_bin());
    new.args(["new", name]).arg(dir);
    if let Some(exports) = exports {
        new.args(["--exports", exports]);
    }
    let printed = run(&mut new, "wasm-ccm new");
    assert!(
        printed.contains(&format!("created {name}-provider")),
        "{printed}"
    );
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock"),
        dir.join("Cargo.lock"),
    )
    .unwrap();
    let (_, stderr) = run_both(
        &mut cargo(dir, &["build", "--target", "wasm32-wasip2", "--release"]),
        "cargo build of the generated crate",
    );
    assert!(!stderr.contains("warning"), "{stderr}");
    outside_target_dir().join(format!(
        "wasm32-wasip2/release/{}_provider.wasm",
        name.replace('-', "_")
    ))
}

/// Where cargo-component is installed (it is not needed by CI: installing it takes
/// ~10 minutes), the generated crate also builds with `cargo component build` into a
/// component that passes `wasm-ccm check`.
fn component_build_checks(dir: &Path, file: &str) {
    let installed = Command::new(env!("CARGO"))
        .args(["component", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        eprintln!("cargo-component not installed: `cargo component build` not tried");
        return;
    }
    run_both(
        &mut cargo(dir, &["component", "build", "--release"]),
        "cargo component build of the generated crate",
    );
    let wasm = outside_target_dir().join(format!("wasm32-wasip1/release/{file}.wasm"));
    let report = check(&wasm, dir);
    assert!(report.contains("result:    ok"), "{report}");
}

/// `wasm-ccm check` of `wasm` with the generated crate's policy and cloud config;
/// the report.
fn check(wasm: &Path, dir: &Path) -> String {
    run(
        Command::new(wasm_ccm_bin())
            .arg("check")
            .arg(wasm)
            .arg("--policy")
            .arg(dir.join("policy.yaml"))
            .arg("--cloud-config")
            .arg(dir.join("cloud-config.json")),
        "wasm-ccm check",
    )
}

fn cargo(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO"));
    command
        .current_dir(dir)
        .args(args)
        .arg("--offline")
        .env("CARGO_TARGET_DIR", outside_target_dir());
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_provider_builds_tests_checks_and_runs() {
    let temp = TempDir::new("new");
    let dir = temp.path().join("acme");
    let started = Instant::now();
    let wasm = generate_and_build(
        "acme",
        &dir,
        Some("routes,instances-v2,load-balancer,clusters"),
    );
    for file in [
        "Cargo.toml",
        "src/lib.rs",
        "contract/world.wit",
        "policy.yaml",
    ] {
        assert!(dir.join(file).is_file(), "{file} was not written");
    }
    // A `wit/` directory would be cargo-component's own target, which its WIT parser
    // cannot resolve (the WASI 0.2.12 packages): the generated crate has none.
    assert!(!dir.join("wit").exists());
    let world = std::fs::read_to_string(dir.join("contract/world.wit")).unwrap();
    assert!(
        world.contains("export wasm-ccm:provider/routes@0.3.0;"),
        "{world}"
    );
    let report = check(&wasm, &dir);
    let to_check = started.elapsed();
    for line in [
        "provider:  acme",
        "exports:   identity, instances-v2, load-balancer, routes, clusters",
        // The generated policy names the cluster's Secret file: without
        // --credentials-dir the check reads no credential file, and says so.
        "credentials: none read (no --credentials-dir); left out: credentials[0] \
         (/etc/wasm-ccm/credentials/token)",
        "initialize: ok",
        "result:    ok",
    ] {
        assert!(report.contains(line), "{line:?} not in:\n{report}");
    }
    eprintln!(
        "wasm-ccm new -> passing check: {:.1}s (build included)",
        to_check.as_secs_f64()
    );

    let tests = run(
        &mut cargo(&dir, &["test"]),
        "cargo test of the generated crate",
    );
    assert!(tests.contains("test result: ok. 2 passed"), "{tests}");
    component_build_checks(&dir, "acme_provider");

    // The example API on 127.0.0.1, under a policy allowing only it.
    let api = RawServer::start(RawBehavior::Respond(std::sync::Arc::new(
        |request: &str| {
            // node-1 is instance i-7, node-2 i-8; nothing else exists.
            let found = [(1, 7), (2, 8)]
                .into_iter()
                .find(|(node, _)| request.starts_with(&format!("GET /v1/instances/node-{node} ")));
            match found {
                Some((node, id)) => (
                    200,
                    format!(
                        r#"{{"id": "i-{id}", "type": "small", "zone": "z1", "region": "r1",
                        "state": "running", "private_ip": "10.1.2.{node}"}}"#
                    ),
                ),
                None => (404, r#"{"message": "no such instance"}"#.into()),
            }
        },
    )))
    .await;
    let policy = temp.path().join("local.yaml");
    std::fs::write(
        &policy,
        format!("allowedOutboundHosts: ['http://{}']\n", api.addr),
    )
    .unwrap();
    let config = temp.path().join("local.json");
    std::fs::write(&config, format!(r#"{{"endpoint": "http://{}"}}"#, api.addr)).unwrap();
    let (playground_policy, playground_config, playground_wasm) =
        (policy.clone(), config.clone(), wasm.clone());
    let call = move |function: &str, node: &str| {
        let mut command = Command::new(wasm_ccm_bin());
        command
            .arg("call")
            .arg(&wasm)
            .arg("--policy")
            .arg(&policy)
            .arg("--cloud-config")
            .arg(&config)
            .args([function, node]);
        let out = run(&mut command, "wasm-ccm call");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let metadata = tokio::task::spawn_blocking(move || {
        (
            call("instances-v2.instance-metadata", "node-1"),
            call("instances-v2.instance-exists", "node-3"),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        metadata.0["ok"]["providerID"], "acme://i-7",
        "{}",
        metadata.0
    );
    assert_eq!(metadata.1, serde_json::json!({"ok": false}));

    // guests/README.md step 5: the playground runs it; its Nodes get initialized.
    let kubeconfig = temp.path().join("kubeconfig");
    let _playground = tokio::process::Command::new(built_bin("wasm-ccm-playground"))
        .args(["--cloud", "none", "--nodes", "2", "--provider"])
        .arg(&playground_wasm)
        .arg("--policy")
        .arg(&playground_policy)
        .arg("--cloud-config")
        .arg(&playground_config)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .arg("--work-dir")
        .arg(temp.path().join("playground"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    wait_until(
        Duration::from_secs(90),
        "the playground's Nodes initialized by the new provider",
        || async {
            let out = tokio::process::Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"])
                .output()
                .await;
            out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout) == "acme://i-7 acme://i-8")
        },
    )
    .await;
}

/// Each interface alone (and the default, `instances-v2` with `instances-batch`): the generated crate builds
/// without a warning (no helper left unused) and passes `wasm-ccm check` exporting
/// just that interface.
#[test]
fn each_export_alone_builds_and_checks() {
    let temp = TempDir::new("new-each");
    for (exports, listed) in [
        (None, "identity, instances-v2, instances-batch"),
        (Some("load-balancer"), "identity, load-balancer"),
        (Some("routes"), "identity, routes"),
        (Some("clusters"), "identity, clusters"),
    ] {
        let name = format!("solo-{}", exports.unwrap_or("default"));
        let dir = temp.path().join(&name);
        let wasm = generate_and_build(&name, &dir, exports);
        let report = check(&wasm, &dir);
        for line in [format!("exports:   {listed}\n"), "result:    ok".into()] {
            assert!(report.contains(&line), "{line:?} not in:\n{report}");
        }
    }
}

#[test]
fn bad_names_exports_and_directories_are_refused() {
    let temp = TempDir::new("new-refused");
    let new = |args: &[&str]| {
        let out = Command::new(wasm_ccm_bin())
            .arg("new")
            .args(args)
            .current_dir(temp.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(new(&["Acme_Cloud"]).contains("invalid provider name \"Acme_Cloud\""));
    assert!(new(&["acme", "--exports", "instances-v2,lb"]).contains("unknown interface \"lb\""));
    assert!(new(&["acme", "--exports", "instances-batch"]).contains("choose instances-v2 with it"));
    std::fs::create_dir_all(temp.path().join("taken")).unwrap();
    std::fs::write(temp.path().join("taken/keep.txt"), "mine").unwrap();
    assert!(new(&["acme", "taken"]).contains("already exists and is not empty"));
    assert_eq!(
        std::fs::read_to_string(temp.path().join("taken/keep.txt")).unwrap(),
        "mine"
    );
}
