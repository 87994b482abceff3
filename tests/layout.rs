//! The crate boundaries of the layout, checked on the real dependency graph with
//! `cargo tree` (normal dependencies only: what the built artifacts link):
//! - `wasm-ccm-host` runs providers without knowing Kubernetes: no `kube`, no
//!   `k8s-openapi`;
//! - `wasm-ccm`, the shipped controller manager, links neither the API server double
//!   nor the simulated cloud;
//! - only `wasm-ccm-playground` links those.

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
    ] {
        assert!(deps.contains(needed), "playground lacks {needed}: {deps:?}");
    }
}
