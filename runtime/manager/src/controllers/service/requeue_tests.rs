//! The service controller's whole loop (watch, work queue, reconcile, error policy) on
//! paused time: a failed sync's next attempt comes when the back-off or the cloud's
//! Retry-After says, measured on tokio's clock, which jumps to each timer instead of
//! waiting for it. Ported from upstream's `TestServiceQueueDelay`, through the queue.
//! And how many Services are synced at once against a cloud that takes its time
//! (`--concurrent-service-syncs`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::Api;

use super::controller_tests::stored;
use super::{Options, run};
use crate::cloud::Cloud;
use crate::cloud::fake::Calls;
use crate::cloud::fake::{INGRESS_IP, Recording};
use crate::controllers::test_cluster::{TestCluster, about, wait_for};

/// Starts the service controller on `cluster` with the LoadBalancer Service `svc` and
/// one Ready Node, and waits until the Service's status has the load balancer's
/// address; answers when each `ensure` was called, the successful one last.
async fn ensured_after_failures(cluster: &mut TestCluster) -> Vec<Duration> {
    cluster.ready_node("node0").await;
    cluster.run(|ctx, stop| run(ctx, Options::for_test(), stop));
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
    stored(&services, "svc", "LoadBalancer").await;
    wait_for(
        "the load balancer's address in the Service's status",
        || {
            let services = services.clone();
            async move {
                let svc = services.get("svc").await.map_err(|e| e.to_string())?;
                let status = svc.status.and_then(|s| s.load_balancer);
                let ingress = status.clone().and_then(|lb| lb.ingress).unwrap_or_default();
                if ingress.iter().any(|i| i.ip.as_deref() == Some(INGRESS_IP)) {
                    Ok(())
                } else {
                    Err(format!("{status:?}"))
                }
            }
        },
    )
    .await;
    let times = cluster.calls.times("ensure");
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Regular errors: the next attempts come 5 s and then 10 s after the failures (the
/// rate limiter's doubling), not sooner although the controller's own finalizer write
/// changes the Service meanwhile, and not later.
#[tokio::test(start_paused = true)]
async fn a_failed_sync_is_retried_after_the_back_off() {
    let mut cluster =
        TestCluster::in_memory(|calls| Arc::new(Recording::new(0, calls)) as Arc<dyn Cloud>).await;
    cluster
        .cloud
        .set_failing_versions(&cluster.calls, 2, "ensure", |r| r.failing("ensure"));
    let delays = ensured_after_failures(&mut cluster).await;
    assert!(
        delays.len() == 2
            && about(delays[0], Duration::from_secs(5))
            && about(delays[1], Duration::from_secs(10)),
        "delays between the ensures: {delays:?}"
    );
    let reasons = cluster.reasons("svc").await;
    assert!(
        reasons.iter().any(|r| r == "SyncLoadBalancerFailed")
            && reasons.iter().any(|r| r == "EnsuredLoadBalancer"),
        "{reasons:?}"
    );
}

/// `api.RetryError`: the cloud's Retry-After (7 s, longer than the first back-off
/// step) is when the next attempt comes, each time. (That it does not grow the
/// back-off is `backoff::tests::service_queue_delay`.)
#[tokio::test(start_paused = true)]
async fn a_retry_after_is_when_the_next_attempt_comes() {
    let mut cluster =
        TestCluster::in_memory(|calls| Arc::new(Recording::new(0, calls)) as Arc<dyn Cloud>).await;
    cluster
        .cloud
        .set_failing_versions(&cluster.calls, 2, "ensure", |r| {
            r.throttled("ensure", Duration::from_secs(7))
        });
    let delays = ensured_after_failures(&mut cluster).await;
    assert!(
        delays.len() == 2 && delays.iter().all(|d| about(*d, Duration::from_secs(7))),
        "delays between the ensures: {delays:?}"
    );
}

/// `--concurrent-service-syncs`: with 2 workers, two Services' load balancers are
/// ensured side by side, the second begun while the cloud still takes its 5 s over the
/// first; with 1, the second only once the first is done.
#[tokio::test(start_paused = true)]
async fn services_are_synced_workers_at_a_time_against_a_slow_cloud() {
    let slow = Duration::from_secs(5);
    for workers in [1, 2] {
        let mut cluster = TestCluster::in_memory(|calls| {
            Arc::new(Recording::new(1, calls).slow("ensure", slow)) as Arc<dyn Cloud>
        })
        .await;
        cluster.ready_node("node0").await;
        let options = Options {
            workers,
            ..Options::for_test()
        };
        cluster.run(|ctx, stop| run(ctx, options, stop));
        let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
        for name in ["s0", "s1"] {
            stored(&services, name, "LoadBalancer").await;
        }
        let calls = cluster.calls.clone();
        let (first, second) = wait_for("both Services' first ensure to end", || {
            let firsts = first_ensures(&calls);
            async move {
                match firsts[..] {
                    [a, b] if tokio::time::Instant::now() >= b + slow => Ok((a, b)),
                    _ => Err(format!("first ensures at {firsts:?}")),
                }
            }
        })
        .await;
        let gap = second - first;
        if workers == 2 {
            assert!(
                gap < slow,
                "2 workers: the second began {gap:?} after the first"
            );
        } else {
            assert!(
                gap >= slow,
                "1 worker: the second began {gap:?} after the first"
            );
        }
        for name in ["s0", "s1"] {
            let nodes = calls
                .of("ensure")
                .into_iter()
                .find(|c| c.subject == format!("default/{name}"))
                .map(|c| c.nodes);
            assert_eq!(nodes, Some(vec!["node0".to_string()]), "{name}");
        }
    }
}

/// When each Service's first `ensure` was made, earliest first.
fn first_ensures(calls: &Calls) -> Vec<tokio::time::Instant> {
    let mut firsts: Vec<(String, tokio::time::Instant)> = Vec::new();
    for call in calls.of("ensure") {
        if !firsts.iter().any(|(subject, _)| *subject == call.subject) {
            firsts.push((call.subject, call.at));
        }
    }
    let mut times: Vec<_> = firsts.into_iter().map(|(_, at)| at).collect();
    times.sort();
    times
}
