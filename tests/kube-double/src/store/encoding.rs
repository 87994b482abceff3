//! How the real server's Go types encode a stored object: empty `omitempty` slices,
//! maps and nil pointers dropped, zero time structs as `null`.

use serde_json::Value;

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
pub(super) fn encode_as_go(kind: &str, value: &mut Value) {
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
