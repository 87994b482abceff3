//! [`ProviderCloud`]: the [`Cloud`] of a loaded provider component.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, NodeAddress, Service};
use wasm_ccm_host::contract::types as wit;
use wasm_ccm_host::provider::{Provider, ProviderError};

use super::{
    BatchFuture, Cloud, CloudFuture, Error, InstanceMetadata, Requirement, Route, convert, validate,
};

/// One version of a provider, as a [`Cloud`].
#[derive(Debug, Clone)]
pub struct ProviderCloud {
    provider: Provider,
}

impl ProviderCloud {
    /// The cloud of `provider`.
    pub fn new(provider: Provider) -> Self {
        Self { provider }
    }

    /// The provider behind it.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    async fn metadata(&self, node: &Node) -> Result<InstanceMetadata, Error> {
        let name = node_name(node);
        let existing_id = existing_provider_id(node);
        let provider = &self.provider;
        if let Some(v2) = provider.instances_v2() {
            let meta = v2.instance_metadata(&convert::node(node)).await?;
            return from_v2(provider.name(), node, meta);
        }
        let v1 = provider
            .instances()
            .ok_or(Error::NotExported(Requirement::Instances.interface()))?;
        let provider_id = match existing_id {
            Some(id) => id,
            None => match v1.instance_id(&name).await {
                Ok(id) => super::provider_id(provider.name(), &id),
                // The one case where a Node continues without a provider ID.
                Err(e) if e.is_not_implemented() => String::new(),
                Err(e) => return Err(e.into()),
            },
        };
        let addresses = by_provider_id_or_name(
            &provider_id,
            v1.node_addresses_by_provider_id(&provider_id),
            v1.node_addresses(&name),
        )
        .await?;
        let instance_type = by_provider_id_or_name(
            &provider_id,
            v1.instance_type_by_provider_id(&provider_id),
            v1.instance_type(&name),
        )
        .await?;
        let mut meta = InstanceMetadata {
            provider_id: provider_id.clone(),
            instance_type,
            addresses: convert::to_k8s_addresses(&addresses),
            ..InstanceMetadata::default()
        };
        if let Some(zones) = provider.zones() {
            let zone = by_provider_id_or_name(
                &provider_id,
                zones.get_zone_by_provider_id(&provider_id),
                zones.get_zone_by_node_name(&name),
            )
            .await?;
            meta.zone = zone.failure_domain;
            meta.region = zone.region;
        }
        validate::instance_metadata(provider.name(), node, &meta)?;
        Ok(meta)
    }

    async fn addresses(&self, node: &Node) -> Result<Option<Vec<NodeAddress>>, Error> {
        let provider = &self.provider;
        if let Some(v2) = provider.instances_v2() {
            let meta = v2.instance_metadata(&convert::node(node)).await?;
            return current_addresses(provider.name(), node, meta).map(Some);
        }
        let Some(v1) = provider.instances() else {
            return Ok(None);
        };
        let provider_id = existing_provider_id(node).unwrap_or_default();
        let addresses = by_provider_id_or_name(
            &provider_id,
            v1.node_addresses_by_provider_id(&provider_id),
            v1.node_addresses(&node_name(node)),
        )
        .await?;
        let addresses = convert::to_k8s_addresses(&addresses);
        validate::addresses(&addresses)?;
        Ok(Some(addresses))
    }

    async fn exists(&self, node: &Node) -> Result<Option<bool>, Error> {
        let provider = &self.provider;
        if let Some(v2) = provider.instances_v2() {
            return Ok(Some(v2.instance_exists(&convert::node(node)).await?));
        }
        let Some(v1) = provider.instances() else {
            return Ok(None);
        };
        let provider_id = match existing_provider_id(node) {
            Some(id) => id,
            None => match v1.instance_id(&node_name(node)).await {
                Ok(id) => super::provider_id(provider.name(), &id),
                Err(e) if e.is_instance_not_found() => return Ok(Some(false)),
                Err(e) => return Err(e.into()),
            },
        };
        Ok(Some(v1.instance_exists_by_provider_id(&provider_id).await?))
    }

    async fn shutdown(&self, node: &Node) -> Result<Option<bool>, Error> {
        let provider = &self.provider;
        if let Some(v2) = provider.instances_v2() {
            return Ok(Some(v2.instance_shutdown(&convert::node(node)).await?));
        }
        let Some(v1) = provider.instances() else {
            return Ok(None);
        };
        // Upstream shutdownInCloudProvider: a Node without a provider ID gets one
        // through instance-id; not found or not implemented mean "not shut down".
        let provider_id = match existing_provider_id(node) {
            Some(id) => id,
            None => match v1.instance_id(&node_name(node)).await {
                Ok(id) => super::provider_id(provider.name(), &id),
                Err(e) if e.is_instance_not_found() || e.is_not_implemented() => {
                    return Ok(Some(false));
                }
                Err(e) => return Err(e.into()),
            },
        };
        match v1.instance_shutdown_by_provider_id(&provider_id).await {
            Err(e) if e.is_not_implemented() => Ok(Some(false)),
            other => Ok(Some(other?)),
        }
    }

    /// The batch handle, when the provider answers the `instances-v2` questions for
    /// many Nodes at once.
    fn batch(&self) -> Option<wasm_ccm_host::provider::InstancesBatch<'_>> {
        self.provider
            .instances_v2()
            .and(self.provider.instances_batch())
    }

    /// One node's error in a batch answer, as a call about that node alone would give.
    fn node_error(&self, function: &'static str, error: wit::CloudError) -> Error {
        Error::Provider(ProviderError::Cloud {
            provider: self.provider.name().to_owned(),
            function,
            error: error.into(),
        })
    }

    fn load_balancer(&self) -> Result<wasm_ccm_host::provider::LoadBalancer<'_>, Error> {
        self.provider
            .load_balancer()
            .ok_or(Error::NotExported(Requirement::LoadBalancer.interface()))
    }

    fn routes(&self) -> Result<wasm_ccm_host::provider::Routes<'_>, Error> {
        self.provider
            .routes()
            .ok_or(Error::NotExported(Requirement::Routes.interface()))
    }
}

