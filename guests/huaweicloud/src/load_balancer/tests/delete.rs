//! Deleting and reading: an ELB made here goes with its EIP (unless kept), an adopted
//! one loses only the Service's listeners, one gone already is done.

use serde_json::json;
use wasm_ccm_guest::http::Response;
use wasm_ccm_guest::testing::MockTransport;

use super::{existing, ok, provider, sent, web};

#[test]
fn delete_releases_the_eip_then_the_elb_unless_kept() {
    for (keep, released) in [("false", 1), ("true", 0)] {
        let cloud = MockTransport::new();
        let _installed = cloud.install();
        existing(
            &cloud,
            json!([{"publicip_id": "eip-1", "publicip_address": "203.0.113.7"}]),
        );
        cloud.on("GET", "/v2/p1/elb/listeners", ok(json!({"listeners": []})));
        cloud.on("GET", "/v2/p1/elb/pools", ok(json!({"pools": []})));
        cloud.on("PUT", "/v1/p1/publicips/eip-1", ok(json!({"publicip": {}})));
        cloud.on("DELETE", "/v1/p1/publicips/eip-1", Response::new(204));
        cloud.on(
            "DELETE",
            "/v2/p1/elb/loadbalancers/lb-1",
            Response::new(204),
        );
        let service = web(&[("kubernetes.io/elb.keep-eip", keep)]);
        super::super::delete(&provider(), "kubernetes", &service).unwrap();
        assert_eq!(
            sent(&cloud, "PUT", "/v1/p1/publicips/eip-1"),
            [json!({"publicip": {"port_id": ""}})],
            "unbound first"
        );
        assert_eq!(cloud.count("DELETE", "/v1/p1/publicips/eip-1"), released);
        assert_eq!(cloud.count("DELETE", "/v2/p1/elb/loadbalancers/lb-1"), 1);
    }
}

#[test]
fn delete_of_an_adopted_elb_removes_only_the_services_listeners() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    existing(&cloud, json!([]));
    cloud.on(
        "GET",
        "/v2/p1/elb/listeners",
        ok(json!({"listeners": [
            {"id": "ls-1", "protocol": "TCP", "protocol_port": 80},
            {"id": "ls-2", "protocol": "TCP", "protocol_port": 443}]})),
    );
    cloud.on(
        "GET",
        "/v2/p1/elb/pools/pool-1/members",
        ok(json!({"members": []})),
    );
    cloud.on(
        "DELETE",
        "/v2/p1/elb/healthmonitors/hm-1",
        Response::new(204),
    );
    cloud.on("DELETE", "/v2/p1/elb/pools/pool-1", Response::new(204));
    cloud.on("DELETE", "/v2/p1/elb/listeners/ls-1", Response::new(204));
    let service = web(&[("kubernetes.io/elb.id", "lb-1")]);
    super::super::delete(&provider(), "kubernetes", &service).unwrap();
    assert_eq!(cloud.count("DELETE", "/v2/p1/elb/listeners/ls-1"), 1);
    assert_eq!(cloud.count("DELETE", "/v2/p1/elb/pools/pool-1"), 1);
    let deleted: Vec<String> = cloud
        .requests()
        .iter()
        .filter(|r| r.method().as_str() == "DELETE")
        .map(|r| r.url_text().to_owned())
        .collect();
    assert!(
        deleted
            .iter()
            .all(|u| !u.contains("ls-2") && !u.contains("loadbalancers")),
        "{deleted:?}"
    );
}

#[test]
fn delete_of_an_elb_already_gone_is_done() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers",
        ok(json!({"loadbalancers": []})),
    );
    super::super::delete(&provider(), "kubernetes", &web(&[])).unwrap();
    cloud.on(
        "GET",
        "/v2/p1/elb/loadbalancers/lb-gone",
        Response::new(404),
    );
    let adopted = web(&[("kubernetes.io/elb.id", "lb-gone")]);
    super::super::delete(&provider(), "kubernetes", &adopted).unwrap();
    assert_eq!(
        super::super::get(&provider(), "kubernetes", &adopted),
        Ok(None)
    );
    assert!(
        cloud
            .requests()
            .iter()
            .all(|r| r.method().as_str() == "GET")
    );
}

#[test]
fn get_answers_the_bound_eip_else_the_vip() {
    let cloud = MockTransport::new();
    let _installed = cloud.install();
    existing(&cloud, json!([]));
    let ip = |status: Option<wasm_ccm_guest::types::LoadBalancerStatus>| {
        status.unwrap().ingress[0].ip.clone().unwrap()
    };
    let vip = super::super::get(&provider(), "kubernetes", &web(&[])).unwrap();
    assert_eq!(ip(vip), "192.168.0.10");
    existing(
        &cloud,
        json!([{"publicip_id": "eip-1", "publicip_address": "203.0.113.7"}]),
    );
    let eip = super::super::get(&provider(), "kubernetes", &web(&[])).unwrap();
    assert_eq!(ip(eip), "203.0.113.7");
}
