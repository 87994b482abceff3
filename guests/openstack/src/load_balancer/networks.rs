//! Which networks a Service's load balancer uses, in occm's order (v1.36.0,
//! `pkg/openstack/loadbalancer.go`), each from the Service's annotations
//! (`loadbalancer.openstack.org/…`), the `[LoadBalancerClass "name"]` its `class`
//! annotation names and the cloud config's `[LoadBalancer]`:
//!
//! - **VIP subnet and network**: the annotation, the class, the cloud config (occm's
//!   `getSubnetID`, `getNetworkID`); for an external Service with a class, the class's
//!   first (occm's `createOctaviaLoadBalancer` takes `lbClass.SubnetID` and
//!   `lbClass.NetworkID` over what those read; its `configClassName` is set for
//!   external Services only).
//! - **Members' subnet**: `member-subnet-id` of the annotation, the class, the cloud
//!   config (occm's `getMemberSubnetID`), else the cloud config's `subnet-id`, else the
//!   VIP subnet as read above (occm's `checkService`).
//! - **Floating network**: the class's, else the annotation (even empty), else the
//!   cloud config's (occm's `checkService`).
//! - **Floating subnet**: the class's, else the annotations', else the cloud config's
//!   (occm's `checkService`, each a `floatingSubnetSpec`).
//!
//! An empty annotation counts as absent for the subnets and the VIP network, as occm's
//! `getSubnetID`, `getNetworkID` and `getMemberSubnetID` test `!= ""`. What none of them
//! names is found later (`autodetect`).

use wasm_ccm_guest::types::Service;

use super::floating_subnet::FloatingSubnet;
use super::settings::ours;
use crate::config::{LoadBalancerClass, LoadBalancerConfig};

/// The networks a Service asks for, before what is found where none is named.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Networks {
    /// The VIP's subnet (`vip_subnet_id`).
    pub(super) vip_subnet: String,
    /// The VIP's network (`vip_network_id`).
    pub(super) vip_network: String,
    /// The members' `subnet_id` (occm's `svcConf.lbMemberSubnetID`).
    pub(super) member_subnet: String,
    /// Where floating IPs come from.
    pub(super) floating_network: String,
    /// Which subnet of the floating network.
    pub(super) floating_subnet: FloatingSubnet,
}

/// The first of `values` that is not empty (else empty).
fn first(values: &[&str]) -> String {
    values
        .iter()
        .find(|v| !v.is_empty())
        .map_or_else(String::new, |v| (*v).to_owned())
}

/// What the Service (`internal` or not), its `class` and the cloud `config` name.
pub(super) fn networks(
    config: &LoadBalancerConfig,
    class: Option<&LoadBalancerClass>,
    service: &Service,
    internal: bool,
) -> Networks {
    let none = LoadBalancerClass::default();
    let class = class.unwrap_or(&none);
    let annotation = |name: &str| ours(service, name).unwrap_or_default();
    // occm's getSubnetID and getNetworkID: the annotation, the class, the config.
    let subnet = first(&[annotation("subnet-id"), &class.subnet_id, &config.subnet_id]);
    let network = first(&[
        annotation("network-id"),
        &class.network_id,
        &config.network_id,
    ]);
    Networks {
        vip_subnet: vip(&class.subnet_id, subnet.clone(), internal),
        vip_network: vip(&class.network_id, network, internal),
        member_subnet: member_subnet(config, class, service, &subnet),
        floating_network: floating_network(config, class, service),
        floating_subnet: floating_subnet(config, class, service),
    }
}

/// occm's `createOctaviaLoadBalancer`: an external Service's class value (a VIP subnet
/// or network) before the one `read` from the annotation, the class and the config.
fn vip(class: &str, read: String, internal: bool) -> String {
    if internal || class.is_empty() {
        read
    } else {
        class.to_owned()
    }
}

/// occm's `checkService`: `member-subnet-id` (`getMemberSubnetID`: annotation, class,
/// config), else the config's `subnet-id`, else the VIP `subnet` as `getSubnetID` reads it.
fn member_subnet(
    config: &LoadBalancerConfig,
    class: &LoadBalancerClass,
    service: &Service,
    subnet: &str,
) -> String {
    first(&[
        ours(service, "member-subnet-id").unwrap_or_default(),
        &class.member_subnet_id,
        &config.member_subnet_id,
        &config.subnet_id,
        subnet,
    ])
}

/// occm's `checkService`: the class's floating network, else the annotation (even
/// empty: then one is found), else the config's.
fn floating_network(
    config: &LoadBalancerConfig,
    class: &LoadBalancerClass,
    service: &Service,
) -> String {
    if !class.floating_network_id.is_empty() {
        return class.floating_network_id.clone();
    }
    ours(service, "floating-network-id")
        .unwrap_or(&config.floating_network_id)
        .to_owned()
}

