//! A provider as a plain struct: [`Provider`] builds it from the cloud config, one
//! trait per contract interface answers the calls with `&self`, and
//! [`export_provider!`](crate::export_provider) exports it.
//!
//! The host calls `initialize` once per instance, then the exports; the macro keeps
//! the value `initialize` built and answers calls made before it with an error. The
//! struct holds whatever the provider needs between calls (clients, caches in a
//! `RefCell`): an instance runs one call at a time.
//!
//! ```ignore
//! wasm_ccm_guest::export_provider!(MyCloud with_types_in bindings,
//!     exports: [instances_v2, load_balancer, routes]);
//! ```
//!
//! `exports` lists the interfaces the provider's world exports (`instances_v2`,
//! `instances_batch`, `instances`, `zones`, `load_balancer`, `load_balancer_name`,
//! `routes`, `clusters`); `identity` is always exported. The bindings must take the contract's types from this crate:
//! `with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types }`.

use crate::types::{
    BoolAnswer, CloudError, InstanceInfo, LoadBalancerStatus, MetadataAnswer, Node, NodeAddress,
    Route, Service, Zone,
};

/// The required part of every provider: `identity`.
pub trait Provider: Sized + 'static {
    /// The provider name, for example `simcloud`: `--cloud-provider` selects it and
    /// provider IDs are `<NAME>://...`.
    const NAME: &'static str;

    /// Builds the provider from the bytes of the `--cloud-config` file (empty when
    /// none). The error says why the configuration is unusable, naming the field.
    fn initialize(cloud_config: &[u8]) -> Result<Self, String>;

    /// True when the provider tags its resources with a cluster ID.
    fn has_cluster_id(&self) -> bool {
        true
    }

    /// Exported interfaces this configuration turns off, by WIT name (e.g.
    /// `"load-balancer"` for a cloud config that disables load balancers): the host
    /// treats them as not exported, so their controllers do not run. Asked once, after
    /// [`initialize`](Self::initialize); a name the provider does not export fails the
    /// load. None by default.
    fn declined_interfaces(&self) -> Vec<&'static str> {
        Vec::new()
    }
}

/// `instances-v2` (`cloudprovider.InstancesV2`).
pub trait InstancesV2 {
    /// True if the node's instance exists; false only when it is definitely gone.
    fn instance_exists(&self, node: Node) -> Result<bool, CloudError>;
    /// True if the node's instance is shut down (stopped, not terminated).
    fn instance_shutdown(&self, node: Node) -> Result<bool, CloudError>;
    /// Provider ID, type, addresses, zone, region and labels of the node's instance.
    fn instance_metadata(&self, node: Node) -> Result<InstanceInfo, CloudError>;
}

/// `instances-batch`: `instances-v2`'s questions for many nodes in one call, answered
/// with as few cloud requests as the cloud allows (one paged list, not one lookup per
/// node). One answer per node, in the order given; a node's own error (e.g.
/// `InstanceNotFound`) is its answer, the outer error fails the whole batch.
///
/// The defaults ask [`InstancesV2`] per node, so a provider overrides the ones its
/// cloud can answer in bulk.
pub trait InstancesBatch: InstancesV2 {
    /// [`InstancesV2::instance_exists`] for each node.
    fn instances_exist(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(nodes.into_iter().map(|n| self.instance_exists(n)).collect())
    }
    /// [`InstancesV2::instance_shutdown`] for each node.
    fn instances_shutdown(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(nodes
            .into_iter()
            .map(|n| self.instance_shutdown(n))
            .collect())
    }
    /// [`InstancesV2::instance_metadata`] for each node.
    fn instances_metadata(&self, nodes: Vec<Node>) -> Result<Vec<MetadataAnswer>, CloudError> {
        Ok(nodes
            .into_iter()
            .map(|n| self.instance_metadata(n))
            .collect())
    }
}

/// The legacy `instances` (`cloudprovider.Instances`).
pub trait Instances {
    /// Addresses of the instance backing the named node.
    fn node_addresses(&self, node_name: String) -> Result<Vec<NodeAddress>, CloudError>;
    /// Addresses of the instance with this provider ID.
    fn node_addresses_by_provider_id(
        &self,
        provider_id: String,
    ) -> Result<Vec<NodeAddress>, CloudError>;
    /// The cloud's instance ID for the named node.
    fn instance_id(&self, node_name: String) -> Result<String, CloudError>;
    /// The instance type of the named node.
    fn instance_type(&self, node_name: String) -> Result<String, CloudError>;
    /// The instance type of the instance with this provider ID.
    fn instance_type_by_provider_id(&self, provider_id: String) -> Result<String, CloudError>;
    /// Adds an SSH key to all instances: `not-implemented` unless overridden.
    fn add_ssh_key_to_all_instances(
        &self,
        _user: String,
        _key_data: Vec<u8>,
    ) -> Result<(), CloudError> {
        Err(CloudError::NotImplemented)
    }
    /// The node name the instance with this hostname registers as: the hostname
    /// unless overridden (what most upstream providers answer).
    fn current_node_name(&self, hostname: String) -> Result<String, CloudError> {
        Ok(hostname)
    }
    /// Whether the instance with this provider ID exists.
    fn instance_exists_by_provider_id(&self, provider_id: String) -> Result<bool, CloudError>;
    /// Whether the instance with this provider ID is shut down.
    fn instance_shutdown_by_provider_id(&self, provider_id: String) -> Result<bool, CloudError>;
}

