//! Just enough OpenAPI v3 for kubectl: its `--validate=strict` (the default) asks the
//! server to validate (`fieldValidation=Strict`) when the PATCH operation of the
//! kind lists that parameter. The double then rejects unknown fields it knows about:
//! top-level fields, `metadata`, and the `spec` of Nodes and Services.

use serde_json::{Map, Value, json};

use crate::errors::ApiError;
use crate::resources::{RESOURCES, Resource};

/// `/openapi/v3`: the group-versions served.
pub fn root() -> Value {
    let mut paths = Map::new();
    for r in RESOURCES {
        let gv = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        paths.insert(
            gv.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{gv}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/GROUP/VERSION`.
pub fn group_version(group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        paths.insert(
            path,
            json!({"patch": {
                "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
                ],
                "responses": {"200": {"description": "OK"}}
            }}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}

const METADATA_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn top_level_fields(resource: &Resource) -> &'static [&'static str] {
    match (resource.group, resource.kind) {
        ("", "Event") => &[
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ],
        ("events.k8s.io", "Event") => &[
            "regarding",
            "note",
            "reportingController",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingInstance",
            "reason",
        ],
        (_, "Lease") => &["spec"],
        _ => &["spec", "status"],
    }
}

fn spec_fields(resource: &Resource) -> Option<&'static [&'static str]> {
    match resource.kind {
        "Node" => Some(&[
            "podCIDR",
            "podCIDRs",
            "providerID",
            "unschedulable",
            "taints",
            "configSource",
            "externalID",
        ]),
        "Service" => Some(&[
            "ports",
            "selector",
            "clusterIP",
            "clusterIPs",
            "type",
            "externalIPs",
            "sessionAffinity",
            "loadBalancerIP",
            "loadBalancerSourceRanges",
            "externalName",
            "externalTrafficPolicy",
            "healthCheckNodePort",
            "publishNotReadyAddresses",
            "sessionAffinityConfig",
            "ipFamilies",
            "ipFamilyPolicy",
            "allocateLoadBalancerNodePorts",
            "loadBalancerClass",
            "internalTrafficPolicy",
            "trafficDistribution",
        ]),
        "Lease" => Some(&[
            "holderIdentity",
            "leaseDurationSeconds",
            "acquireTime",
            "renewTime",
            "leaseTransitions",
            "strategy",
            "preferredHolder",
        ]),
        _ => None,
    }
}

/// Unknown fields of `obj`, as dotted paths.
pub fn unknown_fields(resource: &Resource, obj: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    let Some(map) = obj.as_object() else {
        return unknown;
    };
    let top = top_level_fields(resource);
    for k in map.keys() {
        if !["apiVersion", "kind", "metadata"].contains(&k.as_str()) && !top.contains(&k.as_str()) {
            unknown.push(k.clone());
        }
    }
    if let Some(meta) = map.get("metadata").and_then(Value::as_object) {
        unknown.extend(
            meta.keys()
                .filter(|k| !METADATA_FIELDS.contains(&k.as_str()))
                .map(|k| format!("metadata.{k}")),
        );
    }
    if let (Some(spec), Some(known)) = (
        map.get("spec").and_then(Value::as_object),
        spec_fields(resource),
    ) {
        unknown.extend(
            spec.keys()
                .filter(|k| !known.contains(&k.as_str()))
                .map(|k| format!("spec.{k}")),
        );
    }
    unknown
}

/// Applies `fieldValidation`: `Strict` rejects unknown fields; `Warn` returns them as
/// warnings; `Ignore` (or absent) accepts.
pub fn validate_fields(
    resource: &Resource,
    obj: &Value,
    mode: Option<&str>,
) -> Result<Vec<String>, ApiError> {
    let unknown = unknown_fields(resource, obj);
    match mode {
        Some("Strict") if !unknown.is_empty() => {
            let fields: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                fields.join(", "),
                kind = resource.kind,
                version = resource.version
            )))
        }
        Some("Warn") => Ok(unknown
            .into_iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect()),
        Some("Strict") | Some("Ignore") | None => Ok(Vec::new()),
        Some(other) => Err(ApiError::bad_request(format!(
            "fieldValidation {other:?} is not one of Ignore, Warn, Strict"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    #[test]
    fn strict_validation_names_unknown_fields() {
        let svc = find("", "v1", "services").unwrap();
        let obj = json!({"metadata": {"name": "a", "nmae": "x"}, "spec": {"ports": [], "typo": 1}, "extra": 1});
        let err = validate_fields(svc, &obj, Some("Strict")).unwrap_err();
        assert!(
            err.message.contains("unknown field \"extra\""),
            "{}",
            err.message
        );
        assert!(err.message.contains("metadata.nmae"));
        assert!(err.message.contains("spec.typo"));
        assert_eq!(validate_fields(svc, &obj, Some("Warn")).unwrap().len(), 3);
        assert!(validate_fields(svc, &obj, None).unwrap().is_empty());
    }

    #[test]
    fn patch_operations_advertise_field_validation() {
        let doc = group_version("", "v1").unwrap();
        let op = &doc["paths"]["/api/v1/nodes/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Node");
        assert!(group_version("nope", "v1").is_none());
    }
}
