//! Waiting for a shared ELB to be `ACTIVE` again after a change, without blocking a
//! worker: upstream's `SharedLoadBalanceClient.WaitStatusActive` polls with
//! `common.WaitForCompleted` (a read at once, then pauses of 2 s growing ×1.02, 30
//! reads); here the pauses stop where the call's deadline would not leave room for
//! the work after them, and the call answers `retry-after` so the controller calls
//! again and the work resumes where it stopped (every step is found again by name,
//! port or address).

use std::time::Duration;

use serde_json::Value;
use wasm_ccm_guest::types::CloudError;
use wasm_ccm_guest::{cloud_error, deadline};

use super::cloud::{Cloud, ELB, Endpoint, encode, text};

/// Upstream's `common.DefaultInitDelay` and `DefaultFactor`.
const POLL_FIRST: Duration = Duration::from_secs(2);
const POLL_FACTOR: f64 = 1.02;
/// What a call keeps of its deadline for the work after a wait.
const RESERVE: Duration = Duration::from_secs(2);
/// The delay asked for when the ELB is still busy at the end of a call.
pub(super) const BUSY_RETRY_MS: u64 = 3_000;

/// The pauses of one wait, within the call's deadline.
pub(super) struct Poll {
    next: Duration,
}

impl Poll {
    pub(super) fn new() -> Self {
        Self { next: POLL_FIRST }
    }

    /// Sleeps the next pause, or answers `retry-after` (saying `why`) when the call's
    /// deadline leaves no room for it and the work after it.
    pub(super) fn pause(&mut self, why: impl FnOnce() -> String) -> Result<(), CloudError> {
        if deadline::remaining() < self.next + RESERVE {
            return Err(cloud_error::retry_after(BUSY_RETRY_MS, why()));
        }
        std::thread::sleep(self.next);
        self.next = self.next.mul_f64(POLL_FACTOR);
        Ok(())
    }
}

/// The ELB `id` (`GET /v2/{project_id}/elb/loadbalancers/{id}`), `None` when gone.
pub(super) fn read(cloud: &Cloud, id: &str) -> Result<Option<Value>, CloudError> {
    let found = cloud.find(
        Endpoint::Elb,
        &format!("{ELB}/loadbalancers/{}", encode(id)),
        "get the ELB",
    )?;
    Ok(found.map(|body| body["loadbalancer"].clone()))
}

/// Upstream's `WaitStatusActive`: the ELB once `ACTIVE`; upstream's error when it is in
/// `ERROR`; `retry-after` when it is still busy as the call's deadline nears.
pub(super) fn active(cloud: &Cloud, id: &str) -> Result<Value, CloudError> {
    let mut poll = Poll::new();
    loop {
        let Some(lb) = read(cloud, id)? else {
            return Err(cloud_error::other(format!("ELB {id} disappeared")));
        };
        match text(&lb, "provisioning_status") {
            "ACTIVE" => return Ok(lb),
            "ERROR" => {
                return Err(cloud_error::other(format!(
                    "ELB {id}: LoadBalancer has gone into ERROR provisioning status"
                )));
            }
            status => {
                let status = status.to_owned();
                poll.pause(|| format!("ELB {id} is {status}; resuming later"))?;
            }
        }
    }
}
