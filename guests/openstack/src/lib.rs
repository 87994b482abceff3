//! The wasm-ccm provider for OpenStack (provider name `openstack`).
//!
//! It speaks to Nova, Neutron and Octavia through the host's HTTP broker; the host
//! logs in to Keystone and adds the token to every request for the catalog's
//! endpoints, so the provider holds no secret. Where to start:
//! - [`config`]: occm's `cloud.conf` (`[Global]`, `[LoadBalancer]`, `[Networking]`,
//!   `[Route]`), secrets refused (occm's `[Global]` keys the host holds are the
//!   `occm-config` crate's table, `occm-config/`, shared with `wasm-ccm
//!   import-occm-config`);
//! - [`api`]: the service catalog, JSON requests, errors, pagination;
//! - [`instances`] (`instances-v2` and `instances-batch` with Nova servers and their
//!   Neutron ports), [`load_balancer`] (Octavia), [`routes`] (the router's extra
//!   routes): the exports.
//!
//! Behaviour follows kubernetes/cloud-provider-openstack (occm); `guests/openstack/README.md`
//! lists what is covered and what is not.

mod api;
mod config;
mod instances;
mod labels;
mod load_balancer;
pub mod occm_settings;
mod routes;

use wasm_ccm_guest::Provider;

#[allow(warnings)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package wasm-ccm:openstack;
            world openstack {
                export wasm-ccm:provider/identity@0.3.0;
                export wasm-ccm:provider/instances-v2@0.3.0;
                export wasm-ccm:provider/instances-batch@0.3.0;
                export wasm-ccm:provider/load-balancer@0.3.0;
                export wasm-ccm:provider/load-balancer-name@0.3.0;
                export wasm-ccm:provider/routes@0.3.0;
            }
        ",
        world: "wasm-ccm:openstack/openstack",
        with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types },
    });
}

/// The provider name: `--cloud-provider openstack`, provider IDs `openstack:///<id>`.
pub const PROVIDER_NAME: &str = "openstack";

/// The provider: what `initialize` sets up from the cloud config.
pub struct OpenStack {
    config: config::Config,
}

impl Provider for OpenStack {
    const NAME: &'static str = PROVIDER_NAME;

    fn initialize(cloud_config: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(cloud_config)
            .map_err(|_| "the cloud config is not UTF-8 text".to_owned())?;
        let config = config::Config::parse(text)?;
        wasm_ccm_guest::log::info(
            "initialized",
            &[
                ("auth-url", &config.auth_url),
                ("region", &config.region),
                ("interface", &config.interface),
            ],
        );
        Ok(OpenStack { config })
    }

    /// occm tags nothing with a cluster ID; its load balancers carry the cluster name.
    fn has_cluster_id(&self) -> bool {
        true
    }

    /// occm's `LoadBalancer()` answers `false` for `[LoadBalancer] enabled = false`, so
    /// the service controller does not run: the same here.
    fn declined_interfaces(&self) -> Vec<&'static str> {
        if self.config.load_balancer.enabled {
            Vec::new()
        } else {
            vec!["load-balancer", "load-balancer-name"]
        }
    }
}

wasm_ccm_guest::export_provider!(OpenStack with_types_in bindings,
    exports: [instances_v2, instances_batch, load_balancer, load_balancer_name, routes]);
