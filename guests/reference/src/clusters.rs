//! `clusters`: the clusters the cloud knows and their control plane addresses.

use wasm_ccm_guest::Clusters;
use wasm_ccm_guest::types::CloudError;

use crate::SimCloud;

impl Clusters for SimCloud {
    fn list_clusters(&self) -> Result<Vec<String>, CloudError> {
        Ok(self.cloud.clusters()?.into_iter().map(|c| c.name).collect())
    }

    fn master(&self, cluster_name: String) -> Result<String, CloudError> {
        self.cloud
            .clusters()?
            .into_iter()
            .find(|c| c.name == cluster_name)
            .map(|c| c.master)
            .ok_or_else(|| CloudError::Other(format!("unknown cluster {cluster_name}")))
    }
}
