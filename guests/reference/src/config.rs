//! The cloud config (`--cloud-config`), JSON:
//!
//! ```json
//! {"endpoint": "http://127.0.0.1:8080", "zone": "zone-a", "region": "region-1"}
//! ```
//!
//! `endpoint` is required; `zone`/`region` answer `zones.get-zone` (the zone of the
//! machine the controller manager runs on). The bearer token is not here: the host
//! injects it from a mounted Secret, per the provider policy.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Base URL of the simulated cloud API.
    pub endpoint: String,
    /// Zone reported by `get-zone`.
    #[serde(default)]
    pub zone: Option<String>,
    /// Region reported by `get-zone`.
    #[serde(default)]
    pub region: Option<String>,
}

impl Config {
    /// Parses and validates the cloud config bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err("the cloud config is empty; it must be JSON with at least \
                        {\"endpoint\": \"http://HOST:PORT\"}"
                .into());
        }
        let config: Config =
            serde_json::from_slice(bytes).map_err(|e| format!("invalid cloud config: {e}"))?;
        wasm_ccm_guest::url::Url::parse(&config.endpoint)
            .map_err(|e| format!("invalid cloud config: field `endpoint`: {e}"))?;
        Ok(config)
    }
}
