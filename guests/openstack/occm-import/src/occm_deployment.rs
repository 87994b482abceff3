//! occm's `--cluster-name`, read from what runs occm: its Deployment, DaemonSet,
//! StatefulSet or static Pod (`kubectl get ds openstack-cloud-controller-manager -o
//! yaml`, `helm template`, occm's own `manifests/controller-manager/...-ds.yaml`), or a
//! file of its flags. occm's manifests pass `--cluster-name=$(CLUSTER_NAME)` with
//! `CLUSTER_NAME` in the container's `env` (the chart's `cluster.name`), expanded here
//! as kubelet expands it; the chart's `controllerExtraArgs` may add a second
//! `--cluster-name`, and the last one wins (pflag). A container running occm without
//! the flag has its default, `kubernetes`.
//!
//! The name matters because occm puts it in every load balancer's name and tags
//! (`kube_service_<cluster>_<namespace>_<name>`): a controller with another one does not
//! find them as the Services' own (see guests/openstack/README.md).

use serde_json::Value;

/// The default of `--cluster-name` in occm (and every cloud-controller-manager:
/// `k8s.io/cloud-provider`'s `KubeCloudShared.ClusterName`).
pub const OCCM_DEFAULT: &str = "kubernetes";

/// The flag, as occm's command line spells it.
const FLAG: &str = "--cluster-name";

/// The name occm runs with, and where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// occm's `--cluster-name`.
    pub name: String,
    /// Where: `DaemonSet kube-system/openstack-cloud-controller-manager, container
    /// openstack-cloud-controller-manager`, or `the flags`.
    pub source: String,
    /// occm runs without `--cluster-name`: [`OCCM_DEFAULT`].
    pub defaulted: bool,
}

/// A container running occm: where it is, its command and arguments, its `env`
/// (a name and its value; `None` for one from `valueFrom`).
struct Container {
    source: String,
    words: Vec<String>,
    env: Vec<(String, Option<String>)>,
}

/// occm's cluster name in `text`: the occm containers of the workloads it holds (all
/// must agree), else, when it holds none, its words as flags.
pub fn cluster_name(text: &str) -> Result<Found, String> {
    let containers = occm_containers(text);
    if containers.is_empty() {
        return from_flags(text);
    }
    let found = containers
        .iter()
        .map(from_container)
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(other) = found.iter().find(|f| f.name != found[0].name) {
        return Err(format!(
            "occm's containers run with different cluster names: \"{}\" ({}) and \"{}\" ({}); \
             give the one in use with --cluster-name",
            found[0].name, found[0].source, other.name, other.source
        ));
    }
    Ok(found[0].clone())
}

/// The containers running occm in the workloads of `text` (YAML or JSON, one document
/// or several, `kind: List` too); none when it is not such a file.
fn occm_containers(text: &str) -> Vec<Container> {
    let Ok(documents) = serde_saphyr::from_multiple::<Value>(text) else {
        return Vec::new();
    };
    let mut objects = Vec::new();
    for document in documents {
        if document["kind"] == "List" {
            objects.extend(document["items"].as_array().into_iter().flatten().cloned());
        } else {
            objects.push(document);
        }
    }
    objects.iter().flat_map(workload_containers).collect()
}

/// The containers of a Deployment, DaemonSet, StatefulSet or Pod that run occm.
fn workload_containers(object: &Value) -> Vec<Container> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let pod = match kind {
        "Deployment" | "DaemonSet" | "StatefulSet" => &object["spec"]["template"]["spec"],
        "Pod" => &object["spec"],
        _ => return Vec::new(),
    };
    let metadata = &object["metadata"];
    let workload = format!(
        "{kind} {}/{}",
        metadata["namespace"].as_str().unwrap_or("default"),
        metadata["name"].as_str().unwrap_or_default()
    );
    pod["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| runs_occm(c))
        .map(|c| Container {
            source: format!(
                "{workload}, container {}",
                c["name"].as_str().unwrap_or_default()
            ),
            words: words(c),
            env: env(c),
        })
        .collect()
}

/// Whether a container runs occm: its image, its command or `--cloud-provider=openstack`.
fn runs_occm(container: &Value) -> bool {
    let image = container["image"].as_str().unwrap_or_default();
    image.contains("openstack-cloud-controller-manager")
        || words(container).iter().any(|w| {
            w.contains("openstack-cloud-controller-manager") || w == "--cloud-provider=openstack"
        })
}

