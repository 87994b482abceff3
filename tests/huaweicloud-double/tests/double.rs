//! The double end to end, over HTTP/1.1 written by hand and signed with the crate's own
//! signer: the gateway's refusals, ECS, the shared ELB's life cycle and EIP binding.

use huaweicloud_double::clock::system_now;
use huaweicloud_double::state::NewServer;
use huaweicloud_double::{HuaweiCloudDouble, Key, Service, Settings, signature};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PROJECT: &str = "0123456789abcdef0123456789abcdef";

fn key() -> Key {
    Key::new("AK-TEST", "SK-TEST")
}

async fn start() -> HuaweiCloudDouble {
    let mut settings = Settings::new(PROJECT, "ap-southeast-1");
    settings.keys.push(key());
    HuaweiCloudDouble::start(settings).await.unwrap()
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        signature::header(&self.headers, name)
    }
}

/// `method target` to `service`, signed by `key` at `now` (unsigned without a key).
async fn call_at(
    cloud: &HuaweiCloudDouble,
    service: Service,
    key: Option<&Key>,
    now: i64,
    method: &str,
    target: &str,
    body: Option<Value>,
) -> Answer {
    let endpoint = cloud.endpoint(service);
    let host = endpoint.trim_start_matches("http://").to_owned();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let bytes = body
        .map(|b| serde_json::to_vec(&b).unwrap())
        .unwrap_or_default();
    let mut headers = vec![
        ("Host".to_owned(), host.clone()),
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("X-Project-Id".to_owned(), PROJECT.to_owned()),
    ];
    if let Some(key) = key {
        signature::sign(key, method, path, query, &mut headers, &bytes, now);
    }
    let mut request = format!("{method} {target} HTTP/1.1\r\n");
    for (k, v) in &headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    ));
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete answer");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let body = serde_json::from_slice(&raw[split + 4..]).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        body,
    }
}

async fn call(
    cloud: &HuaweiCloudDouble,
    service: Service,
    method: &str,
    target: &str,
    body: Option<Value>,
) -> Answer {
    call_at(
        cloud,
        service,
        Some(&key()),
        system_now(),
        method,
        target,
        body,
    )
    .await
}