/// occm's `checkService`: the class's floating subnet, else the annotations', else the
/// config's (each an ID, else a name pattern and tags).
fn floating_subnet(
    config: &LoadBalancerConfig,
    class: &LoadBalancerClass,
    service: &Service,
) -> FloatingSubnet {
    let annotation = |name| ours(service, name).unwrap_or_default();
    [
        FloatingSubnet::new(
            &class.floating_subnet_id,
            &class.floating_subnet,
            &class.floating_subnet_tags,
        ),
        FloatingSubnet::new(
            annotation("floating-subnet-id"),
            annotation("floating-subnet"),
            annotation("floating-subnet-tags"),
        ),
    ]
    .into_iter()
    .find(FloatingSubnet::configured)
    .unwrap_or_else(|| {
        FloatingSubnet::new(
            &config.floating_subnet_id,
            &config.floating_subnet,
            &config.floating_subnet_tags,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancer::settings::tests::service;

    /// The cloud config: `[LoadBalancer]` with `extra`.
    fn config(extra: &str) -> LoadBalancerConfig {
        let text = format!("[Global]\nauth-url = https://k/v3\n[LoadBalancer]\n{extra}");
        crate::config::Config::parse(&text).unwrap().load_balancer
    }

    /// A class naming a floating network and subnet, a VIP subnet and network.
    fn class() -> LoadBalancerClass {
        LoadBalancerClass {
            floating_network_id: "class-fnet".into(),
            floating_subnet_id: "class-fsub".into(),
            subnet_id: "class-sub".into(),
            network_id: "class-net".into(),
            ..LoadBalancerClass::default()
        }
    }

    /// Annotations naming every network.
    const ANNOTATED: [(&str, &str); 4] = [
        (
            "loadbalancer.openstack.org/floating-network-id",
            "anno-fnet",
        ),
        ("loadbalancer.openstack.org/floating-subnet-id", "anno-fsub"),
        ("loadbalancer.openstack.org/subnet-id", "anno-sub"),
        ("loadbalancer.openstack.org/network-id", "anno-net"),
    ];

    /// occm's checkService and createOctaviaLoadBalancer: the class's floating network
    /// and subnet beat the annotations, and so do its VIP subnet and network for an
    /// external Service; an internal one's VIP is the annotations' (getSubnetID).
    #[test]
    fn a_class_beats_the_annotations_as_occm() {
        let config = config("subnet-id = conf-sub\nfloating-network-id = conf-fnet\n");
        let annotated = service(&ANNOTATED);
        let external = networks(&config, Some(&class()), &annotated, false);
        assert_eq!(external.floating_network, "class-fnet");
        assert_eq!(external.floating_subnet.id, "class-fsub");
        assert_eq!(
            (external.vip_subnet.as_str(), external.vip_network.as_str()),
            ("class-sub", "class-net")
        );
        let internal = networks(&config, Some(&class()), &annotated, true);
        assert_eq!(
            (internal.vip_subnet.as_str(), internal.vip_network.as_str()),
            ("anno-sub", "anno-net")
        );
        // Without a class: the annotations, then the config.
        let plain = networks(&config, None, &annotated, false);
        assert_eq!(plain.floating_network, "anno-fnet");
        assert_eq!(plain.floating_subnet.id, "anno-fsub");
        assert_eq!(plain.vip_subnet, "anno-sub");
        let bare = networks(&config, None, &service(&[]), false);
        assert_eq!(bare.floating_network, "conf-fnet");
        assert_eq!(bare.vip_subnet, "conf-sub");
        // An empty floating network annotation is occm's "find one"; an empty subnet
        // annotation is absent.
        let empty = service(&[
            ("loadbalancer.openstack.org/floating-network-id", ""),
            ("loadbalancer.openstack.org/subnet-id", ""),
        ]);
        let found = networks(&config, None, &empty, false);
        assert_eq!(found.floating_network, "");
        assert_eq!(found.vip_subnet, "conf-sub");
    }

    /// occm's checkService: member-subnet-id (annotation, class, config), then the
    /// config's subnet-id, then the VIP subnet as getSubnetID reads it (annotation,
    /// class), whatever the class names for the VIP.
    #[test]
    fn the_member_subnet_in_occms_order() {
        let member =
            |extra: &str, class: Option<&LoadBalancerClass>, annotations: &[(&str, &str)]| {
                networks(&config(extra), class, &service(annotations), false).member_subnet
            };
        let with_member = LoadBalancerClass {
            member_subnet_id: "class-member".into(),
            ..class()
        };
        let annotated = [("loadbalancer.openstack.org/member-subnet-id", "anno-member")];
        let conf = "subnet-id = conf-sub\nmember-subnet-id = conf-member\n";
        assert_eq!(member(conf, Some(&with_member), &annotated), "anno-member");
        assert_eq!(member(conf, Some(&with_member), &[]), "class-member");
        assert_eq!(member(conf, Some(&class()), &[]), "conf-member");
        // The config's subnet-id before the class's and the annotation's.
        let subnet = [("loadbalancer.openstack.org/subnet-id", "anno-sub")];
        assert_eq!(
            member("subnet-id = conf-sub\n", Some(&class()), &subnet),
            "conf-sub"
        );
        // Without it, the VIP subnet as read: the annotation, else the class.
        assert_eq!(member("", Some(&class()), &subnet), "anno-sub");
        assert_eq!(member("", Some(&class()), &[]), "class-sub");
        assert_eq!(member("", None, &[]), "");
    }

    /// A class without a floating network leaves the annotation's; the class's floating
    /// subnet pattern beats the annotation's ID (occm's floatingSubnetSpec by source).
    #[test]
    fn each_setting_falls_back_on_its_own() {
        let config = config("floating-network-id = conf-fnet\nfloating-subnet = conf-*\n");
        let patterned = LoadBalancerClass {
            floating_subnet: "pub-*".into(),
            ..LoadBalancerClass::default()
        };
        let read = networks(&config, Some(&patterned), &service(&ANNOTATED), false);
        assert_eq!(read.floating_network, "anno-fnet");
        assert_eq!(read.floating_subnet.id, "");
        assert_eq!(read.floating_subnet.name, "pub-*");
        assert_eq!(read.vip_subnet, "anno-sub");
        let bare = networks(&config, Some(&patterned), &service(&[]), false);
        assert_eq!(bare.floating_network, "conf-fnet");
        let none = networks(&config, None, &service(&[]), false);
        assert_eq!(none.floating_subnet.name, "conf-*");
    }
}
