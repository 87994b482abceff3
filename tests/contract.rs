//! The contract's additions through real components: batched instance calls answer as
//! the single calls do (with one cloud request), the shared cache is shared by a
//! version's instances and starts empty for a new version, events reach the
//! embedder's sink only when valid, the deadline import tells the time left (0.2); the
//! `services` import lists what the embedder's source holds and is `not-ready` without
//! one, and a provider's configuration declines interfaces (0.3); 0.1 and 0.2
//! components load and answer unchanged.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sim_cloud::model::{InstanceState, NewInstance};
use wasm_ccm_host::capabilities::events::{EventSink, ObjectKind, ProviderEvent};
use wasm_ccm_host::contract::Version;
use wasm_ccm_host::provider::CloudError;
use wasm_ccm_tests::types::CloudError as WitError;
use wasm_ccm_tests::{
    ProviderDir, Simulated, TOKEN, act, cloud_config, hostile, lb_service, loader, node, policy_for,
};

fn label<'a>(info: &'a wasm_ccm_tests::types::InstanceInfo, key: &str) -> &'a str {
    info.additional_labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {key} in {info:?}"))
}

/// Requests the simulated cloud served for `route` (`METHOD /template`).
fn served(sim: &Simulated, route: &str) -> u64 {
    sim.cloud
        .with_state(|s| s.requests.get(route).copied().unwrap_or(0))
}

#[tokio::test]
async fn batched_answers_are_the_single_answers_from_one_request() {
    let sim = Simulated::start().await;
    let (running, stopped, terminated) = sim.cloud.with_state(|s| {
        let running = s.create_instance(NewInstance::named("b-running"));
        let mut new = NewInstance::named("b-stopped");
        new.state = Some(InstanceState::Stopped);
        let stopped = s.create_instance(new);
        let mut new = NewInstance::named("b-terminated");
        new.state = Some(InstanceState::Terminated);
        let terminated = s.create_instance(new);
        (running, stopped, terminated)
    });
    let pid = |id: &str| format!("simcloud://{id}");
    let nodes = vec![
        node("b-running", None, &[]),
        node("b-running", Some(&pid(&running.id)), &[]),
        node("b-stopped", Some(&pid(&stopped.id)), &[]),
        node("b-terminated", Some(&pid(&terminated.id)), &[]),
        node("b-unknown", None, &[]),
        node("b-bad-id", Some("aws:///zone/i-1"), &[]),
    ];
    let v2 = sim.provider.instances_v2().unwrap();
    let batch = sim
        .provider
        .instances_batch()
        .expect("the reference provider exports instances-batch");

    let before = served(&sim, "GET /v1/instances");
    let exist = batch.instances_exist(&nodes).await.unwrap();
    let shutdown = batch.instances_shutdown(&nodes).await.unwrap();
    let metadata = batch.instances_metadata(&nodes).await.unwrap();
    assert_eq!(
        served(&sim, "GET /v1/instances") - before,
        3,
        "one listing per batched call"
    );
    assert_eq!(served(&sim, "GET /v1/instances/{id}"), 0);

    // Each answer is what the single call gives for that node alone.
    let cloud = |r: Result<bool, wasm_ccm_host::provider::ProviderError>| {
        r.map_err(|e| e.cloud().cloned().expect("a cloud error"))
    };
    let from_batch = |r: &Result<bool, WitError>| r.clone().map_err(CloudError::from);
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(
            from_batch(&exist[i]),
            cloud(v2.instance_exists(n).await),
            "exists {}",
            n.metadata.name
        );
        assert_eq!(
            from_batch(&shutdown[i]),
            cloud(v2.instance_shutdown(n).await),
            "shutdown {}",
            n.metadata.name
        );
        let single = v2.instance_metadata(n).await;
        match (&metadata[i], single) {
            (Ok(a), Ok(b)) => assert_eq!(a, &b, "metadata {}", n.metadata.name),
            (Err(a), Err(b)) => assert_eq!(
                CloudError::from(a.clone()),
                b.cloud().cloned().unwrap(),
                "metadata {}",
                n.metadata.name
            ),
            (a, b) => panic!("metadata {}: batch {a:?}, single {b:?}", n.metadata.name),
        }
    }
    assert_eq!(exist[0], Ok(true));
    assert_eq!(exist[3], Ok(false), "terminated");
    assert_eq!(shutdown[2], Ok(true), "stopped");
    assert_eq!(shutdown[4], Err(WitError::InstanceNotFound));
    assert!(
        matches!(exist[5], Err(WitError::Other(_))),
        "{:?}",
        exist[5]
    );
    assert_eq!(metadata[1].as_ref().unwrap().provider_id, pid(&running.id));
}

