//! Providers written in Rust and run in-process, without a component or a sandbox.
//!
//! They exist to measure what the sandbox costs: the node-initialization benchmark
//! runs the same controllers over the reference provider's component and over a
//! native port of its `instances-v2` logic. A native provider exports only
//! `instances-v2` ([`NativeInstancesV2`]); its calls are not pooled, timed out or
//! counted in the provider metrics.
//!
//! ```
//! use std::sync::Arc;
//! use wasm_ccm::bindings::types::{InstanceInfo, Node};
//! use wasm_ccm::provider::native::{NativeFuture, NativeInstancesV2};
//! use wasm_ccm::provider::{CloudError, Provider};
//!
//! struct Everywhere;
//!
//! impl NativeInstancesV2 for Everywhere {
//!     fn instance_exists<'a>(&'a self, _: &'a Node) -> NativeFuture<'a, bool> {
//!         Box::pin(async { Ok(true) })
//!     }
//!     fn instance_shutdown<'a>(&'a self, _: &'a Node) -> NativeFuture<'a, bool> {
//!         Box::pin(async { Ok(false) })
//!     }
//!     fn instance_metadata<'a>(&'a self, _: &'a Node) -> NativeFuture<'a, InstanceInfo> {
//!         Box::pin(async { Err(CloudError::InstanceNotFound) })
//!     }
//! }
//!
//! let provider = Provider::native("everywhere", Arc::new(Everywhere));
//! assert!(provider.instances_v2().is_some());
//! assert!(provider.load_balancer().is_none());
//! ```

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use super::error::{CloudError, ProviderError};
use super::{Backend, Exports, Inner, Provider};
use crate::bindings::types::{InstanceInfo, Node};

/// The future a native provider function returns.
pub type NativeFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, CloudError>> + Send + 'a>>;

/// `cloudprovider.InstancesV2`, implemented in Rust. Same contract as the WIT
/// interface `instances-v2` (see `wit/README.md`).
pub trait NativeInstancesV2: Send + Sync + 'static {
    /// `instance-exists`.
    fn instance_exists<'a>(&'a self, node: &'a Node) -> NativeFuture<'a, bool>;
    /// `instance-shutdown`.
    fn instance_shutdown<'a>(&'a self, node: &'a Node) -> NativeFuture<'a, bool>;
    /// `instance-metadata`.
    fn instance_metadata<'a>(&'a self, node: &'a Node) -> NativeFuture<'a, InstanceInfo>;
}

impl Provider {
    /// A provider named `name` whose `instances-v2` is `instances`, run in-process.
    pub fn native(name: impl Into<String>, instances: Arc<dyn NativeInstancesV2>) -> Self {
        Provider {
            inner: Arc::new(Inner {
                name: name.into(),
                path: PathBuf::new(),
                sha256: "native".into(),
                exports: Exports {
                    instances_v2: true,
                    ..Exports::default()
                },
                has_cluster_id: true,
                backend: Backend::Native(instances),
            }),
        }
    }

    /// The native `instances-v2`, when this provider is native.
    pub(crate) fn native_instances(&self) -> Option<&dyn NativeInstancesV2> {
        match &self.inner.backend {
            Backend::Native(instances) => Some(instances.as_ref()),
            Backend::Component(_) => None,
        }
    }

    /// Awaits a native call, mapping its cloud error like a component's.
    pub(crate) async fn native_call<T>(
        &self,
        function: &'static str,
        call: NativeFuture<'_, T>,
    ) -> Result<T, ProviderError> {
        call.await.map_err(|error| ProviderError::Cloud {
            provider: self.name().to_owned(),
            function,
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl NativeInstancesV2 for Fixed {
        fn instance_exists<'a>(&'a self, node: &'a Node) -> NativeFuture<'a, bool> {
            Box::pin(async move { Ok(node.metadata.name == "present") })
        }
        fn instance_shutdown<'a>(&'a self, _: &'a Node) -> NativeFuture<'a, bool> {
            Box::pin(async { Err(CloudError::NotImplemented) })
        }
        fn instance_metadata<'a>(&'a self, _: &'a Node) -> NativeFuture<'a, InstanceInfo> {
            Box::pin(async { Err(CloudError::InstanceNotFound) })
        }
    }

    #[tokio::test]
    async fn calls_reach_the_rust_implementation() {
        let provider = Provider::native("fixed", Arc::new(Fixed));
        assert_eq!(provider.name(), "fixed");
        assert_eq!(provider.exports().names(), ["instances-v2"]);
        assert!(provider.instances().is_none() && provider.routes().is_none());
        let v2 = provider.instances_v2().unwrap();
        assert!(v2.instance_exists(&Node::named("present")).await.unwrap());
        assert!(!v2.instance_exists(&Node::named("absent")).await.unwrap());
        let err = v2
            .instance_metadata(&Node::named("absent"))
            .await
            .unwrap_err();
        assert!(err.is_instance_not_found(), "{err}");
        assert!(
            v2.instance_shutdown(&Node::named("x"))
                .await
                .unwrap_err()
                .is_not_implemented()
        );
        // Identity calls need a component.
        assert!(provider.call_provider_name().await.is_err());
    }
}
