//! The names upstream gives what it makes (`sharedloadbalancer.go`), so a load balancer
//! made by cloud-provider-huaweicloud is found here and the other way round.

use wasm_ccm_guest::types::Service;

/// Upstream's `defaultMaxNameLength`: load balancer and listener names.
pub(super) const MAX_NAME: usize = 255;
/// Upstream's `maxServerGroupNameLength`: pool (backend server group) names.
pub(super) const MAX_POOL_NAME: usize = 64;
/// The longest bandwidth name the EIP API takes.
pub(super) const MAX_BANDWIDTH_NAME: usize = 64;

/// Upstream's `utils.CutString`: at most `max` bytes (here cut at a character
/// boundary, so a multi-byte name stays valid UTF-8).
pub(super) fn cut(name: String, max: usize) -> String {
    if name.len() <= max {
        return name;
    }
    let mut end = max;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

/// Upstream's `SharedLoadBalancer.GetLoadBalancerName`:
/// `k8s_service_<cluster>_<namespace>_<name>`, cut to 255, with the configured
/// `business-name` in place of the cluster name when there is one.
pub(super) fn load_balancer(cluster: &str, business_name: &str, service: &Service) -> String {
    let cluster = if business_name.is_empty() {
        cluster
    } else {
        business_name
    };
    cut(
        format!(
            "k8s_service_{cluster}_{}_{}",
            service.metadata.namespace, service.metadata.name
        ),
        MAX_NAME,
    )
}

/// Upstream's listener name (`createListener`, `updateListener`):
/// `<service name>_<protocol>_<port>`, cut to 255.
pub(super) fn listener(service: &Service, protocol: &str, port: i32) -> String {
    cut(
        format!("{}_{protocol}_{port}", service.metadata.name),
        MAX_NAME,
    )
}

/// Upstream's pool name (`createPool`): `sg_<listener name>`, cut to 64.
pub(super) fn pool(listener_name: &str) -> String {
    cut(format!("sg_{listener_name}"), MAX_POOL_NAME)
}

/// Upstream's description of a load balancer it makes (`createLoadbalancer`), naming the
/// cluster (never the business name).
pub(super) fn description(cluster: &str, service: &Service) -> String {
    format!(
        "Created by the ELB service({}/{}) of the k8s cluster({cluster}).",
        service.metadata.namespace, service.metadata.name
    )
}

/// Upstream's bandwidth name for an EIP it creates (`createEIP`):
/// `<namespace>_<name>` (here cut to the API's 64 characters).
pub(super) fn bandwidth(service: &Service) -> String {
    cut(
        format!("{}_{}", service.metadata.namespace, service.metadata.name),
        MAX_BANDWIDTH_NAME,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ccm_guest::testing::service;

    #[test]
    fn names_are_upstreams() {
        let web = service("default", "web");
        assert_eq!(
            load_balancer("kubernetes", "", &web),
            "k8s_service_kubernetes_default_web"
        );
        assert_eq!(
            load_balancer("kubernetes", "shop", &web),
            "k8s_service_shop_default_web"
        );
        assert_eq!(listener(&web, "TCP", 80), "web_TCP_80");
        assert_eq!(pool("web_TCP_80"), "sg_web_TCP_80");
        assert_eq!(
            description("kubernetes", &web),
            "Created by the ELB service(default/web) of the k8s cluster(kubernetes)."
        );
        assert_eq!(bandwidth(&web), "default_web");
    }

    #[test]
    fn long_names_are_cut() {
        let long = service("default", &"n".repeat(300));
        assert_eq!(load_balancer("k", "", &long).len(), MAX_NAME);
        assert_eq!(listener(&long, "TCP", 80).len(), MAX_NAME);
        assert_eq!(pool(&"l".repeat(100)).len(), MAX_POOL_NAME);
        assert_eq!(cut("ééé".into(), 3), "é");
    }
}
