//! Label selectors (`a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`) and field
//! selectors (`path=value`, `path!=value`) as the API server parses them.

use serde_json::Value;

use crate::resources::Resource;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(text) {
            let bad = || format!("unable to parse requirement: {part:?}");
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(rest).ok_or_else(bad)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(rest).ok_or_else(bad)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else {
                Requirement::Exists(part.into())
            };
            let key = match &req {
                Requirement::Eq(k, _)
                | Requirement::NotEq(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `text`, rejecting fields the real server does not index for `resource`.
    pub fn parse(text: &str, resource: &Resource) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(text) {
            let (field, negate, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, false, v)
            } else {
                return Err(format!("invalid selector: {part:?}; can't understand"));
            };
            let field = field.trim();
            let supported = field == "metadata.name"
                || (field == "metadata.namespace" && resource.namespaced)
                || resource.field_selectors.contains(&field);
            if !supported {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push((field.to_owned(), negate, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, negate, value)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Object(o)) if field == "source" => o
                    .get("component")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                // An unset boolean reads as false, an unset string as empty.
                None if field == "spec.unschedulable" => "false".into(),
                _ => String::new(),
            };
            (actual == *value) != *negate
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("app in (web, api)", true),
            ("tier notin (front)", false),
            ("app", true),
            ("!missing", true),
            ("missing", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&obj),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a in x").is_err());
    }

    #[test]
    fn field_selectors_are_checked_per_resource() {
        let nodes = find("", "v1", "nodes").unwrap();
        let node = json!({"metadata": {"name": "n1"}, "spec": {}});
        assert!(
            FieldSelector::parse("metadata.name=n1", nodes)
                .unwrap()
                .matches(&node)
        );
        assert!(
            FieldSelector::parse("spec.unschedulable=false", nodes)
                .unwrap()
                .matches(&node)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=n1", nodes)
                .unwrap()
                .matches(&node)
        );
        assert!(FieldSelector::parse("spec.providerID=x", nodes).is_err());
        assert!(FieldSelector::parse("metadata.namespace=x", nodes).is_err());
        let events = find("", "v1", "events").unwrap();
        let ev = json!({"involvedObject": {"name": "n1", "kind": "Node"}, "reason": "Synced"});
        assert!(
            FieldSelector::parse("involvedObject.name=n1,reason=Synced", events)
                .unwrap()
                .matches(&ev)
        );
    }
}
