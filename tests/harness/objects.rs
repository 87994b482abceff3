//! Kubernetes objects as the tests make and read them: Nodes as kubelet registers
//! them, load balancer Services, and what the controllers wrote on them.

/// A Node as kubelet registers it with `--cloud-provider=external`: tainted
/// uninitialized, its Ready condition `ready`, its hostname as only address.
pub fn kubelet_node(name: &str, ready: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "addresses": [{"type": "Hostname", "address": name}]
        }
    }))
    .expect("a Node")
}

/// The first ingress IP of a Service's load balancer status, if any.
pub fn ingress_ip(service: &k8s_openapi::api::core::v1::Service) -> Option<String> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

/// A Service of type LoadBalancer in `default` (port 80 → 8080), of `class` if any.
pub fn load_balancer_service(
    name: &str,
    class: Option<&str>,
) -> k8s_openapi::api::core::v1::Service {
    let mut spec = serde_json::json!({"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]});
    if let Some(class) = class {
        spec["loadBalancerClass"] = serde_json::json!(class);
    }
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .expect("a Service")
}

/// The keys of a Node's taints.
pub fn taint_keys(node: &k8s_openapi::api::core::v1::Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

/// Sets a Node's Ready condition to `status`, as its kubelet would.
pub async fn set_ready(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
    status: &str,
) {
    nodes
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(serde_json::json!(
                {"status": {"conditions": [{"type": "Ready", "status": status}]}}
            )),
        )
        .await
        .unwrap();
}

/// Whether the route controller marked the Node routed (`NetworkUnavailable` False).
pub async fn network_available(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
) -> bool {
    nodes.get(name).await.is_ok_and(|n| {
        n.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
    })
}

/// [`kubelet_node`], Ready, with the pod CIDR `pod_cidr` (as kube-controller-manager's
/// node IPAM allocates it).
pub fn kubelet_node_with_pod_cidr(name: &str, pod_cidr: &str) -> k8s_openapi::api::core::v1::Node {
    let mut node = kubelet_node(name, "True");
    let spec = node.spec.get_or_insert_default();
    spec.pod_cidr = Some(pod_cidr.into());
    spec.pod_cidrs = Some(vec![pod_cidr.into()]);
    node
}

/// A Node as kubelet registers it with `--cloud-provider=external --node-ip=<ip>`
/// (1.29+): the uninitialized taint, a pod CIDR if given, the `provided-node-ip` annotation, and
/// that address as its InternalIP (with its Hostname) until the cloud-node controller
/// writes the cloud's.
pub fn kubelet_node_with_node_ip(
    name: &str,
    pod_cidr: Option<&str>,
    ip: &str,
) -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::NodeAddress;
    let mut node = match pod_cidr {
        Some(cidr) => kubelet_node_with_pod_cidr(name, cidr),
        None => kubelet_node(name, "True"),
    };
    node.metadata.annotations = Some(
        [(
            "alpha.kubernetes.io/provided-node-ip".to_owned(),
            ip.to_owned(),
        )]
        .into(),
    );
    node.status.get_or_insert_default().addresses = Some(vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: ip.into(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: name.into(),
        },
    ]);
    node
}

/// A Node's addresses as (type, address), in order; none while it has none. Fails the
/// test when the Node cannot be read.
pub async fn node_addresses(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
) -> Vec<(String, String)> {
    nodes
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("reading Node {name}: {e}"))
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect()
}

/// Whether the cloud-node controller has initialized the Node (its
/// `node.cloudprovider.kubernetes.io/uninitialized` taint is gone).
pub async fn initialized(nodes: &kube::Api<k8s_openapi::api::core::v1::Node>, name: &str) -> bool {
    nodes.get(name).await.is_ok_and(|n| {
        !taint_keys(&n).contains(&"node.cloudprovider.kubernetes.io/uninitialized".to_string())
    })
}

/// Upstream's default load balancer name of a Service (`cloudprovider.DefaultLoadBalancerName`):
/// `a` + its UID without dashes, 32 characters at most.
pub fn default_load_balancer_name(svc: &k8s_openapi::api::core::v1::Service) -> String {
    let uid = svc
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .replace('-', "");
    format!("a{uid}").chars().take(32).collect()
}
