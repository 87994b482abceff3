//! The resources the double serves, and what the real API server says about each:
//! scope, status subresource, field selectors, strategic-merge list semantics.

/// How a list field merges in a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMerge {
    /// Items are objects merged by this key (`patchMergeKey`).
    ByKey(&'static str),
    /// Items are primitives merged as a set.
    Set,
}

/// One served resource.
#[derive(Debug)]
pub struct Resource {
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub has_status: bool,
    /// Whether the status in a create request is kept (Nodes) or cleared (Services).
    pub keep_status_on_create: bool,
    pub short_names: &'static [&'static str],
    /// Field selector keys the real server supports for this resource (besides
    /// `metadata.name` and `metadata.namespace`).
    pub field_selectors: &'static [&'static str],
    /// Strategic-merge semantics of list fields, by JSON path (dot-separated).
    pub merge_lists: &'static [(&'static str, ListMerge)],
    /// The storage this resource shares (events.k8s.io Events are core Events).
    pub storage: &'static str,
}

impl Resource {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The merge semantics of the list at `path`, if it merges.
    pub fn list_merge(&self, path: &str) -> Option<ListMerge> {
        COMMON_MERGE_LISTS
            .iter()
            .chain(self.merge_lists.iter())
            .find(|(p, _)| *p == path)
            .map(|(_, m)| *m)
    }
}

const COMMON_MERGE_LISTS: &[(&str, ListMerge)] = &[
    ("metadata.finalizers", ListMerge::Set),
    ("metadata.ownerReferences", ListMerge::ByKey("uid")),
];

/// Every resource the double serves.
pub static RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        has_status: true,
        keep_status_on_create: false,
        short_names: &["ns"],
        field_selectors: &["status.phase"],
        merge_lists: &[],
        storage: "namespaces",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        has_status: true,
        // "Nodes allow *all* fields, including status, to be set on create."
        keep_status_on_create: true,
        short_names: &["no"],
        field_selectors: &["spec.unschedulable"],
        merge_lists: &[
            ("spec.podCIDRs", ListMerge::Set),
            ("status.conditions", ListMerge::ByKey("type")),
            ("status.addresses", ListMerge::ByKey("type")),
            ("status.volumesAttached", ListMerge::ByKey("name")),
        ],
        storage: "nodes",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        has_status: true,
        keep_status_on_create: false,
        short_names: &["svc"],
        field_selectors: &["spec.clusterIP", "spec.type"],
        merge_lists: &[
            ("spec.ports", ListMerge::ByKey("port")),
            ("status.conditions", ListMerge::ByKey("type")),
        ],
        storage: "services",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        has_status: false,
        keep_status_on_create: false,
        short_names: &["ev"],
        field_selectors: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        merge_lists: &[],
        storage: "events",
    },
    Resource {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        has_status: false,
        keep_status_on_create: false,
        short_names: &["ev"],
        field_selectors: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        merge_lists: &[],
        storage: "events",
    },
    // The API server's published client CA (kube-system/extension-apiserver-authentication),
    // which servers with delegated authentication read.
    Resource {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        has_status: false,
        keep_status_on_create: false,
        short_names: &["cm"],
        field_selectors: &[],
        merge_lists: &[],
        storage: "configmaps",
    },
    Resource {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        has_status: false,
        keep_status_on_create: false,
        short_names: &[],
        field_selectors: &[],
        merge_lists: &[],
        storage: "leases",
    },
];

/// Finds a resource by group, version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The API groups besides core, with their versions.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut groups: Vec<(&str, &str)> = RESOURCES
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| (r.group, r.version))
        .collect();
    groups.dedup();
    groups
}
