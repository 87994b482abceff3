//! The calls the controllers make on a [`Cloud`](super::Cloud), in one table. The
//! trait's methods (with their defaults) and the canary's forwarding
//! ([`ShadowCloud`](super::shadow::ShadowCloud): the serving version answers, the
//! version on trial is asked the same and compared) are both made from it, so a call
//! the controllers start making is one row here, its conversion in
//! [`ProviderCloud`](super::ProviderCloud), and (for the controllers' tests) its
//! answer in the recording fake.
//!
//! A row: its docs, then
//! `KIND name(arg: Type, ...) -> Answer, "metric-label", DEFAULT;` where
//! - `KIND` is `read` (one answer, compared), `batch` (one answer per Node, compared
//!   Node by Node) or `write` (it changes the cloud: only the serving version makes it);
//! - each argument is taken by reference (`&'a Type`);
//! - `"metric-label"` names the call in the canary's comparisons;
//! - `DEFAULT` is the trait's default body: `required` (none), `not_exported
//!   Requirement` (the call needs an interface the provider may not export), or `each
//!   single` (a batch asked Node by Node with the single-Node method).

/// Calls `$then!` with every row of the table.
macro_rules! cloud_methods {
    ($then:ident) => {
        $then! {
            /// Instance metadata for initializing `node`: provider ID, type, addresses,
            /// zone, region and additional labels.
            read instance_metadata(node: Node) -> InstanceMetadata,
                "instance-metadata", required;
            /// The Node's current addresses, for the periodic status update; `None` when
            /// the provider has no instances interface.
            read node_addresses(node: Node) -> Option<Vec<NodeAddress>>,
                "node-addresses", required;
            /// Whether the Node's instance exists; `None` when the provider cannot tell.
            read instance_exists(node: Node) -> Option<bool>, "instance-exists", required;
            /// Whether the Node's instance is shut down; `None` when the provider cannot
            /// tell.
            read instance_shutdown(node: Node) -> Option<bool>,
                "instance-shutdown", required;
            /// [`Cloud::instance_metadata`] for each of `nodes`.
            batch instances_metadata(nodes: [Arc<Node>]) -> InstanceMetadata,
                "instances-metadata", each instance_metadata;
            /// [`Cloud::node_addresses`] for each of `nodes`.
            batch nodes_addresses(nodes: [Arc<Node>]) -> Option<Vec<NodeAddress>>,
                "nodes-addresses", each node_addresses;
            /// [`Cloud::instance_exists`] for each of `nodes`.
            batch instances_exist(nodes: [Arc<Node>]) -> Option<bool>,
                "instances-exist", each instance_exists;
            /// [`Cloud::instance_shutdown`] for each of `nodes`.
            batch instances_shutdown(nodes: [Arc<Node>]) -> Option<bool>,
                "instances-shutdown", each instance_shutdown;
            /// The Service's load balancer status, `None` when it does not exist.
            read get_load_balancer(cluster: str, service: Service)
                -> Option<LoadBalancerStatus>,
                "get-load-balancer", not_exported LoadBalancer;
            /// Creates or updates the Service's load balancer on `nodes`.
            write ensure_load_balancer(cluster: str, service: Service, nodes: [Arc<Node>])
                -> LoadBalancerStatus,
                "ensure-load-balancer", not_exported LoadBalancer;
            /// Points the Service's load balancer at `nodes`.
            write update_load_balancer(cluster: str, service: Service, nodes: [Arc<Node>])
                -> (),
                "update-load-balancer", not_exported LoadBalancer;
            /// Deletes the Service's load balancer; succeeds when it is already gone.
            write ensure_load_balancer_deleted(cluster: str, service: Service) -> (),
                "ensure-load-balancer-deleted", not_exported LoadBalancer;
            /// The cluster's routes.
            read list_routes(cluster: str) -> Vec<Route>, "list-routes", not_exported Routes;
            /// Creates `route`; `name_hint` is unique per route (the Node UID).
            write create_route(cluster: str, name_hint: str, route: Route) -> (),
                "create-route", not_exported Routes;
            /// Deletes `route`.
            write delete_route(cluster: str, route: Route) -> (),
                "delete-route", not_exported Routes;
        }
    };
}

pub(crate) use cloud_methods;

