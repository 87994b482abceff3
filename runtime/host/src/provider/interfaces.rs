//! The optional interfaces of the contract: **the** table (one row each), the export
//! lookups and handles of each contract version, then each interface's typed call
//! handle, one async method per WIT function.
//!
//! Adding an interface to the contract means: the WIT file, one row here (and in the
//! current version's `guest_exports!`), its handle's methods below, and the controller
//! manager's cloud seam. Inspection, `check`, the export lookups, the pool and the
//! [`Provider`] accessors follow from the row.
//!
//! Every call borrows an instance from the provider's pool, runs under the provider's
//! call deadline inside a `provider_call` span, and maps failures to [`ProviderError`].
//! A method names the call for each contract version: a 0.1 component gets its
//! arguments through the adapter in [`crate::contract::v0_1`] (`down`) and its answers are
//! converted back.

use super::call::guest_call;
use super::{Provider, ProviderError};
use crate::capabilities::ObjectRef;
use crate::contract::types::{
    BoolAnswer, InstanceInfo, LoadBalancerStatus, MetadataAnswer, Node, NodeAddress, Route,
    Service, Zone,
};
use crate::contract::v0_1::down;

interface_table! {
    /// `cloudprovider.InstancesV2`: instance existence, shutdown and metadata by Node.
    InstancesV2 => instances_v2, "instances-v2", InstancesV2;
    /// `instances-v2`'s three questions for many Nodes in one call (contract 0.2).
    InstancesBatch => instances_batch, "instances-batch", InstancesBatch;
    /// Legacy `cloudprovider.Instances`, by node name or provider ID.
    Instances => instances, "instances", Instances;
    /// `cloudprovider.Zones` (used only with legacy `instances`).
    Zones => zones, "zones", Zones;
    /// `cloudprovider.LoadBalancer`: load balancers for Services.
    LoadBalancer => load_balancer, "load-balancer", LoadBalancer;
    /// `LoadBalancer.GetLoadBalancerName`, when the provider's names are not upstream's
    /// default (its own interface since contract 0.2; part of `load-balancer` in 0.1).
    LoadBalancerName => load_balancer_name, "load-balancer-name", LoadBalancerName;
    /// `cloudprovider.Routes`: cloud routes for Node pod CIDRs.
    Routes => routes, "routes", Routes;
    /// `cloudprovider.Clusters`.
    Clusters => clusters, "clusters", Clusters;
}

/// The current contract's export lookups and handles.
pub(crate) mod exports_v0_3 {
    use crate::contract::bindings;

    guest_exports! {
        instances_v2 => InstancesV2, "instances-v2";
        instances_batch => InstancesBatch, "instances-batch";
        instances => Instances, "instances";
        zones => Zones, "zones";
        load_balancer => LoadBalancer, "load-balancer";
        load_balancer_name => LoadBalancerName, "load-balancer-name";
        routes => Routes, "routes";
        clusters => Clusters, "clusters";
    }
}

/// Contract 0.2's export lookups and handles (its records are the current ones).
pub(crate) mod exports_v0_2 {
    use crate::contract::v0_2::bindings;

    guest_exports! {
        instances_v2 => InstancesV2, "instances-v2";
        instances_batch => InstancesBatch, "instances-batch";
        instances => Instances, "instances";
        zones => Zones, "zones";
        load_balancer => LoadBalancer, "load-balancer";
        load_balancer_name => LoadBalancerName, "load-balancer-name";
        routes => Routes, "routes";
        clusters => Clusters, "clusters";
    }
}

/// Contract 0.1's export lookups and handles.
pub(crate) mod exports_v0_1 {
    use crate::contract::v0_1::bindings;

    guest_exports! {
        instances_v2 => InstancesV2, "instances-v2";
        instances => Instances, "instances";
        zones => Zones, "zones";
        load_balancer => LoadBalancer, "load-balancer";
        routes => Routes, "routes";
        clusters => Clusters, "clusters";
    }
}

