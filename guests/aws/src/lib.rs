//! The wasm-ccm provider for AWS (provider name `aws`).
//!
//! It speaks to EC2 and Elastic Load Balancing (Classic and v2) through the host's HTTP broker; the
//! host signs every request (SigV4) with credentials the provider never sees. Where
//! to start:
//! - [`config`]: the cloud config, in cloud-provider-aws's format (`[Global]`,
//!   `[ServiceOverride "N"]`);
//! - [`api`]: the AWS Query protocol (form-encoded requests, XML answers), errors
//!   mapped to the contract's (throttling → `retry-after`), pagination;
//! - [`ec2`] (security groups in `ec2/security_groups.rs`), [`elb`] (Classic), [`elbv2`]: the API
//!   calls used, with their XML read into plain structs;
//! - [`instances`] (`instances-v2` and `instances-batch`), [`load_balancer`] (a Classic Load
//!   Balancer per Service, or an NLB; the nodes' security group rules), [`routes`] (the cluster's
//!   VPC route table): the exports.
//!
//! Behaviour follows kubernetes/cloud-provider-aws; `guests/aws/README.md` lists what
//! is covered and what is not.

mod actions;
mod api;
mod config;
mod ec2;
mod elb;
mod elbv2;
mod instances;
mod load_balancer;
mod routes;
mod topology;
mod xml;

use wasm_ccm_guest::Provider;

#[allow(warnings)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package wasm-ccm:aws;
            world aws {
                export wasm-ccm:provider/identity@0.3.0;
                export wasm-ccm:provider/instances-v2@0.3.0;
                export wasm-ccm:provider/instances-batch@0.3.0;
                export wasm-ccm:provider/load-balancer@0.3.0;
                export wasm-ccm:provider/routes@0.3.0;
            }
        ",
        world: "wasm-ccm:aws/aws",
        with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types },
    });
}

/// The provider name: `--cloud-provider aws`, provider IDs `aws:///<zone>/<id>`.
pub const PROVIDER_NAME: &str = "aws";

/// The provider: what `initialize` sets up from the cloud config.
pub struct Aws {
    config: config::Config,
    ec2: ec2::Ec2,
    /// Classic Load Balancers.
    elb: elb::Elb,
    /// Network Load Balancers.
    elbv2: elbv2::Elbv2,
}

impl Provider for Aws {
    const NAME: &'static str = PROVIDER_NAME;

    fn initialize(cloud_config: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(cloud_config)
            .map_err(|_| "the cloud config is not UTF-8 text".to_owned())?;
        let config = config::Config::parse(text)?;
        let ec2 = ec2::Ec2::new(config.endpoint(config::Service::Ec2));
        // Both APIs are served at the `elasticloadbalancing` endpoint.
        let elbv2 = elbv2::Elbv2::new(config.endpoint(config::Service::Elbv2));
        let elb = elb::Elb::new(config.endpoint(config::Service::Elb));
        wasm_ccm_guest::log::info(
            "initialized",
            &[
                ("region", &config.region),
                ("ec2", ec2.endpoint()),
                ("elasticloadbalancing", elbv2.endpoint()),
                ("clusterID", &config.cluster_id),
            ],
        );
        Ok(Aws {
            config,
            ec2,
            elb,
            elbv2,
        })
    }

    fn has_cluster_id(&self) -> bool {
        !self.config.cluster_id.is_empty()
    }
}

wasm_ccm_guest::export_provider!(Aws with_types_in bindings,
    exports: [instances_v2, instances_batch, load_balancer, routes]);