/// `instances-v2` metadata in the controllers' terms (the Node's own provider ID when
/// the cloud gave none), checked ([`validate`]).
fn from_v2(
    provider: &str,
    node: &Node,
    meta: wit::InstanceInfo,
) -> Result<InstanceMetadata, Error> {
    let provider_id = match (meta.provider_id.is_empty(), existing_provider_id(node)) {
        (false, _) => meta.provider_id,
        (true, Some(id)) => id,
        (true, None) => return Err(Error::MissingProviderId(node_name(node))),
    };
    let meta = InstanceMetadata {
        provider_id,
        instance_type: meta.instance_type,
        addresses: convert::to_k8s_addresses(&meta.node_addresses),
        zone: meta.zone,
        region: meta.region,
        additional_labels: meta.additional_labels,
    };
    validate::instance_metadata(provider, node, &meta)?;
    Ok(meta)
}

/// An initialized Node's addresses from `instances-v2` metadata, checked: valid, and
/// for the instance the Node's provider ID names.
fn current_addresses(
    provider: &str,
    node: &Node,
    meta: wit::InstanceInfo,
) -> Result<Vec<NodeAddress>, Error> {
    validate::provider_id(provider, node, &meta.provider_id)?;
    let addresses = convert::to_k8s_addresses(&meta.node_addresses);
    validate::addresses(&addresses)?;
    Ok(addresses)
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

fn existing_provider_id(node: &Node) -> Option<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .filter(|p| !p.is_empty())
}

/// Upstream's `get...ByProviderIDOrName`: the lookup by provider ID when there is one,
/// falling back to the lookup by node name when it fails. (Futures are lazy: only the
/// lookups awaited here reach the provider.)
async fn by_provider_id_or_name<T>(
    provider_id: &str,
    by_id: impl Future<Output = Result<T, ProviderError>>,
    by_name: impl Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    if !provider_id.is_empty()
        && let Ok(value) = by_id.await
    {
        return Ok(value);
    }
    by_name.await
}

fn views(nodes: &[Arc<Node>]) -> Vec<wit::Node> {
    nodes.iter().map(|n| convert::node(n)).collect()
}

impl Cloud for ProviderCloud {
    fn name(&self) -> &str {
        self.provider.name()
    }

    fn version(&self) -> u64 {
        self.provider.serial()
    }

    fn meets(&self, requirement: Requirement) -> bool {
        requirement.met_by(self.provider.exports())
    }

    fn instance_metadata<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, InstanceMetadata> {
        Box::pin(self.metadata(node))
    }

    fn node_addresses<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<Vec<NodeAddress>>> {
        Box::pin(self.addresses(node))
    }

