//! The policy after the credential rule: the request timeout (occm's), the call
//! timeout, the limits and annotations deploy/openstack's policy has, and the requests
//! the token goes with (the provider's, [`provider_actions`]).

use std::time::Duration;

use wasm_ccm_guest::gcfg;

/// occm's timeout of one OpenStack request when `[Metadata] request-timeout` is unset
/// (`defaultTimeOut` in `pkg/openstack/openstack.go`).
const OCCM_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// deploy/openstack's `callTimeout`, the least an imported policy gets.
const DEPLOY_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The request timeout: occm's `[Metadata] request-timeout` (the last one; in the
/// policy's duration grammar, Go's), [`OCCM_REQUEST_TIMEOUT`] when unset or zero; what
/// is wrong with it as the error.
pub(super) fn request_timeout(entries: &[gcfg::Entry]) -> Result<Duration, String> {
    match entries
        .iter()
        .rev()
        .find(|e| e.section == "metadata" && e.subsection.is_none() && e.name == "requesttimeout")
    {
        Some(timeout) => {
            let duration = wasm_ccm_host::policy::parse_duration(&timeout.value)
                .map_err(|e| format!("[Metadata] request-timeout `{}`: {e}", timeout.value))?;
            Ok(if duration.is_zero() {
                OCCM_REQUEST_TIMEOUT
            } else {
                duration
            })
        }
        None => Ok(OCCM_REQUEST_TIMEOUT),
    }
}

/// The policy after the credential rule: deploy/openstack's limits but occm's request
/// timeout (and a call long enough for two such requests: the host starts a request
/// only while its whole timeout fits in the call), and the annotations the provider
/// records on its Services (occm's).
pub(super) fn policy_tail(request_timeout: Duration) -> String {
    let call_timeout = (request_timeout * 2).max(DEPLOY_CALL_TIMEOUT);
    format!(
        "\
limits:
  # Octavia provisions asynchronously: a call waits for it up to this long, then the
  # controller calls again. A request starts only while its whole requestTimeout is
  # left in the call.
  callTimeout: {call}s
  # One request, as occm times it ([Metadata] request-timeout, else 60s).
  requestTimeout: {request}ms
  poolSize: 4
# The provider records its load balancer on the Service, as occm does
# (loadbalancer.openstack.org/load-balancer-id and load-balancer-address).
serviceAnnotations:
  - loadbalancer.openstack.org/
",
        call = call_timeout.as_secs_f64().ceil() as u64,
        request = request_timeout.as_millis(),
    )
}

