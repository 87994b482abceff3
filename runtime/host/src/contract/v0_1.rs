//! Contract 0.1 (`wasm-ccm:provider@0.1.0`, frozen in `wit/v0.1/`): its bindings and
//! the adapter that lets the host call a 0.1 component with the current records.
//!
//! What 0.2 changed, and how a 0.1 component sees it:
//! - Node and Service views gained fields (deletion timestamp, unschedulable,
//!   external and cluster IPs, IP family policy, session affinity timeout,
//!   `allocateLoadBalancerNodePorts`): they are dropped on the way in.
//! - Routes gained `enable-node-addresses` and the target's provider ID: dropped on the
//!   way in; listed routes come back with the addresses they carry and no provider ID.
//! - `get-load-balancer-name` moved from `load-balancer` to the optional
//!   `load-balancer-name`: a 0.1 component exporting `load-balancer` counts as
//!   exporting `load-balancer-name` too, answered by its own function.
//! - `instances-batch`, the `cache`, `events` and `deadline` imports do not exist: the
//!   host asks a 0.1 component one node at a time.
//!
//! Records that did not change are converted field by field ([`Adapt`]).

use super::types as current;

// Generated from `wit/v0.1/`; the WIT documents each item. Both versions of the
// package are in scope when generating, so bindgen names the module `provider0_1_0`;
// the re-exports give it the current version's paths.
pub(crate) mod bindings {
    pub mod exports {
        pub mod wasm_ccm {
            pub use super::super::generated::exports::wasm_ccm::provider0_1_0 as provider;
        }
    }
    pub mod wasm_ccm {
        pub use super::generated::wasm_ccm::provider0_1_0 as provider;
    }
    #[allow(missing_docs)]
    mod generated {
        wasmtime::component::bindgen!({
            path: ["../../wit", "../../wit/v0.1"],
            world: "wasm-ccm:provider/provider@0.1.0",
            imports: { default: async },
            exports: { default: async },
            additional_derives: [PartialEq, Eq],
            with: {
                "wasi:http": wasmtime_wasi_http::p2::bindings::http,
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            },
        });
    }
}

/// 0.1's `logging` import (the same function as today's).
pub use self::bindings::wasm_ccm::provider::logging;
/// 0.1's records.
pub use self::bindings::wasm_ccm::provider::types;

/// A conversion between a 0.1 record and the current one, in the direction the adapter
/// needs (arguments down to 0.1, answers up from it).
pub(crate) trait Adapt<T> {
    /// The value as `T`.
    fn adapt(self) -> T;
}

macro_rules! same {
    ($($t:ty),*) => {
        $(impl Adapt<$t> for $t {
            fn adapt(self) -> $t {
                self
            }
        })*
    };
}
same!(bool, String, (), i32, u64);

impl<A: Adapt<B>, B> Adapt<Vec<B>> for Vec<A> {
    fn adapt(self) -> Vec<B> {
        self.into_iter().map(Adapt::adapt).collect()
    }
}

impl<A: Adapt<B>, B> Adapt<Option<B>> for Option<A> {
    fn adapt(self) -> Option<B> {
        self.map(Adapt::adapt)
    }
}

impl<A: Adapt<C>, B: Adapt<D>, C, D> Adapt<(C, D)> for (A, B) {
    fn adapt(self) -> (C, D) {
        (self.0.adapt(), self.1.adapt())
    }
}

impl<A: Clone + Adapt<B>, B> Adapt<B> for &A {
    fn adapt(self) -> B {
        self.clone().adapt()
    }
}

/// A record whose fields are the same in both versions, both ways.
macro_rules! record {
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl Adapt<current::$name> for types::$name {
            fn adapt(self) -> current::$name {
                current::$name { $($field: self.$field.adapt()),* }
            }
        }
        impl Adapt<types::$name> for current::$name {
            fn adapt(self) -> types::$name {
                types::$name { $($field: self.$field.adapt()),* }
            }
        }
    };
}

/// An enum whose cases are the same in both versions, both ways.
macro_rules! cases {
    ($name:ident { $($case:ident),* $(,)? }) => {
        impl Adapt<current::$name> for types::$name {
            fn adapt(self) -> current::$name {
                match self { $(types::$name::$case => current::$name::$case),* }
            }
        }
        impl Adapt<types::$name> for current::$name {
            fn adapt(self) -> types::$name {
                match self { $(current::$name::$case => types::$name::$case),* }
            }
        }
    };
}

cases!(NodeAddressType {
    Hostname,
    InternalIp,
    ExternalIp,
    InternalDns,
    ExternalDns
});
cases!(Protocol { Tcp, Udp, Sctp });
cases!(ServiceType {
    ClusterIp,
    NodePort,
    LoadBalancer,
    ExternalName
});
cases!(SessionAffinity { None, ClientIp });
cases!(TrafficPolicy { Cluster, Local });
cases!(IpFamily { Ipv4, Ipv6 });
cases!(IpMode { Vip, Proxy });
record!(NodeAddress {
    address_type,
    address
});
record!(NodeCondition {
    condition_type,
    status,
    reason,
    message
});
record!(Taint { key, value, effect });
record!(ServicePort {
    name,
    protocol,
    port,
    target_port,
    node_port,
    app_protocol
});
record!(PortStatus {
    port,
    protocol,
    error
});
record!(LoadBalancerIngress {
    ip,
    hostname,
    ip_mode,
    ports
});
record!(LoadBalancerStatus { ingress });
record!(InstanceInfo {
    provider_id,
    instance_type,
    node_addresses,
    zone,
    region,
    additional_labels
});
record!(Zone {
    failure_domain,
    region
});
record!(Retry { delay_ms, message });

