//! kube-rs as the client: conflicting writers, the status subresource, label and
//! field selectors, pagination, watches with bookmarks and 410 Gone, and a reflector
//! across dropped connections and a compacted history.

use super::*;

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "spec": {},
        "status": {"addresses": [{"type": "Hostname", "address": name}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn kube_rs_conflict_exactly_one_writer_wins() {
    let c = Cluster::start().await;
    let nodes: Api<Node> = Api::all(c.client());
    let created = nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let writers = (0..2).map(|i| {
        let nodes = nodes.clone();
        let mut copy = created.clone();
        tokio::spawn(async move {
            copy.metadata
                .labels
                .get_or_insert_default()
                .insert("writer".into(), i.to_string());
            nodes.replace("n1", &PostParams::default(), &copy).await
        })
    });
    let mut wins = 0;
    let mut conflicts = 0;
    for w in writers {
        match w.await.unwrap() {
            Ok(_) => wins += 1,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                assert_eq!(status.reason, "Conflict");
                conflicts += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!((wins, conflicts), (1, 1));
}

#[tokio::test]
async fn kube_rs_status_subresource_and_selectors() {
    let c = Cluster::start().await;
    let nodes: Api<Node> = Api::all(c.client());
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let mut other = node("n2");
    other.metadata.labels = Some([("pool".to_string(), "b".to_string())].into());
    nodes.create(&PostParams::default(), &other).await.unwrap();

    let patched = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}, "spec": {"providerID": "ignored"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.status.unwrap().addresses.unwrap()[0].address,
        "10.0.0.1"
    );
    assert_eq!(
        patched.spec.unwrap().provider_id,
        None,
        "status writes ignore spec"
    );

    let by_label = nodes
        .list(&ListParams::default().labels("pool=b"))
        .await
        .unwrap();
    assert_eq!(by_label.items.len(), 1);
    let by_field = nodes
        .list(&ListParams::default().fields("metadata.name=n1"))
        .await
        .unwrap();
    assert_eq!(by_field.items[0].metadata.name.as_deref(), Some("n1"));
    let err = nodes
        .list(&ListParams::default().fields("spec.providerID=x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err}"
    );

    // Pagination: limit + continue.
    let page = nodes.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let token = page.metadata.continue_.clone().unwrap();
    let rest = nodes
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items[0].metadata.name.as_deref(), Some("n2"));

    let deleted = nodes.delete("n2", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_right(), "deleted at once: a Status comes back");
}

#[tokio::test]
async fn kube_rs_watch_bookmarks_and_gone() {
    let c = Cluster::with(Settings {
        bookmark_interval: Duration::from_millis(100),
        history: 5,
        ..Settings::default()
    })
    .await;
    let nodes: Api<Node> = Api::all(c.client());
    let list = nodes.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut stream = nodes
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    nodes
        .create(&PostParams::default(), &node("w1"))
        .await
        .unwrap();
    let mut added = false;
    let mut bookmark = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(added && bookmark) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(WatchEvent::Added(n)))) => added |= n.metadata.name.as_deref() == Some("w1"),
            Ok(Some(Ok(WatchEvent::Bookmark(_)))) => bookmark = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(added && bookmark);

    // Past the retained history: the watch answers with a 410 ERROR event.
    for i in 0..10 {
        nodes
            .create(&PostParams::default(), &node(&format!("x{i}")))
            .await
            .unwrap();
    }
    let mut old = nodes
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), old.next())
        .await
        .unwrap()
    {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_rs_reflector_survives_reconnects_and_forced_410() {
    let c = Cluster::start().await;
    let nodes: Api<Node> = Api::all(c.client());
    for i in 0..3 {
        nodes
            .create(&PostParams::default(), &node(&format!("r{i}")))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store::<Node>();
    let stream = reflector(writer, watcher(nodes.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        futures_util::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    let names = |reader: &reflector::Store<Node>| {
        let mut v: Vec<String> = reader
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        v.sort();
        v
    };
    wait_for(|| names(&reader) == ["r0", "r1", "r2"], "initial list").await;

    // Connections drop: the watcher resumes from its last resourceVersion.
    c.api.disconnect_watches();
    nodes
        .create(&PostParams::default(), &node("r3"))
        .await
        .unwrap();
    wait_for(
        || names(&reader).len() == 4,
        "a change made while reconnecting",
    )
    .await;

    // History compacted while disconnected: resuming gets 410, the watcher relists.
    c.api.store().compact();
    c.api.disconnect_watches();
    nodes.delete("r0", &DeleteParams::default()).await.unwrap();
    nodes
        .create(&PostParams::default(), &node("r4"))
        .await
        .unwrap();
    wait_for(
        || names(&reader) == ["r1", "r2", "r3", "r4"],
        "relist after 410",
    )
    .await;
    task.abort();
}

async fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
