//! Query strings: parameters decoded as the signer decodes them (`%XX` escapes, `+` a
//! space), the list filters of the ELB and VPC APIs (a parameter given several times
//! matches any of its values) and marker pagination (`limit`, `marker`,
//! `page_reverse`, with neutron-style `*_links`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::signature::escape;

/// A request's query parameters, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params(pub Vec<(String, String)>);

/// The parameters that page a list rather than filter it.
pub const PAGING: [&str; 4] = ["limit", "marker", "page_reverse", "offset"];

impl Params {
    /// Parses a raw query (without the `?`).
    pub fn parse(raw: Option<&str>) -> Self {
        let decode =
            |s: &str| String::from_utf8_lossy(&crate::signature::decode_query(s)).into_owned();
        Self(
            raw.unwrap_or_default()
                .split('&')
                .filter(|piece| !piece.is_empty())
                .map(|piece| match piece.split_once('=') {
                    Some((k, v)) => (decode(k), decode(v)),
                    None => (decode(piece), String::new()),
                })
                .collect(),
        )
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `key` as a non-negative integer (None when absent), or why not.
    pub fn count(&self, key: &str) -> Result<Option<usize>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.parse::<usize>().map(Some).map_err(|_| {
                format!("Invalid input for {key}: '{v}' is not a non-negative integer.")
            }),
        }
    }

    /// Whether boolean `key` is `true` (any case).
    pub fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// The filters: every parameter but paging and `ignored` ones, by key.
    pub fn filters(&self, ignored: &[&str]) -> BTreeMap<&str, Vec<&str>> {
        let mut filters: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (k, v) in &self.0 {
            if !PAGING.contains(&k.as_str()) && !ignored.contains(&k.as_str()) {
                filters.entry(k.as_str()).or_default().push(v.as_str());
            }
        }
        filters
    }
}

/// Whether a field's value is `wanted`: text compared as text, numbers and booleans as
/// written, lists by membership (an object in a list by its `id`).
pub fn value_matches(value: &Value, wanted: &str) -> bool {
    match value {
        Value::String(s) => s == wanted,
        Value::Number(n) => n.to_string() == wanted,
        Value::Bool(b) => b.to_string().eq_ignore_ascii_case(wanted),
        Value::Array(list) => list.iter().any(|x| match x {
            Value::Object(_) => x["id"].as_str() == Some(wanted),
            other => value_matches(other, wanted),
        }),
        _ => false,
    }
}

/// Keeps the items every filter matches. A filter `x_id` an item has no field for is
/// matched against its list `xs` (`loadbalancer_id` against a listener's
/// `loadbalancers`); a filter on a field the items do not have is ignored.
pub fn filter(items: Vec<Value>, params: &Params, ignored: &[&str]) -> Vec<Value> {
    let filters = params.filters(ignored);
    items
        .into_iter()
        .filter(|item| {
            filters.iter().all(|(key, wanted)| {
                let field = item.get(*key).or_else(|| {
                    key.strip_suffix("_id")
                        .and_then(|stem| item.get(format!("{stem}s")))
                });
                field.is_none_or(|field| wanted.iter().any(|w| value_matches(field, w)))
            })
        })
        .collect()
}

/// A page of a list.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub items: Vec<Value>,
    /// The marker of the page after this one, if more follow.
    pub next: Option<String>,
    /// The marker of the page before this one (going backwards), if more precede.
    pub previous: Option<String>,
}

