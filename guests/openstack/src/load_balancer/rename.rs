//! The cluster name in occm's names (`--cluster-name`, `kube_service_<cluster>_<ns>_<name>`)
//! and a load balancer occm made under another one.
//!
//! occm (v1.36.0, `pkg/openstack/loadbalancer_rename.go`), in `ensureOctaviaLoadBalancer`:
//! when the load balancer `loadbalancer.openstack.org/load-balancer-id` names is occm's
//! (`kube_service_…`) and its name's cluster component is not occm's `--cluster-name`
//! (`lbHasOldClusterName`, the component as `getClusterName` reads it), it records the
//! Warning `LoadBalancerRename` and renames it (`renameLoadBalancer`): each listener named
//! `listener_<i>_kube_service_<old>_…` and, before it, its pool and the pool's health
//! monitor get the new cluster name (`replaceClusterName`), as do the listener's and the
//! load balancer's `kube_service_…` tags; the load balancer is renamed last, so an
//! interrupted rename resumes at the next sync.
//!
//! occm cannot tell a deliberate change of `--cluster-name` from a controller started
//! with the wrong one (a move from occm without occm's `--cluster-name`): it renames
//! either way. Here the rename is served only when asked for: the Service's annotation
//! [`RENAME_FROM`] names the old cluster name. Otherwise a load balancer of another
//! cluster name is refused by name (both names and the flag to set), and nothing is
//! changed on it: it is not shared, its listeners are not touched, it is not deleted.
//! occm's `ensureLoadBalancerDeleted` does not rename: it takes the old-named tag for
//! another Service's (`isSharedLB`), deletes none of it and lets the Service go, leaving
//! the load balancer and its floating IP behind. Here the deletion is refused by name
//! too (the Service waits), or, when the rename is asked for, renames first and then
//! deletes as for any load balancer of this cluster.
//!
//! Where this differs from occm's `renameLoadBalancer`, on purpose: the load balancer
//! keeps its owner (occm renames it after the Service being synced, which makes a
//! Service sharing it its owner); a listener's new name replaces its own old cluster
//! component (occm replaces its pool's, so a listener whose pool was renamed before an
//! interruption keeps its old name); a name without occm's pattern is left as it is
//! (occm would insert the cluster name at its start); a listener without a pool is
//! renamed alone (occm fails on it at every sync).

use serde_json::{Value, json};
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, Service};
use wasm_ccm_guest::{cloud_error, events};

use super::listeners::tags;
use super::settings::{PREFIX, annotation};
use super::shared::SERVICE_PREFIX;
use super::{LOAD_BALANCER_ID, load_balancer_name};
use crate::OpenStack;
use crate::api;

/// The Service annotation that asks for occm's rename: the cluster name its load
/// balancer was made under (`wasm-ccm.io/rename-from-cluster-name: prod`).
pub const RENAME_FROM: &str = "wasm-ccm.io/rename-from-cluster-name";

/// occm's event reason for a rename (`eventLBRename`).
const RENAME_EVENT: &str = "LoadBalancerRename";

/// What comes before `kube_service_…` in the name of a load balancer's child (occm's
/// `listenerPrefix`, `poolPrefix`, `monitorPrefix`, each followed by `[0-9]+_`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A load balancer or a tag: nothing before.
    LoadBalancer,
    Listener,
    Pool,
    Monitor,
}

impl Kind {
    fn prefix(self) -> Option<&'static str> {
        match self {
            Kind::LoadBalancer => None,
            Kind::Listener => Some("listener_"),
            Kind::Pool => Some("pool_"),
            Kind::Monitor => Some("monitor_"),
        }
    }
}

/// occm's `getClusterName(resourcePrefix, objectName)`: the cluster component of an
/// occm name, `""` when it has none. The regexp
/// `<prefix>kube_service_(.+?)_[^_]+(_[^_]+)?$`, unanchored, matched as Go matches it:
/// the leftmost match, the shortest cluster (so `kube_service_my_cluster_ns_svc` is
/// `my_cluster`; a name cut at 255 characters may lose its last part).
fn cluster_component(kind: Kind, name: &str) -> &str {
    (0..name.len())
        .filter(|start| name.is_char_boundary(*start))
        .find_map(|start| match_at(kind, &name[start..]))
        .unwrap_or_default()
}

