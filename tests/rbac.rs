//! `deploy/` renders with `kubectl kustomize`, and its RBAC grants exactly the API
//! calls `wasm-ccm` makes: the real binary runs every controller, leader election and
//! a provider reload against the API server double, which records each request's
//! (group, resource, verb, namespace); every request must be allowed by the rendered
//! rules, and every granted verb must have been used.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use sim_cloud::model::{Fault, NewInstance};
use wasm_ccm_tests::{
    Stack, kubelet_node_with_pod_cidr, listening_port, wait_until, with_custom_section,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// One RBAC rule, flattened: (group, resource, verb), with the namespace it applies
/// in (`None`: cluster-wide).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    group: String,
    resource: String,
    verb: String,
    namespace: Option<String>,
    /// Granted by one of Kubernetes' built-in roles (its rules are not ours to trim).
    builtin: Option<&'static str>,
}

/// A rule of a built-in role: (group, resource, verbs).
type BuiltinRule = (&'static str, &'static str, &'static [&'static str]);

/// The rules of the built-in roles deploy/ binds (as the API server bootstraps them).
const BUILTIN_ROLES: &[(&str, &[BuiltinRule])] = &[
    (
        "system:auth-delegator",
        &[
            ("authentication.k8s.io", "tokenreviews", &["create"]),
            ("authorization.k8s.io", "subjectaccessreviews", &["create"]),
        ],
    ),
    (
        // Limited to resourceNames [extension-apiserver-authentication].
        "extension-apiserver-authentication-reader",
        &[("", "configmaps", &["get", "list", "watch"])],
    ),
];

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// `kubectl kustomize deploy/`, parsed.
fn rendered() -> Vec<serde_json::Value> {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    assert!(
        deploy.join("providers/simcloud.wasm").exists(),
        "deploy/providers/simcloud.wasm is missing: run scripts/build-guests.sh"
    );
    let out = std::process::Command::new(kubectl())
        .arg("kustomize")
        .arg(&deploy)
        .output()
        .unwrap_or_else(|e| panic!("running {} kustomize: {e} (set KUBECTL)", kubectl()));
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/ failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("\n---\n")
        .map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).expect("rendered YAML"))
        .collect()
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The grants of the ServiceAccount `kube-system/wasm-ccm` through its bindings.
fn grants(docs: &[serde_json::Value]) -> BTreeSet<Grant> {
    let binds_us = |doc: &serde_json::Value| {
        doc["subjects"].as_array().is_some_and(|subjects| {
            subjects.iter().any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == "wasm-ccm"
                    && s["namespace"] == "kube-system"
            })
        })
    };
    let mut grants = BTreeSet::new();
    for binding in docs.iter().filter(|d| binds_us(d)) {
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role_name = binding["roleRef"]["name"].as_str().unwrap();
        let namespace = match binding["kind"].as_str() {
            Some("RoleBinding") => Some(
                binding["metadata"]["namespace"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
            _ => None,
        };
        if let Some((builtin, rules)) = BUILTIN_ROLES.iter().find(|(name, _)| *name == role_name) {
            for (group, resource, verbs) in rules.iter() {
                for verb in verbs.iter() {
                    grants.insert(Grant {
                        group: group.to_string(),
                        resource: resource.to_string(),
                        verb: verb.to_string(),
                        namespace: namespace.clone(),
                        builtin: Some(builtin),
                    });
                }
            }
            continue;
        }
        let role = docs
            .iter()
            .find(|d| d["kind"] == role_kind && d["metadata"]["name"] == role_name)
            .unwrap_or_else(|| panic!("{role_kind} {role_name} is not in deploy/"));
        for rule in role["rules"].as_array().unwrap() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        grants.insert(Grant {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            namespace: namespace.clone(),
                            builtin: None,
                        });
                    }
                }
            }
        }
    }
    grants
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_rbac_grants_exactly_the_calls_the_controller_manager_makes() {
    let docs = rendered();
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(container[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    assert!(docs.iter().any(|d| d["kind"] == "ConfigMap"
        && d["metadata"]["name"] == "wasm-ccm-providers"
        && d["binaryData"]["simcloud.wasm"].is_string()));
    let grants = grants(&docs);

    // A full run: leader election, all four controllers, a provider reload.
    let stack = Stack::start().await;
    let nodes: Api<Node> = Api::all(stack.client());
    let services: Api<Service> = Api::namespaced(stack.client(), "default");
    for (name, cidr) in [("rbac-a", "10.244.1.0/24"), ("rbac-b", "10.244.2.0/24")] {
        stack
            .cloud
            .with_state(|s| s.create_instance(NewInstance::named(name)));
        nodes
            .create(
                &PostParams::default(),
                &kubelet_node_with_pod_cidr(name, cidr),
            )
            .await
            .unwrap();
    }
    // A Node changed between the cache's version and the controller's update (a
    // conflict): the controller reads the Node from the API server and updates it again.
    stack.api.inject_conflicts("nodes", "update", 1);
    // The secure port as deployed: a scraper's token is reviewed, its access to
    // /metrics too, and the client CA ConfigMap is read.
    stack
        .api
        .add_user("t-scraper", "scraper", &["system:authenticated"]);
    stack.api.allow_non_resource("scraper", "get", "/metrics");
    let port = listening_port();
    let _ccm = stack
        .secure_controller_manager_command(port, &[])
        .env("POD_NAME", "wasm-ccm-0")
        .env("POD_NAMESPACE", "kube-system")
        .spawn()
        .unwrap();
    for name in ["rbac-a", "rbac-b"] {
        wait_until(TIMEOUT, &format!("{name} initialized"), || async {
            nodes.get(name).await.is_ok_and(|n| {
                !n.spec
                    .and_then(|s| s.taints)
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == UNINITIALIZED)
            })
        })
        .await;
    }
    wait_until(TIMEOUT, "routes for both nodes", || async {
        stack.cloud.with_state(|s| s.list_routes(None).len()) == 2
    })
    .await;

    // The cloud throttles the first two ensures (429, retry after 1 s): the repeated
    // SyncLoadBalancerFailed event is aggregated (a patch of the event's series).
    stack.cloud.with_state(|s| {
        s.faults.push(Fault {
            path_prefix: "/v1/load-balancers".into(),
            method: Some("PUT".into()),
            status: Some(429),
            retry_after_seconds: Some(1),
            count: Some(2),
            ..Fault::default()
        })
    });
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    wait_until(TIMEOUT, "an ingress", || async {
        services.get("web").await.is_ok_and(|s| {
            s.status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .is_some_and(|i| !i.is_empty())
        })
    })
    .await;
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "the Service gone after cleanup", || async {
        services.get_opt("web").await.is_ok_and(|s| s.is_none())
    })
    .await;

    // rbac-b's instance stops and the Node is not Ready: the lifecycle taints it;
    // then the instance is gone: the lifecycle deletes the Node.
    stack.shut_down_then_gone(&nodes, "rbac-b", TIMEOUT).await;

    // A provider reload: an Event on the Pod.
    let reference = std::fs::read(&stack.dir.wasm).unwrap();
    let staged = stack.dir.dir.path().join("staged.tmp");
    std::fs::write(&staged, with_custom_section(&reference, "rbac")).unwrap();
    std::fs::rename(&staged, &stack.dir.wasm).unwrap();
    wait_until(TIMEOUT, "the reload event", || async {
        stack.api.accesses().iter().any(|a| {
            a.group == "events.k8s.io" && a.namespace == "kube-system" && a.verb == "create"
        })
    })
    .await;

    // The leader renews its Lease (every --leader-elect-retry-period).
    wait_until(TIMEOUT, "a Lease renewal", || async {
        stack
            .api
            .accesses()
            .iter()
            .any(|a| a.group == "coordination.k8s.io" && a.verb == "update")
    })
    .await;

    let scraper = wasm_ccm_tests::https::Credentials::token("t-scraper");
    wait_until(TIMEOUT, "a scrape of /metrics", || async {
        wasm_ccm_tests::https::https_get(port, "/metrics", &scraper)
            .await
            .is_ok_and(|a| a.status == 200)
    })
    .await;

    // The controller manager's requests (this test's own client sends no User-Agent).
    let mut used = BTreeSet::new();
    let mut denied = Vec::new();
    for access in stack
        .api
        .accesses()
        .into_iter()
        .filter(|a| a.user_agent == wasm_ccm::daemon::USER_AGENT)
    {
        let allowed = grants.iter().any(|g| {
            g.group == access.group
                && g.resource == access.resource
                && g.verb == access.verb
                && g.namespace
                    .as_ref()
                    .is_none_or(|ns| *ns == access.namespace)
        });
        if allowed {
            used.insert((
                access.group.clone(),
                access.resource.clone(),
                access.verb.clone(),
            ));
        } else {
            denied.push(access);
        }
    }
    assert!(
        denied.is_empty(),
        "deploy/base/rbac.yaml does not allow requests the controller manager made: {denied:#?}"
    );
    let is_used =
        |g: &&Grant| used.contains(&(g.group.clone(), g.resource.clone(), g.verb.clone()));
    let unused: Vec<_> = grants
        .iter()
        .filter(|g| g.builtin.is_none() && !is_used(g))
        .collect();
    for (builtin, _) in BUILTIN_ROLES {
        assert!(
            grants
                .iter()
                .filter(|g| g.builtin == Some(builtin))
                .any(|g| is_used(&g)),
            "deploy/base/rbac.yaml binds {builtin}, which the controller manager did not use"
        );
    }
    assert!(
        unused.is_empty(),
        "deploy/base/rbac.yaml grants more than the controller manager used: {unused:#?}"
    );
}
