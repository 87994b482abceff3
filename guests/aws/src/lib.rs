//! The wasm-ccm provider for AWS (provider name `aws`).
//!
//! It speaks to EC2 and Elastic Load Balancing v2 through the host's HTTP broker; the
//! host signs every request (SigV4) with credentials the provider never sees. Where
//! to start:
//! - [`config`]: the cloud config, in cloud-provider-aws's format (`[Global]`,
//!   `[ServiceOverride "N"]`);
//! - [`api`]: the AWS Query protocol (form-encoded requests, XML answers), errors
//!   mapped to the contract's (throttling → `retry-after`), pagination;
//! - [`ec2`], [`elbv2`]: the API calls used, with their XML read into plain structs;
//! - [`instances`] (`instances-v2`), [`load_balancer`] (one NLB per Service),
//!   [`routes`] (the cluster's VPC route table): the exports.
//!
//! Behaviour follows kubernetes/cloud-provider-aws; `guests/aws/README.md` lists what
//! is covered and what is not.

mod api;
mod config;
mod ec2;
mod elbv2;
mod instances;
mod load_balancer;
mod routes;
mod xml;

use std::cell::RefCell;

use bindings::exports::wasm_ccm::provider::identity;
use bindings::wasm_ccm::provider::types::CloudError;

#[allow(warnings)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package wasm-ccm:aws;
            world aws {
                include wasm-ccm:provider/host-capabilities@0.1.0;
                export wasm-ccm:provider/identity@0.1.0;
                export wasm-ccm:provider/instances-v2@0.1.0;
                export wasm-ccm:provider/load-balancer@0.1.0;
                export wasm-ccm:provider/routes@0.1.0;
            }
        ",
        world: "wasm-ccm:aws/aws",
        generate_all,
    });
}

/// The provider name: `--cloud-provider aws`, provider IDs `aws:///<zone>/<id>`.
pub const PROVIDER_NAME: &str = "aws";

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// What `initialize` sets up.
struct State {
    config: config::Config,
    ec2: ec2::Ec2,
    elb: elbv2::Elbv2,
    /// Availability zones seen (for zone IDs and zone types), asked again when a new
    /// zone shows up.
    zones: RefCell<Vec<ec2::Zone>>,
}

/// Runs `f` with the initialized state.
fn with_state<T>(f: impl FnOnce(&State) -> Result<T, CloudError>) -> Result<T, CloudError> {
    STATE.with(|s| match &*s.borrow() {
        Some(state) => f(state),
        None => Err(CloudError::Other(
            "the provider was called before initialize".into(),
        )),
    })
}

struct Provider;

impl identity::Guest for Provider {
    fn provider_name() -> String {
        PROVIDER_NAME.into()
    }

    fn initialize(cloud_config: Vec<u8>) -> Result<(), String> {
        wasm_ccm_guest::log::install_panic_hook();
        let text = std::str::from_utf8(&cloud_config)
            .map_err(|_| "the cloud config is not UTF-8 text".to_owned())?;
        let config = config::Config::parse(text)?;
        let ec2 = ec2::Ec2::new(config.endpoint(config::Service::Ec2));
        let elb = elbv2::Elbv2::new(config.endpoint(config::Service::Elbv2));
        wasm_ccm_guest::log::info(
            "initialized",
            &[
                ("region", &config.region),
                ("ec2", ec2.endpoint()),
                ("elasticloadbalancing", elb.endpoint()),
                ("clusterID", &config.cluster_id),
            ],
        );
        STATE.with(|s| {
            *s.borrow_mut() = Some(State {
                config,
                ec2,
                elb,
                zones: RefCell::new(Vec::new()),
            })
        });
        Ok(())
    }

    fn has_cluster_id() -> bool {
        STATE.with(|s| {
            s.borrow()
                .as_ref()
                .is_some_and(|state| !state.config.cluster_id.is_empty())
        })
    }
}

bindings::export!(Provider with_types_in bindings);
