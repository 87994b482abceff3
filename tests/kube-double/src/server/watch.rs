//! Watches: the initial state, the backlog and the live feed as a stream of JSON
//! lines, selector transitions as ADDED/DELETED, bookmarks, timeouts and 410 Gone.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::wrappers::ReceiverStream;

use super::{Shared, is_true};
use crate::convert;
use crate::errors::ApiError;
use crate::resources::Resource;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType};
use crate::table;

fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn bookmark(resource: &Resource, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    watch_line(
        "BOOKMARK",
        &json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata}),
    )
}

pub(super) fn watch(
    state: Shared,
    resource: &'static Resource,
    storage: &'static Resource,
    ns: String,
    (labels, fields): (LabelSelector, FieldSelector),
    query: &HashMap<String, String>,
    as_table: bool,
) -> Result<Response, ApiError> {
    let store = state.store.clone();
    let bookmarks = is_true(query.get("allowWatchBookmarks"));
    let send_initial = is_true(query.get("sendInitialEvents"));
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let requested_rv = query.get("resourceVersion").cloned().unwrap_or_default();
    let events_api = resource.group == "events.k8s.io";
    let present = move |obj: &Value| {
        let obj = if events_api {
            convert::core_to_events_v1(obj)
        } else {
            obj.clone()
        };
        // Watched as a Table (kubectl get -w): each event carries a one-row Table.
        if as_table {
            let rv = obj["metadata"]["resourceVersion"].clone();
            table::render(resource, &[obj], json!({"resourceVersion": rv}))
        } else {
            obj
        }
    };
    let matches = {
        let ns = ns.clone();
        move |obj: &Value, namespace: &str| {
            (ns.is_empty() || ns == namespace) && labels.matches(obj) && fields.matches(obj)
        }
    };
    // The starting point: "" / "0" means "from now, with the current state first".
    let (initial, from_rv) = if requested_rv.is_empty() || requested_rv == "0" || send_initial {
        let (items, rv) = store.list(
            storage,
            &ns,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        (Some(items), rv)
    } else {
        let rv: u64 = requested_rv.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid resourceVersion {requested_rv:?}"))
        })?;
        (None, rv)
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let subscription = store.watch_from(from_rv);
    let bookmark_interval = state.settings.bookmark_interval;
    let mut disconnect = state.disconnect.subscribe();
    tokio::spawn(async move {
        let (backlog, mut live) = match subscription {
            Ok(s) => s,
            Err(gone) => {
                // Like the real server: 200, then an ERROR event with the 410 Status.
                let _ = tx.send(Ok(watch_line("ERROR", &gone.status()))).await;
                return;
            }
        };
        if let Some(items) = initial {
            for item in items {
                let namespace = item
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if matches(&item, &namespace)
                    && tx
                        .send(Ok(watch_line("ADDED", &present(&item))))
                        .await
                        .is_err()
                {
                    return;
                }
            }
            if send_initial
                && tx
                    .send(Ok(bookmark(resource, from_rv, true)))
                    .await
                    .is_err()
            {
                return;
            }
        }
        let mut last_rv = from_rv;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        let deliver = |change: &Change, last_rv: &mut u64| -> Option<Bytes> {
            if change.storage != storage.storage || change.rv <= *last_rv {
                return None;
            }
            *last_rv = change.rv;
            let now = matches(&change.object, &change.namespace);
            let before = change
                .old
                .as_ref()
                .is_some_and(|o| matches(o, &change.namespace));
            let kind = match (change.kind, now, before) {
                (EventType::Added, true, _) => "ADDED",
                (EventType::Modified, true, true) => "MODIFIED",
                (EventType::Modified, true, false) => "ADDED",
                (EventType::Modified, false, true) => "DELETED",
                (EventType::Deleted, true, _) => "DELETED",
                _ => return None,
            };
            Some(watch_line(kind, &present(&change.object)))
        };
        for change in backlog {
            if let Some(line) = deliver(&change, &mut last_rv)
                && tx.send(Ok(line)).await.is_err()
            {
                return;
            }
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tx.closed() => return,
                _ = disconnect.changed() => return,
                _ = ticker.tick(), if bookmarks => {
                    let rv = store.resource_version().max(last_rv);
                    if tx.send(Ok(bookmark(resource, rv, false))).await.is_err() {
                        return;
                    }
                }
                received = live.recv() => match received {
                    Ok(change) => {
                        if let Some(line) = deliver(&change, &mut last_rv)
                            && tx.send(Ok(line)).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let gone = ApiError::gone(format!("too old resource version: {last_rv}: the watch fell behind"));
                        let _ = tx.send(Ok(watch_line("ERROR", &gone.status()))).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                },
            }
        }
    });
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .expect("watch response"))
}
