//! The typed provider API: one handle per optional interface, one async method per
//! WIT function. Every call borrows an instance from the pool, runs under the
//! provider's call deadline, and maps failures to [`ProviderError`].

use std::convert::Infallible;

use super::Provider;
use super::error::ProviderError;
use crate::bindings::types::{
    InstanceInfo, LoadBalancerStatus, Node, NodeAddress, Route, Service, Zone,
};

/// Runs one guest call: borrow, arm the deadline, call, settle.
macro_rules! guest_call {
    ($provider:expr, $iface:ident, $function:literal, |$guest:ident, $store:ident| $call:expr) => {{
        let mut lease = $provider.pool().acquire().await?;
        let outcome = {
            let ($store, guests, deadline) = lease.arm();
            let $guest = guests
                .$iface
                .as_ref()
                .expect("interface handles exist only for exported interfaces");
            tokio::time::timeout(deadline, $call).await
        };
        lease.settle($function, outcome)
    }};
}

/// Same as `guest_call!` for WIT functions that cannot return a cloud error.
macro_rules! guest_call_infallible {
    ($provider:expr, $iface:ident, $function:literal, |$guest:ident, $store:ident| $call:expr) => {{
        let mut lease = $provider.pool().acquire().await?;
        let outcome = {
            let ($store, guests, deadline) = lease.arm();
            let $guest = &guests.$iface;
            tokio::time::timeout(deadline, $call)
                .await
                .map(|r| r.map(Ok::<_, Infallible>))
        };
        lease.settle($function, outcome)
    }};
}

impl Provider {
    /// `identity.provider-name`, called on a pooled instance (the cached value is
    /// [`Provider::name`]).
    pub async fn call_provider_name(&self) -> Result<String, ProviderError> {
        guest_call_infallible!(self, identity, "provider-name", |g, store| g
            .call_provider_name(store))
    }

    /// `identity.has-cluster-id`, called on a pooled instance.
    pub async fn call_has_cluster_id(&self) -> Result<bool, ProviderError> {
        guest_call_infallible!(self, identity, "has-cluster-id", |g, store| g
            .call_has_cluster_id(store))
    }
}

/// `cloudprovider.InstancesV2`.
#[derive(Clone, Copy)]
pub struct InstancesV2<'a>(pub(super) &'a Provider);

impl InstancesV2<'_> {
    /// See `instances-v2.instance-exists` in the WIT contract.
    pub async fn instance_exists(&self, node: &Node) -> Result<bool, ProviderError> {
        guest_call!(self.0, instances_v2, "instance-exists", |g, store| g
            .call_instance_exists(store, node))
    }

    /// See `instances-v2.instance-shutdown`.
    pub async fn instance_shutdown(&self, node: &Node) -> Result<bool, ProviderError> {
        guest_call!(self.0, instances_v2, "instance-shutdown", |g, store| g
            .call_instance_shutdown(store, node))
    }

    /// See `instances-v2.instance-metadata`.
    pub async fn instance_metadata(&self, node: &Node) -> Result<InstanceInfo, ProviderError> {
        guest_call!(self.0, instances_v2, "instance-metadata", |g, store| g
            .call_instance_metadata(store, node))
    }
}

/// Legacy `cloudprovider.Instances`.
#[derive(Clone, Copy)]
pub struct Instances<'a>(pub(super) &'a Provider);

impl Instances<'_> {
    pub async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>, ProviderError> {
        guest_call!(self.0, instances, "node-addresses", |g, store| g
            .call_node_addresses(store, node_name))
    }

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

    pub async fn instance_id(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, instances, "instance-id", |g, store| g
            .call_instance_id(store, node_name))
    }

    pub async fn instance_type(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, instances, "instance-type", |g, store| g
            .call_instance_type(store, node_name))
    }

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

    pub async fn current_node_name(&self, hostname: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, instances, "current-node-name", |g, store| g
            .call_current_node_name(store, hostname))
    }

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

/// `cloudprovider.Zones`.
#[derive(Clone, Copy)]
pub struct Zones<'a>(pub(super) &'a Provider);

impl Zones<'_> {
    pub async fn get_zone(&self) -> Result<Zone, ProviderError> {
        guest_call!(self.0, zones, "get-zone", |g, store| g.call_get_zone(store))
    }

    pub async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone, ProviderError> {
        guest_call!(self.0, zones, "get-zone-by-provider-id", |g, store| g
            .call_get_zone_by_provider_id(store, provider_id))
    }

    pub async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone, ProviderError> {
        guest_call!(self.0, zones, "get-zone-by-node-name", |g, store| g
            .call_get_zone_by_node_name(store, node_name))
    }
}

/// `cloudprovider.LoadBalancer`.
#[derive(Clone, Copy)]
pub struct LoadBalancer<'a>(pub(super) &'a Provider);

impl LoadBalancer<'_> {
    /// The load balancer's status, or `None` when it does not exist.
    pub async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        guest_call!(self.0, load_balancer, "get-load-balancer", |g, store| g
            .call_get_load_balancer(store, cluster_name, service))
    }

    pub async fn get_load_balancer_name(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<String, ProviderError> {
        let mut lease = self.0.pool().acquire().await?;
        let outcome = {
            let (store, guests, deadline) = lease.arm();
            let g = guests
                .load_balancer
                .as_ref()
                .expect("interface handles exist only for exported interfaces");
            tokio::time::timeout(
                deadline,
                g.call_get_load_balancer_name(store, cluster_name, service),
            )
            .await
            .map(|r| r.map(Ok::<_, Infallible>))
        };
        lease.settle("get-load-balancer-name", outcome)
    }

    pub async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        guest_call!(self.0, load_balancer, "ensure-load-balancer", |g, store| g
            .call_ensure_load_balancer(store, cluster_name, service, nodes))
    }

    pub async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, load_balancer, "update-load-balancer", |g, store| g
            .call_update_load_balancer(store, cluster_name, service, nodes))
    }

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

/// `cloudprovider.Routes`.
#[derive(Clone, Copy)]
pub struct Routes<'a>(pub(super) &'a Provider);

impl Routes<'_> {
    pub async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>, ProviderError> {
        guest_call!(self.0, routes, "list-routes", |g, store| g
            .call_list_routes(store, cluster_name))
    }

    pub async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, routes, "create-route", |g, store| g
            .call_create_route(store, cluster_name, name_hint, route))
    }

    pub async fn delete_route(
        &self,
        cluster_name: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, routes, "delete-route", |g, store| g
            .call_delete_route(store, cluster_name, route))
    }
}

/// `cloudprovider.Clusters`.
#[derive(Clone, Copy)]
pub struct Clusters<'a>(pub(super) &'a Provider);

impl Clusters<'_> {
    pub async fn list_clusters(&self) -> Result<Vec<String>, ProviderError> {
        guest_call!(self.0, clusters, "list-clusters", |g, store| g
            .call_list_clusters(store))
    }

    pub async fn master(&self, cluster_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, clusters, "master", |g, store| g
            .call_master(store, cluster_name))
    }
}