#[tokio::test]
async fn the_gateway_refuses_what_is_not_signed_right() {
    let cloud = start().await;
    let target = format!("/v1/{PROJECT}/cloudservers/detail");
    let unsigned = call_at(&cloud, Service::Ecs, None, 0, "GET", &target, None).await;
    assert_eq!(unsigned.status, 401);
    assert_eq!(unsigned.body["error_code"], "APIGW.0301");
    assert!(unsigned.header("date").is_some_and(|d| d.ends_with(" GMT")));
    assert!(unsigned.header("x-request-id").is_some());

    let ok = call(&cloud, Service::Ecs, "GET", &target, None).await;
    assert_eq!(ok.status, 200, "{}", ok.body);

    // The double's clock an hour ahead: the host-signed date is too old.
    cloud.set_clock_offset(3600);
    let skewed = call(&cloud, Service::Ecs, "GET", &target, None).await;
    assert_eq!(skewed.status, 401);
    assert!(
        skewed.body["error_msg"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    let signed_ahead = call_at(
        &cloud,
        Service::Ecs,
        Some(&key()),
        system_now() + 3600,
        "GET",
        &target,
        None,
    )
    .await;
    assert_eq!(signed_ahead.status, 200);
    cloud.set_clock_offset(0);

    // Keys come and go.
    cloud.remove_key("AK-TEST");
    let removed = call(&cloud, Service::Ecs, "GET", &target, None).await;
    assert_eq!(removed.status, 401);
    assert!(
        removed.body["error_msg"]
            .as_str()
            .unwrap()
            .contains("ak not exist")
    );
    cloud.add_key(key());
    assert_eq!(
        call(&cloud, Service::Ecs, "GET", &target, None)
            .await
            .status,
        200
    );

    // Another project in the path.
    let other = call(
        &cloud,
        Service::Elb,
        "GET",
        "/v2/ffff/elb/loadbalancers",
        None,
    )
    .await;
    assert_eq!(other.status, 400);
    assert_eq!(other.body["error"]["code"], "ELB.9808");
    // A path no service serves.
    let missing = call(
        &cloud,
        Service::Vpc,
        "GET",
        &format!("/v1/{PROJECT}/nothing/here"),
        None,
    )
    .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body["error_code"], "APIGW.0101");

    let journal = cloud.journal();
    assert_eq!(journal.len(), 8);
    assert_eq!(journal[0].status, 401);
    assert!(journal[0].refused.is_some());
    assert_eq!(journal[1].refused, None);
    assert_eq!(journal[1].target, target);
    assert_eq!(journal[5].service, Service::Ecs);
}

#[tokio::test]
async fn servers_are_found_by_address_and_name() {
    let cloud = start().await;
    let server = cloud.with_state(|s| s.add_server(NewServer::named("node-1", "192.168.0.11")));
    cloud.with_state(|s| s.add_server(NewServer::named("node-2", "192.168.0.12")));
    let by_ip = call(
        &cloud,
        Service::Ecs,
        "GET",
        &format!("/v1/{PROJECT}/cloudservers/detail?ip_eq=192.168.0.11"),
        None,
    )
    .await;
    assert_eq!(by_ip.body["count"], 1);
    assert_eq!(by_ip.body["servers"][0]["id"], server.id.as_str());
    let by_name = call(
        &cloud,
        Service::Ecs,
        "GET",
        &format!("/v1/{PROJECT}/cloudservers/detail?name=%5Enode-2%24"),
        None,
    )
    .await;
    assert_eq!(by_name.body["servers"][0]["name"], "node-2");
    let shown = call(
        &cloud,
        Service::Ecs,
        "GET",
        &format!("/v1/{PROJECT}/cloudservers/{}", server.id),
        None,
    )
    .await;
    let addresses = shown.body["server"]["addresses"].as_object().unwrap();
    let entry = &addresses.values().next().unwrap()[0];
    assert_eq!(entry["OS-EXT-IPS:port_id"], server.nics[0].port_id.as_str());
    let nics = call(
        &cloud,
        Service::Ecs,
        "GET",
        &format!("/v1/{PROJECT}/cloudservers/{}/os-interface", server.id),
        None,
    )
    .await;
    assert_eq!(nics.body["interfaceAttachments"][0]["port_state"], "ACTIVE");
    let gone = call(
        &cloud,
        Service::Ecs,
        "GET",
        &format!("/v1/{PROJECT}/cloudservers/nope"),
        None,
    )
    .await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.body["error"]["code"], "Ecs.0114");
}