    fn instance_exists<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        Box::pin(self.exists(node))
    }

    fn instance_shutdown<'a>(&'a self, node: &'a Node) -> CloudFuture<'a, Option<bool>> {
        Box::pin(self.shutdown(node))
    }

    fn batches(&self) -> bool {
        self.batch().is_some()
    }

    fn instances_metadata<'a>(
        &'a self,
        nodes: &'a [Arc<Node>],
    ) -> BatchFuture<'a, InstanceMetadata> {
        let Some(batch) = self.batch() else {
            return Box::pin(super::each(nodes, |node| self.metadata(node)));
        };
        Box::pin(async move {
            let answers = batch.instances_metadata(&views(nodes)).await?;
            Ok(answers
                .into_iter()
                .zip(nodes)
                .map(|(answer, node)| match answer {
                    Ok(meta) => from_v2(self.name(), node, meta),
                    Err(e) => Err(self.node_error("instances-metadata", e)),
                })
                .collect())
        })
    }

    fn nodes_addresses<'a>(
        &'a self,
        nodes: &'a [Arc<Node>],
    ) -> BatchFuture<'a, Option<Vec<NodeAddress>>> {
        let Some(batch) = self.batch() else {
            return Box::pin(super::each(nodes, |node| self.addresses(node)));
        };
        Box::pin(async move {
            let answers = batch.instances_metadata(&views(nodes)).await?;
            Ok(answers
                .into_iter()
                .zip(nodes)
                .map(|(answer, node)| match answer {
                    Ok(meta) => current_addresses(self.name(), node, meta).map(Some),
                    Err(e) => Err(self.node_error("instances-metadata", e)),
                })
                .collect())
        })
    }

    fn instances_exist<'a>(&'a self, nodes: &'a [Arc<Node>]) -> BatchFuture<'a, Option<bool>> {
        let Some(batch) = self.batch() else {
            return Box::pin(super::each(nodes, |node| self.exists(node)));
        };
        Box::pin(async move {
            let answers = batch.instances_exist(&views(nodes)).await?;
            Ok(answers
                .into_iter()
                .map(|answer| {
                    answer
                        .map(Some)
                        .map_err(|e| self.node_error("instances-exist", e))
                })
                .collect())
        })
    }

    fn instances_shutdown<'a>(&'a self, nodes: &'a [Arc<Node>]) -> BatchFuture<'a, Option<bool>> {
        let Some(batch) = self.batch() else {
            return Box::pin(super::each(nodes, |node| self.shutdown(node)));
        };
        Box::pin(async move {
            let answers = batch.instances_shutdown(&views(nodes)).await?;
            Ok(answers
                .into_iter()
                .map(|answer| {
                    answer
                        .map(Some)
                        .map_err(|e| self.node_error("instances-shutdown", e))
                })
                .collect())
        })
    }

    fn get_load_balancer<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
    ) -> CloudFuture<'a, Option<LoadBalancerStatus>> {
        Box::pin(async move {
            let status = self
                .load_balancer()?
                .get_load_balancer(cluster, &convert::service(service))
                .await?;
            let status = status.as_ref().map(convert::to_k8s_status);
            if let Some(status) = &status {
                validate::load_balancer_status(status)?;
            }
            Ok(status)
        })
    }

    fn ensure_load_balancer<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
        nodes: &'a [Arc<Node>],
    ) -> CloudFuture<'a, LoadBalancerStatus> {
        Box::pin(async move {
            let status = self
                .load_balancer()?
                .ensure_load_balancer(cluster, &convert::service(service), &views(nodes))
                .await?;
            let status = convert::to_k8s_status(&status);
            validate::load_balancer_status(&status)?;
            Ok(status)
        })
    }

    fn update_load_balancer<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
        nodes: &'a [Arc<Node>],
    ) -> CloudFuture<'a, ()> {
        Box::pin(async move {
            Ok(self
                .load_balancer()?
                .update_load_balancer(cluster, &convert::service(service), &views(nodes))
                .await?)
        })
    }

    fn ensure_load_balancer_deleted<'a>(
        &'a self,
        cluster: &'a str,
        service: &'a Service,
    ) -> CloudFuture<'a, ()> {
        Box::pin(async move {
            Ok(self
                .load_balancer()?
                .ensure_load_balancer_deleted(cluster, &convert::service(service))
                .await?)
        })
    }

    fn list_routes<'a>(&'a self, cluster: &'a str) -> CloudFuture<'a, Vec<Route>> {
        Box::pin(async move {
            let routes = self.routes()?.list_routes(cluster).await?;
            Ok(routes.iter().map(convert::to_route).collect())
        })
    }

    fn create_route<'a>(
        &'a self,
        cluster: &'a str,
        name_hint: &'a str,
        route: &'a Route,
    ) -> CloudFuture<'a, ()> {
        Box::pin(async move {
            Ok(self
                .routes()?
                .create_route(cluster, name_hint, &convert::route(route))
                .await?)
        })
    }

    fn delete_route<'a>(&'a self, cluster: &'a str, route: &'a Route) -> CloudFuture<'a, ()> {
        Box::pin(async move {
            Ok(self
                .routes()?
                .delete_route(cluster, &convert::route(route))
                .await?)
        })
    }
}
