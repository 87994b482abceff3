//! The crate boundaries of the layout, checked on the real dependency graph with
//! `cargo tree` (normal dependencies only: what the built artifacts link):
//! - `wasm-ccm-host` runs providers without knowing Kubernetes: no `kube`, no
//!   `k8s-openapi`;
//! - `wasm-ccm`, the shipped controller manager, links neither the API server double
//!   nor the simulated cloud;
//! - only `wasm-ccm-playground` links those;
//! - the OpenStack provider shares occm's key table with `wasm-ccm import-occm-config`
//!   (`occm-config`) without the import (`occm-import`): it links no host.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Every package `package` depends on (itself included), by name.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO"))
        .current_dir(&workspace)
        .args(["tree", "--offline", "--locked", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}", "-p", package])
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("cargo tree prints UTF-8")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_host_does_not_depend_on_kubernetes() {
    let deps = normal_dependencies("wasm-ccm-host");
    assert!(deps.contains("wasmtime"), "{deps:?}");
    for forbidden in ["kube", "kube-client", "kube-runtime", "k8s-openapi"] {
        assert!(
            !deps.contains(forbidden),
            "wasm-ccm-host depends on {forbidden}"
        );
    }
}

#[test]
fn the_shipped_binary_links_no_test_doubles() {
    let deps = normal_dependencies("wasm-ccm");
    assert!(
        deps.contains("wasm-ccm-host") && deps.contains("kube"),
        "{deps:?}"
    );
    for forbidden in [
        "kube-double",
        "sim-cloud",
        "moto-peer",
        "keystone-peer",
        "kube-apiserver-peer",
        "openstack-double",
        "huaweicloud-double",
        "wasm-ccm-playground",
    ] {
        assert!(!deps.contains(forbidden), "wasm-ccm depends on {forbidden}");
    }
}

#[test]
fn only_the_playground_links_the_doubles() {
    let deps = normal_dependencies("wasm-ccm-playground");
    for needed in [
        "wasm-ccm",
        "wasm-ccm-host",
        "kube-double",
        "sim-cloud",
        "moto-peer",
        "keystone-peer",
        "kube-apiserver-peer",
        "openstack-double",
        "huaweicloud-double",
    ] {
        assert!(deps.contains(needed), "playground lacks {needed}: {deps:?}");
    }
}

#[test]
fn the_openstack_provider_links_no_host() {
    let deps = normal_dependencies("openstack-provider");
    assert!(deps.contains("occm-config"), "{deps:?}");
    for forbidden in ["occm-import", "wasm-ccm-host", "wasmtime", "serde-saphyr"] {
        assert!(
            !deps.contains(forbidden),
            "openstack-provider depends on {forbidden}"
        );
    }
}

#[test]
fn the_huaweicloud_provider_links_no_host() {
    let deps = normal_dependencies("huaweicloud-provider");
    assert!(deps.contains("wasm-ccm-guest"), "{deps:?}");
    for forbidden in ["wasm-ccm-host", "wasmtime", "huaweicloud-double", "hmac"] {
        assert!(
            !deps.contains(forbidden),
            "huaweicloud-provider depends on {forbidden}"
        );
    }
}

/// The `.wit` files under `dir`, by path relative to it.
fn wit_files(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).expect("reading a wit directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "wit") {
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(relative, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    files
}

/// The contract is written once: `wit/` is a link to the SDK's `guests/sdk/wit/` (real
/// files there, so the published crate carries them), and the SDK's version is the
/// contract's.
#[test]
fn the_sdk_carries_the_contract_at_its_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let link =
        std::fs::read_link(root.join("wit")).expect("wit/ is a symbolic link to guests/sdk/wit");
    assert_eq!(link, Path::new("guests/sdk/wit"));
    let contract = wit_files(&root.join("guests/sdk/wit"));
    assert!(contract.contains_key("provider.wit"), "{contract:?}");
    let package = contract["provider.wit"]
        .lines()
        .find_map(|l| l.strip_prefix("package wasm-ccm:provider@"))
        .expect("the contract's package line")
        .trim_end_matches(';')
        .to_owned();
    let manifest = std::fs::read_to_string(root.join("guests/sdk/Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!("\nversion = \"{package}\"")),
        "wasm-ccm-guest's version must be the contract's ({package})"
    );
}

/// The SDK is publishable as it stands: `cargo package` makes a `.crate` holding the
/// contract's WIT, and that crate builds on its own (outside the workspace, so no path
/// escapes into it). Built where tests/new_provider.rs builds a generated provider,
/// which depends on the same crates ([`wasm_ccm_tests::outside_target_dir`]).
#[test]
fn the_sdk_packages_for_crates_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args(["package", "--offline", "--locked", "--allow-dirty"])
        .args(["-p", "wasm-ccm-guest"])
        .env("CARGO_TARGET_DIR", wasm_ccm_tests::outside_target_dir())
        .output()
        .expect("running cargo package");
    assert!(
        out.status.success(),
        "cargo package -p wasm-ccm-guest failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "package",
            "--offline",
            "--locked",
            "--allow-dirty",
            "--list",
        ])
        .args(["-p", "wasm-ccm-guest"])
        .output()
        .expect("running cargo package --list");
    let files = String::from_utf8_lossy(&list.stdout);
    for file in [
        "wit/provider.wit",
        "wit/types.wit",
        "wit/deps/http.wit",
        "README.md",
    ] {
        assert!(
            files.lines().any(|l| l == file),
            "{file} not packaged:\n{files}"
        );
    }
}

/// The HTTP broker names no cloud: every credential kind reaches it through
/// `CredentialKind` (runtime/host/src/capabilities/http_egress/credentials/), so a new
/// cloud's kind adds no line to the broker's own files (their tests aside).
#[test]
fn the_broker_names_no_cloud() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/host/src");
    let egress = host.join("capabilities/http_egress");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&egress)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.push(host.join("metrics.rs"));
    assert!(files.len() > 8, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for (number, line) in code.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            for cloud in ["keystone", "aws", "amazon", "openstack", "huawei", "sigv4"] {
                assert!(
                    !lower.contains(cloud),
                    "{}:{}: `{line}` names a cloud ({cloud}): it belongs in its credential kind",
                    file.display(),
                    number + 1
                );
            }
        }
    }
}
