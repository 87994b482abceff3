//! helm (`scripts/ensure-go-tools.sh helm` builds it from its Go module; `$HELM`) and
//! the chart `deploy/helm/wasm-ccm`, rendered and compared with deploy/'s kustomize
//! directories.

use std::path::{Path, PathBuf};

/// The helm binary: `$HELM`, else target/kube/bin/helm; panics naming the script that
/// builds it when it is missing.
pub fn helm() -> PathBuf {
    let path = std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kube/bin/helm"));
    assert!(
        path.is_file(),
        "{} is missing: run `source scripts/ensure-go-tools.sh helm` (scripts/test.sh does), \
         which builds it from its Go module",
        path.display()
    );
    path
}

/// The chart's directory.
pub fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/wasm-ccm")
}

/// Runs helm with `args` in the repository's root: what it printed, or a panic naming
/// the command and its errors.
pub fn run(args: &[&str]) -> String {
    try_run(args).unwrap_or_else(|e| panic!("helm {} failed: {e}", args.join(" ")))
}

/// Runs helm with `args` in the repository's root: what it printed, or what it printed
/// when it failed.
pub fn try_run(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(helm())
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        // No user's helm configuration or cache.
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("wasm-ccm-helm-config"),
        )
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("wasm-ccm-helm-cache"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("wasm-ccm-helm-data"),
        )
        .args(args)
        .output()
        .expect("running helm");
    let printed = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    if out.status.success() {
        Ok(printed(&out.stdout))
    } else {
        Err(printed(&out.stdout) + &printed(&out.stderr))
    }
}

/// `helm template wasm-ccm deploy/helm/wasm-ccm -n kube-system ARGS`: the manifest.
pub fn template(args: &[&str]) -> String {
    let chart = chart().display().to_string();
    let mut all = vec!["template", "wasm-ccm", &chart, "--namespace", "kube-system"];
    all.extend_from_slice(args);
    run(&all)
}

/// A manifest's objects, document by document (documents holding only comments left
/// out).
pub fn objects(manifest: &str) -> Vec<serde_json::Value> {
    manifest
        .split("\n---")
        .map(|doc| serde_saphyr::from_str(doc).expect("rendered YAML"))
        .filter(|doc: &serde_json::Value| !doc.is_null())
        .collect()
}

/// The labels Helm's chart conventions add and kustomize does not.
pub const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// `objects` without [`HELM_LABELS`], their base64 values unwrapped (kustomize breaks
/// a ConfigMap's `binaryData` into lines), the lists merged by name whose order does not
/// matter (a Pod's volumes and its containers' mounts, which kustomize's patches
/// reorder) sorted by name (the environment keeps its order: `$(VAR)` reads what comes
/// before it), and the objects sorted by kind, namespace and
/// name, so two renderings of the same objects compare equal.
pub fn comparable(mut objects: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    fn by_name(list: &mut serde_json::Value) {
        if let Some(items) = list.as_array_mut() {
            items.sort_by_key(|item| item["name"].as_str().unwrap_or_default().to_owned());
        }
    }
    for object in &mut objects {
        if let Some(pod) = object.pointer_mut("/spec/template/spec") {
            if let Some(volumes) = pod.get_mut("volumes") {
                by_name(volumes);
            }
            if let Some(containers) = pod.get_mut("containers").and_then(|c| c.as_array_mut()) {
                for container in containers {
                    if let Some(mounts) = container.get_mut("volumeMounts") {
                        by_name(mounts);
                    }
                }
            }
        }
        if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
            for label in HELM_LABELS {
                labels.remove(label);
            }
        }
        let base64 = match object["kind"].as_str() {
            Some("ConfigMap") => "binaryData",
            Some("Secret") => "data",
            _ => continue,
        };
        if let Some(values) = object[base64].as_object_mut() {
            for value in values.values_mut() {
                if let Some(text) = value.as_str() {
                    *value = text.split_whitespace().collect::<String>().into();
                }
            }
        }
    }
    let key = |o: &serde_json::Value| {
        (
            o["kind"].as_str().unwrap_or_default().to_owned(),
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    objects.sort_by_key(key);
    objects
}

/// Where `a` and `b` differ: each path (`spec.template...`) with both values, shortened.
pub fn differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    fn short(v: &serde_json::Value) -> String {
        let text = v.to_string();
        match text.char_indices().nth(160) {
            Some((end, _)) => format!("{}...", &text[..end]),
            None => text,
        }
    }
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for key in keys {
                    match (x.get(key), y.get(key)) {
                        (Some(l), Some(r)) => walk(&format!("{path}.{key}"), l, r, out),
                        (l, r) => {
                            let side = |v: Option<&Value>| v.map_or("(absent)".into(), short);
                            out.push(format!("{path}.{key}: {} != {}", side(l), side(r)));
                        }
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (l, r)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), l, r, out);
                }
            }
            _ if a != b => out.push(format!("{path}: {} != {}", short(a), short(b))),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", a, b, &mut out);
    out
}
