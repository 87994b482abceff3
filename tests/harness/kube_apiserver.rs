//! The real Kubernetes API server for tests: the `kube-apiserver-peer` crate (shared
//! with the playground), re-exported where the tests have always found it.

pub use kube_apiserver_peer::{Audited, KubeApiServer, client_for};

/// Runs `kubectl` (`$KUBECTL`, else `kubectl`) with `server`'s admin kubeconfig: its
/// output, or a panic naming the command and what it printed.
pub fn kubectl_admin(server: &KubeApiServer, args: &[&str]) -> String {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {kubectl}: {e} (source scripts/ensure-kubectl.sh)"));
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Installs deploy/ on `server` with deploy/README.md's command (`kubectl apply
/// --server-side -k deploy`); panics when deploy/'s provider is not built.
pub fn install_deploy(server: &KubeApiServer) {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    assert!(
        deploy.join("providers/simcloud.wasm").exists(),
        "deploy/providers/simcloud.wasm is missing: run scripts/build-guests.sh"
    );
    kubectl_admin(
        server,
        &[
            "apply",
            "--server-side",
            "-k",
            &deploy.display().to_string(),
        ],
    );
}
