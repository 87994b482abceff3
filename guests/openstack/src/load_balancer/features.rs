//! Octavia's API version and what it allows, as occm's `IsOctaviaFeatureSupported`:
//! listener timeouts from 2.1, tags 2.5, flavors 2.6, allowed CIDRs 2.12, availability
//! zones 2.14, HTTP monitors on UDP pools 2.16. The version is the last one Octavia's
//! version document lists (occm's `getOctaviaVersion`), read once and kept in the
//! shared cache.
//!
//! A setting the version does not allow is left out as occm leaves it out, with a
//! Warning when the Service (or the cloud config) asked for it. Unlike occm, an Octavia
//! known to be without tags (before 2.5, Rocky) is refused: tags are how a Service's
//! listeners on a load balancer are told apart. When the version cannot be read (the
//! policy does not allow the version document, it fails, or it lists no version), no
//! optional feature is assumed, as occm's `IsOctaviaFeatureSupported` answers false
//! when `getOctaviaVersion` fails (listener timeouts, flavors, allowed CIDRs,
//! availability zones and HTTP monitors on UDP pools are left out; tags are still
//! sent, this provider needs them), and the version is read again at the next call
//! (occm keeps only a version it read).

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
    /// Whether the API is known to be at least `major.minor` (occm's
    /// `IsOctaviaFeatureSupported`: an unknown version supports nothing).
    pub(super) fn at_least(self, major: u32, minor: u32) -> bool {
        self.0.is_some_and(|v| v >= (major, minor))
    }

    /// Whether the API is known to be older than `major.minor`.
    fn before(self, major: u32, minor: u32) -> bool {
        self.0.is_some_and(|v| v < (major, minor))
    }

    /// Why a feature of `needs` is left out.
    fn lacks(self, needs: &str) -> String {
        match self.0 {
            Some(_) => format!(
                "Octavia API {} does not support it (upgrade Octavia to {needs} or later)",
                self.text()
            ),
            None => format!(
                "Octavia's API version could not be read, and occm then assumes no \
                 optional feature (this one needs {needs})"
            ),
        }
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
    /// Octavia's API version (from the shared cache, else its version document); an
    /// unknown one (not kept: read again at the next call) when it cannot be read.
    pub(super) fn octavia_version(&self) -> OctaviaVersion {
        let Ok(octavia) = self.octavia() else {
            return OctaviaVersion(None);
        };
        // The version document is at the endpoint's root, above `/v2`.
        let root = octavia.trim_end_matches("/v2").to_owned();
        let key = format!("octavia-version/{root}");
        // (An unknown version an older provider kept is read again.)
        if let Some(found) = cache::get_json::<OctaviaVersion>(&key).filter(|v| v.0.is_some()) {
            return found;
        }
        match read_version(&root) {
            Some(version) => {
                let version = OctaviaVersion(Some(version));
                let _ = cache::set_json(&key, &version, VERSION_TTL);
                version
            }
            None => {
                // occm's IsOctaviaFeatureSupported: "Failed to get current Octavia API
                // version", and every feature is false.
                wasm_ccm_guest::log::warn(
                    "Octavia's API version could not be read (is `GET` of its endpoint's \
                     root in the policy's allowedActions?); no optional feature is assumed, \
                     as occm assumes none",
                    &[("endpoint", root.as_str())],
                );
                OctaviaVersion(None)
            }
        }
    }
}

/// The current version of the version document at `root` (occm's `getOctaviaVersion`),
/// `None` when it cannot be read or lists none.
fn read_version(root: &str) -> Option<(u32, u32)> {
    let what = "read Octavia's version document";
    let response = Request::get(root).send().ok()?;
    let response = cloud_error::check(response, what).ok()?;
    current_version(&cloud_error::json::<Value>(&response, what).ok()?)
}