/// The provider's requests (`guests/openstack/allowed-actions.txt`), the
/// `allowedActions` of its Keystone rule.
pub fn provider_actions() -> impl Iterator<Item = &'static str> {
    include_str!("../../allowed-actions.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::TEST_CLOUD_CONF as OCCM;
    use crate::convert;

    use super::*;

    /// The imported policy runs the provider as deploy/openstack's does: the same
    /// limits, the same requests, the same annotations.
    #[test]
    fn the_imported_policy_matches_deploy_openstacks() {
        let imported = convert(
            OCCM,
            Path::new("/in/cloud.conf"),
            "/etc/wasm-ccm/credentials",
        )
        .unwrap();
        let path = Path::new("/etc/wasm-ccm/providers/openstack.yaml");
        let ours = wasm_ccm_host::policy::Policy::parse(&imported.policy, path).unwrap();
        let deploy = wasm_ccm_host::policy::Policy::parse(
            include_str!("../../../../deploy/openstack/providers/openstack.yaml"),
            path,
        )
        .unwrap();
        // The same, but for occm's request timeout (see the test below) and a call
        // long enough for two such requests.
        assert_eq!(
            wasm_ccm_host::policy::InstanceLimits {
                call_timeout: deploy.instance_limits.call_timeout,
                ..ours.instance_limits.clone()
            },
            deploy.instance_limits
        );
        assert_eq!(ours.instance_limits.call_timeout, Duration::from_secs(120));
        assert_eq!(
            wasm_ccm_host::policy::EgressLimits {
                request_timeout: deploy.egress_limits.request_timeout,
                ..ours.egress_limits.clone()
            },
            deploy.egress_limits
        );
        assert_eq!(ours.service_annotations, deploy.service_annotations);
        assert_eq!(
            ours.credentials[0].allowed_actions,
            deploy.credentials[0].allowed_actions
        );
    }

    /// occm times each request 60 s when `[Metadata] request-timeout` is unset or zero
    /// (`NewOpenStack`: `defaultTimeOut`, `provider.HTTPClient.Timeout`).
    #[test]
    fn the_request_timeout_is_occms_60s_by_default() {
        for text in [
            OCCM.to_owned(),
            format!("{OCCM}[Metadata]\nrequest-timeout = 0s\n"),
            format!("{OCCM}[Metadata]\nsearch-order = configDrive\n"),
        ] {
            let imported = convert(&text, Path::new("/in/cloud.conf"), "/c").unwrap();
            let policy =
                wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml"))
                    .unwrap();
            assert_eq!(
                policy.egress_limits.request_timeout,
                std::time::Duration::from_secs(60),
                "{text}"
            );
        }
    }

    /// The route fallback without Neutron's `extraroute-atomic` writes the router's
    /// whole route list back (`PUT <network>/v2.0/routers/<id>`, guests/openstack's
    /// routes.rs): the imported policy lets it, as deploy/openstack's does.
    #[test]
    fn the_imported_policy_allows_the_whole_router_update() {
        let imported = convert(OCCM, Path::new("/in/cloud.conf"), "/c").unwrap();
        let policy =
            wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml")).unwrap();
        let actions = policy.credentials[0].allowed_actions.as_ref().unwrap();
        let check = |method: http::Method, url: &str| {
            actions
                .check_request(&method, &url::Url::parse(url).unwrap())
                .is_ok()
        };
        let router = "https://neutron.example.com:9696/v2.0/routers/8d7e0a61";
        assert!(check(http::Method::PUT, router));
        assert!(check(http::Method::GET, router));
        assert!(check(
            http::Method::PUT,
            &format!("{router}/add_extraroutes")
        ));
        assert!(check(
            http::Method::PUT,
            &format!("{router}/remove_extraroutes")
        ));
        // Still only what the provider does: no router deleted, no interface added.
        assert!(!check(http::Method::DELETE, router));
        assert!(!check(
            http::Method::PUT,
            &format!("{router}/add_router_interface")
        ));
    }

    #[test]
    fn metadata_request_timeout_becomes_the_policys() {
        let text = format!("{OCCM}[Metadata]\nrequest-timeout = 45s\n");
        let imported = convert(&text, Path::new("/in/cloud.conf"), "/c").unwrap();
        let policy =
            wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml")).unwrap();
        assert_eq!(
            policy.egress_limits.request_timeout,
            std::time::Duration::from_secs(45)
        );
        assert_eq!(policy.instance_limits.call_timeout, Duration::from_secs(90));
        // A short request timeout keeps deploy/openstack's call.
        let text = format!("{OCCM}[Metadata]\nrequest-timeout = 1500ms\n");
        let imported = convert(&text, Path::new("/in/cloud.conf"), "/c").unwrap();
        let policy =
            wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml")).unwrap();
        assert_eq!(
            policy.egress_limits.request_timeout,
            Duration::from_millis(1500)
        );
        assert_eq!(policy.instance_limits.call_timeout, Duration::from_secs(60));
        let err = convert(
            &format!("{OCCM}[Metadata]\nrequest-timeout = soon\n"),
            Path::new("/in/cloud.conf"),
            "/c",
        )
        .unwrap_err();
        assert!(err.to_string().contains("request-timeout"), "{err}");
    }
}