/// Export lookups of a compiled component, for the contract version it was built against.
#[derive(Clone)]
pub(crate) enum Indices {
    /// Built against 0.1 (adapted).
    V0_1(exports_v0_1::Indices),
    /// Built against 0.2.
    V0_2(exports_v0_2::Indices),
    /// Built against the current contract.
    V0_3(exports_v0_3::Indices),
}

/// Typed export handles of one instance.
pub(crate) enum Guests {
    /// Built against 0.1 (adapted).
    V0_1(exports_v0_1::Guests),
    /// Built against 0.2.
    V0_2(exports_v0_2::Guests),
    /// Built against the current contract.
    V0_3(exports_v0_3::Guests),
}

impl Indices {
    /// The lookups of `identity` and of every interface in `exports`, for `version`.
    pub(crate) fn new(
        pre: &wasmtime::component::InstancePre<crate::capabilities::HostState>,
        version: crate::contract::Version,
        exports: super::Exports,
    ) -> Result<Self, super::ContractMismatch> {
        Ok(match version {
            crate::contract::Version::V0_1 => Self::V0_1(exports_v0_1::Indices::new(pre, exports)?),
            crate::contract::Version::V0_2 => Self::V0_2(exports_v0_2::Indices::new(pre, exports)?),
            crate::contract::Version::V0_3 => Self::V0_3(exports_v0_3::Indices::new(pre, exports)?),
        })
    }

    /// The typed handles of `instance`.
    pub(crate) fn load(
        &self,
        store: &mut wasmtime::Store<crate::capabilities::HostState>,
        instance: &wasmtime::component::Instance,
    ) -> Result<Guests, super::ContractMismatch> {
        Ok(match self {
            Self::V0_1(i) => Guests::V0_1(i.load(store, instance)?),
            Self::V0_2(i) => Guests::V0_2(i.load(store, instance)?),
            Self::V0_3(i) => Guests::V0_3(i.load(store, instance)?),
        })
    }
}

impl Guests {
    /// `identity.provider-name`.
    pub(crate) async fn call_provider_name(
        &self,
        store: &mut wasmtime::Store<crate::capabilities::HostState>,
    ) -> wasmtime::Result<String> {
        match self {
            Self::V0_1(g) => g.identity.call_provider_name(store).await,
            Self::V0_2(g) => g.identity.call_provider_name(store).await,
            Self::V0_3(g) => g.identity.call_provider_name(store).await,
        }
    }

    /// `identity.initialize`.
    pub(crate) async fn call_initialize(
        &self,
        store: &mut wasmtime::Store<crate::capabilities::HostState>,
        cloud_config: &[u8],
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Self::V0_1(g) => g.identity.call_initialize(store, cloud_config).await,
            Self::V0_2(g) => g.identity.call_initialize(store, cloud_config).await,
            Self::V0_3(g) => g.identity.call_initialize(store, cloud_config).await,
        }
    }
}

fn node_ref(node: &Node) -> Vec<ObjectRef> {
    vec![ObjectRef::node(&node.metadata)]
}

fn nodes_ref(nodes: &[Node]) -> Vec<ObjectRef> {
    nodes.iter().map(|n| ObjectRef::node(&n.metadata)).collect()
}

fn service_ref(service: &Service) -> Vec<ObjectRef> {
    vec![ObjectRef::service(&service.metadata)]
}

impl Provider {
    /// `identity.provider-name`, called on a pooled instance (the cached value is
    /// [`Provider::name`]).
    pub async fn call_provider_name(&self) -> Result<String, ProviderError> {
        guest_call!(infallible self, "identity", "provider-name", about Vec::new(), |g, store| {
            current => g.identity.call_provider_name(store),
            v0_1 => g.identity.call_provider_name(store),
        })
    }

    /// `identity.has-cluster-id`, called on a pooled instance.
    pub async fn call_has_cluster_id(&self) -> Result<bool, ProviderError> {
        guest_call!(infallible self, "identity", "has-cluster-id", about Vec::new(), |g, store| {
            current => g.identity.call_has_cluster_id(store),
            v0_1 => g.identity.call_has_cluster_id(store),
        })
    }

