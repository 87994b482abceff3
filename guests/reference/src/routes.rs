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

    /// The ID of the instance named `name` (a Node's), from the shared cache when it
    /// knows exactly one, else from a fresh listing kept there: a route created for
    /// each Node of a cluster joining at once costs one listing, not one lookup each.
    fn instance_id(&self, name: &str, fresh: bool) -> Result<String, CloudError> {
        let find = |names: &HashMap<String, String>| {
            let mut ids = names.iter().filter(|(_, n)| *n == name).map(|(id, _)| id);
            match (ids.next(), ids.next()) {
                (Some(id), None) => Some(id.clone()),
                _ => None,
            }
        };
        if !fresh
            && let Some(names) = cache::get_json::<HashMap<String, String>>(NAMES_KEY)
            && let Some(id) = find(&names)
        {
            return Ok(id);
        }
        find(&self.instance_names(&[], true)?).ok_or_else(|| {
            CloudError::Other(format!(
                "cannot route to node {name}: no such instance (or more than one by that name)"
            ))
        })
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
        let cached = self.instance_id(&route.target_node, false)?;
        match create(cached.clone()) {
            // A name kept in the cache may now be another instance's: look again.
            Err(err) => match self.instance_id(&route.target_node, true)? {
                fresh if fresh != cached => create(fresh),
                _ => Err(err),
            },
            created => created,
        }
    }

    fn delete_route(&self, _cluster_name: String, route: Route) -> Result<(), CloudError> {
        self.cloud.delete_route(&route.name).map(drop)
    }
}
