//! The object store: resource versions, optimistic concurrency, status subresources,
//! finalizers, the watch history, and the defaults and validation the CCM relies on.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::errors::ApiError;
use crate::patch::{self, PatchError};
use crate::resources::{self, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::time::now_rfc3339;

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

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn valid_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn valid_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && valid_label_value(name)
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

    /// Drops the watch history: watches from any earlier resource version get 410.
    /// The oldest resource version still served: continue tokens and watches from
    /// before it get 410 Gone.
    pub fn oldest_watchable(&self) -> u64 {
        self.lock().oldest_watchable
    }

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

    fn commit(&self, inner: &mut Inner, change: Change) {
        let change = Arc::new(change);
        inner.history.push_back(change.clone());
        while inner.history.len() > inner.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.oldest_watchable = dropped.rv;
            }
        }
        let _ = self.changes.send(change);
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

    fn validate(resource: &Resource, obj: &Value) -> Result<(), ApiError> {
        let name = meta_str(obj, "name");
        let invalid = |detail: String| ApiError::invalid(resource.kind, name, detail);
        if !is_dns_subdomain(name) {
            return Err(invalid(format!(
                "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
            )));
        }
        if let Some(labels) = meta(obj).get("labels") {
            let labels = labels
                .as_object()
                .ok_or_else(|| invalid("metadata.labels: must be a map of strings".into()))?;
            for (k, v) in labels {
                let v = v.as_str().ok_or_else(|| {
                    invalid(format!(
                        "metadata.labels: Invalid value for {k:?}: must be a string"
                    ))
                })?;
                if !valid_label_key(k) {
                    return Err(invalid(format!(
                        "metadata.labels: Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.'"
                    )));
                }
                if !valid_label_value(v) {
                    return Err(invalid(format!(
                        "metadata.labels: Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"
                    )));
                }
            }
        }
        if resource.kind == "Node" && resource.group.is_empty() {
            let mut seen = Vec::new();
            for (i, taint) in obj
                .pointer("/spec/taints")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .enumerate()
            {
                let key = taint.get("key").and_then(Value::as_str).unwrap_or("");
                let effect = taint.get("effect").and_then(Value::as_str).unwrap_or("");
                if key.is_empty() {
                    return Err(invalid(format!("spec.taints[{i}].key: Required value")));
                }
                if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
                    return Err(invalid(format!(
                        "spec.taints[{i}].effect: Unsupported value: {effect:?}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
                    )));
                }
                if seen.contains(&(key, effect)) {
                    return Err(invalid(format!(
                        "spec.taints[{i}]: Duplicate value: taints must be unique by key and effect pair"
                    )));
                }
                seen.push((key, effect));
            }
        }
        if resource.kind == "Service" {
            let svc_type = obj
                .pointer("/spec/type")
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP");
            if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&svc_type) {
                return Err(invalid(format!(
                    "spec.type: Unsupported value: {svc_type:?}"
                )));
            }
            let ports = obj.pointer("/spec/ports").and_then(Value::as_array);
            if svc_type != "ExternalName" && ports.is_none_or(|p| p.is_empty()) {
                return Err(invalid("spec.ports: Required value".into()));
            }
        }
        Ok(())
    }

    fn new_uid(inner: &mut Inner) -> String {
        inner.next_uid += 1;
        let n = inner.next_uid;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mix =
            (seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (mix >> 32) as u32,
            (mix >> 16) as u16,
            (mix & 0xfff) as u16,
            (n & 0xfff) as u16,
            n
        )
    }

    /// Service defaults the real server applies on create: cluster IP, node ports,
    /// protocols, policies.
    fn default_service(inner: &mut Inner, obj: &mut Value) {
        let spec = obj["spec"].as_object_mut().expect("spec");
        let svc_type = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_owned();
        spec.insert("type".into(), json!(svc_type));
        spec.entry("sessionAffinity").or_insert(json!("None"));
        if svc_type != "ExternalName" {
            if !spec.contains_key("clusterIP") {
                inner.next_cluster_ip += 1;
                let n = inner.next_cluster_ip;
                let ip = format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff);
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
            }
            spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
            spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
            spec.entry("internalTrafficPolicy")
                .or_insert(json!("Cluster"));
        }
        let external = svc_type == "NodePort" || svc_type == "LoadBalancer";
        if external {
            spec.entry("externalTrafficPolicy")
                .or_insert(json!("Cluster"));
        }
        let allocate = external
            && (svc_type == "NodePort"
                || spec
                    .get("allocateLoadBalancerNodePorts")
                    .and_then(Value::as_bool)
                    != Some(false));
        if svc_type == "LoadBalancer" {
            spec.entry("allocateLoadBalancerNodePorts")
                .or_insert(json!(true));
        }
        Self::default_ports(inner, spec, allocate);
        if external
            && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
            && !spec.contains_key("healthCheckNodePort")
        {
            inner.next_node_port += 1;
            spec.insert(
                "healthCheckNodePort".into(),
                json!(30000 + inner.next_node_port % 2768),
            );
        }
        obj["status"] = json!({"loadBalancer": {}});
    }

    /// Each port's defaults: TCP, the target port its port, and a node port when
    /// `allocate` and it has none.
    fn default_ports(inner: &mut Inner, spec: &mut serde_json::Map<String, Value>, allocate: bool) {
        let Some(Value::Array(ports)) = spec.get_mut("ports") else {
            return;
        };
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
            if let Some(number) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(number);
            }
            if allocate && !p.contains_key("nodePort") {
                inner.next_node_port += 1;
                p.insert(
                    "nodePort".into(),
                    json!(30000 + inner.next_node_port % 2768),
                );
            }
        }
    }

    /// What the real server fills in on a Service update: the cluster IPs kept, and a
    /// node port for each new port of a NodePort or LoadBalancer Service (a port added
    /// or renumbered by a patch gets one, as the API server's allocator gives it).
    fn default_service_update(inner: &mut Inner, current: &Value, next: &mut Value) {
        let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        for field in ["clusterIP", "clusterIPs"] {
            if !spec.contains_key(field)
                && let Some(old) = current["spec"].get(field)
            {
                spec.insert(field.into(), old.clone());
            }
        }
        let svc_type = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_owned();
        let allocate = svc_type == "NodePort"
            || (svc_type == "LoadBalancer"
                && spec
                    .get("allocateLoadBalancerNodePorts")
                    .and_then(Value::as_bool)
                    != Some(false));
        if svc_type == "LoadBalancer" {
            spec.entry("allocateLoadBalancerNodePorts")
                .or_insert(json!(true));
        }
        Self::default_ports(inner, spec, allocate);
    }

    /// Creates an object. `namespace` comes from the URL.
    pub fn create(
        &self,
        resource: &Resource,
        namespace: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        Self::check_namespace(&inner, resource, namespace)?;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        let body_ns = meta_str(&obj, "namespace").to_owned();
        if resource.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if meta_str(&obj, "name").is_empty() {
            let prefix = meta_str(&obj, "generateName").to_owned();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    resource.kind,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            inner.next_uid += 1;
            let suffix: String = format!("{:05x}", (inner.next_uid * 2_654_435_761) & 0xfffff)
                .chars()
                .map(|c| {
                    if c.is_ascii_digit() {
                        (b'b' + (c as u8 - b'0')) as char
                    } else {
                        c
                    }
                })
                .collect();
            meta_mut(&mut obj).insert("name".into(), json!(format!("{prefix}{suffix}")));
        }
        let name = meta_str(&obj, "name").to_owned();
        let key = Self::key(resource, namespace, &name);
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(resource.plural, &name));
        }
        if resource.kind == "Service" && obj.get("spec").is_none_or(|s| !s.is_object()) {
            obj["spec"] = json!({});
        }
        Self::validate(resource, &obj)?;
        encode_as_go(resource.kind, &mut obj);
        if resource.kind == "Service" {
            Self::default_service(&mut inner, &mut obj);
        } else if resource.has_status && !resource.keep_status_on_create {
            obj.as_object_mut().expect("object").remove("status");
        }
        inner.rv += 1;
        let rv = inner.rv;
        let uid = Self::new_uid(&mut inner);
        obj["apiVersion"] = json!(resource.api_version());
        obj["kind"] = json!(resource.kind);
        let m = meta_mut(&mut obj);
        if resource.namespaced {
            m.insert("namespace".into(), json!(namespace));
        } else {
            m.remove("namespace");
        }
        m.insert("uid".into(), json!(uid));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        inner.objects.insert(key, obj.clone());
        self.commit(
            &mut inner,
            Change {
                rv,
                kind: EventType::Added,
                storage: resource.storage,
                namespace: if resource.namespaced {
                    namespace.into()
                } else {
                    String::new()
                },
                object: obj.clone(),
                old: None,
            },
        );
        Ok(obj)
    }

    /// Replaces an object (PUT). An empty `metadata.resourceVersion` is an
    /// unconditional update; a stale one is a 409 Conflict.
    pub fn update(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        target: Target,
        obj: Value,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        let body_name = meta_str(&obj, "name");
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta_str(&obj, "namespace");
        if resource.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let rv = meta_str(&obj, "resourceVersion").to_owned();
        self.write(resource, namespace, name, target, Some(rv), |_| Ok(obj))
    }

    /// Patches an object.
    pub fn patch(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        target: Target,
        patch_type: PatchType,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let invalid = |e: PatchError| match e {
            PatchError::Malformed(m) => ApiError::bad_request(m),
            PatchError::Failed(m) => ApiError::invalid(resource.kind, name, m),
        };
        self.write(resource, namespace, name, target, None, |current| {
            let mut patched = current.clone();
            match patch_type {
                PatchType::Merge => {
                    if !patch.is_object() {
                        return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                    }
                    patch::merge_patch(&mut patched, patch)
                }
                PatchType::Json => patch::json_patch(&mut patched, patch).map_err(invalid)?,
                PatchType::Strategic => {
                    if !patch.is_object() {
                        return Err(ApiError::bad_request(
                            "a strategic merge patch must be a JSON object",
                        ));
                    }
                    patch::strategic_merge_patch(&mut patched, patch, resource).map_err(invalid)?
                }
            }
            Ok(patched)
        })
    }

    /// The shared path of update and patch: `change` turns the current object into
    /// the proposed one; the store applies preconditions, subresource rules,
    /// server-owned fields, validation and finalizer semantics.
    pub fn write(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        target: Target,
        precondition_rv: Option<String>,
        change: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        if target == Target::Status && !resource.has_status {
            return Err(ApiError::not_found(resource.plural, name));
        }
        let mut inner = self.lock();
        let key = Self::key(resource, namespace, name);
        let current = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource.plural, name))?;
        let current_rv = meta_str(&current, "resourceVersion").to_owned();
        let mut proposed = change(&current)?;
        if !proposed.is_object() {
            return Err(ApiError::bad_request("the result must be a JSON object"));
        }
        // A resourceVersion in the body (PUT) or in the patch result is a precondition.
        let asked_rv =
            precondition_rv.unwrap_or_else(|| meta_str(&proposed, "resourceVersion").to_owned());
        if !asked_rv.is_empty() && asked_rv != current_rv {
            return Err(ApiError::conflict(resource.plural, name));
        }
        if let Some(kind) = proposed.get("kind").and_then(Value::as_str)
            && kind != resource.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} does not match {}",
                resource.kind
            )));
        }
        // Status subresource: only status changes; main resource: status unchanged.
        let mut next = match target {
            Target::Status => {
                let mut next = current.clone();
                match proposed.get("status") {
                    Some(status) => next["status"] = status.clone(),
                    None => {
                        next.as_object_mut().expect("object").remove("status");
                    }
                }
                next
            }
            Target::Main => {
                if resource.has_status {
                    match current.get("status") {
                        Some(status) => proposed["status"] = status.clone(),
                        None => {
                            proposed.as_object_mut().expect("object").remove("status");
                        }
                    }
                }
                proposed
            }
        };
        if target == Target::Main && resource.kind == "Service" {
            Self::default_service_update(&mut inner, &current, &mut next);
        }
        // Server-owned metadata.
        next["apiVersion"] = json!(resource.api_version());
        next["kind"] = json!(resource.kind);
        let old_meta = meta(&current).clone();
        {
            let m = meta_mut(&mut next);
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
            ] {
                match old_meta.get(field) {
                    Some(v) => {
                        m.insert(field.into(), v.clone());
                    }
                    None => {
                        m.remove(field);
                    }
                }
            }
            m.insert("resourceVersion".into(), json!(current_rv.clone()));
        }
        Self::validate(resource, &next)?;
        encode_as_go(resource.kind, &mut next);
        let deleting = old_meta.contains_key("deletionTimestamp");
        if deleting {
            let before = finalizers(&current);
            if finalizers(&next).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    resource.kind,
                    name,
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                ));
            }
        }
        if next == current {
            // A no-op write returns the object unchanged, without a new version.
            return Ok(current);
        }
        if target == Target::Main && next.get("spec") != current.get("spec") {
            let generation = old_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta_mut(&mut next).insert("generation".into(), json!(generation + 1));
        }
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut next).insert("resourceVersion".into(), json!(rv.to_string()));
        let ns = key.1.clone();
        if deleting && finalizers(&next).is_empty() {
            inner.objects.remove(&key);
            self.commit(
                &mut inner,
                Change {
                    rv,
                    kind: EventType::Deleted,
                    storage: resource.storage,
                    namespace: ns,
                    object: next.clone(),
                    old: None,
                },
            );
        } else {
            inner.objects.insert(key, next.clone());
            self.commit(
                &mut inner,
                Change {
                    rv,
                    kind: EventType::Modified,
                    storage: resource.storage,
                    namespace: ns,
                    object: next.clone(),
                    old: Some(current),
                },
            );
        }
        Ok(next)
    }

    /// Deletes an object: removed at once without finalizers (returns `None`), or
    /// marked with a deletionTimestamp (returns the object).
    pub fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        precondition_uid: Option<&str>,
        precondition_rv: Option<&str>,
    ) -> Result<(Value, bool), ApiError> {
        let mut inner = self.lock();
        let key = Self::key(resource, namespace, name);
        let current = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource.plural, name))?;
        if let Some(uid) = precondition_uid
            && uid != meta_str(&current, "uid")
        {
            return Err(ApiError::conflict(resource.plural, name));
        }
        if let Some(rv) = precondition_rv
            && rv != meta_str(&current, "resourceVersion")
        {
            return Err(ApiError::conflict(resource.plural, name));
        }
        inner.rv += 1;
        let rv = inner.rv;
        let ns = key.1.clone();
        if finalizers(&current).is_empty() {
            let mut gone = current.clone();
            meta_mut(&mut gone).insert("resourceVersion".into(), json!(rv.to_string()));
            inner.objects.remove(&key);
            self.commit(
                &mut inner,
                Change {
                    rv,
                    kind: EventType::Deleted,
                    storage: resource.storage,
                    namespace: ns,
                    object: gone.clone(),
                    old: None,
                },
            );
            return Ok((gone, true));
        }
        if meta(&current).contains_key("deletionTimestamp") {
            inner.rv -= 1;
            return Ok((current, false));
        }
        let mut marked = current.clone();
        {
            let m = meta_mut(&mut marked);
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        inner.objects.insert(key, marked.clone());
        self.commit(
            &mut inner,
            Change {
                rv,
                kind: EventType::Modified,
                storage: resource.storage,
                namespace: ns,
                object: marked.clone(),
                old: Some(current),
            },
        );
        Ok((marked, false))
    }
}

