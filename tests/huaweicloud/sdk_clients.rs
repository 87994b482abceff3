//! Huawei's official Python SDK clients (`huaweicloudsdkecs`, `vpc`, `elb`, `eip`)
//! drive the double as a user's script would, so its paths, query parameters and
//! answers are the shapes Huawei's own clients send and read: a server found by name,
//! a subnet, a shared load balancer created, polled to ACTIVE and found by name, a
//! listener, pool and member, an EIP created and bound to the VIP's port, and found by
//! that port. Every request carried the SDK's own signature, which the double accepted.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huawei_s_own_clients_drive_the_double() {
    let world = HuaweiWorld::start().await;
    let server = world
        .cloud
        .with_state(|s| s.add_server(NewServer::named("node-a", "192.168.0.11")));
    let endpoints: serde_json::Map<String, serde_json::Value> = SERVICES
        .iter()
        .map(|(service, name)| ((*name).to_owned(), json!(world.cloud.endpoint(*service))))
        .collect();
    let made = sdk_judge(
        "drive",
        &[],
        &json!({
            "ak": world.key.access_key_id,
            "sk": world.key.secret_access_key,
            "project_id": PROJECT,
            "endpoints": endpoints,
            "server": "node-a",
        }),
    )
    .await;
    assert_eq!(made["server_id"], server.id.as_str());
    assert_eq!(made["member_address"], "192.168.0.11");
    // Created PENDING_CREATE, then ACTIVE, as ELB makes one.
    let statuses = made["statuses"].as_array().unwrap();
    assert_eq!(statuses[0], "PENDING_CREATE");
    assert_eq!(statuses.last().unwrap(), "ACTIVE");
    world.cloud.with_state(|s| {
        let lb = s
            .load_balancer(made["load_balancer_id"].as_str().unwrap())
            .unwrap();
        assert_eq!(lb.name, "sdk-lb");
        let eip = s.eip(made["eip_id"].as_str().unwrap()).unwrap();
        assert_eq!(eip.port_id.as_deref(), Some(lb.vip_port_id.as_str()));
        assert_eq!(eip.public_ip_address, made["public_ip"].as_str().unwrap());
        assert_eq!(s.members().len(), 1);
    });
    let journal = world.cloud.journal();
    assert!(journal.len() >= 10, "{journal:?}");
    let refused: Vec<_> = journal.iter().filter(|r| r.refused.is_some()).collect();
    assert!(refused.is_empty(), "{refused:?}");
}
