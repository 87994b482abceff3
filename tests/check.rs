//! `wasm-ccm check` on real components built from `guests/`: the reference provider
//! passes; every kind of bad file fails with its own clear reason and a non-zero exit;
//! `--cloud-config` runs `initialize` with credential files confined as the controller
//! manager confines them.

use std::path::Path;
use std::process::Command;

use wasm_ccm_tests::vendor::{Named, VendorHome};
use wasm_ccm_tests::{TempDir, guest, wasm_ccm_bin};

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

fn check(file: &Path, extra: &[&str]) -> Outcome {
    let out = Command::new(wasm_ccm_bin())
        .arg("check")
        .arg(file)
        .args(extra)
        .output()
        .expect("run wasm-ccm check");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn assert_rejected(file: &Path, reason: &str) {
    let out = check(file, &[]);
    assert_eq!(
        out.code, 1,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout for a failed check: {}",
        out.stdout
    );
    let name = file.display().to_string();
    assert!(
        out.stderr.contains(&name),
        "the error names the file: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains(reason),
        "expected {reason:?} in: {}",
        out.stderr
    );
}

#[test]
fn reference_provider_passes() {
    let file = guest("reference_provider");
    let out = check(&file, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for expected in [
        "provider:  simcloud",
        "contract:  wasm-ccm:provider@0.3.0",
        "exports:   identity, instances-v2, instances-batch, instances, zones, load-balancer, routes, clusters",
        "wasm-ccm:http/client@0.1.0",
        "wasm-ccm:provider/logging@0.3.0",
        "of the 1 MiB ConfigMap limit",
        "result:    ok",
    ] {
        assert!(
            out.stdout.contains(expected),
            "missing {expected:?} in:\n{}",
            out.stdout
        );
    }
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(
        size < 1 << 20,
        "the release provider must fit in a ConfigMap: {size} bytes"
    );
    assert!(
        out.stdout.contains(&format!("size:      {size} bytes")),
        "{}",
        out.stdout
    );
}

#[test]
fn aws_provider_passes_and_fits_a_config_map() {
    let file = guest("aws_provider");
    let out = check(&file, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for expected in [
        "provider:  aws",
        "exports:   identity, instances-v2, instances-batch, load-balancer, routes\n",
        "result:    ok",
    ] {
        assert!(
            out.stdout.contains(expected),
            "missing {expected:?} in:\n{}",
            out.stdout
        );
    }
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size < 1 << 20, "{size} bytes");
}

#[test]
fn openstack_provider_passes_and_fits_a_config_map() {
    let file = guest("openstack_provider");
    let out = check(&file, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("provider:  openstack"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("result:    ok"), "{}", out.stdout);
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(
        size < 1 << 20,
        "the release provider must fit in a ConfigMap: {size} bytes"
    );
}

/// A component built against contract 0.1 still passes, with the version and a
/// warning; it links only 0.1's imports.
#[test]
fn a_contract_0_1_component_passes_with_a_warning() {
    let out = check(&guest("fixture_legacy"), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for expected in [
        "contract:  wasm-ccm:provider@0.1.0",
        "warning:   an older contract, adapted by the host",
        "exports:   identity, instances, zones\n",
        "result:    ok",
    ] {
        assert!(
            out.stdout.contains(expected),
            "missing {expected:?} in:\n{}",
            out.stdout
        );
    }
    assert!(
        !out.stdout.contains("wasm-ccm:provider/types@0.3.0")
            && out.stdout.contains("wasm-ccm:provider/types@0.1.0"),
        "a 0.1 component links 0.1's imports, nothing of 0.2:\n{}",
        out.stdout
    );
    let json = check(&guest("fixture_legacy"), &["--json"]);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(report["contractVersion"], "0.1.0");
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .contains("wasm-ccm:provider@0.1.0"),
        "{report}"
    );
}

#[test]
fn json_report_lists_exports() {
    let out = check(&guest("reference_provider"), &["--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["provider"], "simcloud");
    assert_eq!(report["exports"].as_array().unwrap().len(), 8);
    assert_eq!(report["contractVersion"], "0.3.0");
    assert_eq!(report["warnings"], serde_json::json!([]));
    assert_eq!(report["configMapLimitBytes"], 1 << 20);
}

#[test]
fn partial_provider_reports_what_it_lacks() {
    let out = check(&guest("fixture_hostile"), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("exports:   identity, instances-v2\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("not exported (controllers using them are skipped): instances-batch, instances, zones, load-balancer, load-balancer-name, routes, clusters"),
        "{}",
        out.stdout
    );
}

#[test]
fn corrupt_file_is_rejected() {
    let dir = TempDir::new("check-corrupt");
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"this is not webassembly at all").unwrap();
    assert_rejected(&garbage, "not a WebAssembly file");

    // A real component cut short: the header is right, the body is not.
    let truncated = dir.path().join("truncated.wasm");
    let bytes = std::fs::read(guest("reference_provider")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    assert_rejected(&truncated, "invalid component");
}

#[test]
fn core_module_is_rejected() {
    let dir = TempDir::new("check-core");
    let module = dir.path().join("module.wasm");
    // The smallest valid core module: magic + version 1.
    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    assert_rejected(&module, "a core WebAssembly module, not a component");
}

#[test]
fn component_of_another_world_is_rejected() {
    assert_rejected(
        &guest("fixture-other-world"),
        "not a wasm-ccm provider: it exports nothing from wasm-ccm:provider (exports: wasi:cli/run@",
    );
}

#[test]
fn missing_identity_is_rejected() {
    assert_rejected(
        &guest("fixture_no_identity"),
        "does not export the required interface wasm-ccm:provider/identity@0.3.0",
    );
}

#[test]
fn unknown_import_is_rejected() {
    assert_rejected(
        &guest("fixture_unknown_import"),
        "imports fixtures:unknown-import/vault which the host does not provide",
    );
}

#[test]
fn missing_file_is_rejected() {
    assert_rejected(Path::new("/nonexistent/provider.wasm"), "cannot read");
}

/// The policy next to the component is parsed as the controller manager would (an
/// unknown field is an error naming the file and the field), and `--cloud-config`
/// runs `initialize` under it (a cloud config the provider refuses fails the check).
#[test]
fn policy_and_cloud_config_are_checked() {
    let dir = TempDir::new("check-policy");
    let wasm = dir.path().join("simcloud.wasm");
    std::fs::copy(guest("reference_provider"), &wasm).unwrap();
    let out = check(&wasm, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("policy:    none next to the component (no outbound requests allowed)"),
        "{}",
        out.stdout
    );

    let policy = dir.path().join("simcloud.yaml");
    std::fs::write(&policy, "allowedOutboundHosts: ['http://127.0.0.1:9']\n").unwrap();
    let out = check(&wasm, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!(
            "policy:    {} (1 allowed outbound host(s), 0 credential rule(s))",
            policy.display()
        )),
        "{}",
        out.stdout
    );

    let good = dir.path().join("cloud-config.json");
    std::fs::write(&good, r#"{"endpoint": "http://127.0.0.1:9"}"#).unwrap();
    let out = check(&wasm, &["--cloud-config", good.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("initialize: ok with {}", good.display())),
        "{}",
        out.stdout
    );
    let out = check(&wasm, &["--json", "--cloud-config", good.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["policy"]["allowedOutboundHosts"], 1);
    assert_eq!(report["initialized"], good.display().to_string());

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let out = check(&wasm, &["--cloud-config", bad.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(out.stderr.contains("initialize"), "{}", out.stderr);

    std::fs::write(&policy, "allowedOutboundHost: ['http://127.0.0.1:9']\n").unwrap();
    let out = check(&wasm, &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stderr.contains(&policy.display().to_string())
            && out.stderr.contains("allowedOutboundHost"),
        "{}",
        out.stderr
    );
}

/// `check --cloud-config` runs a vendor's `initialize`, whose request reaches the
/// vendor's host. Run from the operator's home, the vendor's policy naming a file of
/// the operator's (by its absolute path, or `.kube/config` relative to the home) sends
/// nothing of it by default, and the report says what was left out; with
/// `--credentials-dir` holding only that file it is used, and the report says where
/// files are read; the home as the credentials directory (it holds the component and
/// the policy) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_cloud_config_sends_no_file_of_the_operator_s_by_default() {
    for named in [Named::Absolute, Named::Relative] {
        let vendor = VendorHome::start(named).await;
        let check = ["check", "vendor.wasm", "--cloud-config", "cloud.conf"];
        let (stdout, stderr) = vendor.assert_confined(&check).await;
        let file = match named {
            Named::Absolute => vendor.elsewhere.path().join("config"),
            Named::Relative => ".kube/config".into(),
        };
        for line in [
            format!(
                "credentials: none read (no --credentials-dir); left out: credentials[0] ({})",
                file.display()
            ),
            "initialize: ok with cloud.conf".to_owned(),
            "result:    ok".to_owned(),
        ] {
            assert!(
                stdout.contains(&line),
                "{named:?}: {line:?} not in:\n{stdout}\n{stderr}"
            );
        }

        let dir = vendor.credentials_dir();
        let dir = dir.to_str().unwrap();
        let (code, json, stderr) = vendor
            .wasm_ccm(&[&check[..], &["--credentials-dir", dir, "--json"]].concat())
            .await;
        assert_eq!(code, 0, "{named:?}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(&json).unwrap();
        let canonical = std::fs::canonicalize(vendor.home.path().join(dir)).unwrap();
        assert_eq!(
            report["credentialFiles"],
            serde_json::json!({"dir": canonical.display().to_string(), "leftOut": []}),
            "{named:?}"
        );
    }
}