/// The page of `items` (in their order, each with an `id`) that `limit`, `marker` and
/// `page_reverse` ask for: after the marker (before it, reversed); without a limit (or
/// with 0), all of them. An unknown marker or a bad limit: why.
pub fn page(items: Vec<Value>, params: &Params) -> Result<Page, String> {
    let limit = params.count("limit")?.filter(|l| *l > 0);
    let position = match params.get("marker") {
        None => None,
        Some(marker) => Some(
            items
                .iter()
                .position(|i| i["id"].as_str() == Some(marker))
                .ok_or_else(|| format!("Marker {marker} could not be found."))?,
        ),
    };
    let len = items.len();
    let (start, end) = if params.flag("page_reverse") {
        let end = position.unwrap_or(len);
        (limit.map_or(0, |l| end.saturating_sub(l)), end)
    } else {
        let start = position.map_or(0, |p| p + 1);
        (start, limit.map_or(len, |l| (start + l).min(len)))
    };
    let id = |i: usize| items[i]["id"].as_str().map(str::to_owned);
    let next = (end < len && end > start).then(|| id(end - 1)).flatten();
    let previous = (start > 0 && end > start).then(|| id(start)).flatten();
    Ok(Page {
        items: items[start..end.max(start)].to_vec(),
        next,
        previous,
    })
}

/// Neutron-style `*_links` for a page of the list at `base` (`http://host/path`), with
/// the request's other parameters.
pub fn links(base: &str, params: &Params, page: &Page) -> Vec<Value> {
    let rest: Vec<(&str, &str)> = params
        .0
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "marker" | "page_reverse"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let href = |marker: &str, reverse: bool| {
        let mut pairs = rest.clone();
        pairs.push(("marker", marker));
        if reverse {
            pairs.push(("page_reverse", "true"));
        }
        let query = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", escape(k.as_bytes()), escape(v.as_bytes())))
            .collect::<Vec<_>>()
            .join("&");
        format!("{base}?{query}")
    };
    let mut links = Vec::new();
    if let Some(next) = &page.next {
        links.push(json!({"rel": "next", "href": href(next, false)}));
    }
    if let Some(previous) = &page.previous {
        links.push(json!({"rel": "previous", "href": href(previous, true)}));
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<Value> {
        (0..n).map(|i| json!({"id": format!("i{i}")})).collect()
    }

    fn of(page: &Page) -> Vec<&str> {
        page.items
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn pages_forward_and_back() {
        let params = Params::parse(Some("limit=2"));
        let first = page(ids(5), &params).unwrap();
        assert_eq!(of(&first), ["i0", "i1"]);
        assert_eq!(first.next.as_deref(), Some("i1"));
        assert_eq!(first.previous, None);
        let second = page(ids(5), &Params::parse(Some("limit=2&marker=i1"))).unwrap();
        assert_eq!(of(&second), ["i2", "i3"]);
        assert_eq!(second.previous.as_deref(), Some("i2"));
        let last = page(ids(5), &Params::parse(Some("limit=2&marker=i3"))).unwrap();
        assert_eq!(of(&last), ["i4"]);
        assert_eq!(last.next, None);
        let back = page(
            ids(5),
            &Params::parse(Some("limit=2&marker=i3&page_reverse=true")),
        )
        .unwrap();
        assert_eq!(of(&back), ["i1", "i2"]);
        assert!(page(ids(5), &Params::parse(Some("marker=nope"))).is_err());
        assert!(page(ids(5), &Params::parse(Some("limit=-1"))).is_err());
        assert_eq!(
            of(&page(ids(3), &Params::default()).unwrap()),
            ["i0", "i1", "i2"]
        );
    }

    #[test]
    fn filters_match_fields_and_lists() {
        let items = vec![
            json!({"id": "a", "name": "x", "protocol_port": 80, "loadbalancers": [{"id": "lb1"}]}),
            json!({"id": "b", "name": "y", "protocol_port": 443, "loadbalancers": [{"id": "lb2"}]}),
        ];
        let keep = |q: &str| -> Vec<String> {
            filter(items.clone(), &Params::parse(Some(q)), &[])
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(keep("name=x"), ["a"]);
        assert_eq!(keep("protocol_port=443"), ["b"]);
        assert_eq!(keep("loadbalancer_id=lb2"), ["b"]);
        assert_eq!(keep("name=x&name=y"), ["a", "b"]);
        assert_eq!(keep("limit=1&unknown=z"), ["a", "b"]);
        assert_eq!(keep("name=k8s%5F1"), Vec::<String>::new());
    }
}