/// `zones` (`cloudprovider.Zones`), used with the legacy `instances`.
pub trait Zones {
    /// The zone of the machine the controller manager runs on.
    fn get_zone(&self) -> Result<Zone, CloudError>;
    /// The zone of the instance with this provider ID.
    fn get_zone_by_provider_id(&self, provider_id: String) -> Result<Zone, CloudError>;
    /// The zone of the instance backing the named node.
    fn get_zone_by_node_name(&self, node_name: String) -> Result<Zone, CloudError>;
}

/// `load-balancer` (`cloudprovider.LoadBalancer`).
pub trait LoadBalancer {
    /// The status of the Service's load balancer, or `None` when it does not exist.
    fn get_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError>;
    /// Creates or updates the load balancer; must be idempotent.
    fn ensure_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError>;
    /// Points an existing load balancer at a new set of nodes.
    fn update_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<(), CloudError>;
    /// Deletes the load balancer; succeeds when it is already gone.
    fn ensure_load_balancer_deleted(
        &self,
        cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError>;
}

/// `load-balancer-name`: for a provider whose load balancer names are not upstream's
/// default; without it the host uses [`default_load_balancer_name`].
pub trait LoadBalancerName {
    /// The cloud name of the Service's load balancer.
    fn get_load_balancer_name(&self, cluster_name: String, service: Service) -> String;
}

/// `routes` (`cloudprovider.Routes`).
pub trait Routes {
    /// All routes of the cluster.
    fn list_routes(&self, cluster_name: String) -> Result<Vec<Route>, CloudError>;
    /// Creates a route; `name_hint` (the node UID) may name it.
    fn create_route(
        &self,
        cluster_name: String,
        name_hint: String,
        route: Route,
    ) -> Result<(), CloudError>;
    /// Deletes a route; succeeds when it is already gone.
    fn delete_route(&self, cluster_name: String, route: Route) -> Result<(), CloudError>;
}

/// `clusters` (`cloudprovider.Clusters`).
pub trait Clusters {
    /// Names of all clusters.
    fn list_clusters(&self) -> Result<Vec<String>, CloudError>;
    /// The address of the named cluster's control plane.
    fn master(&self, cluster_name: String) -> Result<String, CloudError>;
}

/// Upstream's `cloudprovider.DefaultLoadBalancerName`: `a` + the Service UID without
/// dashes, cut to 32 characters.
///
/// `6f1c4cc1-9b1c-4a35-8b54-5d9d2f6a7e01` → `a6f1c4cc19b1c4a358b545d9d2f6a7e0`.
pub fn default_load_balancer_name(service: &Service) -> String {
    name_from_uid(&service.metadata.uid)
}

fn name_from_uid(uid: &str) -> String {
    let mut name: String = std::iter::once('a')
        .chain(uid.chars().filter(|c| *c != '-'))
        .collect();
    name.truncate(32);
    name
}

/// The message of the error a call made before `initialize` gets.
#[doc(hidden)]
pub const NOT_INITIALIZED: &str = "the provider was called before initialize";

/// Exports a [`Provider`] and the interface traits it implements through the
/// provider's own wit-bindgen bindings (see [the module docs](crate::provider)).
#[macro_export]
macro_rules! export_provider {
    ($provider:ident with_types_in $bindings:ident $(, exports: [$($interface:ident),* $(,)?])? $(,)?) => {
        const _: () = {
            type P = $provider;
            ::std::thread_local! {
                static STATE: $crate::__private::RefCell<::std::option::Option<$crate::__private::Rc<P>>> =
                    const { $crate::__private::RefCell::new(::std::option::Option::None) };
            }
            fn state() -> ::std::option::Option<$crate::__private::Rc<P>> {
                STATE.with(|s| s.borrow().clone())
            }
            fn with<T>(
                f: impl ::std::ops::FnOnce(&P) -> ::std::result::Result<T, $crate::types::CloudError>,
            ) -> ::std::result::Result<T, $crate::types::CloudError> {
                match state() {
                    ::std::option::Option::Some(provider) => f(&provider),
                    ::std::option::Option::None => ::std::result::Result::Err(
                        $crate::types::CloudError::Other($crate::provider::NOT_INITIALIZED.into()),
                    ),
                }
            }
            struct Export;
            impl $bindings::exports::wasm_ccm::provider::identity::Guest for Export {
                fn provider_name() -> ::std::string::String {
                    <P as $crate::Provider>::NAME.into()
                }
                fn initialize(cloud_config: ::std::vec::Vec<u8>) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::log::install_panic_hook();
                    $crate::log::init();
                    let provider = <P as $crate::Provider>::initialize(&cloud_config)?;
                    STATE.with(|s| *s.borrow_mut() = ::std::option::Option::Some($crate::__private::Rc::new(provider)));
                    ::std::result::Result::Ok(())
                }
                fn has_cluster_id() -> bool {
                    state().is_some_and(|provider| $crate::Provider::has_cluster_id(&*provider))
                }
                fn declined_interfaces() -> ::std::vec::Vec<::std::string::String> {
                    state()
                        .map(|provider| {
                            $crate::Provider::declined_interfaces(&*provider)
                                .into_iter()
                                .map(::std::string::String::from)
                                .collect()
                        })
                        .unwrap_or_default()
                }
            }
            $($( $crate::__export_interface!($interface, Export, P, with, state, $bindings); )*)?
            $bindings::export!(Export with_types_in $bindings);
        };
    };
}

