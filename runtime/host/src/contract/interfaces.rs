//! The optional interfaces of the contract: **the** table (one row each), then each
//! interface's typed call handle, one async method per WIT function.
//!
//! Adding an interface to the contract means: the WIT file, one row here, its handle's
//! methods below, and the controller manager's cloud seam. Inspection, `check`, the
//! export lookups, the pool and the [`Provider`] accessors follow from the row.
//!
//! Every call borrows an instance from the provider's pool, runs under the provider's
//! call deadline inside a `provider_call` span, and maps failures to [`ProviderError`].

use super::types::{InstanceInfo, LoadBalancerStatus, Node, NodeAddress, Route, Service, Zone};
use crate::provider::call::guest_call;
use crate::provider::{Provider, ProviderError};

interface_table! {
    /// `cloudprovider.InstancesV2`: instance existence, shutdown and metadata by Node.
    InstancesV2 => instances_v2, "instances-v2", InstancesV2;
    /// Legacy `cloudprovider.Instances`, by node name or provider ID.
    Instances => instances, "instances", Instances;
    /// `cloudprovider.Zones` (used only with legacy `instances`).
    Zones => zones, "zones", Zones;
    /// `cloudprovider.LoadBalancer`: load balancers for Services.
    LoadBalancer => load_balancer, "load-balancer", LoadBalancer;
    /// `cloudprovider.Routes`: cloud routes for Node pod CIDRs.
    Routes => routes, "routes", Routes;
    /// `cloudprovider.Clusters`.
    Clusters => clusters, "clusters", Clusters;
}

impl Provider {
    /// `identity.provider-name`, called on a pooled instance (the cached value is
    /// [`Provider::name`]).
    pub async fn call_provider_name(&self) -> Result<String, ProviderError> {
        guest_call!(infallible self, |g| &g.identity, "identity", "provider-name",
            |g, store| g.call_provider_name(store))
    }

    /// `identity.has-cluster-id`, called on a pooled instance.
    pub async fn call_has_cluster_id(&self) -> Result<bool, ProviderError> {
        guest_call!(infallible self, |g| &g.identity, "identity", "has-cluster-id",
            |g, store| g.call_has_cluster_id(store))
    }
}

impl InstancesV2<'_> {
    /// `instance-exists`: false only when the instance definitely does not exist.
    pub async fn instance_exists(&self, node: &Node) -> Result<bool, ProviderError> {
        guest_call!(self.0, instances_v2, "instance-exists", |g, store| g
            .call_instance_exists(store, node))
    }

    /// `instance-shutdown`.
    pub async fn instance_shutdown(&self, node: &Node) -> Result<bool, ProviderError> {
        guest_call!(self.0, instances_v2, "instance-shutdown", |g, store| g
            .call_instance_shutdown(store, node))
    }

    /// `instance-metadata`.
    pub async fn instance_metadata(&self, node: &Node) -> Result<InstanceInfo, ProviderError> {
        guest_call!(self.0, instances_v2, "instance-metadata", |g, store| g
            .call_instance_metadata(store, node))
    }
}