    /// `identity.declined-interfaces` (contract 0.3), called on a pooled instance; an
    /// older component declines nothing.
    pub async fn call_declined_interfaces(&self) -> Result<Vec<String>, ProviderError> {
        if self.contract_version() < crate::contract::Version::V0_3 {
            return Ok(Vec::new());
        }
        guest_call!(infallible self, "identity", "declined-interfaces", about Vec::new(), |g, store| {
            since_v0_3 => g.identity.call_declined_interfaces(store),
        })
    }
}

impl InstancesV2<'_> {
    /// `instance-exists`: false only when the instance definitely does not exist.
    pub async fn instance_exists(&self, node: &Node) -> Result<bool, ProviderError> {
        guest_call!(self.0, "instance-exists", about node_ref(node), |g, store| {
            current => g.instances_v2().call_instance_exists(store, node),
            v0_1 => g.instances_v2().call_instance_exists(store, &down(node)),
        })
    }

    /// `instance-shutdown`.
    pub async fn instance_shutdown(&self, node: &Node) -> Result<bool, ProviderError> {
        guest_call!(self.0, "instance-shutdown", about node_ref(node), |g, store| {
            current => g.instances_v2().call_instance_shutdown(store, node),
            v0_1 => g.instances_v2().call_instance_shutdown(store, &down(node)),
        })
    }

    /// `instance-metadata`.
    pub async fn instance_metadata(&self, node: &Node) -> Result<InstanceInfo, ProviderError> {
        guest_call!(self.0, "instance-metadata", about node_ref(node), |g, store| {
            current => g.instances_v2().call_instance_metadata(store, node),
            v0_1 => g.instances_v2().call_instance_metadata(store, &down(node)),
        })
    }
}

impl InstancesBatch<'_> {
    /// `instances-exist`: one answer per node, in order. An answer of another length is
    /// an error (see [`check_answers`]).
    pub async fn instances_exist(&self, nodes: &[Node]) -> Result<Vec<BoolAnswer>, ProviderError> {
        let answers = guest_call!(self.0, "instances-exist", about nodes_ref(nodes), |g, store| {
            current => g.instances_batch().call_instances_exist(store, nodes),
            v0_1 => unsupported,
        })?;
        check_answers(self.0, "instances-exist", nodes.len(), answers)
    }

    /// `instances-shutdown`: one answer per node, in order.
    pub async fn instances_shutdown(
        &self,
        nodes: &[Node],
    ) -> Result<Vec<BoolAnswer>, ProviderError> {
        let answers = guest_call!(self.0, "instances-shutdown", about nodes_ref(nodes), |g, store| {
            current => g.instances_batch().call_instances_shutdown(store, nodes),
            v0_1 => unsupported,
        })?;
        check_answers(self.0, "instances-shutdown", nodes.len(), answers)
    }

    /// `instances-metadata`: one answer per node, in order.
    pub async fn instances_metadata(
        &self,
        nodes: &[Node],
    ) -> Result<Vec<MetadataAnswer>, ProviderError> {
        let answers = guest_call!(self.0, "instances-metadata", about nodes_ref(nodes), |g, store| {
            current => g.instances_batch().call_instances_metadata(store, nodes),
            v0_1 => unsupported,
        })?;
        check_answers(self.0, "instances-metadata", nodes.len(), answers)
    }
}

/// A batch answer must hold one entry per node asked about: anything else cannot be
/// matched to the nodes, so the whole batch fails (no node is judged on a guess).
fn check_answers<T>(
    provider: &Provider,
    function: &'static str,
    asked: usize,
    answers: Vec<T>,
) -> Result<Vec<T>, ProviderError> {
    if answers.len() == asked {
        return Ok(answers);
    }
    Err(ProviderError::Cloud {
        provider: provider.name().to_owned(),
        function,
        error: crate::provider::CloudError::Other(format!(
            "answered {} entries for {asked} nodes; a batch answer has one entry per node",
            answers.len()
        )),
    })
}

