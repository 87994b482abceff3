//! The OpenStack API double checked with a real client, as kubectl checks the API
//! server double: openstacksdk (PyPI, in the tools venv) logs in to the real Keystone,
//! finds the double's services in the catalog, pages through servers, and creates a
//! load balancer and a listener, waiting for `ACTIVE` as its users do; a fully populated
//! creation (occm's) is all or nothing; a flavor is read by ID.

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
# Before microversion 2.47 a server names its flavor by ID: the flavor is read by it.
flavor_id = conn.compute.get(f"/servers/{conn.compute.find_server('node-0').id}").json()["server"]["flavor"]["id"]
flavor = conn.compute.get_flavor(flavor_id).name
# Fully populated creation, as occm sends it: listener, pool, member and monitor at once.
def populated(algorithm):
    return [{"name": "l", "protocol": "TCP", "protocol_port": 443, "default_pool": {
        "name": "p", "protocol": "TCP", "lb_algorithm": algorithm,
        "members": [{"address": "10.0.0.11", "protocol_port": 30443}],
        "healthmonitor": {"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 1}}}]
full = conn.load_balancer.create_load_balancer(name="sdk-full", vip_subnet_id=subnet,
                                               listeners=populated("ROUND_ROBIN"))
full = conn.load_balancer.wait_for_load_balancer(full.id, interval=0.1, wait=30)
pool = next(conn.load_balancer.pools(loadbalancer_id=full.id))
children = {"listeners": len(full.listeners), "pools": len(full.pools),
            "members": [m.address for m in conn.load_balancer.members(pool.id)],
            "monitor": conn.load_balancer.get_health_monitor(pool.health_monitor_id).type}
# A bad child refuses the whole creation: nothing of it is left.
try:
    conn.load_balancer.create_load_balancer(name="sdk-bad", vip_subnet_id=subnet,
                                            listeners=populated("FASTEST"))
    refused = False
except openstack.exceptions.BadRequestException:
    refused = True
left = [x.name for x in conn.load_balancer.load_balancers(name="sdk-bad")]
print(json.dumps({"servers": servers, "shutoff": shutoff, "lb": lb.provisioning_status,
                  "vip": lb.vip_address, "listener": listener.protocol_port, "found": found,
                  "flavor": flavor, "full": full.provisioning_status, "children": children,
                  "refused": refused, "left": left}))
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
    assert_eq!(seen["flavor"], "m1.small");
    assert_eq!(seen["full"], "ACTIVE");
    assert_eq!(
        seen["children"],
        serde_json::json!({"listeners": 1, "pools": 1, "members": ["10.0.0.11"], "monitor": "TCP"})
    );
    assert_eq!(seen["refused"], true);
    assert_eq!(seen["left"], serde_json::json!([]));
    // The client paged (two servers a page) and waited through PENDING_* with GETs.
    let requests = cloud.with_state(|s| s.requests.clone());
    let pages = requests
        .iter()
        .filter(|r| r.as_str() == "GET /compute/v2.1/servers/detail")
        .count();
    assert!(pages >= 3, "{requests:?}");
    cloud.with_state(|s| {
        let lb = s
            .load_balancers
            .values()
            .find(|lb| lb.name == "sdk-lb")
            .unwrap();
        assert!(s.listeners.values().any(|l| l.loadbalancer_id == lb.id));
        // The refused creation left no load balancer.
        assert_eq!(s.load_balancers.len(), 2);
    });
}
