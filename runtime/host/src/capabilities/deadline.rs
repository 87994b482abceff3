//! The `wasm-ccm:provider/deadline` import: how long the current call may still run,
//! so a provider waiting on a slow cloud operation returns `retry-after` (and resumes
//! on the next call) before the host cuts it off.

use std::time::Instant;

use super::HostState;
use crate::contract::deadline::Host;

impl Host for HostState {
    async fn remaining_ms(&mut self) -> u64 {
        self.call.remaining_ms(Instant::now())
    }
}
