//! Writes the Service annotations providers set (the contract's `annotations` import)
//! with one JSON merge patch per call, off the provider call. The patch carries the
//! Service's UID, so a Service deleted and made again under the name is not written.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use wasm_ccm_host::capabilities::annotations::{AnnotationSink, ServiceAnnotations};

/// Patches Services with `client`.
pub struct ProviderAnnotations {
    client: kube::Client,
}

impl ProviderAnnotations {
    /// Annotations written with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

/// The merge patch writing `set`.
pub fn patch(set: &ServiceAnnotations) -> serde_json::Value {
    let annotations: serde_json::Map<String, serde_json::Value> = set
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let mut metadata = serde_json::json!({ "annotations": annotations });
    if !set.service.uid.is_empty() {
        metadata["uid"] = serde_json::Value::String(set.service.uid.clone());
    }
    serde_json::json!({ "metadata": metadata })
}

impl AnnotationSink for ProviderAnnotations {
    fn apply(&self, set: ServiceAnnotations) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let services: Api<Service> = Api::namespaced(self.client.clone(), &set.service.namespace);
        runtime.spawn(async move {
            let params = PatchParams::default();
            match services
                .patch(&set.service.name, &params, &Patch::Merge(patch(&set)))
                .await
            {
                Ok(_) => tracing::info!(
                    provider = set.provider,
                    service = format!("{}/{}", set.service.namespace, set.service.name),
                    keys = ?set.annotations.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
                    "wrote the provider's annotations"
                ),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(err) => tracing::warn!(
                    provider = set.provider,
                    service = format!("{}/{}", set.service.namespace, set.service.name),
                    error = %err,
                    "cannot write the provider's annotations"
                ),
            }
        });
    }
}
