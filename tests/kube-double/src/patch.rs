//! The patch types the API server accepts: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and strategic merge patch (merge keys per list, `$patch` directives).

use serde_json::{Map, Value};

use crate::resources::{ListMerge, Resource};

/// Why a patch cannot be applied (422 Invalid, or 400 for malformed patches).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Failed(String),
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(patch_map) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let map = target.as_object_mut().expect("object");
            for (k, v) in patch_map {
                if v.is_null() {
                    map.remove(k);
                } else {
                    merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<Vec<String>, PatchError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    if !path.starts_with('/') {
        return Err(PatchError::Malformed(format!(
            "invalid JSON pointer {path:?}"
        )));
    }
    Ok(path[1..].split('/').map(unescape).collect())
}

fn get_mut<'a>(root: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut cur = root;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => a.get_mut(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn remove_at(root: &mut Value, path: &str) -> Result<Value, PatchError> {
    let tokens = split_pointer(path)?;
    let (last, parent) = tokens
        .split_last()
        .ok_or_else(|| PatchError::Failed("cannot remove the document root".into()))?;
    let missing = || PatchError::Failed(format!("path {path} does not exist"));
    match get_mut(root, parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i < a.len() {
                Ok(a.remove(i))
            } else {
                Err(missing())
            }
        }
        _ => Err(missing()),
    }
}

fn add_at(root: &mut Value, path: &str, value: Value, replace: bool) -> Result<(), PatchError> {
    let tokens = split_pointer(path)?;
    let Some((last, parent)) = tokens.split_last() else {
        *root = value;
        return Ok(());
    };
    let missing = || PatchError::Failed(format!("path {path} does not exist"));
    match get_mut(root, parent).ok_or_else(missing)? {
        Value::Object(m) => {
            if replace && !m.contains_key(last) {
                return Err(missing());
            }
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            if last == "-" && !replace {
                a.push(value);
                return Ok(());
            }
            let i: usize = last.parse().map_err(|_| missing())?;
            if replace {
                *a.get_mut(i).ok_or_else(missing)? = value;
            } else if i <= a.len() {
                a.insert(i, value);
            } else {
                return Err(missing());
            }
            Ok(())
        }
        _ => Err(missing()),
    }
}

/// RFC 6902 JSON patch.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops = patch.as_array().ok_or_else(|| {
        PatchError::Malformed("a JSON patch must be an array of operations".into())
    })?;
    for op in ops {
        let field = |name: &str| {
            op.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| PatchError::Malformed(format!("operation {op} lacks `{name}`")))
        };
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| PatchError::Malformed(format!("operation {op} lacks `value`")))
        };
        match field("op")? {
            "add" => add_at(target, field("path")?, value()?, false)?,
            "replace" => add_at(target, field("path")?, value()?, true)?,
            "remove" => {
                remove_at(target, field("path")?)?;
            }
            "move" => {
                let v = remove_at(target, field("from")?)?;
                add_at(target, field("path")?, v, false)?;
            }
            "copy" => {
                let tokens = split_pointer(field("from")?)?;
                let v = get_mut(target, &tokens).cloned().ok_or_else(|| {
                    PatchError::Failed(format!(
                        "path {} does not exist",
                        field("from").unwrap_or("")
                    ))
                })?;
                add_at(target, field("path")?, v, false)?;
            }
            "test" => {
                let path = field("path")?;
                let tokens = split_pointer(path)?;
                let actual = get_mut(target, &tokens).cloned();
                if actual.as_ref() != Some(&value()?) {
                    return Err(PatchError::Failed(format!("testing value {path} failed")));
                }
            }
            other => {
                return Err(PatchError::Malformed(format!(
                    "unknown JSON patch operation {other:?}"
                )));
            }
        }
    }
    Ok(())
}

