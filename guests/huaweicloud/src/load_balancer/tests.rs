//! The shared ELB against a mock ELB/VPC: what is sent, in which cases, and what is
//! refused before anything is sent.

use serde_json::{Value, json};
use wasm_ccm_guest::http::Response;
use wasm_ccm_guest::testing::{MockTransport, node, service};
use wasm_ccm_guest::types::{
    CloudError, Node, NodeAddress, NodeAddressType, Protocol, Service, ServicePort,
};
use wasm_ccm_guest::{deadline, events};

use super::annotations::Defaults;
use crate::HuaweiCloud;
use crate::config::Config;

mod delete;

const CONFIG: &str =
    "[Global]\nregion = ap-southeast-1\nproject-id = p1\n[Vpc]\nsubnet-id = vpc-subnet-1\n";

pub(super) fn provider() -> HuaweiCloud {
    HuaweiCloud::new(Config::parse(CONFIG).unwrap())
}

pub(super) fn defaults() -> Defaults {
    Defaults::from_config(&Config::parse(CONFIG).unwrap())
}

/// Service `default/web`, TCP 80 on node port 30080, `elb.class: shared` and `extra`.
pub(super) fn web(extra: &[(&str, &str)]) -> Service {
    let mut web = service("default", "web");
    web.metadata.annotations = std::iter::once(("kubernetes.io/elb.class", "shared"))
        .chain(extra.iter().copied())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    web.ports = vec![ServicePort {
        name: "http".into(),
        protocol: Protocol::Tcp,
        port: 80,
        target_port: "8080".into(),
        node_port: 30080,
        app_protocol: None,
    }];
    web
}

pub(super) fn host(name: &str, ip: &str) -> Node {
    Node {
        addresses: vec![NodeAddress {
            address_type: NodeAddressType::InternalIp,
            address: ip.into(),
        }],
        ..node(name)
    }
}

pub(super) fn ok(body: Value) -> Response {
    Response::with_json(200, &body)
}

/// The JSON bodies sent with `method` to `path` (without its query).
pub(super) fn sent(cloud: &MockTransport, method: &str, path: &str) -> Vec<Value> {
    cloud
        .requests()
        .iter()
        .filter(|r| r.method().as_str() == method)
        .filter(|r| {
            r.url()
                .is_ok_and(|u| u.path_and_query.split('?').next() == Some(path))
        })
        .map(|r| serde_json::from_slice(r.body_bytes()).unwrap_or(Value::Null))
        .collect()
}

pub(super) fn message(error: CloudError) -> String {
    match error {
        CloudError::Other(message) => message,
        other => panic!("{other:?}"),
    }
}

fn lb(publicips: Value) -> Value {
    json!({"id": "lb-1", "name": "k8s_service_kubernetes_default_web",
           "provisioning_status": "ACTIVE", "vip_port_id": "port-1",
           "vip_address": "192.168.0.10", "vip_subnet_id": "neutron-1",
           "publicips": publicips})
}

/// An ACTIVE ELB of the Service's name serving port 80 with member 10.0.0.1 and a
/// health monitor as the defaults want them.
pub(super) fn existing(cloud: &MockTransport, publicips: Value) {
    let elb = lb(publicips);
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers",
        ok(json!({"loadbalancers": [elb.clone()]})),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers/lb-1",
        ok(json!({"loadbalancer": elb})),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/listeners",
        ok(
            json!({"listeners": [{"id": "ls-1", "name": "web_TCP_80", "protocol": "TCP",
                                 "protocol_port": 80}]}),
        ),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/pools",
        ok(
            json!({"pools": [{"id": "pool-1", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                             "session_persistence": null, "healthmonitor_id": "hm-1",
                             "listeners": [{"id": "ls-1"}]}]}),
        ),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/pools/pool-1/members",
        ok(json!({"members": [{"id": "m-1", "address": "10.0.0.1", "protocol_port": 30080}]})),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/healthmonitors/hm-1",
        ok(
            json!({"healthmonitor": {"id": "hm-1", "type": "TCP", "delay": 5, "timeout": 3,
                                    "max_retries": 3}}),
        ),
    );
    cloud.on(
        "PUT",
        "/v3/p1/elb/listeners/ls-1",
        ok(json!({"listener": {}})),
    );
}

#[test]
fn other_classes_are_refused_by_name_with_a_warning_before_any_request() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    let _ = events::recorded();
    let mut dedicated = web(&[]);
    dedicated.metadata.annotations = vec![("kubernetes.io/elb.class".into(), "dedicated".into())];
    let nodes = [host("n1", "10.0.0.1")];
    let error = super::ensure(&provider(), "kubernetes", &dedicated, &nodes).unwrap_err();
    assert!(message(error).contains("\"dedicated\""));
    let recorded = events::recorded();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert!(matches!(recorded[0].0, events::EventType::Warning));
    assert_eq!(recorded[0].1, "UnsupportedELBClass");
    assert!(
        recorded[0].2.contains("not served yet"),
        "{}",
        recorded[0].2
    );
    assert!(cloud.requests().is_empty());
}

