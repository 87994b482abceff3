//! `routes`: pod CIDRs routed to instances in the cluster's VPC route table, as
//! cloud-provider-aws does.
//!
//! The table is `RouteTableID` from the cloud config, else the one table tagged for
//! the cluster. Routes are named `<cluster>-<cidr>`; a route's target node is the
//! name of its instance's Node — its private DNS name (or its instance ID, for nodes
//! named that way), which is how Nodes are named on AWS unless the kubelet overrides
//! its hostname.

use crate::Aws;
use crate::api::Params;
use crate::config::LEGACY_CLUSTER_TAG;
use crate::ec2::{self, RouteTable};
use crate::instances;
use wasm_ccm_guest::Routes;
use wasm_ccm_guest::types::{CloudError, NodeAddressType, Route};

/// The cluster's route table (upstream's `findRouteTable`).
fn route_table(state: &Aws) -> Result<RouteTable, CloudError> {
    let config = &state.config;
    let tables = if !config.route_table_id.is_empty() {
        state.ec2.route_tables(
            Params::new().filter("route-table-id", &[config.route_table_id.as_str()]),
        )?
    } else if config.cluster_id.is_empty() {
        return Err(CloudError::Other(
            "routes need `RouteTableID` or a cluster ID (`KubernetesClusterID`) in the cloud config"
                .into(),
        ));
    } else {
        let filter = if config.legacy_cluster_tag {
            Params::new().filter(
                &format!("tag:{LEGACY_CLUSTER_TAG}"),
                &[config.cluster_id.as_str()],
            )
        } else {
            Params::new().filter("tag-key", &[config.cluster_tag_key()])
        };
        state.ec2.route_tables(filter)?
    };
    let count = tables.len();
    let mut tables = tables.into_iter();
    match (tables.next(), count) {
        (Some(table), 1) => Ok(table),
        (None, _) => Err(CloudError::Other(format!(
            "unable to find a route table for cluster {:?} (RouteTableID {:?})",
            config.cluster_id, config.route_table_id
        ))),
        (Some(_), n) => Err(CloudError::Other(format!(
            "found {n} route tables tagged for cluster {:?}: set RouteTableID",
            config.cluster_id
        ))),
    }
}

/// The Node name of an instance: its private DNS name, else its ID.
fn node_name(instance: &ec2::Instance) -> String {
    if instance.private_dns_name.is_empty() {
        instance.id.clone()
    } else {
        instance.private_dns_name.clone()
    }
}

/// The instance a route to `route.target_node` goes to: by node name, else by the
/// node's InternalIP.
fn target_instance(state: &Aws, route: &Route) -> Result<ec2::Instance, CloudError> {
    if let Some(instance) = instances::by_node_name(state, &route.target_node)? {
        return Ok(instance);
    }
    let ips: Vec<&str> = route
        .target_node_addresses
        .iter()
        .filter(|a| a.address_type == NodeAddressType::InternalIp)
        .map(|a| a.address.as_str())
        .collect();
    if !ips.is_empty() {
        let found = state.ec2.instances_filtered(
            Params::new()
                .filter("private-ip-address", &ips)
                .filter("instance-state-name", &ec2::ALIVE_STATES),
        )?;
        if let [instance] = found.as_slice() {
            return Ok(instance.clone());
        }
    }
    Err(CloudError::Other(format!(
        "no instance found for node {} (by private DNS name or InternalIP)",
        route.target_node
    )))
}

impl Routes for Aws {
    fn list_routes(&self, cluster_name: String) -> Result<Vec<Route>, CloudError> {
        {
            let s = self;
            let table = route_table(s)?;
            let mut ids: Vec<String> = table
                .routes
                .iter()
                .filter(|r| !r.instance_id.is_empty())
                .map(|r| r.instance_id.clone())
                .collect();
            ids.sort();
            ids.dedup();
            // One call for every instance the table routes to.
            let instances = s.ec2.instances_by_id(&ids)?;
            let mut routes = Vec::new();
            for route in table.routes.iter().filter(|r| !r.destination.is_empty()) {
                let name = format!("{cluster_name}-{}", route.destination);
                if route.state == "blackhole" {
                    routes.push(Route {
                        name,
                        target_node: String::new(),
                        target_node_addresses: Vec::new(),
                        enable_node_addresses: false,
                        target_node_provider_id: None,
                        destination_cidr: route.destination.clone(),
                        blackhole: true,
                    });
                    continue;
                }
                if route.instance_id.is_empty() {
                    // The VPC's local route, gateways, peerings: not ours.
                    continue;
                }
                match instances.iter().find(|i| i.id == route.instance_id) {
                    Some(instance) => routes.push(Route {
                        name,
                        target_node: node_name(instance),
                        target_node_addresses: Vec::new(),
                        enable_node_addresses: false,
                        target_node_provider_id: None,
                        destination_cidr: route.destination.clone(),
                        blackhole: instance.state == "terminated",
                    }),
                    None => wasm_ccm_guest::log::warn(
                        "route targets an unknown instance; skipped",
                        &[
                            ("cidr", &route.destination),
                            ("instance", &route.instance_id),
                        ],
                    ),
                }
            }
            Ok(routes)
        }
    }

    fn create_route(
        &self,
        _cluster_name: String,
        _name_hint: String,
        route: Route,
    ) -> Result<(), CloudError> {
        {
            let s = self;
            let instance = target_instance(s, &route)?;
            // Pods' traffic has addresses other than the instance's own.
            s.ec2.disable_source_dest_check(&instance.id)?;
            let table = route_table(s)?;
            if let Some(existing) = table
                .routes
                .iter()
                .find(|r| r.destination == route.destination_cidr)
            {
                if existing.state == "blackhole" {
                    s.ec2.delete_route(&table.id, &existing.destination)?;
                } else if existing.instance_id == instance.id {
                    return Ok(());
                }
            }
            s.ec2
                .create_route(&table.id, &route.destination_cidr, &instance.id)?;
            wasm_ccm_guest::log::info(
                "created route",
                &[
                    ("cidr", &route.destination_cidr),
                    ("instance", &instance.id),
                    ("routeTable", &table.id),
                ],
            );
            Ok(())
        }
    }

    fn delete_route(&self, _cluster_name: String, route: Route) -> Result<(), CloudError> {
        {
            let s = self;
            let table = route_table(s)?;
            match s.ec2.delete_route(&table.id, &route.destination_cidr) {
                Err(e) if e.code() == "InvalidRoute.NotFound" => Ok(()),
                other => Ok(other?),
            }
        }
    }
}