/// One interface's glue for [`export_provider!`]. Not public API.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_interface {
    (instances_v2, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::instances_v2::Guest for $export {
            fn instance_exists(
                node: $crate::types::Node,
            ) -> ::std::result::Result<bool, $crate::types::CloudError> {
                $with(|p| $crate::InstancesV2::instance_exists(p, node))
            }
            fn instance_shutdown(
                node: $crate::types::Node,
            ) -> ::std::result::Result<bool, $crate::types::CloudError> {
                $with(|p| $crate::InstancesV2::instance_shutdown(p, node))
            }
            fn instance_metadata(
                node: $crate::types::Node,
            ) -> ::std::result::Result<$crate::types::InstanceInfo, $crate::types::CloudError> {
                $with(|p| $crate::InstancesV2::instance_metadata(p, node))
            }
        }
    };
    (instances_batch, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::instances_batch::Guest for $export {
            fn instances_exist(
                nodes: ::std::vec::Vec<$crate::types::Node>,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::types::BoolAnswer>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::InstancesBatch::instances_exist(p, nodes))
            }
            fn instances_shutdown(
                nodes: ::std::vec::Vec<$crate::types::Node>,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::types::BoolAnswer>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::InstancesBatch::instances_shutdown(p, nodes))
            }
            fn instances_metadata(
                nodes: ::std::vec::Vec<$crate::types::Node>,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::types::MetadataAnswer>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::InstancesBatch::instances_metadata(p, nodes))
            }
        }
    };
    (load_balancer_name, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::load_balancer_name::Guest for $export {
            fn get_load_balancer_name(
                cluster_name: ::std::string::String,
                service: $crate::types::Service,
            ) -> ::std::string::String {
                match $state() {
                    ::std::option::Option::Some(p) => {
                        $crate::LoadBalancerName::get_load_balancer_name(&*p, cluster_name, service)
                    }
                    ::std::option::Option::None => $crate::default_load_balancer_name(&service),
                }
            }
        }
    };
    (instances, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::instances::Guest for $export {
            fn node_addresses(
                node_name: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::types::NodeAddress>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::Instances::node_addresses(p, node_name))
            }
            fn node_addresses_by_provider_id(
                provider_id: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::types::NodeAddress>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::Instances::node_addresses_by_provider_id(p, provider_id))
            }
            fn instance_id(
                node_name: ::std::string::String,
            ) -> ::std::result::Result<::std::string::String, $crate::types::CloudError> {
                $with(|p| $crate::Instances::instance_id(p, node_name))
            }
            fn instance_type(
                node_name: ::std::string::String,
            ) -> ::std::result::Result<::std::string::String, $crate::types::CloudError> {
                $with(|p| $crate::Instances::instance_type(p, node_name))
            }
            fn instance_type_by_provider_id(
                provider_id: ::std::string::String,
            ) -> ::std::result::Result<::std::string::String, $crate::types::CloudError> {
                $with(|p| $crate::Instances::instance_type_by_provider_id(p, provider_id))
            }
            fn add_ssh_key_to_all_instances(
                user: ::std::string::String,
                key_data: ::std::vec::Vec<u8>,
            ) -> ::std::result::Result<(), $crate::types::CloudError> {
                $with(|p| $crate::Instances::add_ssh_key_to_all_instances(p, user, key_data))
            }
            fn current_node_name(
                hostname: ::std::string::String,
            ) -> ::std::result::Result<::std::string::String, $crate::types::CloudError> {
                $with(|p| $crate::Instances::current_node_name(p, hostname))
            }
            fn instance_exists_by_provider_id(
                provider_id: ::std::string::String,
            ) -> ::std::result::Result<bool, $crate::types::CloudError> {
                $with(|p| $crate::Instances::instance_exists_by_provider_id(p, provider_id))
            }
            fn instance_shutdown_by_provider_id(
                provider_id: ::std::string::String,
            ) -> ::std::result::Result<bool, $crate::types::CloudError> {
                $with(|p| $crate::Instances::instance_shutdown_by_provider_id(p, provider_id))
            }
        }
    };
    (zones, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::zones::Guest for $export {
            fn get_zone() -> ::std::result::Result<$crate::types::Zone, $crate::types::CloudError> {
                $with(|p| $crate::Zones::get_zone(p))
            }
            fn get_zone_by_provider_id(
                provider_id: ::std::string::String,
            ) -> ::std::result::Result<$crate::types::Zone, $crate::types::CloudError> {
                $with(|p| $crate::Zones::get_zone_by_provider_id(p, provider_id))
            }
            fn get_zone_by_node_name(
                node_name: ::std::string::String,
            ) -> ::std::result::Result<$crate::types::Zone, $crate::types::CloudError> {
                $with(|p| $crate::Zones::get_zone_by_node_name(p, node_name))
            }
        }
    };
    (load_balancer, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::load_balancer::Guest for $export {
            fn get_load_balancer(
                cluster_name: ::std::string::String,
                service: $crate::types::Service,
            ) -> ::std::result::Result<
                ::std::option::Option<$crate::types::LoadBalancerStatus>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::LoadBalancer::get_load_balancer(p, cluster_name, service))
            }
            fn ensure_load_balancer(
                cluster_name: ::std::string::String,
                service: $crate::types::Service,
                nodes: ::std::vec::Vec<$crate::types::Node>,
            ) -> ::std::result::Result<$crate::types::LoadBalancerStatus, $crate::types::CloudError>
            {
                $with(|p| {
                    $crate::LoadBalancer::ensure_load_balancer(p, cluster_name, service, nodes)
                })
            }
            fn update_load_balancer(
                cluster_name: ::std::string::String,
                service: $crate::types::Service,
                nodes: ::std::vec::Vec<$crate::types::Node>,
            ) -> ::std::result::Result<(), $crate::types::CloudError> {
                $with(|p| {
                    $crate::LoadBalancer::update_load_balancer(p, cluster_name, service, nodes)
                })
            }
            fn ensure_load_balancer_deleted(
                cluster_name: ::std::string::String,
                service: $crate::types::Service,
            ) -> ::std::result::Result<(), $crate::types::CloudError> {
                $with(|p| {
                    $crate::LoadBalancer::ensure_load_balancer_deleted(p, cluster_name, service)
                })
            }
        }
    };
    (routes, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::routes::Guest for $export {
            fn list_routes(
                cluster_name: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::types::Route>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::Routes::list_routes(p, cluster_name))
            }
            fn create_route(
                cluster_name: ::std::string::String,
                name_hint: ::std::string::String,
                route: $crate::types::Route,
            ) -> ::std::result::Result<(), $crate::types::CloudError> {
                $with(|p| $crate::Routes::create_route(p, cluster_name, name_hint, route))
            }
            fn delete_route(
                cluster_name: ::std::string::String,
                route: $crate::types::Route,
            ) -> ::std::result::Result<(), $crate::types::CloudError> {
                $with(|p| $crate::Routes::delete_route(p, cluster_name, route))
            }
        }
    };
    (clusters, $export:ident, $p:ty, $with:ident, $state:ident, $bindings:ident) => {
        impl $bindings::exports::wasm_ccm::provider::clusters::Guest for $export {
            fn list_clusters() -> ::std::result::Result<
                ::std::vec::Vec<::std::string::String>,
                $crate::types::CloudError,
            > {
                $with(|p| $crate::Clusters::list_clusters(p))
            }
            fn master(
                cluster_name: ::std::string::String,
            ) -> ::std::result::Result<::std::string::String, $crate::types::CloudError> {
                $with(|p| $crate::Clusters::master(p, cluster_name))
            }
        }
    };
    ($other:ident, $($rest:tt)*) => {
        ::std::compile_error!(::std::concat!(
            "export_provider!: unknown interface `",
            ::std::stringify!($other),
            "`; expected instances_v2, instances_batch, instances, zones, load_balancer, \
             load_balancer_name, routes or clusters"
        ));
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_load_balancer_name_as_upstream() {
        assert_eq!(
            super::name_from_uid("6f1c4cc1-9b1c-4a35-8b54-5d9d2f6a7e01"),
            "a6f1c4cc19b1c4a358b545d9d2f6a7e0"
        );
        assert_eq!(super::name_from_uid("abc"), "aabc");
    }
}