impl Instances<'_> {
    /// `node-addresses`.
    pub async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>, ProviderError> {
        guest_call!(self.0, "node-addresses", about Vec::new(), |g, store| {
            current => g.instances().call_node_addresses(store, node_name),
            v0_1 => g.instances().call_node_addresses(store, node_name),
        })
    }

    /// `node-addresses-by-provider-id`.
    pub async fn node_addresses_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<Vec<NodeAddress>, ProviderError> {
        guest_call!(self.0, "node-addresses-by-provider-id", about Vec::new(), |g, store| {
            current => g.instances().call_node_addresses_by_provider_id(store, provider_id),
            v0_1 => g.instances().call_node_addresses_by_provider_id(store, provider_id),
        })
    }

    /// `instance-id`.
    pub async fn instance_id(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, "instance-id", about Vec::new(), |g, store| {
            current => g.instances().call_instance_id(store, node_name),
            v0_1 => g.instances().call_instance_id(store, node_name),
        })
    }

    /// `instance-type`.
    pub async fn instance_type(&self, node_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, "instance-type", about Vec::new(), |g, store| {
            current => g.instances().call_instance_type(store, node_name),
            v0_1 => g.instances().call_instance_type(store, node_name),
        })
    }

    /// `instance-type-by-provider-id`.
    pub async fn instance_type_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<String, ProviderError> {
        guest_call!(self.0, "instance-type-by-provider-id", about Vec::new(), |g, store| {
            current => g.instances().call_instance_type_by_provider_id(store, provider_id),
            v0_1 => g.instances().call_instance_type_by_provider_id(store, provider_id),
        })
    }

    /// `add-ssh-key-to-all-instances`.
    pub async fn add_ssh_key_to_all_instances(
        &self,
        user: &str,
        key_data: &[u8],
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, "add-ssh-key-to-all-instances", about Vec::new(), |g, store| {
            current => g.instances().call_add_ssh_key_to_all_instances(store, user, key_data),
            v0_1 => g.instances().call_add_ssh_key_to_all_instances(store, user, key_data),
        })
    }

    /// `current-node-name`.
    pub async fn current_node_name(&self, hostname: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, "current-node-name", about Vec::new(), |g, store| {
            current => g.instances().call_current_node_name(store, hostname),
            v0_1 => g.instances().call_current_node_name(store, hostname),
        })
    }

    /// `instance-exists-by-provider-id`.
    pub async fn instance_exists_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<bool, ProviderError> {
        guest_call!(self.0, "instance-exists-by-provider-id", about Vec::new(), |g, store| {
            current => g.instances().call_instance_exists_by_provider_id(store, provider_id),
            v0_1 => g.instances().call_instance_exists_by_provider_id(store, provider_id),
        })
    }

    /// `instance-shutdown-by-provider-id`.
    pub async fn instance_shutdown_by_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<bool, ProviderError> {
        guest_call!(self.0, "instance-shutdown-by-provider-id", about Vec::new(), |g, store| {
            current => g.instances().call_instance_shutdown_by_provider_id(store, provider_id),
            v0_1 => g.instances().call_instance_shutdown_by_provider_id(store, provider_id),
        })
    }
}

impl Zones<'_> {
    /// `get-zone`: the zone of the machine the caller runs on.
    pub async fn get_zone(&self) -> Result<Zone, ProviderError> {
        guest_call!(self.0, "get-zone", about Vec::new(), |g, store| {
            current => g.zones().call_get_zone(store),
            v0_1 => g.zones().call_get_zone(store),
        })
    }

    /// `get-zone-by-provider-id`.
    pub async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone, ProviderError> {
        guest_call!(self.0, "get-zone-by-provider-id", about Vec::new(), |g, store| {
            current => g.zones().call_get_zone_by_provider_id(store, provider_id),
            v0_1 => g.zones().call_get_zone_by_provider_id(store, provider_id),
        })
    }

    /// `get-zone-by-node-name`.
    pub async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone, ProviderError> {
        guest_call!(self.0, "get-zone-by-node-name", about Vec::new(), |g, store| {
            current => g.zones().call_get_zone_by_node_name(store, node_name),
            v0_1 => g.zones().call_get_zone_by_node_name(store, node_name),
        })
    }
}