/// A container's `command` then `args`.
fn words(container: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .flat_map(|key| container[*key].as_array().into_iter().flatten())
        .filter_map(|w| w.as_str().map(str::to_owned))
        .collect()
}

/// A container's `env`: each name with its value (`None` from `valueFrom`), each value
/// expanded against the ones before it, as kubelet does.
fn env(container: &Value) -> Vec<(String, Option<String>)> {
    let mut env: Vec<(String, Option<String>)> = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let Some(name) = var["name"].as_str() else {
            continue;
        };
        let value = match var["value"].as_str() {
            Some(value) => expand(value, &env).ok(),
            None if var.get("valueFrom").is_some() => None,
            None => Some(String::new()),
        };
        env.push((name.to_owned(), value));
    }
    env
}

/// The cluster name occm's container runs with.
fn from_container(container: &Container) -> Result<Found, String> {
    let found = |name: String, defaulted| Found {
        name,
        source: container.source.clone(),
        defaulted,
    };
    match flag_values(&container.words).pop() {
        None => Ok(found(OCCM_DEFAULT.to_owned(), true)),
        Some(value) => expand(&value, &container.env)
            .map(|name| found(name, false))
            .map_err(|var| {
                format!(
                    "{}: {FLAG}={value} takes {var} from outside the file (valueFrom, \
                     envFrom, or not set): give the cluster name with --cluster-name",
                    container.source
                )
            }),
    }
}

/// The cluster name in a file of flags (a command line, one flag a line, a systemd
/// unit): the last `--cluster-name`, else occm's default when the file runs occm.
fn from_flags(text: &str) -> Result<Found, String> {
    let found = |name: String, defaulted| Found {
        name,
        source: "the flags".into(),
        defaulted,
    };
    let words: Vec<String> = text.split_whitespace().map(unquoted).collect();
    match flag_values(&words).pop() {
        Some(value) if value.contains("$(") => Err(format!(
            "{FLAG}={value} refers to a variable the file does not set: give the cluster \
             name with --cluster-name"
        )),
        Some(value) => Ok(found(value, false)),
        None if text.contains("openstack-cloud-controller-manager") => {
            Ok(found(OCCM_DEFAULT.to_owned(), true))
        }
        None => Err(
            "neither a workload running occm (a Deployment, DaemonSet, StatefulSet or Pod \
             running openstack-cloud-controller-manager) nor --cluster-name found"
                .into(),
        ),
    }
}

/// A word of a command line without the quotes, brackets and commas around it.
fn unquoted(word: &str) -> String {
    word.trim_matches(|c| matches!(c, '"' | '\'' | '[' | ']' | ',' | '\\'))
        .to_owned()
}

/// Every `--cluster-name` value among `words` (`--cluster-name=NAME`, or
/// `--cluster-name NAME`), in order; a word holding a whole command line (`sh -c
/// "..."`) is read word by word.
fn flag_values(words: &[String]) -> Vec<String> {
    let split: Vec<String> = words
        .iter()
        .flat_map(|w| {
            if w.contains(char::is_whitespace) {
                w.split_whitespace().map(unquoted).collect::<Vec<_>>()
            } else {
                vec![w.clone()]
            }
        })
        .collect();
    let mut values = Vec::new();
    let mut words = split.iter();
    while let Some(word) = words.next() {
        if word == FLAG {
            values.extend(words.next().cloned());
        } else if let Some(value) = word.strip_prefix(FLAG).and_then(|r| r.strip_prefix('=')) {
            values.push(value.to_owned());
        }
    }
    values
}

