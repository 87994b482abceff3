//! Swaps that go through: a kubelet update under load, rapid successive updates, and
//! contract 0.1 and 0.2 versions replacing each other under load.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_update_under_load_swaps_with_no_failed_calls() {
    let swap = SwapStack::start().await;
    let v1 = sha256_hex(&swap.reference);
    for i in 0..10 {
        swap.add_node(&format!("before-{i}")).await;
    }
    let port = listening_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &v1).await;

    // Nodes keep arriving while the new version is published.
    let v2_bytes = with_custom_section(&swap.reference, "v2");
    let v2 = sha256_hex(&v2_bytes);
    let mut added = Vec::new();
    let mut published: Option<Instant> = None;
    let mut swapped_after = None;
    for i in 0..40 {
        let name = format!("during-{i}");
        swap.add_node(&name).await;
        added.push(name);
        if i == 10 {
            swap.publish(&v2_bytes);
            published = Some(Instant::now());
        }
        if let Some(at) = published
            && swapped_after.is_none()
            && serving(&metrics(port).await).as_deref() == Some(v2.as_str())
        {
            swapped_after = Some(at.elapsed());
        }
    }
    wait_serving(port, &v2).await;
    eprintln!(
        "published -> serving: {:?} (observed while creating nodes)",
        swapped_after.unwrap_or_else(|| published.unwrap().elapsed())
    );
    for name in (0..10).map(|i| format!("before-{i}")).chain(added) {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            swap.initialized(&name)
        })
        .await;
    }
    let m = metrics(port).await;
    assert_eq!(failed_calls(&m), 0.0, "{m}");
    assert_eq!(reconciles(&m, "cloud-node", "error"), 0.0, "{m}");
    assert_eq!(reloads(&m, "success"), 1.0, "{m}");
    wait_until(TIMEOUT, "a ProviderReloaded event on the Pod", || async {
        swap.pod_events()
            .await
            .iter()
            .any(|(reason, note)| reason == "ProviderReloaded" && note.contains(&v2[..12]))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_updates_end_on_the_newest_good_version() {
    let swap = SwapStack::start().await;
    let port = listening_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &sha256_hex(&swap.reference)).await;

    let versions: Vec<Vec<u8>> = ["v2", "v3", "v4"]
        .iter()
        .map(|tag| with_custom_section(&swap.reference, tag))
        .collect();
    // Faster than a compile: no waiting between updates, a broken one in between.
    swap.publish(&versions[0]);
    swap.publish(b"garbage");
    swap.publish(&versions[1]);
    swap.publish(&versions[2]);
    let newest = sha256_hex(&versions[2]);
    wait_serving(port, &newest).await;
    swap.add_node("after-rapid").await;
    wait_until(TIMEOUT, "after-rapid initialized", || {
        swap.initialized("after-rapid")
    })
    .await;
    let m = metrics(port).await;
    assert_eq!(serving(&m), Some(newest), "{m}");
    assert_eq!(failed_calls(&m), 0.0, "{m}");
}

/// A provider built against contract 0.1 (the `fixture_legacy` build of the simcloud
/// provider) replaces a 0.2 one and is replaced back while Nodes keep arriving: both
/// directions swap with no failed call, and every Node is initialized by one version
/// or the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_between_contract_versions_both_ways_under_load() {
    let swap = SwapStack::start().await;
    let v02 = sha256_hex(&swap.reference);
    let old = std::fs::read(guest("fixture_legacy")).unwrap();
    let v01 = sha256_hex(&old);
    let port = listening_port();
    // The 0.1 build exports instances and zones only: the node controllers run.
    let _ccm = swap.controller_manager(
        port,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
        ],
    );
    wait_serving(port, &v02).await;
    let mut names = Vec::new();
    for (i, (publish, hash)) in [(&old, &v01), (&swap.reference, &v02)].iter().enumerate() {
        for j in 0..8 {
            let name = format!("round-{i}-{j}");
            swap.add_node(&name).await;
            names.push(name);
            if j == 3 {
                swap.publish(publish);
            }
        }
        wait_serving(port, hash).await;
    }
    for name in &names {
        wait_until(TIMEOUT, &format!("{name} initialized"), || {
            swap.initialized(name)
        })
        .await;
    }
    let m = metrics(port).await;
    assert_eq!(failed_calls(&m), 0.0, "{m}");
    assert_eq!(reconciles(&m, "cloud-node", "error"), 0.0, "{m}");
    assert_eq!(reloads(&m, "success"), 2.0, "{m}");
    // Both versions answered calls: the 0.1 build through legacy `instances`.
    assert!(m.contains("function=\"instance-id\""), "{m}");
}