/// Strategic merge patch, with the list semantics of `resource`.
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    resource: &Resource,
) -> Result<(), PatchError> {
    smp(target, patch, resource, "")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn smp(
    target: &mut Value,
    patch: &Value,
    resource: &Resource,
    path: &str,
) -> Result<(), PatchError> {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch_map.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    // Deletions from primitive lists first.
    for (k, v) in patch_map {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = v
                .as_array()
                .ok_or_else(|| PatchError::Malformed(format!("{k} must be a list")))?;
            if let Some(Value::Array(items)) =
                target.as_object_mut().expect("object").get_mut(field)
            {
                items.retain(|i| !remove.contains(i));
            }
        }
    }
    for (k, v) in patch_map {
        if k.starts_with('$') {
            if k.starts_with("$setElementOrder/")
                || k.starts_with("$deleteFromPrimitiveList/")
                || k == "$retainKeys"
            {
                continue;
            }
            return Err(PatchError::Malformed(format!(
                "unknown strategic merge directive {k:?}"
            )));
        }
        let child_path = join(path, k);
        let map = target.as_object_mut().expect("object");
        if v.is_null() {
            map.remove(k);
            continue;
        }
        match (v, resource.list_merge(&child_path)) {
            (Value::Array(items), Some(ListMerge::Set)) => {
                let entry = map
                    .entry(k.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                let existing = match entry {
                    Value::Array(a) => a,
                    other => {
                        *other = Value::Array(Vec::new());
                        other.as_array_mut().expect("array")
                    }
                };
                for item in items {
                    if !existing.contains(item) {
                        existing.push(item.clone());
                    }
                }
            }
            (Value::Array(items), Some(ListMerge::ByKey(key))) => {
                let entry = map
                    .entry(k.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if !entry.is_array() {
                    *entry = Value::Array(Vec::new());
                }
                let existing = entry.as_array_mut().expect("array");
                for item in items {
                    let Some(id) = item.get(key) else {
                        return Err(PatchError::Failed(format!(
                            "{child_path}: list item lacks the merge key `{key}`: {item}"
                        )));
                    };
                    let position = existing.iter().position(|e| e.get(key) == Some(id));
                    let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    match (position, delete) {
                        (Some(i), true) => {
                            existing.remove(i);
                        }
                        (None, true) => {}
                        (Some(i), false) => smp(&mut existing[i], item, resource, &child_path)?,
                        (None, false) => {
                            let mut fresh = Value::Object(Map::new());
                            smp(&mut fresh, item, resource, &child_path)?;
                            existing.push(fresh);
                        }
                    }
                }
            }
            (Value::Object(_), _) => {
                let entry = map.entry(k.clone()).or_insert(Value::Null);
                smp(entry, v, resource, &child_path)?;
            }
            _ => {
                map.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn json_patch_operations() {
        let mut doc =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"taints": [{"key": "x"}]}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/metadata/labels/a", "value": "1"},
                {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/a"},
                {"op": "add", "path": "/spec/taints/-", "value": {"key": "y"}},
                {"op": "replace", "path": "/spec/taints/0/key", "value": "w"},
                {"op": "copy", "from": "/spec/taints/1", "path": "/spec/first"},
                {"op": "move", "from": "/spec/first", "path": "/spec/moved"}
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"b/c": "2"}}, "spec": {"taints": [{"key": "w"}, {"key": "y"}], "moved": {"key": "y"}}})
        );
        let err = json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/spec/moved/key", "value": "no"}]),
        )
        .unwrap_err();
        assert!(matches!(err, PatchError::Failed(_)));
        assert!(
            json_patch(
                &mut doc,
                &json!([{"op": "replace", "path": "/nope", "value": 1}])
            )
            .is_err()
        );
        assert!(matches!(
            json_patch(&mut doc, &json!({"op": "add"})),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn strategic_merge_uses_merge_keys_and_replaces_taints() {
        let nodes = find("", "v1", "nodes").unwrap();
        let mut node = json!({
            "metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
            "spec": {"taints": [{"key": "t1", "effect": "NoSchedule"}, {"key": "t2", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "NetworkUnavailable", "status": "True"}],
                       "addresses": [{"type": "Hostname", "address": "n1"}]}
        });
        strategic_merge_patch(
            &mut node,
            &json!({
                "metadata": {"finalizers": ["b"], "labels": {"x": null, "y": "2"}},
                "spec": {"taints": [{"key": "t2", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}],
                           "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
            }),
            nodes,
        )
        .unwrap();
        assert_eq!(node["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(node["metadata"]["labels"], json!({"y": "2"}));
        // Taints have no patch merge key upstream: the list is replaced.
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "t2", "effect": "NoSchedule"}])
        );
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "NetworkUnavailable", "status": "False"}])
        );
        assert_eq!(node["status"]["addresses"].as_array().unwrap().len(), 2);

        assert!(matches!(
            strategic_merge_patch(&mut node, &json!({"$bogus": 1}), nodes),
            Err(PatchError::Malformed(_))
        ));
        strategic_merge_patch(
            &mut node,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}, "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}),
            nodes,
        )
        .unwrap();
        assert_eq!(node["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "NetworkUnavailable", "status": "False"}])
        );
    }
}
