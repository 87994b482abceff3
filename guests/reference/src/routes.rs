//! `routes`: the cloud route table. Routes name their target by instance ID; the
//! provider maps IDs to node names (instance names) and back.

use std::collections::HashMap;

use wasm_ccm_guest::Routes;
use wasm_ccm_guest::types::{CloudError, Route};

use crate::SimCloud;
use crate::cloud::Route as CloudRoute;

impl Routes for SimCloud {
    fn list_routes(&self, cluster_name: String) -> Result<Vec<Route>, CloudError> {
        let routes = self.cloud.routes(&cluster_name)?;
        let instances: HashMap<String, _> = self
            .cloud
            .instances()?
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        Ok(routes
            .into_iter()
            .map(|r| Route {
                name: r.name,
                target_node: instances
                    .get(&r.target_instance)
                    .map(|i| i.name.clone())
                    .unwrap_or_default(),
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
        // The target's provider ID names its instance; a Node without one is looked up.
        let target = match route.target_node_provider_id.as_deref() {
            Some(pid) => crate::instance_id_from_provider_id(pid)?.to_owned(),
            None => {
                self.cloud
                    .instance_by_name(&route.target_node)?
                    .ok_or_else(|| {
                        CloudError::Other(format!(
                            "cannot route {} to node {}: no such instance",
                            route.destination_cidr, route.target_node
                        ))
                    })?
                    .id
            }
        };
        // One route per IP family for a dual-stack node: the name says which.
        let family = if route.destination_cidr.contains(':') {
            "-ipv6"
        } else {
            ""
        };
        self.cloud.create_route(&CloudRoute {
            name: format!("{cluster_name}-{name_hint}{family}"),
            cluster: cluster_name.clone(),
            destination_cidr: route.destination_cidr,
            target_instance: target,
            blackhole: false,
        })
    }

    fn delete_route(&self, _cluster_name: String, route: Route) -> Result<(), CloudError> {
        self.cloud.delete_route(&route.name).map(drop)
    }
}