/// `text` with kubelet's expansion of `$(VAR)` against `env` (`$$` is `$`); the variable
/// whose value is not in the file (`valueFrom`, or not set: kubelet would leave it as
/// it is) as the error.
fn expand(text: &str, env: &[(String, Option<String>)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = after.strip_prefix('(').and_then(|a| a.split_once(')'))
        {
            let value = env.iter().rev().find(|(n, _)| n == name);
            match value {
                Some((_, Some(value))) => out.push_str(value),
                _ => return Err(name.to_owned()),
            }
            rest = after;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// occm's own DaemonSet (manifests/controller-manager/
    /// openstack-cloud-controller-manager-ds.yaml, v1.36.0), the cluster name changed,
    /// among the other objects of the file (tests/openstack/cluster_name.rs imports it
    /// with `wasm-ccm import-occm-config`).
    const OCCM_DAEMONSET: &str = include_str!("../fixtures/occm-daemonset.yaml");

    #[test]
    fn occms_daemonset_gives_its_cluster_name_env() {
        let found = cluster_name(OCCM_DAEMONSET).unwrap();
        assert_eq!(
            found,
            Found {
                name: "prod".into(),
                source: "DaemonSet kube-system/openstack-cloud-controller-manager, container \
                         openstack-cloud-controller-manager"
                    .into(),
                defaulted: false,
            }
        );
    }

    /// `--cluster-name NAME` (two words), the last one winning (the chart's
    /// `controllerExtraArgs` after its own), a Deployment in a `List` as JSON.
    #[test]
    fn the_last_flag_wins_in_either_form() {
        let list = serde_json::json!({"kind": "List", "items": [{
            "kind": "Deployment",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "image": "busybox", "args": ["--cluster-name=not-occm"]},
                {"name": "occm", "image": "example.org/occm:v1",
                 "command": ["/bin/openstack-cloud-controller-manager"],
                 "args": ["--cluster-name=$(CLUSTER_NAME)", "--cluster-name", "staging"],
                 "env": [{"name": "CLUSTER_NAME", "value": "kubernetes"}]}
            ]}}}
        }]});
        let found = cluster_name(&list.to_string()).unwrap();
        assert_eq!(found.name, "staging");
        assert_eq!(found.source, "Deployment kube-system/occm, container occm");
    }

    /// Without the flag, occm's default, said to be one.
    #[test]
    fn occm_without_the_flag_has_the_default() {
        let text = OCCM_DAEMONSET.replace("            - --cluster-name=$(CLUSTER_NAME)\n", "");
        let found = cluster_name(&text).unwrap();
        assert_eq!(found.name, "kubernetes");
        assert!(found.defaulted);
    }

    /// A name from a ConfigMap or not set at all is not guessed.
    #[test]
    fn a_name_from_outside_the_file_is_refused() {
        let from = OCCM_DAEMONSET.replace(
            "value: prod",
            "valueFrom:\n                configMapKeyRef: {name: c, key: k}",
        );
        let unset = OCCM_DAEMONSET.replace(
            "CLUSTER_NAME\n              value: prod",
            "X\n              value: prod",
        );
        for text in [from, unset] {
            let err = cluster_name(&text).unwrap_err();
            assert!(
                err.contains("CLUSTER_NAME") && err.contains("--cluster-name"),
                "{err}"
            );
        }
    }

    /// Two occm containers with two names: which one is in use is asked.
    #[test]
    fn disagreeing_containers_are_refused() {
        let second = OCCM_DAEMONSET
            .split("---\n")
            .nth(1)
            .unwrap()
            .replace("value: prod", "value: test")
            .replace(
                "name: openstack-cloud-controller-manager\n  namespace",
                "name: other\n  namespace",
            );
        let err = cluster_name(&format!("{OCCM_DAEMONSET}---\n{second}")).unwrap_err();
        assert!(
            err.contains("\"prod\"") && err.contains("\"test\""),
            "{err}"
        );
    }

    /// A file of flags, one a line or a command line, and kubelet's `$$` escape.
    #[test]
    fn a_flags_file_is_read() {
        let lines = "--v=2\n--cluster-name=prod\n--cloud-config=/etc/cloud.conf\n";
        assert_eq!(cluster_name(lines).unwrap().name, "prod");
        let unit = "[Service]\nExecStart=/usr/bin/openstack-cloud-controller-manager \\\n  \
                    --cluster-name \"east\" --cloud-provider=openstack\n";
        assert_eq!(cluster_name(unit).unwrap().name, "east");
        let occm = "ExecStart=/usr/bin/openstack-cloud-controller-manager --v=2\n";
        assert!(cluster_name(occm).unwrap().defaulted);
        assert!(cluster_name("--cluster-name=$(NAME)\n").is_err());
        assert!(cluster_name("kind: ConfigMap\n").is_err());
        assert_eq!(
            expand("a$$(B)$(C)$", &[("C".into(), Some("c".into()))]).unwrap(),
            "a$(B)c$"
        );
    }
}
