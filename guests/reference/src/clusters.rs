//! `clusters`: the clusters the cloud knows and their control plane addresses.

use crate::bindings::exports::wasm_ccm::provider::clusters;
use crate::bindings::wasm_ccm::provider::types::CloudError;
use crate::{Provider, with_state};

impl clusters::Guest for Provider {
    fn list_clusters() -> Result<Vec<String>, CloudError> {
        with_state(|s| Ok(s.cloud.clusters()?.into_iter().map(|c| c.name).collect()))
    }

    fn master(cluster_name: String) -> Result<String, CloudError> {
        with_state(|s| {
            s.cloud
                .clusters()?
                .into_iter()
                .find(|c| c.name == cluster_name)
                .map(|c| c.master)
                .ok_or_else(|| CloudError::Other(format!("unknown cluster {cluster_name}")))
        })
    }
}
