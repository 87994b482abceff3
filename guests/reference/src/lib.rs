//! The reference wasm-ccm provider, for the simulated cloud (`tests/sim-cloud`).
//!
//! It implements every interface of the contract over brokered HTTP with the SDK
//! (`wasm-ccm-guest`), and is the example to copy when writing a provider for a real
//! cloud:
//! - [`config`]: the `--cloud-config` it accepts;
//! - [`cloud`]: the REST client (HTTP failures mapped to `cloud-error` by the SDK);
//! - [`instances`], [`load_balancer`], [`routes`], [`clusters`]: the exports, as SDK
//!   traits implemented by [`SimCloud`].
//!
//! Build: `cargo build --target wasm32-wasip2 --release -p reference-provider`
//! (or `cargo component build --release` in this directory).

mod cloud;
mod clusters;
mod config;
mod instances;
mod load_balancer;
mod routes;

use wasm_ccm_guest::Provider;
use wasm_ccm_guest::types::CloudError;

#[allow(warnings)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        // Every interface but `load-balancer-name`: its load balancers have upstream's
        // default names, which the host uses when the export is absent.
        inline: "
            package wasm-ccm:reference;
            world provider {
                include wasm-ccm:provider/host-capabilities@0.3.0;
                export wasm-ccm:provider/identity@0.3.0;
                export wasm-ccm:provider/instances-v2@0.3.0;
                export wasm-ccm:provider/instances-batch@0.3.0;
                export wasm-ccm:provider/instances@0.3.0;
                export wasm-ccm:provider/zones@0.3.0;
                export wasm-ccm:provider/load-balancer@0.3.0;
                export wasm-ccm:provider/routes@0.3.0;
                export wasm-ccm:provider/clusters@0.3.0;
            }
        ",
        world: "wasm-ccm:reference/provider",
        with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types },
        generate_all,
    });
}

/// The provider name: `--cloud-provider simcloud`, provider IDs `simcloud://<id>`.
pub const PROVIDER_NAME: &str = "simcloud";

/// The provider: its config and the API client.
pub struct SimCloud {
    config: config::Config,
    cloud: cloud::Cloud,
}

impl Provider for SimCloud {
    const NAME: &'static str = PROVIDER_NAME;

    fn initialize(cloud_config: &[u8]) -> Result<Self, String> {
        let config = config::Config::parse(cloud_config)?;
        let cloud = cloud::Cloud::new(&config.endpoint).map_err(|e| e.to_string())?;
        wasm_ccm_guest::log::debug("initialized", &[("endpoint", &config.endpoint)]);
        // A one-line change, for a version whose code differs from the default build
        // (the hot-swap bench's "rebuilt" rows).
        #[cfg(feature = "rebuilt")]
        wasm_ccm_guest::log::debug("rebuilt", &[]);
        Ok(SimCloud { config, cloud })
    }
}

wasm_ccm_guest::export_provider!(SimCloud with_types_in bindings,
    exports: [instances_v2, instances_batch, instances, zones, load_balancer, routes, clusters]);

/// `simcloud://i-123` -> `i-123`.
fn instance_id_from_provider_id(provider_id: &str) -> Result<&str, CloudError> {
    let id = wasm_ccm_guest::provider_id::parse(PROVIDER_NAME, provider_id)?;
    if id.contains('/') {
        return Err(CloudError::Other(format!(
            "provider ID {provider_id:?} is not of the form {PROVIDER_NAME}://<instance-id>"
        )));
    }
    Ok(id)
}

fn provider_id(instance_id: &str) -> String {
    wasm_ccm_guest::provider_id::format(PROVIDER_NAME, instance_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        assert_eq!(
            instance_id_from_provider_id(&provider_id("i-1")).unwrap(),
            "i-1"
        );
        assert!(instance_id_from_provider_id("aws:///i-1").is_err());
        assert!(instance_id_from_provider_id("simcloud://").is_err());
        assert!(instance_id_from_provider_id("simcloud://a/b").is_err());
    }
}
