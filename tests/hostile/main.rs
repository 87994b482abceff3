//! Hostile guests and hostile clouds, built from `guests/fixtures/hostile`: each
//! misbehaviour is contained, reported clearly, and does not stop a well-behaved
//! provider served by the same host at the same time.

mod clouds;
mod egress;
mod isolation;
mod memories;
mod policies;
mod runaway;

use std::time::Duration;

use sim_cloud::SimCloud;
use sim_cloud::model::NewInstance;
use wasm_ccm_host::capabilities::http_egress::EgressSettings;
use wasm_ccm_host::engine::EngineSettings;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderLoader, TrapKind};
use wasm_ccm_tests::{
    CapturedLogs, ProviderDir, RawBehavior, RawServer, TOKEN, TempDir, act, cloud_config, hostile,
    label, loader, node, other_message, policy_for, refused_policy,
};

async fn reference(loader: &ProviderLoader, cloud: &SimCloud) -> (ProviderDir, Provider) {
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy_for(cloud), TOKEN);
    let provider = loader
        .load(&dir.wasm, cloud_config(cloud))
        .await
        .expect("load reference");
    (dir, provider)
}

/// Runs `calls` reference-provider calls while `misbehaviour` is in flight; all must
/// succeed.
async fn keeps_serving<T>(good: &Provider, misbehaviour: impl Future<Output = T>) -> T {
    let good = good.clone();
    let served = tokio::spawn(async move {
        let v2 = good.instances_v2().unwrap();
        for _ in 0..10 {
            assert!(
                v2.instance_exists(&node("good-node", None, &[]))
                    .await
                    .unwrap()
            );
        }
    });
    let result = misbehaviour.await;
    served
        .await
        .expect("the well-behaved provider kept serving");
    result
}

/// The two ways a guest sends: the SDK's default (the host's buffered
/// `wasm-ccm:http/client`) and `wasi:http/outgoing-handler`'s resources.
const TRANSPORTS: [&str; 2] = ["buffered", "wasi-http"];