/// Fields of the served types that are Go maps (`map[string]string` and the like):
/// `omitempty` drops them when empty. Struct fields are kept even when empty (Go's
/// encoder never omits a struct), so an empty object elsewhere stays.
const MAP_FIELDS: [&str; 9] = [
    "labels",
    "annotations",
    "selector",
    "matchLabels",
    "nodeSelector",
    "capacity",
    "allocatable",
    "data",
    "binaryData",
];

/// The `metav1.Time`/`MicroTime` struct fields (not pointers) of each served kind: Go
/// encodes a zero one as `null` and `omitempty` never drops a struct, so the real
/// server prints `"eventTime": null`. (top level, in each `status.conditions` item,
/// in `series`.)
fn time_structs(kind: &str) -> TimeStructs {
    match kind {
        "Event" => TimeStructs {
            top: &["eventTime", "firstTimestamp", "lastTimestamp"],
            conditions: &[],
            series: &["lastObservedTime"],
        },
        "Node" => TimeStructs {
            top: &[],
            conditions: &["lastHeartbeatTime", "lastTransitionTime"],
            series: &[],
        },
        _ => TimeStructs::default(),
    }
}

/// Where a kind has time structs (see [`time_structs`]).
#[derive(Default)]
struct TimeStructs {
    top: &'static [&'static str],
    conditions: &'static [&'static str],
    series: &'static [&'static str],
}