#[test]
fn a_service_without_a_class_gets_upstreams_error() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    let _ = events::recorded();
    let mut plain = web(&[]);
    plain.metadata.annotations.clear();
    let nodes = [host("n1", "10.0.0.1")];
    let error = super::update(&provider(), "kubernetes", &plain, &nodes).unwrap_err();
    assert_eq!(
        message(error),
        "service default/web: unknow load balancer elb.class: "
    );
    assert_eq!(events::recorded()[0].1, "UnknownELBClass");
    assert!(cloud.requests().is_empty());
    // Its cleanup looks for an ELB of this provider's name only, and finds none.
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers",
        ok(json!({"loadbalancers": []})),
    );
    assert_eq!(super::get(&provider(), "kubernetes", &plain), Ok(None));
    assert_eq!(super::delete(&provider(), "kubernetes", &plain), Ok(()));
}

#[test]
fn another_load_balancer_class_is_implemented_elsewhere() {
    let mut other = web(&[]);
    other.load_balancer_class = Some("example.com/lb".into());
    let nodes = [host("n1", "10.0.0.1")];
    assert_eq!(
        super::ensure(&provider(), "kubernetes", &other, &nodes),
        Err(CloudError::ImplementedElsewhere)
    );
    assert_eq!(
        super::delete(&provider(), "kubernetes", &other),
        Err(CloudError::ImplementedElsewhere)
    );
}

#[test]
fn ensure_makes_the_elb_its_listener_pool_members_and_monitor() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers",
        ok(json!({"loadbalancers": []})),
    );
    cloud.on(
        "GET",
        "/v1/p1/subnets/vpc-subnet-1",
        ok(json!({"subnet": {"id": "vpc-subnet-1", "neutron_subnet_id": "neutron-1"}})),
    );
    cloud.on(
        "POST",
        "/v2/p1/elb/loadbalancers",
        ok(json!({"loadbalancer": {"id": "lb-1", "provisioning_status": "PENDING_CREATE"}})),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers/lb-1",
        ok(json!({"loadbalancer": lb(json!([]))})),
    );
    cloud.on("GET", "/v2/p1/elb/listeners", ok(json!({"listeners": []})));
    cloud.on("GET", "/v2/p1/elb/pools", ok(json!({"pools": []})));
    cloud.on(
        "POST",
        "/v3/p1/elb/listeners",
        ok(
            json!({"listener": {"id": "ls-1", "name": "web_TCP_80", "protocol": "TCP",
                               "protocol_port": 80}}),
        ),
    );
    cloud.on(
        "POST",
        "/v2/p1/elb/pools",
        ok(json!({"pool": {"id": "pool-1", "healthmonitor_id": "",
                           "listeners": [{"id": "ls-1"}]}})),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/pools/pool-1/members",
        ok(json!({"members": []})),
    );
    cloud.on(
        "POST",
        "/v2/p1/elb/pools/pool-1/members",
        ok(json!({"member": {}})),
    );
    cloud.on(
        "POST",
        "/v2/p1/elb/healthmonitors",
        ok(json!({"healthmonitor": {"id": "hm-1"}})),
    );
    let nodes = [host("n1", "10.0.0.1"), host("n2", "10.0.0.2")];
    let status = super::ensure(&provider(), "kubernetes", &web(&[]), &nodes).unwrap();
    assert_eq!(status.ingress[0].ip.as_deref(), Some("192.168.0.10"));

    let created = &sent(&cloud, "POST", "/v2/p1/elb/loadbalancers")[0]["loadbalancer"];
    assert_eq!(created["name"], "k8s_service_kubernetes_default_web");
    assert_eq!(
        created["vip_subnet_id"], "neutron-1",
        "the VPC subnet's neutron_subnet_id"
    );
    assert_eq!(created["provider"], "vlb");
    let listener = &sent(&cloud, "POST", "/v3/p1/elb/listeners")[0]["listener"];
    assert_eq!(
        (
            &listener["protocol"],
            &listener["protocol_port"],
            &listener["name"]
        ),
        (&json!("TCP"), &json!(80), &json!("web_TCP_80"))
    );
    assert_eq!(listener["transparent_client_ip_enable"], false);
    assert!(listener.get("keepalive_timeout").is_none());
    let pool = &sent(&cloud, "POST", "/v2/p1/elb/pools")[0]["pool"];
    assert_eq!(pool["name"], "sg_web_TCP_80");
    assert_eq!(pool["lb_algorithm"], "ROUND_ROBIN");
    assert_eq!(pool["listener_id"], "ls-1");
    assert!(pool.get("session_persistence").is_none());
    let members = sent(&cloud, "POST", "/v2/p1/elb/pools/pool-1/members");
    assert_eq!(members.len(), 2);
    assert_eq!(
        members[1]["member"],
        json!({"address": "10.0.0.2", "protocol_port": 30080, "subnet_id": "neutron-1"})
    );
    let monitor = &sent(&cloud, "POST", "/v2/p1/elb/healthmonitors")[0]["healthmonitor"];
    assert_eq!(
        monitor,
        &json!({"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3, "pool_id": "pool-1"})
    );
}

#[test]
fn update_adds_new_nodes_and_removes_gone_ones() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    existing(&cloud, json!([]));
    cloud.on(
        "GET",
        "/v2/p1/elb/pools/pool-1/members",
        ok(json!({"members": [
            {"id": "m-1", "address": "10.0.0.1", "protocol_port": 30080},
            {"id": "m-9", "address": "10.0.0.9", "protocol_port": 30080}]})),
    );
    cloud.on(
        "POST",
        "/v2/p1/elb/pools/pool-1/members",
        ok(json!({"member": {}})),
    );
    cloud.on(
        "DELETE",
        "/v2/p1/elb/pools/pool-1/members/m-9",
        Response::new(204),
    );
    let nodes = [host("n1", "10.0.0.1"), host("n2", "10.0.0.2")];
    super::update(&provider(), "kubernetes", &web(&[]), &nodes).unwrap();
    let added = sent(&cloud, "POST", "/v2/p1/elb/pools/pool-1/members");
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["member"]["address"], "10.0.0.2");
    assert_eq!(
        cloud.count("DELETE", "/v2/p1/elb/pools/pool-1/members/m-9"),
        1
    );
    // The monitor is as wanted: untouched. An update changes no listener.
    assert_eq!(cloud.count("PUT", "/v2/p1/elb/healthmonitors/hm-1"), 0);
    assert_eq!(cloud.count("PUT", "/v3/p1/elb/listeners/ls-1"), 0);
}

