//! The object store: resource versions, optimistic concurrency, status subresources,
//! finalizers, the watch history, and the defaults and validation the CCM relies on.
//! This module holds the store itself, its reads and the metadata helpers; the
//! writes, the watch history, validation, Service defaults and the Go encoding are
//! in the modules below.

mod create;
mod delete;
mod encoding;
mod services;
mod update;
mod validation;
mod watch;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::errors::ApiError;
use crate::resources::{self, Resource};
use crate::selector::{FieldSelector, LabelSelector};

pub use watch::{Change, EventType, Subscription};

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
}

type Key = (&'static str, String, String);

struct Inner {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    /// Watches from a resource version below this get 410 Gone.
    oldest_watchable: u64,
    history_limit: usize,
    next_uid: u64,
    next_cluster_ip: u32,
    next_node_port: u32,
}

/// The store. All operations are atomic with respect to each other.
pub struct Store {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Arc<Change>>,
}

/// Where a write goes: the object, or its status subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Main,
    Status,
}

fn meta(obj: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    obj.get("metadata")
        .and_then(Value::as_object)
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    meta(obj).get(field).and_then(Value::as_str).unwrap_or("")
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("metadata object")
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

impl Store {
    /// An empty store with the standard namespaces, keeping `history_limit` changes
    /// for watches.
    pub fn new(history_limit: usize) -> Self {
        // Room for bursts: a watcher that falls further behind is ended with a 410.
        let (changes, _) = broadcast::channel(history_limit.clamp(4096, 1 << 16));
        let store = Self {
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                rv: 0,
                history: VecDeque::new(),
                oldest_watchable: 0,
                history_limit,
                next_uid: 0,
                next_cluster_ip: 0,
                next_node_port: 0,
            }),
            changes,
        };
        let namespaces = resources::find("", "v1", "namespaces").expect("namespaces resource");
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            store
                .create(
                    namespaces,
                    "",
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                )
                .expect("seeding namespaces");
        }
        store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("store lock")
    }

    /// The current resource version.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    fn check_namespace(
        inner: &Inner,
        resource: &Resource,
        namespace: &str,
    ) -> Result<(), ApiError> {
        if !resource.namespaced {
            return Ok(());
        }
        if namespace.is_empty() {
            return Err(ApiError::bad_request(
                "a namespace is required for namespaced resources",
            ));
        }
        if !inner
            .objects
            .contains_key(&("namespaces", String::new(), namespace.to_owned()))
        {
            return Err(ApiError::not_found("namespaces", namespace));
        }
        Ok(())
    }

    fn key(resource: &Resource, namespace: &str, name: &str) -> Key {
        let ns = if resource.namespaced { namespace } else { "" };
        (resource.storage, ns.to_owned(), name.to_owned())
    }

    /// Reads one object.
    pub fn get(&self, resource: &Resource, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.lock()
            .objects
            .get(&Self::key(resource, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource.plural, name))
    }

    /// Lists objects (all namespaces when `namespace` is empty) and the list's
    /// resource version.
    pub fn list(
        &self,
        resource: &Resource,
        namespace: &str,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|((storage, ns, _), _)| {
                *storage == resource.storage && (namespace.is_empty() || ns == namespace)
            })
            .map(|(_, v)| v)
            .filter(|v| labels.matches(v) && fields.matches(v))
            .cloned()
            .collect();
        (items, inner.rv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    fn nodes() -> &'static Resource {
        find("", "v1", "nodes").unwrap()
    }

    fn node(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}, "status": {"addresses": []}})
    }

    #[test]
    fn create_sets_server_fields_and_versions_increase() {
        let store = Store::new(100);
        let a = store.create(nodes(), "", node("a")).unwrap();
        let b = store.create(nodes(), "", node("b")).unwrap();
        let rv = |v: &Value| meta_str(v, "resourceVersion").parse::<u64>().unwrap();
        assert!(rv(&b) > rv(&a));
        assert!(!meta_str(&a, "uid").is_empty());
        assert!(meta_str(&a, "creationTimestamp").ends_with('Z'));
        assert_eq!(
            store.create(nodes(), "", node("a")).unwrap_err().reason,
            "AlreadyExists"
        );
        assert_eq!(
            store
                .create(nodes(), "", node("Bad_Name"))
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn stale_update_conflicts_and_status_is_separate() {
        let store = Store::new(100);
        let a = store.create(nodes(), "", node("a")).unwrap();
        let mut first = a.clone();
        first["metadata"]["labels"] = json!({"x": "1"});
        first["status"] = json!({"addresses": [{"type": "Hostname", "address": "ignored"}]});
        let updated = store.update(nodes(), "", "a", Target::Main, first).unwrap();
        assert_eq!(updated["metadata"]["labels"]["x"], "1");
        assert_eq!(
            updated["status"],
            json!({}),
            "main update ignores status (an empty address list is omitted)"
        );
        let mut stale = a.clone();
        stale["metadata"]["labels"] = json!({"x": "2"});
        assert_eq!(
            store
                .update(nodes(), "", "a", Target::Main, stale)
                .unwrap_err()
                .code,
            409
        );
        let mut status = updated.clone();
        status["status"] = json!({"addresses": [{"type": "Hostname", "address": "a"}]});
        status["metadata"]["labels"] = json!({"x": "ignored"});
        let s = store
            .update(nodes(), "", "a", Target::Status, status)
            .unwrap();
        assert_eq!(s["status"]["addresses"][0]["address"], "a");
        assert_eq!(
            s["metadata"]["labels"]["x"], "1",
            "status update ignores metadata"
        );
    }

    /// As Go encodes the types: an emptied slice or map is gone, a nil pointer is gone,
    /// a zero `metav1.Time`/`MicroTime` struct is `null` (sent or not).
    #[test]
    fn objects_are_encoded_as_the_go_types() {
        let store = Store::new(100);
        let mut n = node("a");
        n["spec"]["taints"] = json!([]);
        n["metadata"]["labels"] = json!({});
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        let a = store.create(nodes(), "", n).unwrap();
        assert!(a["spec"].get("taints").is_none(), "{a}");
        assert!(a["metadata"].get("labels").is_none(), "{a}");
        let ready = &a["status"]["conditions"][0];
        assert_eq!(ready["lastHeartbeatTime"], Value::Null, "{a}");
        assert!(
            ready
                .as_object()
                .unwrap()
                .contains_key("lastTransitionTime")
        );
        let events = find("", "v1", "events").unwrap();
        let e = store
            .create(
                events,
                "default",
                json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default", "deletionGracePeriodSeconds": null},
                       "involvedObject": {"kind": "Node", "name": "a"}, "reason": "Synced", "message": "m",
                       "firstTimestamp": null}),
            )
            .unwrap();
        for field in ["eventTime", "firstTimestamp", "lastTimestamp"] {
            assert_eq!(e.get(field), Some(&Value::Null), "{field}: {e}");
        }
        // Only the kinds whose Go types have such structs: a Lease's null time is a
        // nil pointer, dropped.
        let leases = find("coordination.k8s.io", "v1", "leases").unwrap();
        let l = store
            .create(
                leases,
                "default",
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "l", "namespace": "default"}, "spec": {"renewTime": null}}),
            )
            .unwrap();
        assert!(l["spec"].get("renewTime").is_none(), "{l}");
        assert!(e["metadata"].get("deletionGracePeriodSeconds").is_none());
    }

    #[test]
    fn no_op_write_keeps_the_version() {
        let store = Store::new(100);
        let a = store.create(nodes(), "", node("a")).unwrap();
        let same = store
            .update(nodes(), "", "a", Target::Main, a.clone())
            .unwrap();
        assert_eq!(same, a);
    }

    #[test]
    fn finalizers_delay_deletion_until_removed() {
        let store = Store::new(100);
        let mut n = node("a");
        n["metadata"]["finalizers"] = json!(["example.com/keep"]);
        store.create(nodes(), "", n).unwrap();
        let (marked, gone) = store.delete(nodes(), "", "a", None, None).unwrap();
        assert!(!gone);
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        let err = store
            .patch(
                nodes(),
                "",
                "a",
                Target::Main,
                PatchType::Merge,
                &json!({"metadata": {"finalizers": ["example.com/keep", "new"]}}),
            )
            .unwrap_err();
        assert_eq!(err.code, 422);
        store
            .patch(
                nodes(),
                "",
                "a",
                Target::Main,
                PatchType::Merge,
                &json!({"metadata": {"finalizers": null}}),
            )
            .unwrap();
        assert_eq!(store.get(nodes(), "", "a").unwrap_err().code, 404);
    }

    #[test]
    fn watch_history_and_gone() {
        let store = Store::new(2);
        let start = store.resource_version();
        for n in ["a", "b", "c"] {
            store.create(nodes(), "", node(n)).unwrap();
        }
        assert_eq!(store.watch_from(start).unwrap_err().code, 410);
        let (backlog, _rx) = store.watch_from(store.resource_version() - 1).unwrap();
        assert_eq!(backlog.len(), 1);
        store.compact();
        assert!(store.watch_from(store.resource_version() - 1).is_err());
        assert!(store.watch_from(store.resource_version()).is_ok());
    }

    #[test]
    fn a_port_patched_in_gets_a_node_port() {
        let store = Store::new(100);
        let services = find("", "v1", "services").unwrap();
        let svc = json!({"metadata": {"name": "web"},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]}});
        store.create(services, "default", svc).unwrap();
        let patched = store
            .patch(
                services,
                "default",
                "web",
                Target::Main,
                PatchType::Merge,
                &json!({"spec": {"ports": [{"name": "http", "port": 81, "targetPort": 8080}]}}),
            )
            .unwrap();
        assert!(patched["spec"]["ports"][0]["nodePort"].as_u64().is_some());
        assert_eq!(patched["spec"]["ports"][0]["protocol"], "TCP");
        assert!(patched["spec"]["clusterIP"].is_string());
    }

    #[test]
    fn services_get_cluster_ips_and_node_ports() {
        let store = Store::new(100);
        let services = find("", "v1", "services").unwrap();
        let svc = store
            .create(
                services,
                "default",
                json!({"metadata": {"name": "web"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                       "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
            )
            .unwrap();
        assert!(
            svc["spec"]["clusterIP"]
                .as_str()
                .unwrap()
                .starts_with("10.96.")
        );
        let np = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!((30000..=32767).contains(&np));
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(
            svc["status"],
            json!({"loadBalancer": {}}),
            "status is cleared on create"
        );
        assert_eq!(
            store
                .create(
                    services,
                    "nope",
                    json!({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 1}]}})
                )
                .unwrap_err()
                .code,
            404
        );
    }
}
