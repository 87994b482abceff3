//! The reference wasm-ccm provider, for the simulated cloud (`tests/sim-cloud`).
//!
//! It implements every interface of the contract over brokered HTTP, and is the
//! example to copy when writing a provider for a real cloud:
//! - [`config`]: the `--cloud-config` it accepts;
//! - [`cloud`]: the REST client and the mapping of HTTP failures to `cloud-error`
//!   (404 -> instance-not-found where the contract says so, 429/503 -> retry-after);
//! - [`instances`], [`load_balancer`], [`routes`], [`clusters`]: the exports.
//!
//! Build: `cargo build --target wasm32-wasip2 --release -p reference-provider`
//! (or `cargo component build --release` in this directory).

mod cloud;
mod clusters;
mod config;
mod instances;
mod load_balancer;
mod routes;

use std::cell::RefCell;

use bindings::exports::wasm_ccm::provider::identity;
use bindings::wasm_ccm::provider::types::CloudError;

#[allow(warnings)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "wasm-ccm:provider/provider",
        generate_all,
    });
}

/// The provider name: `--cloud-provider simcloud`, provider IDs `simcloud://<id>`.
pub const PROVIDER_NAME: &str = "simcloud";

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

struct State {
    config: config::Config,
    cloud: cloud::Cloud,
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

/// `simcloud://i-123` -> `i-123`.
fn instance_id_from_provider_id(provider_id: &str) -> Result<&str, CloudError> {
    provider_id
        .strip_prefix(PROVIDER_NAME)
        .and_then(|rest| rest.strip_prefix("://"))
        .filter(|id| !id.is_empty() && !id.contains('/'))
        .ok_or_else(|| {
            CloudError::Other(format!(
                "provider ID {provider_id:?} is not of the form {PROVIDER_NAME}://<instance-id>"
            ))
        })
}

fn provider_id(instance_id: &str) -> String {
    format!("{PROVIDER_NAME}://{instance_id}")
}

struct Provider;

impl identity::Guest for Provider {
    fn provider_name() -> String {
        PROVIDER_NAME.into()
    }

    fn initialize(cloud_config: Vec<u8>) -> Result<(), String> {
        wasm_ccm_guest::log::install_panic_hook();
        let config = config::Config::parse(&cloud_config)?;
        let cloud = cloud::Cloud::new(&config.endpoint).map_err(|e| format!("{e:?}"))?;
        wasm_ccm_guest::log::debug("initialized", &[("endpoint", &config.endpoint)]);
        STATE.with(|s| *s.borrow_mut() = Some(State { config, cloud }));
        Ok(())
    }

    fn has_cluster_id() -> bool {
        true
    }
}

bindings::export!(Provider with_types_in bindings);

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
