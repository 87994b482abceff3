//! Events: `events.k8s.io/v1` Events and core Events are one store, read by field
//! selector and by kubectl.

use super::*;

#[tokio::test]
async fn events_api_and_core_events_are_one_store() {
    let c = Cluster::start().await;
    let events: Api<EventsV1> = Api::namespaced(c.client(), "default");
    let event: EventsV1 = serde_json::from_value(json!({
        "metadata": {"generateName": "worker-1."},
        "eventTime": "2026-11-22T00:00:00.000000Z",
        "reason": "Synced", "note": "Node synced successfully", "type": "Normal", "action": "Sync",
        "reportingController": "cloud-node-controller", "reportingInstance": "wasm-ccm-1",
        "regarding": {"kind": "Node", "name": "worker-1", "apiVersion": "v1"}
    }))
    .unwrap();
    let created = events.create(&PostParams::default(), &event).await.unwrap();
    let name = created.metadata.name.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(c.client(), "default");
    let seen = core.get(&name).await.unwrap();
    assert_eq!(seen.message.as_deref(), Some("Node synced successfully"));
    assert_eq!(seen.involved_object.name.as_deref(), Some("worker-1"));
    let found = core
        .list(&ListParams::default().fields("involvedObject.name=worker-1,reason=Synced"))
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1);
    let out = c
        .kubectl(&["get", "events", "-o", "jsonpath={.items[0].reason}"])
        .await;
    assert_eq!(out, "Synced");
    // Services in a namespace that does not exist are NotFound.
    let svc: Api<Service> = Api::namespaced(c.client(), "nope");
    let err = svc.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err}"
    );
}