#[tokio::test]
async fn a_load_balancer_is_built_and_exposed() {
    let cloud = start().await;
    let subnet = cloud.with_state(|s| s.default_subnet().neutron_subnet_id.clone());
    cloud.with_state(|s| s.add_server(NewServer::named("node-1", "192.168.0.11")));
    let elb = format!("/v2/{PROJECT}/elb");
    let created = call(
        &cloud,
        Service::Elb,
        "POST",
        &format!("{elb}/loadbalancers"),
        Some(json!({"loadbalancer": {"name": "lb-1", "vip_subnet_id": subnet, "provider": "vlb"}})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(
        created.body["loadbalancer"]["provisioning_status"],
        "PENDING_CREATE"
    );
    let lb = created.body["loadbalancer"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let listener =
        json!({"listener": {"loadbalancer_id": lb, "protocol": "TCP", "protocol_port": 80}});
    let busy = call(
        &cloud,
        Service::Elb,
        "POST",
        &format!("{elb}/listeners"),
        Some(listener.clone()),
    )
    .await;
    assert_eq!(busy.status, 409);
    let show = format!("{elb}/loadbalancers/{lb}");
    let first = call(&cloud, Service::Elb, "GET", &show, None).await;
    assert_eq!(
        first.body["loadbalancer"]["provisioning_status"],
        "PENDING_CREATE"
    );
    let second = call(&cloud, Service::Elb, "GET", &show, None).await;
    assert_eq!(second.body["loadbalancer"]["provisioning_status"], "ACTIVE");

    let made = call(
        &cloud,
        Service::Elb,
        "POST",
        &format!("{elb}/listeners"),
        Some(listener.clone()),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let listener_id = made.body["listener"]["id"].as_str().unwrap().to_owned();
    let again = call(
        &cloud,
        Service::Elb,
        "POST",
        &format!("{elb}/listeners"),
        Some(listener),
    )
    .await;
    assert_eq!(again.body["error"]["code"], "ELB.6200");
    let listed = call(
        &cloud,
        Service::Elb,
        "GET",
        &format!("{elb}/listeners?loadbalancer_id={lb}"),
        None,
    )
    .await;
    assert_eq!(listed.body["listeners"].as_array().unwrap().len(), 1);

    let pool = call(
        &cloud,
        Service::Elb,
        "POST",
        &format!("{elb}/pools"),
        Some(json!({"pool": {"listener_id": listener_id, "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}})),
    )
    .await;
    assert_eq!(pool.status, 201, "{}", pool.body);
    let pool_id = pool.body["pool"]["id"].as_str().unwrap().to_owned();
    let member = call(
        &cloud,
        Service::Elb,
        "POST",
        &format!("{elb}/pools/{pool_id}/members"),
        Some(json!({"member": {"address": "192.168.0.11", "protocol_port": 30080, "subnet_id": subnet}})),
    )
    .await;
    assert_eq!(member.status, 201, "{}", member.body);
    assert_eq!(member.body["member"]["operating_status"], "NO_MONITOR");
    let monitor = call(
        &cloud,
        Service::Elb,
        "POST",
        &format!("{elb}/healthmonitors"),
        Some(json!({"healthmonitor": {"pool_id": pool_id, "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}})),
    )
    .await;
    assert_eq!(monitor.status, 201, "{}", monitor.body);
    let in_use = call(&cloud, Service::Elb, "DELETE", &show, None).await;
    assert_eq!(in_use.status, 409);

    // An EIP bound to the VIP port.
    let port = second.body["loadbalancer"]["vip_port_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let eip = call(
        &cloud,
        Service::Vpc,
        "POST",
        &format!("/v1/{PROJECT}/publicips"),
        Some(json!({"publicip": {"type": "5_bgp"},
                    "bandwidth": {"name": "bw", "size": 5, "share_type": "PER", "charge_mode": "traffic"}})),
    )
    .await;
    assert_eq!(eip.status, 200, "{}", eip.body);
    assert_eq!(eip.body["publicip"]["status"], "PENDING_CREATE");
    let eip_id = eip.body["publicip"]["id"].as_str().unwrap().to_owned();
    let eip_path = format!("/v1/{PROJECT}/publicips/{eip_id}");
    let bound = call(
        &cloud,
        Service::Vpc,
        "PUT",
        &eip_path,
        Some(json!({"publicip": {"port_id": port}})),
    )
    .await;
    assert_eq!(bound.body["publicip"]["status"], "ACTIVE");
    let by_port = call(
        &cloud,
        Service::Vpc,
        "GET",
        &format!("/v1/{PROJECT}/publicips?port_id={port}"),
        None,
    )
    .await;
    assert_eq!(by_port.body["publicips"][0]["id"], eip_id.as_str());
    let lb_now = call(&cloud, Service::Elb, "GET", &show, None).await;
    assert_eq!(
        lb_now.body["loadbalancer"]["publicips"][0]["publicip_id"],
        eip_id.as_str()
    );
    let unbound = call(
        &cloud,
        Service::Vpc,
        "PUT",
        &eip_path,
        Some(json!({"publicip": {"port_id": ""}})),
    )
    .await;
    assert_eq!(unbound.body["publicip"]["status"], "DOWN");
    assert!(unbound.body["publicip"].get("port_id").is_none());
    let none = call(
        &cloud,
        Service::Vpc,
        "GET",
        &format!("/v1/{PROJECT}/publicips?port_id={port}"),
        None,
    )
    .await;
    assert_eq!(none.body["publicips"].as_array().unwrap().len(), 0);

    assert_eq!(
        cloud.with_state(|s| (s.listeners().len(), s.members().len(), s.eips().len())),
        (1, 1, 1)
    );
}
