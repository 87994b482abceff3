//! The typed provider API: one handle per optional interface, one async method per
//! WIT function. Every call borrows an instance from the pool, runs under the
//! provider's call deadline, and maps failures to [`ProviderError`].

use std::convert::Infallible;

use tracing::Instrument;

use super::Provider;
use super::error::ProviderError;
use super::pool::Guests;
use crate::bindings::types::{
    InstanceInfo, LoadBalancerStatus, Node, NodeAddress, Route, Service, Zone,
};

/// Runs one guest call inside a `provider_call` span: borrow an instance, arm the
/// deadline, call, settle (metrics, pool). `$getter` picks the typed export handle.
macro_rules! run_call {
    ($provider:expr, $interface:literal, $function:literal, |$gv:ident| $getter:expr, $wrap:expr, |$guest:ident, $store:ident| $call:expr) => {{
        let provider: &Provider = $provider;
        let span = tracing::debug_span!(
            "provider_call",
            provider = provider.name(),
            interface = $interface,
            function = $function
        );
        async {
            let started = std::time::Instant::now();
            let pool = provider.pool($function)?;
            let mut lease = match pool.acquire().await {
                Ok(lease) => lease,
                Err(err) => {
                    pool.record_unavailable($interface, $function, started);
                    return Err(err);
                }
            };
            let outcome = {
                let ($store, guests, deadline) = lease.arm();
                let $guest = {
                    let $gv: &Guests = guests;
                    $getter
                };
                tokio::time::timeout(deadline, $call).await.map($wrap)
            };
            lease.settle($interface, $function, started, outcome)
        }
        .instrument(span)
        .await
    }};
}

/// A call of a WIT function returning `result<_, cloud-error>`.
macro_rules! guest_call {
    ($provider:expr, $iface:ident, $interface:literal, $function:literal, |$guest:ident, $store:ident| $call:expr) => {
        run_call!(
            $provider,
            $interface,
            $function,
            |g| g
                .$iface
                .as_ref()
                .expect("interface handles exist only for exported interfaces"),
            |r| r,
            |$guest, $store| $call
        )
    };
}

/// A call of a WIT function that cannot return a cloud error.
macro_rules! guest_call_infallible {
    ($provider:expr, |$gv:ident| $getter:expr, $interface:literal, $function:literal, |$guest:ident, $store:ident| $call:expr) => {
        run_call!(
            $provider,
            $interface,
            $function,
            |$gv| $getter,
            |r: wasmtime::Result<_>| r.map(Ok::<_, Infallible>),
            |$guest, $store| $call
        )
    };
}

impl Provider {
    /// `identity.provider-name`, called on a pooled instance (the cached value is
    /// [`Provider::name`]).
    pub async fn call_provider_name(&self) -> Result<String, ProviderError> {
        guest_call_infallible!(
            self,
            |g| &g.identity,
            "identity",
            "provider-name",
            |g, store| g.call_provider_name(store)
        )
    }

    /// `identity.has-cluster-id`, called on a pooled instance.
    pub async fn call_has_cluster_id(&self) -> Result<bool, ProviderError> {
        guest_call_infallible!(
            self,
            |g| &g.identity,
            "identity",
            "has-cluster-id",
            |g, store| g.call_has_cluster_id(store)
        )
    }
}

/// `cloudprovider.InstancesV2`.
#[derive(Clone, Copy)]
pub struct InstancesV2<'a>(pub(super) &'a Provider);

impl InstancesV2<'_> {
    /// See `instances-v2.instance-exists` in the WIT contract.
    pub async fn instance_exists(&self, node: &Node) -> Result<bool, ProviderError> {
        if let Some(native) = self.0.native_instances() {
            return self
                .0
                .native_call("instance-exists", native.instance_exists(node))
                .await;
        }
        guest_call!(
            self.0,
            instances_v2,
            "instances-v2",
            "instance-exists",
            |g, store| g.call_instance_exists(store, node)
        )
    }

    /// See `instances-v2.instance-shutdown`.
    pub async fn instance_shutdown(&self, node: &Node) -> Result<bool, ProviderError> {
        if let Some(native) = self.0.native_instances() {
            return self
                .0
                .native_call("instance-shutdown", native.instance_shutdown(node))
                .await;
        }
        guest_call!(
            self.0,
            instances_v2,
            "instances-v2",
            "instance-shutdown",
            |g, store| g.call_instance_shutdown(store, node)
        )
    }

    /// See `instances-v2.instance-metadata`.
    pub async fn instance_metadata(&self, node: &Node) -> Result<InstanceInfo, ProviderError> {
        if let Some(native) = self.0.native_instances() {
            return self
                .0
                .native_call("instance-metadata", native.instance_metadata(node))
                .await;
        }
        guest_call!(
            self.0,
            instances_v2,
            "instances-v2",
            "instance-metadata",
            |g, store| g.call_instance_metadata(store, node)
        )
    }
}