#[tokio::test]
async fn a_failed_batch_fails_every_node_with_the_cloud_error() {
    let sim = Simulated::start().await;
    sim.cloud.with_state(|s| {
        s.create_instance(NewInstance::named("t-1"));
        s.faults.push(sim_cloud::model::Fault {
            path_prefix: "/v1/instances".into(),
            method: None,
            status: Some(429),
            retry_after_seconds: Some(3),
            latency_ms: 0,
            count: Some(1),
        });
    });
    let batch = sim.provider.instances_batch().unwrap();
    let err = batch
        .instances_metadata(&[node("t-1", None, &[])])
        .await
        .unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3)), "{err}");
}

/// Events collected by a test sink.
#[derive(Default)]
struct Collected(Mutex<Vec<ProviderEvent>>);

impl EventSink for Collected {
    fn emit(&self, event: ProviderEvent) {
        self.0.lock().unwrap().push(event);
    }
}

#[tokio::test]
async fn provider_events_are_checked_before_they_reach_the_sink() {
    let sink = Arc::new(Collected::default());
    let loader = loader().with_event_sink(sink.clone());
    let (_dir, provider) = hostile(&loader, "").await;
    let info = act(
        &provider,
        &[
            ("hostile/action", "event"),
            ("hostile/reason", "InstanceSlow"),
            ("hostile/message", "line one\nline two"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(label(&info, "recorded"), "Ok(())");
    let events = sink.0.lock().unwrap().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event.provider, "hostile");
    assert_eq!(event.object.kind, ObjectKind::Node);
    assert_eq!(event.object.name, "victim");
    assert!(event.warning);
    assert_eq!(event.reason, "InstanceSlow");
    assert!(
        !event.message.contains('\n'),
        "sanitized: {:?}",
        event.message
    );

    // A reason that is not CamelCase, and a node the call is not about, are refused.
    for (annotations, refused) in [
        (
            vec![("hostile/reason", "not camel")],
            "Err(EventError::InvalidReason)",
        ),
        (
            vec![("hostile/reason", "Fine"), ("hostile/event-node", "other")],
            "Err(EventError::NoObject)",
        ),
    ] {
        let mut all = vec![("hostile/action", "event")];
        all.extend(annotations);
        let info = act(&provider, &all).await.unwrap();
        assert_eq!(label(&info, "recorded"), refused);
    }
    assert_eq!(sink.0.lock().unwrap().len(), 1, "nothing else recorded");
    let metrics = loader.metrics().encode();
    assert!(
        metrics.contains(
            "wasm_ccm_provider_events_total{provider=\"hostile\",type=\"Warning\",result=\"invalid_reason\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_shared_cache_outlives_instances_but_not_versions() {
    let loader = loader();
    let policy = "limits: {poolSize: 2, cacheKiB: 4}\n";
    let (_dir, provider) = hostile(&loader, policy).await;
    let set = |key: &'static str, value: &'static str| {
        vec![
            ("hostile/action", "cache-set"),
            ("hostile/key", key),
            ("hostile/value", value),
        ]
    };
    let get = |key: &'static str| vec![("hostile/action", "cache-get"), ("hostile/key", key)];
    let info = act(&provider, &set("zones", "zone-a,zone-b"))
        .await
        .unwrap();
    assert_eq!(label(&info, "stored"), "Ok(())");
    // The instance that stored it dies; a fresh one still reads the value.
    assert!(
        act(&provider, &[("hostile/action", "panic")])
            .await
            .is_err()
    );
    let info = act(&provider, &get("zones")).await.unwrap();
    assert_eq!(label(&info, "value"), "zone-a,zone-b");
    assert!(provider.cache_bytes() > 0);

    // The cap holds: a value larger than the cache is refused.
    let info = act(
        &provider,
        &[
            ("hostile/action", "cache-set"),
            ("hostile/key", "big"),
            ("hostile/size", "8192"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(label(&info, "stored"), "Err(CacheError::TooLarge(4096))");
    assert!(provider.cache_bytes() <= 4096);

    // Entries expire.
    let mut short = set("short", "x");
    short.push(("hostile/ttl-ms", "1"));
    act(&provider, &short).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let info = act(&provider, &get("short")).await.unwrap();
    assert_eq!(label(&info, "value"), "missing");

    // A new version of the provider starts with an empty cache.
    let (_dir2, next) = hostile(&loader, policy).await;
    let info = act(&next, &get("zones")).await.unwrap();
    assert_eq!(label(&info, "value"), "missing");
    let metrics = loader.metrics().encode();
    assert!(
        metrics.contains(
            "wasm_ccm_provider_cache_requests_total{provider=\"hostile\",result=\"hit\"}"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_deadline_import_tells_the_time_left() {
    // 20 s, not the 30 s default: what is left says which one the call runs under, with
    // 10 s for the call to reach the import on a loaded machine.
    let (_dir, provider) = hostile(&loader(), "limits: {callTimeout: 20s}\n").await;
    let info = act(&provider, &[("hostile/action", "deadline")])
        .await
        .unwrap();
    let left: u64 = label(&info, "remaining-ms").parse().unwrap();
    assert!(
        (10_000..=20_000).contains(&left),
        "within the 20 s call timeout: {left} ms"
    );
}

/// A component built against contract 0.1 loads unchanged, and the host adapts its
/// answers (and its view of the Node) to the current records.
#[tokio::test]
async fn a_contract_0_1_component_loads_and_answers() {
    let sim = Simulated::start().await;
    let i = sim
        .cloud
        .with_state(|s| s.create_instance(NewInstance::named("old-1")));
    let dir = ProviderDir::new("fixture_legacy", "simcloud", &policy_for(&sim.cloud), TOKEN);
    let provider = loader()
        .load(&dir.wasm, cloud_config(&sim.cloud))
        .await
        .unwrap();
    assert_eq!(provider.contract_version(), Version::V0_1);
    assert!(provider.instances_batch().is_none());
    let v1 = provider.instances().unwrap();
    assert_eq!(v1.instance_id("old-1").await.unwrap(), i.id);
    let err = v1.instance_id("nope").await.unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");
    let zone = provider
        .zones()
        .unwrap()
        .get_zone_by_node_name("old-1")
        .await
        .unwrap();
    assert_eq!(zone.failure_domain, "zone-a");
    assert!(provider.call_has_cluster_id().await.unwrap());
}

/// Annotations collected by a test sink.
#[derive(Default)]
struct CollectedAnnotations(
    Mutex<Vec<wasm_ccm_host::capabilities::annotations::ServiceAnnotations>>,
);

impl wasm_ccm_host::capabilities::annotations::AnnotationSink for CollectedAnnotations {
    fn apply(&self, set: wasm_ccm_host::capabilities::annotations::ServiceAnnotations) {
        self.0.lock().unwrap().push(set);
    }
}

/// A component built against contract 0.2 with its own bindings (guests/fixtures/
/// contract-0-2) loads and answers with every 0.2 import it uses: the cache across
/// calls, the deadline, events about the batch's Node, and an annotation on the Service
/// under its policy's prefix (refused without it).
#[tokio::test]
async fn a_contract_0_2_component_loads_and_answers() {
    let events = Arc::new(Collected::default());
    let written = Arc::new(CollectedAnnotations::default());
    let loader = loader()
        .with_event_sink(events.clone())
        .with_annotation_sink(written.clone());
    let policy = "serviceAnnotations:\n  - frozen.example.com/\n";
    let dir = ProviderDir::new("fixture_contract_0_2", "frozen", policy, TOKEN);
    let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
    assert_eq!(provider.contract_version(), Version::V0_2);
    assert_eq!(provider.call_provider_name().await.unwrap(), "frozen");

    let v2 = provider.instances_v2().unwrap();
    let a = node("node-a", None, &[]);
    for calls in ["1", "2"] {
        let info = v2.instance_metadata(&a).await.unwrap();
        assert_eq!(info.provider_id, "frozen://node-a");
        assert_eq!(label(&info, "frozen/calls"), calls, "counted in the cache");
        assert_eq!(label(&info, "frozen/deadline"), "ok");
    }
    assert!(
        !v2.instance_exists(&node("gone-b", None, &[]))
            .await
            .unwrap()
    );
    assert!(
        v2.instance_shutdown(&node("off-c", None, &[]))
            .await
            .unwrap()
    );

    let batch = provider.instances_batch().unwrap();
    let answers = batch
        .instances_metadata(&[a.clone(), node("gone-b", None, &[])])
        .await
        .unwrap();
    assert_eq!(label(answers[0].as_ref().unwrap(), "frozen/calls"), "3");
    assert!(
        matches!(answers[1], Err(WitError::InstanceNotFound)),
        "{answers:?}"
    );
    let recorded = events.0.lock().unwrap().clone();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].reason, "Batched");
    assert_eq!(recorded[0].object.name, "node-a");

    let lb = provider.load_balancer().unwrap();
    let web = lb_service("default", "web", "uid-web");
    assert_eq!(
        lb.get_load_balancer("kubernetes", &web).await.unwrap(),
        None
    );
    let status = lb
        .ensure_load_balancer("kubernetes", &web, std::slice::from_ref(&a))
        .await
        .unwrap();
    assert_eq!(status.ingress[0].ip.as_deref(), Some("192.0.2.1"));
    assert_eq!(
        lb.get_load_balancer("kubernetes", &web).await.unwrap(),
        Some(status)
    );
    let written = written.0.lock().unwrap().clone();
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(
        written[0].annotations,
        [(
            "frozen.example.com/ensured".to_string(),
            "192.0.2.1".to_string()
        )]
    );
    lb.ensure_load_balancer_deleted("kubernetes", &web)
        .await
        .unwrap();
    assert_eq!(
        lb.get_load_balancer("kubernetes", &web).await.unwrap(),
        None
    );
    assert_eq!(
        provider
            .load_balancer_name()
            .unwrap()
            .get_load_balancer_name("kubernetes", &web)
            .await
            .unwrap(),
        "frozen-web"
    );

    // Without the prefix in its policy, the annotation is refused and the call fails.
    let dir = ProviderDir::new("fixture_contract_0_2", "frozen", "", TOKEN);
    let provider = loader.load(&dir.wasm, Vec::new()).await.unwrap();
    let err = provider
        .load_balancer()
        .unwrap()
        .ensure_load_balancer("kubernetes", &web, &[a])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NotAllowed"), "{err}");
}

/// `identity.declined-interfaces` (0.3): what the configuration declines is not served,
/// and a name the component does not export fails the load, naming it and the exports.
#[tokio::test]
async fn a_declined_interface_is_not_served_and_a_wrong_name_fails_the_load() {
    let dir = ProviderDir::new("fixture_hostile", "hostile", "", TOKEN);
    let loader = loader();
    let provider = loader
        .load(&dir.wasm, b"decline instances-v2".to_vec())
        .await
        .unwrap();
    assert_eq!(provider.contract_version(), Version::V0_3);
    assert!(provider.instances_v2().is_none());
    assert_eq!(provider.declined().names(), ["instances-v2"]);
    assert_eq!(
        provider.call_declined_interfaces().await.unwrap(),
        ["instances-v2"]
    );
    let served = loader.load(&dir.wasm, Vec::new()).await.unwrap();
    assert!(served.instances_v2().is_some());
    assert!(served.declined().names().is_empty());
    for wrong in ["routes", "identity", "instances_v2"] {
        let err = loader
            .load(&dir.wasm, format!("decline {wrong}").into_bytes())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("`{wrong}`")) && err.contains("it exports: instances-v2"),
            "{err}"
        );
    }
}

/// Services as an embedder's source lists them.
struct Listed(Option<Vec<wasm_ccm_host::capabilities::services::LoadBalancerService>>);

impl wasm_ccm_host::capabilities::services::ServiceSource for Listed {
    fn load_balancer_services(
        &self,
        _annotation: &dyn Fn(&str) -> bool,
    ) -> Option<Vec<wasm_ccm_host::capabilities::services::LoadBalancerService>> {
        self.0.clone()
    }
}

/// The `services` import (0.3) through the K3s provider: the Services the embedder's
/// source lists hold their addresses (only annotations under the policy's prefixes are
/// shown), and without a listing the provider is told `not-ready` and retries, never
/// taking it for "nothing is taken".
#[tokio::test]
async fn the_services_import_answers_from_the_embedder_s_source() {
    use wasm_ccm_host::capabilities::services::LoadBalancerService;
    let policy = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k3s/providers/k3s.yaml"),
    )
    .unwrap();
    let dir = ProviderDir::new("k3s_provider", "k3s", &policy, TOKEN);
    let config = b"[Pools]\ncidr-global = 10.0.0.0/29\n".to_vec();
    let holder = |name: &str, ip: &str, annotations: Vec<(String, String)>| LoadBalancerService {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        load_balancer_class: None,
        ports: lb_service("default", name, "u").ports,
        load_balancer_ip: None,
        ingress: vec![wasm_ccm_tests::types::LoadBalancerIngress {
            ip: Some(ip.into()),
            hostname: None,
            ip_mode: None,
            ports: Vec::new(),
        }],
        annotations,
        deleting: false,
    };
    let source = Listed(Some(vec![
        holder("a", "10.0.0.1", Vec::new()),
        // Shown: under kube-vip.io/ (the policy's prefix).
        holder(
            "b",
            "10.0.0.9",
            vec![("kube-vip.io/loadbalancerIPs".into(), "10.0.0.2".into())],
        ),
        // Not shown: outside the prefixes, so 10.0.0.3 stays free.
        holder(
            "c",
            "10.0.0.1",
            vec![("example.com/loadbalancerIPs".into(), "10.0.0.3".into())],
        ),
    ]));
    let provider = loader()
        .with_service_source(Arc::new(source))
        .load(&dir.wasm, config.clone())
        .await
        .unwrap();
    let lb = provider.load_balancer().unwrap();
    let status = lb
        .ensure_load_balancer("kubernetes", &lb_service("default", "new", "uid-new"), &[])
        .await
        .unwrap();
    assert_eq!(status.ingress[0].ip.as_deref(), Some("10.0.0.3"));

    // No source (or one not listed yet): not-ready, retried.
    for loader in [
        loader(),
        loader().with_service_source(Arc::new(Listed(None))),
    ] {
        let provider = loader.load(&dir.wasm, config.clone()).await.unwrap();
        let err = provider
            .load_balancer()
            .unwrap()
            .ensure_load_balancer("kubernetes", &lb_service("default", "new", "uid-new"), &[])
            .await
            .unwrap_err();
        assert!(
            matches!(err.cloud(), Some(CloudError::RetryAfter { .. })),
            "{err}"
        );
    }
}
