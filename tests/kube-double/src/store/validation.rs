//! What the store refuses, as the real server validates it: object names, labels,
//! Node taints, and Service types and ports.

use serde_json::Value;

use super::{Store, meta, meta_str};
use crate::errors::ApiError;
use crate::resources::Resource;

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
    pub(super) fn validate(resource: &Resource, obj: &Value) -> Result<(), ApiError> {
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
}