/// Legacy `cloudprovider.Instances`.
#[derive(Clone, Copy)]
pub struct Instances<'a>(pub(super) &'a Provider);

impl Instances<'_> {
    pub async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instances",
            "node-addresses",
            |g, store| g.call_node_addresses(store, node_name)
        )
    }

    pub async fn node_addresses_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<Vec<NodeAddress>, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instances",
            "node-addresses-by-provider-id",
            |g, store| g.call_node_addresses_by_provider_id(store, provider_id)
        )
    }

    pub async fn instance_id(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, instances, "instances", "instance-id", |g, store| g
            .call_instance_id(store, node_name))
    }

    pub async fn instance_type(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instances",
            "instance-type",
            |g, store| g.call_instance_type(store, node_name)
        )
    }

    pub async fn instance_type_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<String, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instances",
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
            "instances",
            "add-ssh-key-to-all-instances",
            |g, store| g.call_add_ssh_key_to_all_instances(store, user, key_data)
        )
    }

    pub async fn current_node_name(&self, hostname: &str) -> Result<String, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instances",
            "current-node-name",
            |g, store| g.call_current_node_name(store, hostname)
        )
    }

    pub async fn instance_exists_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<bool, ProviderError> {
        guest_call!(
            self.0,
            instances,
            "instances",
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
            "instances",
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
        guest_call!(self.0, zones, "zones", "get-zone", |g, store| g
            .call_get_zone(store))
    }

    pub async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone, ProviderError> {
        guest_call!(
            self.0,
            zones,
            "zones",
            "get-zone-by-provider-id",
            |g, store| g.call_get_zone_by_provider_id(store, provider_id)
        )
    }

    pub async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone, ProviderError> {
        guest_call!(
            self.0,
            zones,
            "zones",
            "get-zone-by-node-name",
            |g, store| g.call_get_zone_by_node_name(store, node_name)
        )
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
        guest_call!(
            self.0,
            load_balancer,
            "load-balancer",
            "get-load-balancer",
            |g, store| g.call_get_load_balancer(store, cluster_name, service)
        )
    }

    pub async fn get_load_balancer_name(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<String, ProviderError> {
        guest_call_infallible!(
            self.0,
            |g| g
                .load_balancer
                .as_ref()
                .expect("interface handles exist only for exported interfaces"),
            "load-balancer",
            "get-load-balancer-name",
            |g, store| g.call_get_load_balancer_name(store, cluster_name, service)
        )
    }

    pub async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        guest_call!(
            self.0,
            load_balancer,
            "load-balancer",
            "ensure-load-balancer",
            |g, store| g.call_ensure_load_balancer(store, cluster_name, service, nodes)
        )
    }

    pub async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<(), ProviderError> {
        guest_call!(
            self.0,
            load_balancer,
            "load-balancer",
            "update-load-balancer",
            |g, store| g.call_update_load_balancer(store, cluster_name, service, nodes)
        )
    }

    pub async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<(), ProviderError> {
        guest_call!(
            self.0,
            load_balancer,
            "load-balancer",
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
        guest_call!(self.0, routes, "routes", "list-routes", |g, store| g
            .call_list_routes(store, cluster_name))
    }

    pub async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, routes, "routes", "create-route", |g, store| g
            .call_create_route(store, cluster_name, name_hint, route))
    }

    pub async fn delete_route(
        &self,
        cluster_name: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, routes, "routes", "delete-route", |g, store| g
            .call_delete_route(store, cluster_name, route))
    }
}

/// `cloudprovider.Clusters`.
#[derive(Clone, Copy)]
pub struct Clusters<'a>(pub(super) &'a Provider);

impl Clusters<'_> {
    pub async fn list_clusters(&self) -> Result<Vec<String>, ProviderError> {
        guest_call!(self.0, clusters, "clusters", "list-clusters", |g, store| g
            .call_list_clusters(store))
    }

    pub async fn master(&self, cluster_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, clusters, "clusters", "master", |g, store| g
            .call_master(store, cluster_name))
    }
}