impl LoadBalancer<'_> {
    /// `get-load-balancer`: the load balancer's status, or `None` when it does not exist.
    pub async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        guest_call!(self.0, "get-load-balancer", about service_ref(service), |g, store| {
            current => g.load_balancer().call_get_load_balancer(store, cluster_name, service),
            v0_1 => g.load_balancer().call_get_load_balancer(store, cluster_name, &down(service)),
        })
    }

    /// `ensure-load-balancer`.
    pub async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        guest_call!(self.0, "ensure-load-balancer", about service_ref(service), |g, store| {
            current => g.load_balancer().call_ensure_load_balancer(store, cluster_name, service, nodes),
            v0_1 => g.load_balancer().call_ensure_load_balancer(
                store, cluster_name, &down(service), &down::<_, Vec<_>>(nodes.to_vec())),
        })
    }

    /// `update-load-balancer`.
    pub async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, "update-load-balancer", about service_ref(service), |g, store| {
            current => g.load_balancer().call_update_load_balancer(store, cluster_name, service, nodes),
            v0_1 => g.load_balancer().call_update_load_balancer(
                store, cluster_name, &down(service), &down::<_, Vec<_>>(nodes.to_vec())),
        })
    }

    /// `ensure-load-balancer-deleted`.
    pub async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, "ensure-load-balancer-deleted", about service_ref(service), |g, store| {
            current => g.load_balancer().call_ensure_load_balancer_deleted(store, cluster_name, service),
            v0_1 => g.load_balancer().call_ensure_load_balancer_deleted(store, cluster_name, &down(service)),
        })
    }
}

impl LoadBalancerName<'_> {
    /// `get-load-balancer-name` (a 0.1 component answers with its `load-balancer`'s).
    pub async fn get_load_balancer_name(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<String, ProviderError> {
        guest_call!(infallible self.0, "load-balancer-name", "get-load-balancer-name",
            about service_ref(service), |g, store| {
            current => g.load_balancer_name().call_get_load_balancer_name(store, cluster_name, service),
            v0_1 => g.load_balancer().call_get_load_balancer_name(store, cluster_name, &down(service)),
        })
    }
}

impl Routes<'_> {
    /// `list-routes`.
    pub async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>, ProviderError> {
        guest_call!(self.0, "list-routes", about Vec::new(), |g, store| {
            current => g.routes().call_list_routes(store, cluster_name),
            v0_1 => g.routes().call_list_routes(store, cluster_name),
        })
    }

    /// `create-route`.
    pub async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, "create-route", about Vec::new(), |g, store| {
            current => g.routes().call_create_route(store, cluster_name, name_hint, route),
            v0_1 => g.routes().call_create_route(store, cluster_name, name_hint, &down(route)),
        })
    }

    /// `delete-route`.
    pub async fn delete_route(
        &self,
        cluster_name: &str,
        route: &Route,
    ) -> Result<(), ProviderError> {
        guest_call!(self.0, "delete-route", about Vec::new(), |g, store| {
            current => g.routes().call_delete_route(store, cluster_name, route),
            v0_1 => g.routes().call_delete_route(store, cluster_name, &down(route)),
        })
    }
}

impl Clusters<'_> {
    /// `list-clusters`.
    pub async fn list_clusters(&self) -> Result<Vec<String>, ProviderError> {
        guest_call!(self.0, "list-clusters", about Vec::new(), |g, store| {
            current => g.clusters().call_list_clusters(store),
            v0_1 => g.clusters().call_list_clusters(store),
        })
    }

    /// `master`.
    pub async fn master(&self, cluster_name: &str) -> Result<String, ProviderError> {
        guest_call!(self.0, "master", about Vec::new(), |g, store| {
            current => g.clusters().call_master(store, cluster_name),
            v0_1 => g.clusters().call_master(store, cluster_name),
        })
    }
}
