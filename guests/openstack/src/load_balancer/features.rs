//! Octavia's API version and what it allows, as occm's `IsOctaviaFeatureSupported`:
//! listener timeouts from 2.1, tags 2.5 (both required here), flavors 2.6, allowed CIDRs 2.12, availability
//! zones 2.14, HTTP monitors on UDP pools 2.16. The version is the last one Octavia's
//! version document lists (occm's `getOctaviaVersion`), read once and kept in the
//! shared cache.
//!
//! A setting the version does not allow is left out as occm leaves it out, with a
//! Warning when the Service (or the cloud config) asked for it. Unlike occm, an Octavia
//! without tags (before 2.5, Rocky) is refused: tags are how a Service's listeners on
//! a load balancer are told apart. When the version cannot be read (the policy does not
//! allow the version document, say), every feature is assumed and Octavia answers
//! for itself.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::{cache, cloud_error, events};

use super::settings::Wanted;
use crate::OpenStack;

/// How long the version is kept in the shared cache.
const VERSION_TTL: Duration = Duration::from_secs(3600);

/// Octavia's API version, `(major, minor)`; `None`: not known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct OctaviaVersion(pub(super) Option<(u32, u32)>);

impl OctaviaVersion {
    /// Whether the API is at least `major.minor` (an unknown version is).
    pub(super) fn at_least(self, major: u32, minor: u32) -> bool {
        self.0.is_none_or(|v| v >= (major, minor))
    }

    fn text(self) -> String {
        self.0
            .map(|(a, b)| format!("v{a}.{b}"))
            .unwrap_or_else(|| "unknown".into())
    }
}

