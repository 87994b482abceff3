//! Deleting objects: uid and resourceVersion preconditions, and finalizers (a
//! deletionTimestamp until the last one is removed).

use serde_json::{Value, json};

use super::{Change, EventType, Store, finalizers, meta, meta_mut, meta_str};
use crate::errors::ApiError;
use crate::resources::Resource;
use crate::time::now_rfc3339;

impl Store {
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