/// The cluster of a match of occm's regexp starting at the beginning of `text`.
fn match_at(kind: Kind, text: &str) -> Option<&str> {
    let mut rest = text;
    if let Some(prefix) = kind.prefix() {
        rest = rest.strip_prefix(prefix)?;
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return None;
        }
        rest = rest[digits..].strip_prefix('_')?;
    }
    let rest = rest.strip_prefix(SERVICE_PREFIX)?;
    // `(.+?)`: the shortest cluster (no newline, as Go's `.`) the tail can follow.
    for (at, c) in rest.char_indices() {
        if c == '\n' {
            return None;
        }
        let end = at + c.len_utf8();
        if is_tail(&rest[end..]) {
            return Some(&rest[..end]);
        }
    }
    None
}

/// Whether `text` is `_[^_]+(_[^_]+)?` to its end (the namespace and the name).
fn is_tail(text: &str) -> bool {
    let Some(text) = text.strip_prefix('_') else {
        return false;
    };
    let parts: Vec<&str> = text.split('_').collect();
    parts.len() <= 2 && parts.iter().all(|p| !p.is_empty())
}

/// occm's `replaceClusterName`: `name` with its first `old` (after `kube_service_`
/// when it starts with it) replaced by `new`, cut to 255 bytes (`CutString255`).
fn replace_cluster_name(old: &str, new: &str, name: &str) -> String {
    let (prefix, rest) = match name.strip_prefix(SERVICE_PREFIX) {
        Some(rest) => (SERVICE_PREFIX, rest),
        None => ("", name),
    };
    cut_255(format!("{prefix}{}", rest.replacen(old, new, 1)))
}