impl Instances<'_> {
    /// `node-addresses`.
    pub async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>, ProviderError> {
        guest_call!(self.0, instances, "node-addresses", |g, store| g
            .call_node_addresses(store, node_name))
    }

    /// `node-addresses-by-provider-id`.
    pub async fn node_addresses_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<Vec<NodeAddress>, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "node-addresses-by-provider-id",
            |g, store| g.call_node_addresses_by_provider_id(store, provider_id)
        )
    }

    /// `instance-id`.
    pub async fn instance_id(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, instances, "instance-id", |g, store| g
            .call_instance_id(store, node_name))
    }

    /// `instance-type`.
    pub async fn instance_type(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, instances, "instance-type", |g, store| g
            .call_instance_type(store, node_name))
    }

    /// `instance-type-by-provider-id`.
    pub async fn instance_type_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<String, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instance-type-by-provider-id",
            |g, store| g.call_instance_type_by_provider_id(store, provider_id)
        )
    }

    /// `add-ssh-key-to-all-instances`.
    pub async fn add_ssh_key_to_all_instances(
        &self,
        user: &str,
        key_data: &[u8],
    ) -> Result<(), ProviderError> {
        guest_call!(
            self.0,
            instances,
            "add-ssh-key-to-all-instances",
            |g, store| g.call_add_ssh_key_to_all_instances(store, user, key_data)
        )
    }

    /// `current-node-name`.
    pub async fn current_node_name(&self, hostname: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, instances, "current-node-name", |g, store| g
            .call_current_node_name(store, hostname))
    }

    /// `instance-exists-by-provider-id`.
    pub async fn instance_exists_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<bool, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instance-exists-by-provider-id",
            |g, store| g.call_instance_exists_by_provider_id(store, provider_id)
        )
    }

    /// `instance-shutdown-by-provider-id`.
    pub async fn instance_shutdown_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<bool, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instance-shutdown-by-provider-id",
            |g, store| g.call_instance_shutdown_by_provider_id(store, provider_id)
        )
    }
}

impl Zones<'_> {
    /// `get-zone`: the zone of the machine the caller runs on.
    pub async fn get_zone(&self) -> Result<Zone, ProviderError> {
        guest_call!(self.0, zones, "get-zone", |g, store| g.call_get_zone(store))
    }

    /// `get-zone-by-provider-id`.
    pub async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone, ProviderError> {
        guest_call!(self.0, zones, "get-zone-by-provider-id", |g, store| g
            .call_get_zone_by_provider_id(store, provider_id))
    }

    /// `get-zone-by-node-name`.
    pub async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone, ProviderError> {
        guest_call!(self.0, zones, "get-zone-by-node-name", |g, store| g
            .call_get_zone_by_node_name(store, node_name))
    }
}

impl LoadBalancer<'_> {
    /// `get-load-balancer`: the load balancer's status, or `None` when it does not exist.
    pub async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        guest_call!(self.0, load_balancer, "get-load-balancer", |g, store| g
            .call_get_load_balancer(store, cluster_name, service))
    }

    /// `get-load-balancer-name`.
    pub async fn get_load_balancer_name(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<String, ProviderError> {
        guest_call!(infallible self.0,
            |g| g.load_balancer.as_ref().expect("handles exist only for exported interfaces"),
            "load-balancer", "get-load-balancer-name",
            |g, store| g.call_get_load_balancer_name(store, cluster_name, service))
    }

    /// `ensure-load-balancer`.
    pub async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        guest_call!(self.0, load_balancer, "ensure-load-balancer", |g, store| g
            .call_ensure_load_balancer(store, cluster_name, service, nodes))
    }

    /// `update-load-balancer`.
    pub async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, load_balancer, "update-load-balancer", |g, store| g
            .call_update_load_balancer(store, cluster_name, service, nodes))
    }

    /// `ensure-load-balancer-deleted`.
    pub async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<(), ProviderError> {
        guest_call!(
            self.0,
            load_balancer,
            "ensure-load-balancer-deleted",
            |g, store| g.call_ensure_load_balancer_deleted(store, cluster_name, service)
        )
    }
}

impl Routes<'_> {
    /// `list-routes`.
    pub async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>, ProviderError> {
        guest_call!(self.0, routes, "list-routes", |g, store| g
            .call_list_routes(store, cluster_name))
    }

    /// `create-route`.
    pub async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, routes, "create-route", |g, store| g
            .call_create_route(store, cluster_name, name_hint, route))
    }

    /// `delete-route`.
    pub async fn delete_route(
        &self,
        cluster_name: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, routes, "delete-route", |g, store| g
            .call_delete_route(store, cluster_name, route))
    }
}

impl Clusters<'_> {
    /// `list-clusters`.
    pub async fn list_clusters(&self) -> Result<Vec<String>, ProviderError> {
        guest_call!(self.0, clusters, "list-clusters", |g, store| g
            .call_list_clusters(store))
    }

    /// `master`.
    pub async fn master(&self, cluster_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, clusters, "master", |g, store| g
            .call_master(store, cluster_name))
    }
}