#[test]
fn ensure_creates_an_eip_bound_to_the_vip_port() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    existing(&cloud, json!([]));
    cloud.on(
        "POST",
        "/v1/p1/publicips",
        ok(json!({"publicip": {"id": "eip-1", "public_ip_address": "203.0.113.7"}})),
    );
    let option = r#"{"ip_type": "5_bgp", "bandwidth_size": 5, "share_type": "PER"}"#;
    let service = web(&[("kubernetes.io/elb.eip-auto-create-option", option)]);
    let status = super::ensure(
        &provider(),
        "kubernetes",
        &service,
        &[host("n1", "10.0.0.1")],
    )
    .unwrap();
    assert_eq!(status.ingress[0].ip.as_deref(), Some("203.0.113.7"));
    let body = &sent(&cloud, "POST", "/v1/p1/publicips")[0];
    assert_eq!(
        body["publicip"],
        json!({"type": "5_bgp", "port_id": "port-1"})
    );
    assert_eq!(
        body["bandwidth"],
        json!({"name": "default_web", "size": 5, "share_type": "PER", "charge_mode": "traffic"})
    );
    // Bound already: nothing more is made.
    existing(
        &cloud,
        json!([{"publicip_id": "eip-1", "publicip_address": "203.0.113.7"}]),
    );
    let again = super::ensure(
        &provider(),
        "kubernetes",
        &service,
        &[host("n1", "10.0.0.1")],
    )
    .unwrap();
    assert_eq!(again, status);
    assert_eq!(cloud.count("POST", "/v1/p1/publicips"), 1);
}

#[test]
fn ensure_binds_the_named_eip() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    existing(&cloud, json!([]));
    cloud.on(
        "GET",
        "/v1/p1/publicips/eip-9",
        ok(json!({"publicip": {"id": "eip-9", "port_id": null,
                               "public_ip_address": "198.51.100.9"}})),
    );
    cloud.on("PUT", "/v1/p1/publicips/eip-9", ok(json!({"publicip": {}})));
    let service = web(&[("kubernetes.io/elb.eip-id", "eip-9")]);
    let status = super::ensure(
        &provider(),
        "kubernetes",
        &service,
        &[host("n1", "10.0.0.1")],
    )
    .unwrap();
    assert_eq!(status.ingress[0].ip.as_deref(), Some("198.51.100.9"));
    assert_eq!(
        sent(&cloud, "PUT", "/v1/p1/publicips/eip-9"),
        [json!({"publicip": {"port_id": "port-1"}})]
    );
}

#[test]
fn a_busy_elb_at_the_end_of_the_deadline_is_retry_after() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    existing(&cloud, json!([]));
    let mut busy = lb(json!([]));
    busy["provisioning_status"] = json!("PENDING_UPDATE");
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers",
        ok(json!({"loadbalancers": [busy.clone()]})),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers/lb-1",
        ok(json!({"loadbalancer": busy})),
    );
    deadline::set_remaining(std::time::Duration::from_secs(1));
    let result = super::update(
        &provider(),
        "kubernetes",
        &web(&[]),
        &[host("n1", "10.0.0.1")],
    );
    deadline::set_remaining(std::time::Duration::from_secs(3600));
    match result {
        Err(CloudError::RetryAfter(retry)) => {
            assert!(
                retry.message.contains("PENDING_UPDATE"),
                "{}",
                retry.message
            )
        }
        other => panic!("{other:?}"),
    }
    // Nothing was changed while it was busy.
    assert!(
        cloud
            .requests()
            .iter()
            .all(|r| r.method().as_str() == "GET")
    );
}