impl Adapt<current::CloudError> for types::CloudError {
    fn adapt(self) -> current::CloudError {
        match self {
            types::CloudError::InstanceNotFound => current::CloudError::InstanceNotFound,
            types::CloudError::NotImplemented => current::CloudError::NotImplemented,
            types::CloudError::ImplementedElsewhere => current::CloudError::ImplementedElsewhere,
            types::CloudError::RetryAfter(retry) => current::CloudError::RetryAfter(retry.adapt()),
            types::CloudError::Other(message) => current::CloudError::Other(message),
        }
    }
}

impl Adapt<types::ObjectMeta> for current::ObjectMeta {
    fn adapt(self) -> types::ObjectMeta {
        types::ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            labels: self.labels,
            annotations: self.annotations,
        }
    }
}

impl Adapt<types::Node> for current::Node {
    fn adapt(self) -> types::Node {
        types::Node {
            metadata: self.metadata.adapt(),
            provider_id: self.provider_id,
            pod_cidrs: self.pod_cidrs,
            taints: self.taints.adapt(),
            addresses: self.addresses.adapt(),
            conditions: self.conditions.adapt(),
        }
    }
}

impl Adapt<types::Service> for current::Service {
    fn adapt(self) -> types::Service {
        types::Service {
            metadata: self.metadata.adapt(),
            service_type: self.service_type.adapt(),
            ports: self.ports.adapt(),
            session_affinity: self.session_affinity.adapt(),
            load_balancer_source_ranges: self.load_balancer_source_ranges,
            external_traffic_policy: self.external_traffic_policy.adapt(),
            health_check_node_port: self.health_check_node_port,
            ip_families: self.ip_families.adapt(),
            load_balancer_class: self.load_balancer_class,
            load_balancer_ip: self.load_balancer_ip,
            status: self.status.adapt(),
        }
    }
}

impl Adapt<types::Route> for current::Route {
    fn adapt(self) -> types::Route {
        types::Route {
            name: self.name,
            target_node: self.target_node,
            target_node_addresses: self.target_node_addresses.adapt(),
            destination_cidr: self.destination_cidr,
            blackhole: self.blackhole,
        }
    }
}

impl Adapt<current::Route> for types::Route {
    fn adapt(self) -> current::Route {
        current::Route {
            enable_node_addresses: !self.target_node_addresses.is_empty(),
            name: self.name,
            target_node: self.target_node,
            target_node_addresses: self.target_node_addresses.adapt(),
            destination_cidr: self.destination_cidr,
            blackhole: self.blackhole,
            target_node_provider_id: None,
        }
    }
}

/// The 0.1 view of `value` (an argument passed to a 0.1 component).
pub(crate) fn down<A: Adapt<B>, B>(value: A) -> B {
    value.adapt()
}

impl From<logging::Level> for super::logging::Level {
    fn from(level: logging::Level) -> Self {
        match level {
            logging::Level::Trace => Self::Trace,
            logging::Level::Debug => Self::Debug,
            logging::Level::Info => Self::Info,
            logging::Level::Warn => Self::Warn,
            logging::Level::Error => Self::Error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_lose_only_the_new_fields() {
        let mut node = current::Node::named("n1");
        node.unschedulable = true;
        node.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        node.provider_id = Some("simcloud://i-1".into());
        let old: types::Node = down(&node);
        assert_eq!(old.metadata.name, "n1");
        assert_eq!(old.provider_id.as_deref(), Some("simcloud://i-1"));
    }

    #[test]
    fn listed_routes_say_whether_they_carry_addresses() {
        let old = types::Route {
            name: "r".into(),
            target_node: "n1".into(),
            target_node_addresses: vec![types::NodeAddress {
                address_type: types::NodeAddressType::InternalIp,
                address: "10.0.0.1".into(),
            }],
            destination_cidr: "10.244.0.0/24".into(),
            blackhole: false,
        };
        let route: current::Route = old.clone().adapt();
        assert!(route.enable_node_addresses);
        assert_eq!(route.target_node_provider_id, None);
        let empty: current::Route = types::Route {
            target_node_addresses: Vec::new(),
            ..old
        }
        .adapt();
        assert!(!empty.enable_node_addresses);
    }

    #[test]
    fn errors_keep_their_case() {
        let e: current::CloudError = types::CloudError::RetryAfter(types::Retry {
            delay_ms: 7,
            message: "slow".into(),
        })
        .adapt();
        assert_eq!(
            e,
            current::CloudError::RetryAfter(current::Retry {
                delay_ms: 7,
                message: "slow".into()
            })
        );
    }
}