/// `v2.27` → `(2, 27)`.
fn parse_version(id: &str) -> Option<(u32, u32)> {
    let (major, minor) = id.trim().trim_start_matches(['v', 'V']).split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The last version of a version document (`{"versions": [{"id": "v2.0"}, ...]}`).
pub(super) fn current_version(document: &Value) -> Option<(u32, u32)> {
    document["versions"]
        .as_array()?
        .iter()
        .filter_map(|v| parse_version(v["id"].as_str()?))
        .next_back()
}

impl OpenStack {
    /// Octavia's API version (from the shared cache, else its version document).
    pub(super) fn octavia_version(&self) -> OctaviaVersion {
        let Ok(octavia) = self.octavia() else {
            return OctaviaVersion(None);
        };
        // The version document is at the endpoint's root, above `/v2`.
        let root = octavia.trim_end_matches("/v2").to_owned();
        let key = format!("octavia-version/{root}");
        if let Some(found) = cache::get_json::<OctaviaVersion>(&key) {
            return found;
        }
        let found = Request::get(&root)
            .send()
            .ok()
            .and_then(|r| cloud_error::check(r, "read Octavia's version document").ok())
            .and_then(|r| cloud_error::json::<Value>(&r, "read Octavia's version document").ok())
            .and_then(|document| current_version(&document));
        let version = match found {
            Some(version) => OctaviaVersion(Some(version)),
            None => {
                wasm_ccm_guest::log::warn(
                    "Octavia's API version could not be read (is `GET` of its endpoint's \
                     root in the policy's allowedActions?); every feature is assumed",
                    &[("endpoint", root.as_str())],
                );
                OctaviaVersion(None)
            }
        };
        let _ = cache::set_json(&key, &version, VERSION_TTL);
        version
    }
}

/// Leaves out what Octavia `version` does not allow, as occm: flavors before 2.6,
/// allowed CIDRs before 2.12 and availability zones before 2.14 (each with a Warning
/// when asked for), HTTP monitors on UDP pools before 2.16. An error before 2.5 (no
/// tags; listener timeouts, 2.1, are older still).
pub(super) fn within_version(wanted: &mut Wanted, version: OctaviaVersion) -> Result<(), String> {
    if !version.at_least(2, 5) {
        return Err(format!(
            "Octavia API {} has no tags (2.5, Rocky, and later have them), which this \
             provider needs to tell each Service's listeners apart",
            version.text()
        ));
    }
    let ignored = |reason: &str, what: &str, needs: &str| {
        let _ = events::warning(
            reason,
            &format!(
                "{what} ignored: Octavia API {} does not support it (upgrade Octavia to \
                 {needs} or later)",
                version.text()
            ),
            None,
        );
    };
    if !version.at_least(2, 6) && !wanted.flavor.is_empty() {
        wanted.flavor.clear();
        ignored("LoadBalancerFlavorIgnored", "The flavor is", "2.6");
    }
    if !version.at_least(2, 12) {
        wanted.allowed_cidrs.clear();
        if wanted.source_ranges_given {
            ignored(
                "LoadBalancerSourceRangesIgnored",
                "LoadBalancerSourceRanges are",
                "2.12",
            );
        }
    }
    if !version.at_least(2, 14) && !wanted.zone.is_empty() {
        wanted.zone.clear();
        ignored(
            "LoadBalancerAvailabilityZonesIgnored",
            "LoadBalancer Availability Zones are",
            "2.14",
        );
    }
    wanted.http_monitors_on_udp = version.at_least(2, 16);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_current_version_is_the_last_listed() {
        let document = json!({"versions": [{"id": "v2.0", "status": "SUPPORTED"},
            {"id": "v2.1"}, {"id": "v2.27", "status": "CURRENT"}]});
        assert_eq!(current_version(&document), Some((2, 27)));
        assert_eq!(current_version(&json!({"versions": []})), None);
        assert_eq!(current_version(&json!({"error": 1})), None);
    }

    fn reasons() -> Vec<String> {
        wasm_ccm_guest::events::recorded()
            .into_iter()
            .map(|(_, reason, _)| reason)
            .collect()
    }

    #[test]
    fn settings_newer_than_octavia_are_left_out_as_occm() {
        let asked = || Wanted {
            listener_settings: vec![("timeout_client_data", 9000), ("connection_limit", -1)],
            flavor: "f1".into(),
            allowed_cidrs: vec!["198.51.100.0/24".into()],
            source_ranges_given: true,
            zone: "az1".into(),
            ..Wanted::default()
        };
        let mut current = asked();
        within_version(&mut current, OctaviaVersion(Some((2, 27)))).unwrap();
        assert_eq!(current.allowed_cidrs.len(), 1);
        assert!(current.http_monitors_on_udp);
        assert!(reasons().is_empty());

        let mut old = asked();
        within_version(&mut old, OctaviaVersion(Some((2, 0)))).unwrap_err();
        let mut old = asked();
        let err = within_version(&mut old, OctaviaVersion(Some((2, 4)))).unwrap_err();
        assert!(err.contains("v2.4") && err.contains("tags"), "{err}");

        let mut train = asked();
        within_version(&mut train, OctaviaVersion(Some((2, 11)))).unwrap();
        assert!(train.allowed_cidrs.is_empty() && train.zone.is_empty());
        assert_eq!(train.flavor, "f1");
        assert_eq!(train.listener_settings.len(), 2);
        assert!(!train.http_monitors_on_udp);
        assert_eq!(
            reasons(),
            [
                "LoadBalancerSourceRangesIgnored",
                "LoadBalancerAvailabilityZonesIgnored"
            ]
        );

        // The default (everyone) is left out before 2.12 without a Warning.
        let mut everyone = Wanted {
            allowed_cidrs: vec!["0.0.0.0/0".into()],
            ..Wanted::default()
        };
        within_version(&mut everyone, OctaviaVersion(Some((2, 11)))).unwrap();
        assert!(everyone.allowed_cidrs.is_empty());
        assert!(reasons().is_empty());
    }

    #[test]
    fn features_follow_the_version() {
        let v = |minor| OctaviaVersion(Some((2, minor)));
        assert!(v(12).at_least(2, 12) && !v(11).at_least(2, 12));
        assert!(OctaviaVersion(None).at_least(2, 16));
        assert!(OctaviaVersion(Some((3, 0))).at_least(2, 16));
    }
}
