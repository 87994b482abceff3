//! The OpenStack API double checked with a real client, as kubectl checks the API
//! server double: openstacksdk (PyPI, in the tools venv) logs in to the real Keystone,
//! finds the double's services in the catalog, pages through servers, and creates a
//! load balancer and a listener, waiting for `ACTIVE` as its users do.

use std::sync::Arc;

use keystone_peer::Keystone;
use openstack_double::OpenStackDouble;
use openstack_double::state::NewServer;

const SCRIPT: &str = r#"
import json, sys
import openstack
auth_url, subnet = sys.argv[1], sys.argv[2]
conn = openstack.connect(
    auth_url=auth_url, username="sdk-user", password="sdk-password",
    project_name="sdk-project", user_domain_id="default", project_domain_id="default",
    region_name="RegionOne", interface="public",
)
servers = sorted(s.name for s in conn.compute.servers(details=True, limit=2))
shutoff = [s.name for s in conn.compute.servers(details=True, status="SHUTOFF")]
lb = conn.load_balancer.create_load_balancer(name="sdk-lb", vip_subnet_id=subnet, tags=["sdk"])
lb = conn.load_balancer.wait_for_load_balancer(lb.id, interval=0.1, wait=30)
listener = conn.load_balancer.create_listener(
    name="sdk-listener", protocol="TCP", protocol_port=80, load_balancer_id=lb.id)
lb = conn.load_balancer.wait_for_load_balancer(lb.id, interval=0.1, wait=30)
found = [x.name for x in conn.load_balancer.load_balancers(tags="sdk")]
print(json.dumps({"servers": servers, "shutoff": shutoff, "lb": lb.provisioning_status,
                  "vip": lb.vip_address, "listener": listener.protocol_port, "found": found}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstacksdk_lists_servers_and_creates_a_load_balancer() {
    let keystone = Arc::new(Keystone::start().await);
    let project = keystone.create_project("sdk-project").await;
    keystone
        .create_user("sdk-user", "sdk-password", &project)
        .await;
    let cloud = OpenStackDouble::start(keystone.clone()).await.unwrap();
    cloud.register(&keystone).await;
    let subnet = cloud.with_state(|s| {
        for i in 0..5 {
            let mut server = NewServer::named(&format!("node-{i}"), &format!("10.0.0.{}", 11 + i));
            if i == 3 {
                server.status = "SHUTOFF".into();
            }
            s.add_server(server);
        }
        let private = s.network_id("private").unwrap();
        s.subnet_of(&private).unwrap().id.clone()
    });
    let python = keystone_peer::venv().join("bin/python");
    let output = tokio::process::Command::new(&python)
        .args(["-c", SCRIPT, &keystone.auth_url(), &subnet])
        .env("OS_CLIENT_CONFIG_FILE", "/dev/null")
        .output()
        .await
        .expect("running openstacksdk");
    assert!(
        output.status.success(),
        "openstacksdk failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        seen["servers"],
        serde_json::json!(["node-0", "node-1", "node-2", "node-3", "node-4"])
    );
    assert_eq!(seen["shutoff"], serde_json::json!(["node-3"]));
    assert_eq!(seen["lb"], "ACTIVE");
    assert_eq!(seen["listener"], 80);
    assert_eq!(seen["found"], serde_json::json!(["sdk-lb"]));
    // The client paged (two servers a page) and waited through PENDING_* with GETs.
    let requests = cloud.with_state(|s| s.requests.clone());
    let pages = requests
        .iter()
        .filter(|r| r.as_str() == "GET /compute/v2.1/servers/detail")
        .count();
    assert!(pages >= 3, "{requests:?}");
    cloud.with_state(|s| {
        let lb = s.load_balancers.values().next().unwrap();
        assert_eq!(lb.name, "sdk-lb");
        assert_eq!(s.listeners.values().next().unwrap().loadbalancer_id, lb.id);
    });
}