/// The [`Cloud`](super::Cloud) trait's method of one row: its signature, and its
/// default body.
macro_rules! trait_method {
    ($(#[$doc:meta])* batch $name:ident ($nodes:ident : $ty:ty) -> $ret:ty, each $single:ident) => {
        $(#[$doc])*
        fn $name<'a>(&'a self, $nodes: &'a $ty) -> BatchFuture<'a, $ret> {
            Box::pin(each($nodes, |node| self.$single(node)))
        }
    };
    ($(#[$doc:meta])* $kind:ident $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, required) => {
        $(#[$doc])*
        fn $name<'a>(&'a self, $($arg: &'a $ty),*) -> CloudFuture<'a, $ret>;
    };
    ($(#[$doc:meta])* $kind:ident $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, not_exported $requirement:ident) => {
        $(#[$doc])*
        fn $name<'a>(&'a self, $($arg: &'a $ty),*) -> CloudFuture<'a, $ret> {
            let _ = ($($arg,)*);
            not_exported(Requirement::$requirement)
        }
    };
}

pub(crate) use trait_method;

/// The trait, from the rows: the methods every cloud has (`name`, `version`, ...)
/// written here, then one per row.
macro_rules! cloud_trait {
    ($(
        $(#[$doc:meta])*
        $kind:ident $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty,
            $label:literal, $default:ident $($with:ident)?;
    )*) => {
        /// The cloud as the controllers see it. Methods take and return Kubernetes
        /// objects.
        ///
        /// Load balancer and route methods have default bodies answering
        /// [`Error::NotExported`], so an implementation with instances only (the
        /// benchmarks' native port) writes just those. The methods past [`Cloud::batches`]
        /// are the table of [`methods`](crate::cloud::methods).
        pub trait Cloud: Send + Sync {
            /// The provider's name (upstream `ProviderName()`).
            fn name(&self) -> &str;

            /// The loaded version answering
            /// ([`wasm_ccm_host::provider::Provider::serial`]: another load, even of
            /// the same component with another cloud config, is another version); 0
            /// for a cloud that is not a provider component.
            fn version(&self) -> u64 {
                0
            }

            /// The version under canary asked beside the serving one
            /// ([`shadow::ShadowCloud`]), if any.
            fn candidate_version(&self) -> Option<u64> {
                None
            }

            /// Whether the provider serves `requirement`.
            fn meets(&self, requirement: Requirement) -> bool;

            /// Whether the provider answers calls about several Nodes in one call (the
            /// contract's `instances-batch`); without it the batch methods ask per Node.
            fn batches(&self) -> bool {
                false
            }

            $($crate::cloud::methods::trait_method!(
                $(#[$doc])* $kind $name ($($arg : $ty),*) -> $ret, $default $($with)?
            );)*
        }
    };
}

pub(crate) use cloud_trait;

/// [`ShadowCloud`](super::shadow::ShadowCloud)'s method of one row.
macro_rules! shadow_method {
    (read $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, $label:literal) => {
        fn $name<'a>(&'a self, $($arg: &'a $ty),*) -> CloudFuture<'a, $ret> {
            Box::pin(async move {
                let answer = self.serving.$name($($arg),*).await;
                let candidate = self.candidate.clone();
                $(let $arg = ::std::borrow::ToOwned::to_owned($arg);)*
                self.compare($label, answer.as_ref().ok().cloned(), async move {
                    candidate.$name($(&$arg),*).await
                });
                answer
            })
        }
    };
    (batch $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, $label:literal) => {
        fn $name<'a>(&'a self, $($arg: &'a $ty),*) -> BatchFuture<'a, $ret> {
            Box::pin(async move {
                let answers = self.serving.$name($($arg),*).await;
                let candidate = self.candidate.clone();
                $(let $arg = ::std::borrow::ToOwned::to_owned($arg);)*
                self.compare($label, each_ok(&answers), async move {
                    per_node(candidate.$name($(&$arg),*).await)
                });
                answers
            })
        }
    };
    (write $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, $label:literal) => {
        fn $name<'a>(&'a self, $($arg: &'a $ty),*) -> CloudFuture<'a, $ret> {
            self.serving.$name($($arg),*)
        }
    };
}

pub(crate) use shadow_method;

/// [`ShadowCloud`](super::shadow::ShadowCloud)'s `Cloud` implementation, from the rows.
macro_rules! shadow_impl {
    ($(
        $(#[$doc:meta])*
        $kind:ident $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty,
            $label:literal, $default:ident $($with:ident)?;
    )*) => {
        impl Cloud for ShadowCloud {
            fn name(&self) -> &str {
                self.serving.name()
            }

            fn version(&self) -> u64 {
                self.serving.version()
            }

            fn candidate_version(&self) -> Option<u64> {
                Some(self.candidate.version())
            }

            fn meets(&self, requirement: Requirement) -> bool {
                self.serving.meets(requirement)
            }

            fn batches(&self) -> bool {
                self.serving.batches()
            }

            $($crate::cloud::methods::shadow_method!(
                $kind $name ($($arg : $ty),*) -> $ret, $label
            );)*
        }
    };
}

pub(crate) use shadow_impl;
