//! The `meta.k8s.io/v1` Table format that `kubectl get` asks for (`Accept:
//! application/json;as=Table;v=v1;g=meta.k8s.io`), for the resources people look at
//! in the playground: Nodes (STATUS, ROLES, AGE, VERSION; wide: INTERNAL-IP,
//! EXTERNAL-IP, OS-IMAGE, KERNEL-VERSION, CONTAINER-RUNTIME), Services (TYPE,
//! CLUSTER-IP, EXTERNAL-IP, PORT(S), AGE; wide: SELECTOR) and core Events (LAST SEEN,
//! TYPE, REASON, OBJECT, MESSAGE; wide: SUBOBJECT, SOURCE, FIRST SEEN, COUNT, NAME), with
//! the real server's column names and cell formats. Other resources are served as
//! plain objects, and kubectl prints its own NAME/AGE columns for them.

use serde_json::{Value, json};

use crate::resources::Resource;

/// Whether the client asked for a Table (kubectl does for `get`).
pub fn wanted(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .any(|part| part.contains("as=Table") && part.contains("g=meta.k8s.io"))
    })
}

/// Whether this double renders `resource` as a Table.
pub fn supported(resource: &Resource) -> bool {
    resource.group.is_empty() && matches!(resource.plural, "nodes" | "services" | "events")
}

