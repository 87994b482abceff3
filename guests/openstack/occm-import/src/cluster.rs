//! occm's cluster name, and `cluster-name.yaml`, deploy/openstack's patch of the
//! Deployment that gives it to wasm-ccm.

use std::path::{Path, PathBuf};

use super::{ImportError, quoted};
use crate::occm_deployment::{self, Found, OCCM_DEFAULT};

/// occm's cluster name: `given` (`--cluster-name`), else the one occm runs with in
/// `deployment` (`--occm-deployment`: its Deployment, DaemonSet or Pod, or a file of its
/// flags), else occm's default.
pub fn cluster_name(given: Option<&str>, deployment: Option<&Path>) -> Result<Found, ImportError> {
    let found = match (given, deployment) {
        (Some(name), _) => Found {
            name: name.to_owned(),
            source: "--cluster-name".into(),
            defaulted: false,
        },
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| ImportError::Io {
                path: path.to_owned(),
                source,
            })?;
            occm_deployment::cluster_name(&text).map_err(|reason| ImportError::Invalid {
                path: path.to_owned(),
                reason,
            })?
        }
        (None, None) => Found {
            name: OCCM_DEFAULT.into(),
            source: "occm's default: neither --cluster-name nor --occm-deployment given".into(),
            defaulted: true,
        },
    };
    if found.name.trim().is_empty() {
        return Err(ImportError::ClusterName(format!(
            "the cluster name ({}) is empty",
            found.source
        )));
    }
    Ok(found)
}

/// What is said when the cluster name is occm's default.
pub fn default_note(cluster: &Found) -> String {
    format!(
        "cluster-name.yaml says occm's default cluster name, \"{OCCM_DEFAULT}\" ({}). If occm \
         ran with another --cluster-name (CLUSTER_NAME in occm's manifests, cluster.name in \
         its chart), run again with --cluster-name NAME or --occm-deployment FILE: wasm-ccm \
         refuses by name the load balancers occm made under another cluster name.",
        cluster.source
    )
}

/// deploy/openstack's `cluster-name.yaml` for `cluster`: the Deployment's container
/// gets `CLUSTER_NAME`, which deployment-patch.yaml passes as
/// `--cluster-name=$(CLUSTER_NAME)` (each `$` doubled: kubelet expands the value).
fn cluster_name_patch(cluster: &Found) -> String {
    format!(
        "\
# The cluster's name, wasm-ccm's --cluster-name (deployment-patch.yaml passes
# --cluster-name=$(CLUSTER_NAME)): part of every load balancer's name and tags
# (kube_service_<cluster>_<namespace>_<name>). Coming from occm it must be occm's
# --cluster-name: a load balancer occm made under another one is refused by name.
# `wasm-ccm import-occm-config` writes this file; this name: {source}.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: wasm-ccm
  namespace: kube-system
spec:
  template:
    spec:
      containers:
        - name: wasm-ccm
          env:
            - name: CLUSTER_NAME
              value: {value}
",
        source = cluster.source.replace('\n', " "),
        value = quoted(&cluster.name.replace('$', "$$")),
    )
}

/// Writes `cluster-name.yaml` under `out`: its path.
pub fn write_cluster_name(cluster: &Found, out: &Path) -> Result<PathBuf, ImportError> {
    let path = out.join("cluster-name.yaml");
    let io = |source| ImportError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(out).map_err(io)?;
    std::fs::write(&path, cluster_name_patch(cluster)).map_err(io)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value a cluster-name.yaml gives `CLUSTER_NAME` in the Deployment's container.
    fn cluster_name_in(patch: &str) -> serde_json::Value {
        let patch: serde_json::Value = serde_saphyr::from_str(patch).unwrap();
        assert_eq!(patch["kind"], "Deployment");
        assert_eq!(patch["metadata"]["name"], "wasm-ccm");
        let container = &patch["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], "wasm-ccm");
        assert_eq!(container["env"][0]["name"], "CLUSTER_NAME");
        container["env"][0]["value"].clone()
    }

    /// `--cluster-name`: occm's name in cluster-name.yaml (a `$` doubled: kubelet
    /// expands the value); without it or `--occm-deployment`, occm's default and a note
    /// saying how to give another; an empty one, refused.
    #[test]
    fn the_cluster_name_is_given_or_occms_default() {
        let found = cluster_name(Some("prod"), None).unwrap();
        assert_eq!(found.name, "prod");
        assert!(!found.defaulted);
        assert_eq!(cluster_name_in(&cluster_name_patch(&found)), "prod");
        let dollar = Found {
            name: "a$(b)".into(),
            ..found
        };
        assert_eq!(cluster_name_in(&cluster_name_patch(&dollar)), "a$$(b)");
        let default = cluster_name(None, None).unwrap();
        assert_eq!(default.name, "kubernetes");
        assert!(default.defaulted);
        let note = default_note(&default);
        assert!(
            note.contains("--cluster-name NAME") && note.contains("--occm-deployment FILE"),
            "{note}"
        );
        assert!(matches!(
            cluster_name(Some(" "), None),
            Err(ImportError::ClusterName(_))
        ));
    }

    /// `--occm-deployment`: the name occm's DaemonSet runs with (`$(CLUSTER_NAME)` from
    /// its env), written where deploy/openstack reads it; a file without occm is named
    /// in the error.
    #[test]
    fn the_cluster_name_is_read_from_occms_daemonset() {
        let dir = std::env::temp_dir().join(format!("occm-deployment-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let daemonset = dir.join("occm.yaml");
        std::fs::write(
            &daemonset,
            r#"kind: DaemonSet
metadata: {name: occm, namespace: kube-system}
spec:
  template:
    spec:
      containers:
        - name: occm
          image: registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0
          args: ["/bin/openstack-cloud-controller-manager", "--cluster-name=$(CLUSTER_NAME)"]
          env: [{name: CLUSTER_NAME, value: prod}]
"#,
        )
        .unwrap();
        let found = cluster_name(None, Some(daemonset.as_path())).unwrap();
        assert_eq!(found.name, "prod");
        assert!(!found.defaulted);
        assert!(
            found.source.contains("DaemonSet kube-system/occm"),
            "{}",
            found.source
        );
        let out = dir.join("out");
        let written = write_cluster_name(&found, &out).unwrap();
        assert_eq!(written, out.join("cluster-name.yaml"));
        let text = std::fs::read_to_string(&written).unwrap();
        assert_eq!(cluster_name_in(&text), "prod");
        std::fs::write(&daemonset, "kind: ConfigMap\n").unwrap();
        let err = cluster_name(None, Some(daemonset.as_path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("occm.yaml") && err.contains("--cluster-name"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// deploy/openstack's cluster-name.yaml is what the import writes for occm's
    /// default, and its Deployment passes it as `--cluster-name`.
    #[test]
    fn deploy_openstacks_cluster_name_is_the_imports_default() {
        let deploy: serde_json::Value = serde_saphyr::from_str(include_str!(
            "../../../../deploy/openstack/cluster-name.yaml"
        ))
        .unwrap();
        let default = cluster_name(None, None).unwrap();
        let imported: serde_json::Value =
            serde_saphyr::from_str(&cluster_name_patch(&default)).unwrap();
        assert_eq!(deploy, imported);
        let patch = include_str!("../../../../deploy/openstack/deployment-patch.yaml");
        assert!(
            patch.contains("- --cluster-name=$(CLUSTER_NAME)\n"),
            "{patch}"
        );
        let kustomization = include_str!("../../../../deploy/openstack/kustomization.yaml");
        assert!(kustomization.contains("- path: cluster-name.yaml\n"));
    }
}
