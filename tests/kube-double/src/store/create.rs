//! Creating objects: generated names, uids, the server-set metadata and the ADDED
//! change.

use serde_json::{Value, json};

use super::encoding::encode_as_go;
use super::{Change, EventType, Inner, Store, meta_mut, meta_str};
use crate::errors::ApiError;
use crate::resources::Resource;
use crate::time::now_rfc3339;

impl Store {
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
}
