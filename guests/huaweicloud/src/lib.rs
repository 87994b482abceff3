//! The wasm-ccm provider for Huawei Cloud (provider name `huaweicloud`).
//!
//! It speaks to ECS, ELB and VPC through the host's HTTP broker; the host signs every
//! request with the access key of the policy's `huaweicloud` credential rule (AK/SK,
//! `SDK-HMAC-SHA256`), so the provider holds no secret and sets no signing header.
//! Behaviour follows kubernetes-sigs/cloud-provider-huaweicloud ("upstream"); the doc
//! comments name the upstream function each piece follows.
//!
//! Where to start:
//! - [`config`]: upstream's `cloud-config` (`[Global]`, `[Vpc]`) with its keys refused,
//!   upstream's `loadbalancer-config` options as `[LoadBalancer]`, `[Networking]`,
//!   `[Metadata]`, and this provider's `[Endpoints]`;
//! - [`api`]: the JSON client of the services' endpoints, Huawei's error bodies as
//!   [`api::ApiError`] (and the contract's `cloud-error`), both pagination styles; the
//!   load balancer code is written against it;
//! - [`instances`] (`instances-v2` and `instances-batch` with ECS) and `load_balancer`
//!   (ELB, with EIPs from VPC): the exports. The traits are wired below; the
//!   load balancer's logic is `load_balancer::{get, ensure, update, delete, name}`.
//!
//! Tests run natively (`cargo test -p huaweicloud-provider`) against the SDK's mock
//! transport; the component is built by `scripts/build-guests.sh`.

mod api;
mod config;
mod instances;
mod load_balancer;
pub mod settings;

use wasm_ccm_guest::types::{CloudError, LoadBalancerStatus, Node, Service};
use wasm_ccm_guest::{LoadBalancer, LoadBalancerName, Provider};

#[allow(warnings)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package wasm-ccm:huaweicloud;
            world huaweicloud {
                export wasm-ccm:provider/identity@0.3.0;
                export wasm-ccm:provider/instances-v2@0.3.0;
                export wasm-ccm:provider/instances-batch@0.3.0;
                export wasm-ccm:provider/load-balancer@0.3.0;
                export wasm-ccm:provider/load-balancer-name@0.3.0;
            }
        ",
        world: "wasm-ccm:huaweicloud/huaweicloud",
        with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types },
    });
}

/// The provider name (upstream's `ProviderName`): `--cloud-provider huaweicloud`,
/// provider IDs `huaweicloud://<ecs-id>`.
pub const PROVIDER_NAME: &str = "huaweicloud";

/// The provider: what `initialize` sets up from the cloud config.
pub struct HuaweiCloud {
    /// The cloud config.
    pub(crate) config: config::Config,
    /// The client of the config's endpoints and project.
    pub(crate) client: api::Client,
}

impl HuaweiCloud {
    /// The provider of `config`.
    pub(crate) fn new(config: config::Config) -> Self {
        let client = api::Client::new(&config);
        Self { config, client }
    }
}

impl Provider for HuaweiCloud {
    const NAME: &'static str = PROVIDER_NAME;

    fn initialize(cloud_config: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(cloud_config)
            .map_err(|_| "the cloud config is not UTF-8 text".to_owned())?;
        let config = config::Config::parse(text)?;
        let provider = HuaweiCloud::new(config);
        wasm_ccm_guest::log::info(
            "initialized",
            &[
                ("region", &provider.config.region),
                ("project-id", &provider.config.project_id),
                ("ecs", provider.client.endpoint(config::Service::Ecs)),
                ("elb", provider.client.endpoint(config::Service::Elb)),
                ("vpc", provider.client.endpoint(config::Service::Vpc)),
            ],
        );
        Ok(provider)
    }

    /// Upstream's `HasClusterID` answers true: its load balancers carry the cluster name
    /// (`k8s_service_<cluster>_<namespace>_<name>`), as the OpenStack provider's do.
    fn has_cluster_id(&self) -> bool {
        true
    }
}

/// Upstream's `CloudProvider.GetLoadBalancerName`: `load_balancer::name` of the cluster
/// name load balancers carry, `[LoadBalancer] business-name` when set
/// ([`config::LoadBalancerOptions::cluster_name`]).
impl LoadBalancerName for HuaweiCloud {
    fn get_load_balancer_name(&self, cluster_name: String, service: Service) -> String {
        let cluster = self.config.load_balancer.cluster_name(&cluster_name);
        load_balancer::name(cluster, &service)
    }
}

/// Upstream's `CloudProvider` load balancer methods; the cluster name is passed as the
/// host gives it (`load_balancer` applies `business-name` itself, as upstream's
/// `GetLoadBalancerName` does inside each of them).
impl LoadBalancer for HuaweiCloud {
    fn get_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError> {
        load_balancer::get(self, &cluster_name, &service)
    }

    fn ensure_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError> {
        load_balancer::ensure(self, &cluster_name, &service, &nodes)
    }

    fn update_load_balancer(
        &self,
        cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<(), CloudError> {
        load_balancer::update(self, &cluster_name, &service, &nodes)
    }

    fn ensure_load_balancer_deleted(
        &self,
        cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        load_balancer::delete(self, &cluster_name, &service)
    }
}

wasm_ccm_guest::export_provider!(HuaweiCloud with_types_in bindings,
    exports: [instances_v2, instances_batch, load_balancer, load_balancer_name]);
