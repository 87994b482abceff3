//! The events recorded about an object in `default`, as the tests read them. A read
//! that fails fails the test, so a check that an event is absent (or happened only so
//! often) cannot pass because the API server could not be read.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

use crate::wait::wait_for;

/// The events about object `name` (`involvedObject.name`).
pub async fn about(client: &kube::Client, name: &str) -> Vec<Event> {
    list(client, &format!("involvedObject.name={name}")).await
}

/// The events with `reason`, about any object.
pub async fn with_reason(client: &kube::Client, reason: &str) -> Vec<Event> {
    list(client, &format!("reason={reason}")).await
}

/// The reasons of the events about object `name`.
pub async fn reasons(client: &kube::Client, name: &str) -> Vec<String> {
    about(client, name)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// The notes of the events about object `name` with `reason`.
pub async fn notes(client: &kube::Client, name: &str, reason: &str) -> Vec<String> {
    about(client, name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

/// How many times `reason` was recorded about object `name`: repeats of one event are
/// aggregated into its series count.
pub async fn occurrences(client: &kube::Client, name: &str, reason: &str) -> i32 {
    list(
        client,
        &format!("involvedObject.name={name},reason={reason}"),
    )
    .await
    .iter()
    .map(|e| {
        e.series
            .as_ref()
            .and_then(|s| s.count)
            .or(e.count)
            .unwrap_or(1)
    })
    .sum()
}

/// The reasons recorded about object `name`, in the order they were recorded (from
/// `events.k8s.io`, whose events carry their time to the microsecond).
pub async fn reasons_in_order(client: &kube::Client, name: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let mut list: Vec<_> = events
        .list(&ListParams::default())
        .await
        .expect("the events can be read")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.name.as_deref() == Some(name))
        })
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list.into_iter().filter_map(|e| e.reason).collect()
}

/// Waits until `reason` was recorded about object `name`; on timeout, the test fails
/// with the reasons recorded by then.
pub async fn wait_for_reason(client: &kube::Client, name: &str, reason: &str, timeout: Duration) {
    wait_for_reasons(client, name, &[reason], timeout).await;
}

/// Waits until every one of `wanted` was recorded about object `name`; on timeout, the
/// test fails with the reasons recorded by then.
pub async fn wait_for_reasons(
    client: &kube::Client,
    name: &str,
    wanted: &[&str],
    timeout: Duration,
) {
    wait_for(
        timeout,
        &format!("{wanted:?} for {name} (the reasons recorded)"),
        || reasons(client, name),
        |recorded| wanted.iter().all(|w| recorded.iter().any(|r| r == w)),
    )
    .await;
}

/// The messages of the events about object `name`, whatever their reason.
pub async fn messages(client: &kube::Client, name: &str) -> Vec<String> {
    about(client, name)
        .await
        .into_iter()
        .filter_map(|e| e.message)
        .collect()
}

async fn list(client: &kube::Client, fields: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default().fields(fields))
        .await
        .unwrap_or_else(|e| panic!("the events ({fields}) can be read: {e}"))
        .items
}
