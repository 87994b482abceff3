//! `events.k8s.io/v1` Events are stored as `core/v1` Events, as the real server does;
//! these convert between the two representations.

use serde_json::{Map, Value};

/// (core/v1 field, events.k8s.io/v1 field)
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, api_version: &str, to_events_api: bool) -> Value {
    let Value::Object(map) = obj else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = RENAMES.iter().find_map(|(core, events)| {
            if to_events_api && k == core {
                Some(*events)
            } else if !to_events_api && k == events {
                Some(*core)
            } else {
                None
            }
        });
        out.insert(renamed.unwrap_or(k).to_owned(), v.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    Value::Object(out)
}

/// A stored core/v1 Event as events.k8s.io/v1.
pub fn core_to_events_v1(obj: &Value) -> Value {
    rename(obj, "events.k8s.io/v1", true)
}

/// An events.k8s.io/v1 Event as the core/v1 Event it is stored as.
pub fn events_v1_to_core(obj: &Value) -> Value {
    rename(obj, "v1", false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let e = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "n"}, "note": "hi", "reason": "Synced", "reportingController": "c"});
        let core = events_v1_to_core(&e);
        assert_eq!(core["involvedObject"]["name"], "n");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core_to_events_v1(&core), e);
    }
}
