//! The Service defaults the real server fills in: cluster IPs, node ports, protocols
//! and traffic policies, on create and on update.

use serde_json::{Value, json};

use super::{Inner, Store};

impl Store {
    /// Service defaults the real server applies on create: cluster IP, node ports,
    /// protocols, policies.
    pub(super) fn default_service(inner: &mut Inner, obj: &mut Value) {
        let spec = obj["spec"].as_object_mut().expect("spec");
        let svc_type = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_owned();
        spec.insert("type".into(), json!(svc_type));
        spec.entry("sessionAffinity").or_insert(json!("None"));
        if svc_type != "ExternalName" {
            if !spec.contains_key("clusterIP") {
                inner.next_cluster_ip += 1;
                let n = inner.next_cluster_ip;
                let ip = format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff);
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
            }
            spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
            spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
            spec.entry("internalTrafficPolicy")
                .or_insert(json!("Cluster"));
        }
        let external = svc_type == "NodePort" || svc_type == "LoadBalancer";
        if external {
            spec.entry("externalTrafficPolicy")
                .or_insert(json!("Cluster"));
        }
        let allocate = external
            && (svc_type == "NodePort"
                || spec
                    .get("allocateLoadBalancerNodePorts")
                    .and_then(Value::as_bool)
                    != Some(false));
        if svc_type == "LoadBalancer" {
            spec.entry("allocateLoadBalancerNodePorts")
                .or_insert(json!(true));
        }
        Self::default_ports(inner, spec, allocate);
        if external
            && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
            && !spec.contains_key("healthCheckNodePort")
        {
            inner.next_node_port += 1;
            spec.insert(
                "healthCheckNodePort".into(),
                json!(30000 + inner.next_node_port % 2768),
            );
        }
        obj["status"] = json!({"loadBalancer": {}});
    }

    /// Each port's defaults: TCP, the target port its port, and a node port when
    /// `allocate` and it has none.
    fn default_ports(inner: &mut Inner, spec: &mut serde_json::Map<String, Value>, allocate: bool) {
        let Some(Value::Array(ports)) = spec.get_mut("ports") else {
            return;
        };
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
            if let Some(number) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(number);
            }
            if allocate && !p.contains_key("nodePort") {
                inner.next_node_port += 1;
                p.insert(
                    "nodePort".into(),
                    json!(30000 + inner.next_node_port % 2768),
                );
            }
        }
    }

    /// What the real server fills in on a Service update: the cluster IPs kept, and a
    /// node port for each new port of a NodePort or LoadBalancer Service (a port added
    /// or renumbered by a patch gets one, as the API server's allocator gives it).
    pub(super) fn default_service_update(inner: &mut Inner, current: &Value, next: &mut Value) {
        let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        for field in ["clusterIP", "clusterIPs"] {
            if !spec.contains_key(field)
                && let Some(old) = current["spec"].get(field)
            {
                spec.insert(field.into(), old.clone());
            }
        }
        let svc_type = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_owned();
        let allocate = svc_type == "NodePort"
            || (svc_type == "LoadBalancer"
                && spec
                    .get("allocateLoadBalancerNodePorts")
                    .and_then(Value::as_bool)
                    != Some(false));
        if svc_type == "LoadBalancer" {
            spec.entry("allocateLoadBalancerNodePorts")
                .or_insert(json!(true));
        }
        Self::default_ports(inner, spec, allocate);
    }
}
