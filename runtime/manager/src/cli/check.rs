//! `wasm-ccm check FILE.wasm [--json] [--cloud-config FILE] [--policy FILE]`: the host's
//! check engine ([`wasm_ccm_host::check`]: contract version, exports, imports, size,
//! the policy, and `initialize` with a cloud config) run on a component, its report
//! printed as text or JSON.

use std::path::Path;

use wasm_ccm_host::check::{CheckError, CheckOptions, check};

/// Checks `file` and prints the report (`json`: as JSON).
pub async fn run(file: &Path, json: bool, options: &CheckOptions) -> Result<(), CheckError> {
    let report = check(file, options).await?;
    if json {
        println!("{:#}", report.to_json());
    } else {
        println!("{report}");
    }
    Ok(())
}
