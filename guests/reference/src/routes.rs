//! `routes`: the cloud route table. Routes name their target by instance ID; the
//! provider maps IDs to node names (instance names) and back.

use std::collections::HashMap;
use std::time::Duration;

use wasm_ccm_guest::types::{CloudError, Route};
use wasm_ccm_guest::{Routes, cache};

use crate::SimCloud;
use crate::cloud::Route as CloudRoute;

/// The shared cache's key for instance ID → instance (node) name.
const NAMES_KEY: &str = "simcloud/instance-names";
/// How long that map is kept: names never change; a route to an instance the map
/// lacks refreshes it.
const NAMES_TTL: Duration = Duration::from_secs(600);
/// The shared cache's key for node name → the ID of the one live (not terminated)
/// instance of that name, for routes to Nodes without a provider ID yet.
const LIVE_KEY: &str = "simcloud/live-instance-ids";
/// How long that map is kept: an instance replaced under the same name is routed to
/// the old one at most this long (and a route to a terminated one is retried at once).
const LIVE_TTL: Duration = Duration::from_secs(60);

impl SimCloud {
    /// Instance ID → name for every ID in `ids`: from the shared cache, listing the
    /// instances only when an ID is missing or `fresh` is asked (the route controller
    /// lists routes every 10 s; the instances rarely change).
    fn instance_names(
        &self,
        ids: &[&str],
        fresh: bool,
    ) -> Result<HashMap<String, String>, CloudError> {
        if !fresh
            && let Some(names) = cache::get_json::<HashMap<String, String>>(NAMES_KEY)
            && ids.iter().all(|id| names.contains_key(*id))
        {
            return Ok(names);
        }
        let names: HashMap<String, String> = self
            .cloud
            .instances()?
            .into_iter()
            .map(|i| (i.id, i.name))
            .collect();
        if let Err(e) = cache::set_json(NAMES_KEY, &names, NAMES_TTL) {
            wasm_ccm_guest::log::warn(
                "cannot keep instance names in the shared cache",
                &[("error", &format!("{e:?}"))],
            );
        }
        Ok(names)
    }

    /// The ID of the live instance named `name` (a Node's) and whether it came from
    /// the shared cache. A route for each Node of a cluster joining at once costs one
    /// listing of the instances, kept for [`LIVE_TTL`], not a lookup each; a name the
    /// listing did not have (a Node that joined since, or one whose name more than one
    /// live instance holds) is looked up on its own.
    fn instance_id(&self, name: &str) -> Result<Option<(String, bool)>, CloudError> {
        let live = match cache::get_json::<HashMap<String, String>>(LIVE_KEY) {
            Some(live) => live,
            None => {
                let listed = self.cloud.instances()?;
                let names: HashMap<String, String> = listed
                    .iter()
                    .map(|i| (i.id.clone(), i.name.clone()))
                    .collect();
                let mut live: HashMap<String, Option<String>> = HashMap::new();
                for i in listed.iter().filter(|i| !i.is_terminated()) {
                    live.entry(i.name.clone())
                        .and_modify(|id| *id = None)
                        .or_insert_with(|| Some(i.id.clone()));
                }
                let live: HashMap<String, String> = live
                    .into_iter()
                    .filter_map(|(name, id)| Some((name, id?)))
                    .collect();
                for (key, ttl, value) in
                    [(NAMES_KEY, NAMES_TTL, &names), (LIVE_KEY, LIVE_TTL, &live)]
                {
                    if let Err(e) = cache::set_json(key, value, ttl) {
                        wasm_ccm_guest::log::warn(
                            "cannot keep instances in the shared cache",
                            &[("key", key), ("error", &format!("{e:?}"))],
                        );
                    }
                }
                live
            }
        };
        if let Some(id) = live.get(name) {
            return Ok(Some((id.clone(), true)));
        }
        Ok(self.cloud.instance_by_name(name)?.map(|i| (i.id, false)))
    }
}

impl Routes for SimCloud {
    fn list_routes(&self, cluster_name: String) -> Result<Vec<Route>, CloudError> {
        let routes = self.cloud.routes(&cluster_name)?;
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        let targets: Vec<&str> = routes.iter().map(|r| r.target_instance.as_str()).collect();
        // A blackhole may point at an instance that is gone: ask the cloud, not the cache.
        let names = self.instance_names(&targets, routes.iter().any(|r| r.blackhole))?;
        Ok(routes
            .into_iter()
            .map(|r| Route {
                name: r.name,
                target_node: names.get(&r.target_instance).cloned().unwrap_or_default(),
                // The cloud's routes do not record target addresses.
                target_node_addresses: Vec::new(),
                enable_node_addresses: false,
                target_node_provider_id: Some(crate::provider_id(&r.target_instance)),
                destination_cidr: r.destination_cidr,
                blackhole: r.blackhole,
            })
            .collect())
    }

    fn create_route(
        &self,
        cluster_name: String,
        name_hint: String,
        route: Route,
    ) -> Result<(), CloudError> {
        // One route per IP family for a dual-stack node: the name says which.
        let family = if route.destination_cidr.contains(':') {
            "-ipv6"
        } else {
            ""
        };
        let create = |target: String| {
            self.cloud.create_route(&CloudRoute {
                name: format!("{cluster_name}-{name_hint}{family}"),
                cluster: cluster_name.clone(),
                destination_cidr: route.destination_cidr.clone(),
                target_instance: target,
                blackhole: false,
            })
        };
        // The target's provider ID names its instance; a Node without one yet (its
        // pod CIDR came before its initialization) is found by name.
        if let Some(pid) = route.target_node_provider_id.as_deref() {
            return create(crate::instance_id_from_provider_id(pid)?.to_owned());
        }
        let no_instance = || {
            CloudError::Other(format!(
                "cannot route {} to node {}: no such instance",
                route.destination_cidr, route.target_node
            ))
        };
        let (id, cached) = self
            .instance_id(&route.target_node)?
            .ok_or_else(no_instance)?;
        match create(id.clone()) {
            // A cached ID may be an instance since terminated or replaced: unless the
            // cloud only asked to wait, look the name up alone and try its instance.
            Err(err) if cached && !matches!(err, CloudError::RetryAfter(_)) => {
                match self.cloud.instance_by_name(&route.target_node)? {
                    Some(fresh) if fresh.id == id => Err(err),
                    Some(fresh) => {
                        cache::delete(LIVE_KEY);
                        create(fresh.id)
                    }
                    None => {
                        cache::delete(LIVE_KEY);
                        Err(no_instance())
                    }
                }
            }
            done => done,
        }
    }

    fn delete_route(&self, _cluster_name: String, route: Route) -> Result<(), CloudError> {
        self.cloud.delete_route(&route.name).map(drop)
    }
}
