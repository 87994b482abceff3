//! Replacing and patching objects: PUT and the three patch types, through the shared
//! write path (preconditions, subresources, server-owned fields, validation and
//! finalizers) and its MODIFIED or DELETED change.

use serde_json::{Value, json};

use super::encoding::encode_as_go;
use super::{Change, EventType, PatchType, Store, Target, finalizers, meta, meta_mut, meta_str};
use crate::errors::ApiError;
use crate::patch::{self, PatchError};
use crate::resources::Resource;

impl Store {
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
}
