//! The watch history: the changes watchers see, the retained backlog with its
//! compaction (older versions get 410 Gone), and subscriptions to the live feed.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::{Inner, Store};
use crate::errors::ApiError;

/// A change, as watchers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One entry of the watch history.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: EventType,
    pub storage: &'static str,
    pub namespace: String,
    /// The object after the change (for DELETED: its last state).
    pub object: Value,
    /// The object before the change (MODIFIED only), to turn selector transitions into
    /// ADDED/DELETED as the real server does.
    pub old: Option<Value>,
}

/// The retained changes after a resource version, and the live feed after them.
pub type Subscription = (Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>);

impl Store {
    /// The oldest resource version still served: continue tokens and watches from
    /// before it get 410 Gone.
    pub fn oldest_watchable(&self) -> u64 {
        self.lock().oldest_watchable
    }

    /// Drops the watch history: watches from any earlier resource version get 410.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.oldest_watchable = inner.rv;
    }

    /// Subscribes to changes after `from_rv`: the retained history plus a live
    /// receiver, taken under one lock so nothing falls between them.
    pub fn watch_from(&self, from_rv: u64) -> Result<Subscription, ApiError> {
        let inner = self.lock();
        if from_rv < inner.oldest_watchable {
            return Err(ApiError::gone(format!(
                "too old resource version: {from_rv} ({})",
                inner.oldest_watchable
            )));
        }
        let backlog = inner
            .history
            .iter()
            .filter(|c| c.rv > from_rv)
            .cloned()
            .collect();
        Ok((backlog, self.changes.subscribe()))
    }

    pub(super) fn commit(&self, inner: &mut Inner, change: Change) {
        let change = Arc::new(change);
        inner.history.push_back(change.clone());
        while inner.history.len() > inner.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.oldest_watchable = dropped.rv;
            }
        }
        let _ = self.changes.send(change);
    }
}