/// What the real server's Go types do when they encode a stored object: `omitempty`
/// slices and maps that are empty, and nil pointers, disappear (after a patch removes
/// the last taint, `.spec.taints` is absent, not `[]`); a zero time struct is `null`,
/// whether the client sent it or not. Every slice and pointer field of the served
/// types (Node, Service, Event, Lease, Namespace) is `omitempty`.
fn encode_as_go(kind: &str, value: &mut Value) {
    let times = time_structs(kind);
    let keep: Vec<&str> = [times.top, times.conditions, times.series].concat();
    omit_empty(value, &keep);
    let Some(object) = value.as_object_mut() else {
        return;
    };
    fill_null(object, times.top);
    if let Some(Value::Object(series)) = object.get_mut("series") {
        fill_null(series, times.series);
    }
    if let Some(Value::Array(conditions)) = object
        .get_mut("status")
        .and_then(|status| status.get_mut("conditions"))
    {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            fill_null(condition, times.conditions);
        }
    }
}

fn fill_null(object: &mut serde_json::Map<String, Value>, fields: &[&str]) {
    for field in fields {
        object.entry(*field).or_insert(Value::Null);
    }
}

/// Drops empty slices, the empty maps of [`MAP_FIELDS`] and nulls, except nulls of the
/// fields in `keep_null`.
fn omit_empty(value: &mut Value, keep_null: &[&str]) {
    match value {
        Value::Object(map) => {
            for child in map.values_mut() {
                omit_empty(child, keep_null);
            }
            map.retain(|key, child| match child {
                Value::Null => keep_null.contains(&key.as_str()),
                Value::Array(items) => !items.is_empty(),
                Value::Object(fields) => !(fields.is_empty() && MAP_FIELDS.contains(&key.as_str())),
                _ => true,
            });
        }
        Value::Array(items) => {
            for item in items {
                omit_empty(item, keep_null);
            }
        }
        _ => {}
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