/// occm's `util.CutString255` (at a character boundary).
fn cut_255(mut text: String) -> String {
    let mut end = text.len().min(255);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// `name` under `cluster` when it is an occm name of another cluster (its component
/// not empty), else `None`.
fn renamed(kind: Kind, name: &str, cluster: &str) -> Option<String> {
    let old = cluster_component(kind, name);
    (!old.is_empty() && old != cluster).then(|| replace_cluster_name(old, cluster, name))
}

/// occm's loops over tags in `renameLoadBalancer`: each `kube_service_…` tag of another
/// cluster under `cluster` (other Services' tags too), the others as they are.
fn renamed_tags(tags: &[String], cluster: &str) -> Vec<String> {
    tags.iter()
        .map(|t| renamed(Kind::LoadBalancer, t, cluster).unwrap_or_else(|| t.clone()))
        .collect()
}

/// occm's `lbHasOldClusterName` for the Service's load balancer `lb`: the cluster name
/// it was made under when occm made it (`kube_service_…`) under another one than
/// `cluster`. `None` for one of this cluster, one occm did not name (the legacy
/// `a<uid>`, one made by hand), or the Service's own name (a name cut at 255 characters
/// reads wrongly).
fn other_cluster(lb: &Value, cluster: &str, service: &Service) -> Option<String> {
    let name = lb["name"].as_str().unwrap_or_default();
    if !name.starts_with(SERVICE_PREFIX) || name == load_balancer_name(cluster, service) {
        return None;
    }
    let theirs = cluster_component(Kind::LoadBalancer, name);
    (!theirs.is_empty() && theirs != cluster).then(|| theirs.to_owned())
}

/// Whether the Service asks for its load balancer made under `theirs` to be renamed.
fn rename_asked(service: &Service, theirs: &str) -> bool {
    annotation(service, RENAME_FROM).map(str::trim) == Some(theirs)
}

/// The refusal of a load balancer made under cluster name `theirs` while this
/// controller runs with `ours`: both names, the flag to set, the annotation that asks
/// for occm's rename instead; `deleting` adds how to leave it.
fn refusal(lb: &Value, theirs: &str, ours: &str, service: &Service, deleting: bool) -> CloudError {
    let (namespace, name) = (&service.metadata.namespace, &service.metadata.name);
    let leave = if deleting {
        format!(
            "; or remove {PREFIX}{LOAD_BALANCER_ID} from the Service to leave the load \
             balancer as it is"
        )
    } else {
        String::new()
    };
    cloud_error::other(format!(
        "load balancer {} ({}), named by {PREFIX}{LOAD_BALANCER_ID} on Service \
         {namespace}/{name}, was made under cluster name \"{theirs}\", not this \
         controller's \"{ours}\": nothing was changed. Run wasm-ccm with \
         --cluster-name={theirs} (occm's --cluster-name); or, to rename it to \"{ours}\" as \
         occm does when its --cluster-name changes (lbHasOldClusterName, \
         renameLoadBalancer), annotate the Service {RENAME_FROM}={theirs}{leave}",
        lb["id"].as_str().unwrap_or_default(),
        lb["name"].as_str().unwrap_or_default(),
    ))
}

/// What deleting a Service does with a load balancer of another cluster name.
pub(super) enum ForDeletion {
    /// Decided under this cluster name (renamed first when asked for).
    Ours(Value),
    /// Decided under the cluster name it carries (asked for a rename, but in `ERROR`:
    /// it cannot be renamed, and goes as it is).
    Under(String, Value),
}

impl OpenStack {
    /// The Service's load balancer `lb` for an ensure or an update under `cluster`: as
    /// it is when it is this cluster's; renamed as occm renames it when it was made
    /// under another cluster name the Service's [`RENAME_FROM`] names; else refused.
    pub(super) fn of_this_cluster(
        &self,
        lb: Value,
        cluster: &str,
        service: &Service,
    ) -> Result<Value, CloudError> {
        match other_cluster(&lb, cluster, service) {
            None => Ok(lb),
            Some(theirs) if rename_asked(service, &theirs) => {
                self.rename(&lb, &theirs, cluster, service)
            }
            Some(theirs) => Err(refusal(&lb, &theirs, cluster, service, false)),
        }
    }

    /// [`Self::of_this_cluster`] for a deletion: a load balancer of another cluster
    /// name is refused (neither left behind nor deleted: the Service waits, naming
    /// both names) unless the rename is asked for.
    pub(super) fn of_this_cluster_for_deletion(
        &self,
        lb: Value,
        cluster: &str,
        service: &Service,
    ) -> Result<ForDeletion, CloudError> {
        match other_cluster(&lb, cluster, service) {
            None => Ok(ForDeletion::Ours(lb)),
            Some(theirs) if !rename_asked(service, &theirs) => {
                Err(refusal(&lb, &theirs, cluster, service, true))
            }
            Some(theirs) if lb["provisioning_status"] == "ERROR" => {
                Ok(ForDeletion::Under(theirs, lb))
            }
            Some(theirs) => Ok(ForDeletion::Ours(
                self.rename(&lb, &theirs, cluster, service)?,
            )),
        }
    }

    /// occm's `renameLoadBalancer` (see the module's notes): the children first, the
    /// load balancer last (its name and tags); the load balancer after it, `ACTIVE`.
    fn rename(
        &self,
        lb: &Value,
        old: &str,
        cluster: &str,
        service: &Service,
    ) -> Result<Value, CloudError> {
        let id = lb["id"].as_str().unwrap_or_default().to_owned();
        let name = lb["name"].as_str().unwrap_or_default();
        let new_name = replace_cluster_name(old, cluster, name);
        // occm's Warning, with its reason and words.
        let _ = events::warning(
            RENAME_EVENT,
            &format!(
                "Loadbalancer {id} has a name of {name} with incorrect cluster-name \
                 component. Renaming it to {new_name}."
            ),
            None,
        );
        wasm_ccm_guest::log::info(
            "renaming the load balancer as occm does (asked by the Service)",
            &[
                ("id", id.as_str()),
                ("from", name),
                ("to", new_name.as_str()),
                (
                    "service",
                    &format!("{}/{}", service.metadata.namespace, service.metadata.name),
                ),
            ],
        );
        let lb = self.wait_active(&id)?;
        let listeners = self.list_children("listeners", "listeners", &id)?;
        let pools = self.list_children("pools", "pools", &id)?;
        for listener in &listeners {
            self.rename_listener(&id, listener, &pools, cluster)?;
        }
        let tags = renamed_tags(&tags(&lb), cluster);
        let url = format!("{}/lbaas/loadbalancers/{id}", self.octavia()?);
        api::send(
            Request::put(&url).json(&json!({"loadbalancer": {"name": new_name, "tags": tags}})),
            "rename the load balancer",
        )?;
        self.wait_active(&id)
    }

    /// One listener of `renameLoadBalancer`'s loop: one named `listener_<i>_kube_service_…`
    /// of another cluster gets the new name, its pool and the pool's monitor first
    /// (each when it too is of another cluster), and its tags renamed.
    fn rename_listener(
        &self,
        lb: &str,
        listener: &Value,
        pools: &[Value],
        cluster: &str,
    ) -> Result<(), CloudError> {
        let name = listener["name"].as_str().unwrap_or_default();
        let Some(new_name) = renamed(Kind::Listener, name, cluster) else {
            return Ok(());
        };
        let lid = listener["id"].as_str().unwrap_or_default();
        // occm's `GetPoolByListener`: the pool whose listeners include it.
        let pool = pools.iter().find(|p| {
            p["listeners"]
                .as_array()
                .is_some_and(|ls| ls.iter().any(|l| l["id"] == lid))
        });
        if let Some(pool) = pool {
            self.rename_pool(lb, pool, cluster)?;
        }
        let octavia = self.octavia()?;
        self.change(
            lb,
            Request::put(&format!("{octavia}/lbaas/listeners/{lid}")).json(&json!({
                "listener": {"name": new_name, "tags": renamed_tags(&tags(listener), cluster)}
            })),
            "rename a listener",
        )?;
        Ok(())
    }

    /// A pool of another cluster renamed, its health monitor first.
    fn rename_pool(&self, lb: &str, pool: &Value, cluster: &str) -> Result<(), CloudError> {
        let name = pool["name"].as_str().unwrap_or_default();
        let Some(new_name) = renamed(Kind::Pool, name, cluster) else {
            return Ok(());
        };
        let octavia = self.octavia()?;
        if let Some(monitor) = pool["healthmonitor_id"].as_str().filter(|m| !m.is_empty()) {
            self.rename_monitor(lb, monitor, cluster)?;
        }
        let pid = pool["id"].as_str().unwrap_or_default();
        self.change(
            lb,
            Request::put(&format!("{octavia}/lbaas/pools/{pid}"))
                .json(&json!({"pool": {"name": new_name}})),
            "rename a pool",
        )?;
        Ok(())
    }

    /// Health monitor `id` renamed when it is of another cluster.
    fn rename_monitor(&self, lb: &str, id: &str, cluster: &str) -> Result<(), CloudError> {
        let url = format!("{}/lbaas/healthmonitors/{id}", self.octavia()?);
        let monitor = api::json(Request::get(&url), "get a health monitor")?;
        let name = monitor["healthmonitor"]["name"]
            .as_str()
            .unwrap_or_default();
        if let Some(new_name) = renamed(Kind::Monitor, name, cluster) {
            self.change(
                lb,
                Request::put(&url).json(&json!({"healthmonitor": {"name": new_name}})),
                "rename a health monitor",
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;

    /// occm's `getClusterName`, as its regexp reads names (cases of occm's
    /// `TestGetClusterName` among them).
    #[test]
    fn the_cluster_component_is_read_as_occms_regexp_reads_it() {
        let lb = |n| cluster_component(Kind::LoadBalancer, n);
        assert_eq!(lb("kube_service_kubernetes_default_web"), "kubernetes");
        assert_eq!(lb("kube_service_prod_default_web"), "prod");
        // Underscores: the cluster is all but the last two parts.
        assert_eq!(lb("kube_service_my_cluster_default_web"), "my_cluster");
        // Cut at 255: one part left after the cluster.
        assert_eq!(lb("kube_service_prod_default"), "prod");
        assert_eq!(lb("kube_service_prod"), "");
        assert_eq!(lb("a0123456789abcdef"), "");
        // Unanchored at the start, as occm's regexp.
        assert_eq!(lb("x-kube_service_prod_ns_a"), "prod");
        let listener = |n| cluster_component(Kind::Listener, n);
        assert_eq!(listener("listener_0_kube_service_prod_default_web"), "prod");
        assert_eq!(listener("listener_12_kube_service_a_b_ns_web"), "a_b");
        assert_eq!(listener("listener_kube_service_prod_default_web"), "");
        // The in-tree provider's `listener_<lb>_<i>`.
        assert_eq!(listener("listener_a0123456789abcdef_0"), "");
        assert_eq!(
            cluster_component(Kind::Pool, "pool_1_kube_service_prod_default_web"),
            "prod"
        );
        assert_eq!(
            cluster_component(Kind::Monitor, "monitor_0_kube_service_prod_default_web"),
            "prod"
        );
    }

    /// occm's `replaceClusterName`: the first occurrence after `kube_service_`.
    #[test]
    fn names_are_renamed_as_occms_replace_cluster_name() {
        assert_eq!(
            replace_cluster_name("prod", "kubernetes", "kube_service_prod_prod_web"),
            "kube_service_kubernetes_prod_web"
        );
        assert_eq!(
            replace_cluster_name("prod", "k8s", "listener_0_kube_service_prod_default_web"),
            "listener_0_kube_service_k8s_default_web"
        );
        let long = format!("kube_service_a_default_{}", "w".repeat(250));
        assert_eq!(replace_cluster_name("a", "bb", &long).len(), 255);
        assert_eq!(
            renamed_tags(
                &[
                    "kube_service_prod_default_web".into(),
                    "kube_service_kubernetes_default_other".into(),
                    "user-tag".into(),
                ],
                "kubernetes"
            ),
            [
                "kube_service_kubernetes_default_web",
                "kube_service_kubernetes_default_other",
                "user-tag"
            ]
        );
    }

    fn service(annotations: &[(&str, &str)]) -> Service {
        super::super::settings::tests::service(annotations)
    }

    /// occm's `lbHasOldClusterName`: only an occm-named load balancer of another
    /// cluster; this cluster's, another Service's of this cluster (shared), the legacy
    /// name and a hand-made one are not.
    #[test]
    fn only_an_occm_load_balancer_of_another_cluster_is_of_another_cluster() {
        let web = service(&[]);
        let of = |name: &str| other_cluster(&json!({"name": name}), "kubernetes", &web);
        assert_eq!(of("kube_service_prod_default_web").as_deref(), Some("prod"));
        assert_eq!(
            of("kube_service_prod_default_other").as_deref(),
            Some("prod")
        );
        assert_eq!(of("kube_service_kubernetes_default_web"), None);
        assert_eq!(of("kube_service_kubernetes_default_other"), None);
        assert_eq!(of("a0123456789abcdef0123456789abcde"), None);
        assert_eq!(of("my-load-balancer"), None);
    }

    /// Without the annotation (or with one naming another cluster), a load balancer of
    /// another cluster name is refused naming both names and the flag, before any
    /// request.
    #[test]
    fn a_load_balancer_of_another_cluster_is_refused_by_name() {
        let provider = OpenStack {
            config: crate::config::Config::parse("[Global]\nauth-url = https://k/v3\n").unwrap(),
        };
        let lb = json!({"id": "lb-1", "name": "kube_service_prod_default_web",
                        "provisioning_status": "ACTIVE"});
        for web in [service(&[]), service(&[(RENAME_FROM, "staging")])] {
            let Err(CloudError::Other(message)) =
                provider.of_this_cluster(lb.clone(), "kubernetes", &web)
            else {
                panic!("refused");
            };
            for words in [
                "lb-1",
                "cluster name \"prod\"",
                "\"kubernetes\"",
                "--cluster-name=prod",
                "wasm-ccm.io/rename-from-cluster-name=prod",
                "nothing was changed",
            ] {
                assert!(message.contains(words), "{words}: {message}");
            }
            let Err(CloudError::Other(message)) =
                provider.of_this_cluster_for_deletion(lb.clone(), "kubernetes", &web)
            else {
                panic!("refused");
            };
            assert!(message.contains("to leave the load balancer"), "{message}");
        }
    }

    /// occm's `renameLoadBalancer` when the Service asks for it: the monitor, the pool,
    /// the listener (name and tags), then the load balancer (name and tags), with occm's
    /// Warning; another Service's listener and tag are renamed too, a user's tag kept.
    #[test]
    fn the_rename_asked_for_is_occms() {
        wasm_ccm_guest::cache::clear();
        let _ = events::recorded();
        let cloud = MockTransport::new();
        let catalog = json!({"catalog": [{"type": "load-balancer", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://octavia"}]}]});
        cloud.on(
            "GET",
            "/v3/auth/catalog",
            Response::with_json(200, &catalog),
        );
        let lb = json!({"loadbalancer": {"id": "lb-1", "provisioning_status": "ACTIVE",
            "name": "kube_service_prod_default_web",
            "tags": ["kube_service_prod_default_web", "kube_service_prod_default_other", "mine"]}});
        cloud.on(
            "GET",
            "/v2/lbaas/loadbalancers/lb-1",
            Response::with_json(200, &lb),
        );
        cloud.on(
            "GET",
            "/v2/lbaas/listeners",
            Response::with_json(
                200,
                &json!({"listeners": [
                    {"id": "l-0", "name": "listener_0_kube_service_prod_default_web",
                     "tags": ["kube_service_prod_default_web"]},
                    {"id": "l-1", "name": "listener_0_kube_service_prod_default_other",
                     "tags": ["kube_service_prod_default_other"]},
                    {"id": "l-2", "name": "by-hand", "tags": []}]}),
            ),
        );
        cloud.on(
            "GET",
            "/v2/lbaas/pools",
            Response::with_json(
                200,
                &json!({"pools": [
                    {"id": "p-0", "name": "pool_0_kube_service_prod_default_web",
                     "listeners": [{"id": "l-0"}], "healthmonitor_id": "m-0"},
                    {"id": "p-1", "name": "pool_0_kube_service_prod_default_other",
                     "listeners": [{"id": "l-1"}], "healthmonitor_id": null}]}),
            ),
        );
        cloud.on(
            "GET",
            "/v2/lbaas/healthmonitors/m-0",
            Response::with_json(
                200,
                &json!({"healthmonitor": {"id": "m-0",
                        "name": "monitor_0_kube_service_prod_default_web"}}),
            ),
        );
        for path in [
            "/v2/lbaas/healthmonitors/m-0",
            "/v2/lbaas/pools/p-0",
            "/v2/lbaas/pools/p-1",
            "/v2/lbaas/listeners/l-0",
            "/v2/lbaas/listeners/l-1",
            "/v2/lbaas/loadbalancers/lb-1",
        ] {
            cloud.on("PUT", path, Response::with_json(200, &json!({})));
        }
        let _installed = cloud.install();
        let provider = OpenStack {
            config: crate::config::Config::parse("[Global]\nauth-url = https://k/v3\n").unwrap(),
        };
        let web = service(&[(RENAME_FROM, "prod")]);
        provider
            .of_this_cluster(lb["loadbalancer"].clone(), "kubernetes", &web)
            .unwrap();
        let puts: Vec<(String, Value)> = cloud
            .requests()
            .iter()
            .filter(|r| r.method().as_str() == "PUT")
            .map(|r| {
                (
                    r.url().unwrap().path_and_query,
                    serde_json::from_slice(r.body_bytes()).unwrap(),
                )
            })
            .collect();
        let expected = [
            (
                "/v2/lbaas/healthmonitors/m-0",
                json!({"healthmonitor": {"name": "monitor_0_kube_service_kubernetes_default_web"}}),
            ),
            (
                "/v2/lbaas/pools/p-0",
                json!({"pool": {"name": "pool_0_kube_service_kubernetes_default_web"}}),
            ),
            (
                "/v2/lbaas/listeners/l-0",
                json!({"listener": {"name": "listener_0_kube_service_kubernetes_default_web",
                                    "tags": ["kube_service_kubernetes_default_web"]}}),
            ),
            (
                "/v2/lbaas/pools/p-1",
                json!({"pool": {"name": "pool_0_kube_service_kubernetes_default_other"}}),
            ),
            (
                "/v2/lbaas/listeners/l-1",
                json!({"listener": {"name": "listener_0_kube_service_kubernetes_default_other",
                                    "tags": ["kube_service_kubernetes_default_other"]}}),
            ),
            (
                "/v2/lbaas/loadbalancers/lb-1",
                json!({"loadbalancer": {"name": "kube_service_kubernetes_default_web",
                       "tags": ["kube_service_kubernetes_default_web",
                                "kube_service_kubernetes_default_other", "mine"]}}),
            ),
        ];
        let expected: Vec<(String, Value)> = expected
            .into_iter()
            .map(|(p, v)| (p.to_owned(), v))
            .collect();
        assert_eq!(puts, expected);
        let recorded = events::recorded();
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        assert_eq!(recorded[0].1, "LoadBalancerRename");
        assert_eq!(
            recorded[0].2,
            "Loadbalancer lb-1 has a name of kube_service_prod_default_web with incorrect \
             cluster-name component. Renaming it to kube_service_kubernetes_default_web."
        );
    }
}