/// `objects` as a Table, with the list's `metadata` (resource version, continue).
pub fn render(resource: &Resource, objects: &[Value], metadata: Value) -> Value {
    let now = now_secs();
    let (columns, cells): (&[Column], CellsOf) = match resource.plural {
        "nodes" => (NODE_COLUMNS, node_cells),
        "services" => (SERVICE_COLUMNS, service_cells),
        _ => (EVENT_COLUMNS, event_cells),
    };
    let columns: Vec<Value> = columns
        .iter()
        .map(|(name, type_, priority)| {
            let format = if *name == "Name" { "name" } else { "" };
            json!({"name": name, "type": type_, "format": format, "description": "", "priority": priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            json!({
                "cells": cells(obj, now),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// (name, type, priority): priority 1 columns show with `-o wide`.
type Column = (&'static str, &'static str, u8);

/// An object's cells, given the time now (for ages).
type CellsOf = fn(&Value, i64) -> Vec<Value>;

const NODE_COLUMNS: &[Column] = &[
    ("Name", "string", 0),
    ("Status", "string", 0),
    ("Roles", "string", 0),
    ("Age", "string", 0),
    ("Version", "string", 0),
    ("Internal-IP", "string", 1),
    ("External-IP", "string", 1),
    ("OS-Image", "string", 1),
    ("Kernel-Version", "string", 1),
    ("Container-Runtime", "string", 1),
];

const SERVICE_COLUMNS: &[Column] = &[
    ("Name", "string", 0),
    ("Type", "string", 0),
    ("Cluster-IP", "string", 0),
    ("External-IP", "string", 0),
    ("Port(s)", "string", 0),
    ("Age", "string", 0),
    ("Selector", "string", 1),
];

const EVENT_COLUMNS: &[Column] = &[
    ("Last Seen", "string", 0),
    ("Type", "string", 0),
    ("Reason", "string", 0),
    ("Object", "string", 0),
    ("Subobject", "string", 1),
    ("Source", "string", 1),
    ("Message", "string", 0),
    ("First Seen", "string", 1),
    ("Count", "integer", 1),
    ("Name", "string", 1),
];

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn or_none(s: String) -> Value {
    Value::String(if s.is_empty() { "<none>".into() } else { s })
}

fn age(obj: &Value, now: i64) -> Value {
    Value::String(since(text(&obj["metadata"]["creationTimestamp"]), now))
}

/// How long ago `stamp` was, as kubectl prints it; `<unknown>` when unset.
fn since(stamp: &str, now: i64) -> String {
    match parse_rfc3339(stamp) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

fn node_cells(node: &Value, now: i64) -> Vec<Value> {
    let status = &node["status"];
    let ready = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .map(|c| text(&c["status"]));
    let mut state = match ready {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
    .to_owned();
    if node["spec"]["unschedulable"] == true {
        state.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = node["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                .filter(|r| !r.is_empty())
                .collect()
        })
        .unwrap_or_default();
    roles.sort_unstable();
    let address = |kind: &str| {
        status["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["type"] == kind))
            .map(|a| text(&a["address"]).to_owned())
            .unwrap_or_default()
    };
    let info = &status["nodeInfo"];
    vec![
        json!(text(&node["metadata"]["name"])),
        json!(state),
        or_none(roles.join(",")),
        age(node, now),
        json!(text(&info["kubeletVersion"])),
        or_none(address("InternalIP")),
        or_none(address("ExternalIP")),
        or_none(text(&info["osImage"]).to_owned()),
        or_none(text(&info["kernelVersion"]).to_owned()),
        or_none(text(&info["containerRuntimeVersion"]).to_owned()),
    ]
}

fn service_cells(svc: &Value, now: i64) -> Vec<Value> {
    let spec = &svc["spec"];
    let type_ = text(&spec["type"]);
    let type_ = if type_.is_empty() { "ClusterIP" } else { type_ };
    let mut external: Vec<String> = spec["externalIPs"]
        .as_array()
        .map(|ips| ips.iter().map(|ip| text(ip).to_owned()).collect())
        .unwrap_or_default();
    if type_ == "LoadBalancer" {
        let ingress: Vec<String> = svc["status"]["loadBalancer"]["ingress"]
            .as_array()
            .map(|ingress| {
                ingress
                    .iter()
                    .map(|i| {
                        let ip = text(&i["ip"]);
                        if ip.is_empty() {
                            text(&i["hostname"])
                        } else {
                            ip
                        }
                        .to_owned()
                    })
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if ingress.is_empty() && external.is_empty() {
            external.push("<pending>".into());
        }
        external.extend(ingress);
    } else if type_ == "ExternalName" {
        external.push(text(&spec["externalName"]).to_owned());
    }
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    let protocol = text(&p["protocol"]);
                    let protocol = if protocol.is_empty() { "TCP" } else { protocol };
                    match p["nodePort"].as_i64() {
                        Some(node_port) if node_port > 0 => {
                            format!("{}:{node_port}/{protocol}", p["port"])
                        }
                        _ => format!("{}/{protocol}", p["port"]),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let mut selector: Vec<String> = spec["selector"]
        .as_object()
        .map(|s| s.iter().map(|(k, v)| format!("{k}={}", text(v))).collect())
        .unwrap_or_default();
    selector.sort();
    let cluster_ip = text(&spec["clusterIP"]).to_owned();
    vec![
        json!(text(&svc["metadata"]["name"])),
        json!(type_),
        or_none(cluster_ip),
        or_none(external.join(",")),
        or_none(ports.join(",")),
        age(svc, now),
        or_none(selector.join(",")),
    ]
}

fn event_cells(ev: &Value, now: i64) -> Vec<Value> {
    let last = [
        text(&ev["series"]["lastObservedTime"]),
        text(&ev["lastTimestamp"]),
        text(&ev["eventTime"]),
        text(&ev["metadata"]["creationTimestamp"]),
    ]
    .into_iter()
    .find(|s| !s.is_empty())
    .unwrap_or_default();
    let first = [text(&ev["firstTimestamp"]), text(&ev["eventTime"])]
        .into_iter()
        .find(|s| !s.is_empty())
        .unwrap_or(last);
    let object = &ev["involvedObject"];
    let source = {
        let component = text(&ev["source"]["component"]);
        let component = if component.is_empty() {
            text(&ev["reportingComponent"])
        } else {
            component
        };
        let host = text(&ev["source"]["host"]);
        if host.is_empty() {
            component.to_owned()
        } else {
            format!("{component}, {host}")
        }
    };
    let count = ev["series"]["count"]
        .as_i64()
        .or(ev["count"].as_i64())
        .unwrap_or(1);
    vec![
        json!(since(last, now)),
        json!(text(&ev["type"])),
        json!(text(&ev["reason"])),
        json!(format!(
            "{}/{}",
            text(&object["kind"]).to_ascii_lowercase(),
            text(&object["name"])
        )),
        json!(text(&object["fieldPath"])),
        json!(source),
        json!(text(&ev["message"])),
        json!(since(first, now)),
        json!(count),
        json!(text(&ev["metadata"]["name"])),
    ]
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Seconds since the Unix epoch of `YYYY-MM-DDTHH:MM:SS[.frac]Z`.
pub fn parse_rfc3339(stamp: &str) -> Option<i64> {
    let (date, rest) = stamp.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let clock = rest.trim_end_matches('Z');
    let clock = clock.split('.').next()?;
    let mut c = clock.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min, s) = (c.next()??, c.next()??, c.next()??);
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + s)
}

/// apimachinery's `duration.HumanDuration`, as kubectl prints ages.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (minutes, hours, days) = (s / 60, s / 3600, s / 86_400);
    if s < 120 {
        format!("{s}s")
    } else if minutes < 10 {
        match s % 60 {
            0 => format!("{minutes}m"),
            rest => format!("{minutes}m{rest}s"),
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            rest => format!("{hours}h{rest}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 192 {
        match hours % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        match days % 365 {
            0 => format!("{}y", days / 365),
            rest => format!("{}y{rest}d", days / 365),
        }
    } else {
        format!("{}y", days / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time;

    #[test]
    fn ages_print_as_kubectl() {
        for (seconds, want) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (10 * 3600, "10h"),
            (3 * 86_400 + 3600, "3d1h"),
            (30 * 86_400, "30d"),
            (3 * 365 * 86_400 + 86_400, "3y1d"),
            (-5, "<invalid>"),
        ] {
            assert_eq!(human_duration(seconds), want, "{seconds}");
        }
    }

    #[test]
    fn timestamps_round_trip() {
        for secs in [0, 951_782_400, 1_795_398_330] {
            assert_eq!(parse_rfc3339(&time::format_rfc3339(secs)), Some(secs));
        }
        assert_eq!(
            parse_rfc3339("2026-11-23T01:45:30.123456Z"),
            Some(1_795_398_330)
        );
        assert_eq!(parse_rfc3339(""), None);
    }

    #[test]
    fn kubectl_accept_header() {
        assert!(wanted(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        )));
        assert!(!wanted(Some("application/json")));
        assert!(!wanted(None));
    }
}