/// Leaves out what Octavia `version` does not allow, as occm: listener timeouts before
/// 2.1, flavors before 2.6, allowed CIDRs before 2.12 and availability zones before
/// 2.14 (each with a Warning when asked for), HTTP monitors on UDP pools before 2.16;
/// all of them when the version is unknown. An error when the version is known to be
/// before 2.5 (no tags).
pub(super) fn within_version(wanted: &mut Wanted, version: OctaviaVersion) -> Result<(), String> {
    if version.before(2, 5) {
        return Err(format!(
            "Octavia API {} has no tags (2.5, Rocky, and later have them), which this \
             provider needs to tell each Service's listeners apart",
            version.text()
        ));
    }
    let ignored = |reason: &str, what: &str, needs: &str| {
        let _ = events::warning(
            reason,
            &format!("{what} ignored: {}", version.lacks(needs)),
            None,
        );
    };
    // occm's OctaviaFeatureTimeout: only an unknown version lacks it here.
    if !version.at_least(2, 1) {
        wanted
            .listener_settings
            .retain(|(field, _)| !field.starts_with("timeout_"));
    }
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

    /// occm's IsOctaviaFeatureSupported answers false when the version cannot be
    /// read: every optional feature is left out (with the Warnings), none refused.
    #[test]
    fn an_unknown_version_assumes_no_feature_as_occm() {
        let mut unknown = Wanted {
            listener_settings: vec![("timeout_client_data", 9000), ("connection_limit", -1)],
            flavor: "f1".into(),
            allowed_cidrs: vec!["198.51.100.0/24".into()],
            source_ranges_given: true,
            zone: "az1".into(),
            http_monitors_on_udp: true,
            ..Wanted::default()
        };
        within_version(&mut unknown, OctaviaVersion(None)).unwrap();
        assert_eq!(unknown.listener_settings, [("connection_limit", -1)]);
        assert!(unknown.flavor.is_empty() && unknown.zone.is_empty());
        assert!(unknown.allowed_cidrs.is_empty());
        assert!(!unknown.http_monitors_on_udp);
        let recorded = wasm_ccm_guest::events::recorded();
        let reasons: Vec<&str> = recorded.iter().map(|(_, r, _)| r.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "LoadBalancerFlavorIgnored",
                "LoadBalancerSourceRangesIgnored",
                "LoadBalancerAvailabilityZonesIgnored"
            ]
        );
        assert!(
            recorded
                .iter()
                .all(|(_, _, m)| m.contains("could not be read"))
        );
    }

    /// A version document that fails or lists no version is an unknown version, read
    /// again at the next call; a version read is kept.
    #[test]
    fn an_unreadable_version_is_read_again() {
        use wasm_ccm_guest::http::Response;
        use wasm_ccm_guest::testing::MockTransport;
        cache::clear();
        let cloud = MockTransport::new();
        let catalog = json!({"catalog": [{"type": "load-balancer", "endpoints": [
            {"interface": "public", "region_id": "RegionOne",
             "url": "http://cloud/load-balancer"}]}]});
        cloud.on(
            "GET",
            "/v3/auth/catalog",
            Response::with_json(200, &catalog),
        );
        let document = json!({"versions": [{"id": "v2.0"}, {"id": "v2.27"}]});
        cloud.on_sequence(
            "GET",
            "/load-balancer",
            vec![
                Ok(Response::new(500)),
                Ok(Response::new(200).with_body("text/html", "<html>garbage</html>")),
                Ok(Response::with_json(200, &json!({"versions": []}))),
                Ok(Response::with_json(200, &document)),
            ],
        );
        let _installed = cloud.install();
        let provider = OpenStack {
            config: crate::config::Config::parse("[Global]\nauth-url = https://k/v3\n").unwrap(),
        };
        for _ in 0..3 {
            assert_eq!(provider.octavia_version(), OctaviaVersion(None));
        }
        assert_eq!(provider.octavia_version(), OctaviaVersion(Some((2, 27))));
        assert_eq!(provider.octavia_version(), OctaviaVersion(Some((2, 27))));
        assert_eq!(cloud.count("GET", "/load-balancer"), 4);
    }

    #[test]
    fn features_follow_the_version() {
        let v = |minor| OctaviaVersion(Some((2, minor)));
        assert!(v(12).at_least(2, 12) && !v(11).at_least(2, 12));
        assert!(!OctaviaVersion(None).at_least(2, 1));
        assert!(!OctaviaVersion(None).before(2, 5));
        assert!(OctaviaVersion(Some((3, 0))).at_least(2, 16));
    }
}
