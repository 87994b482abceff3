//! occm's `manage-security-groups` (`pkg/openstack/loadbalancer_sg.go`, v1.36.0): each
//! Service gets a Neutron security group opening its node ports, on its member Nodes'
//! ports.
//!
//! - **Name**: `lb-sg-<uid>-<namespace>-<name>`, cut to 255 bytes (occm's
//!   `getSecurityGroupName`), described `Security Group for <ns>/<name> Service
//!   LoadBalancer in cluster <cluster>`. The group is found by that exact name (occm's
//!   `secgroups.IDFromName`), so a call cut after its creation, or whose answer was
//!   lost, finds it instead of making another.
//! - **Rules** (occm's `ensureAndUpdateOctaviaSecurityGroup`): ingress on each node port
//!   (the port's protocol, in lower case) from the members' subnet, where the load
//!   balancer's traffic comes from; with the OVN provider, which keeps the clients'
//!   addresses, from each source range instead (everyone of the Service's IP family
//!   without any); with a health check node port, TCP on it from the members' subnet.
//!   They are compared with the group's rules as occm's `getRulesToCreateAndDelete`
//!   does: the missing ones are made (409, the rule already there, is fine: occm's
//!   `ensureSecurityRule`), then the others deleted (Neutron's default egress rules
//!   too, as occm). CIDRs are compared as Neutron stores them (the network address).
//! - **Ports** (occm's `applyNodeSecurityGroupIDForLB`): the group is added to each port
//!   of a selected Node's server that holds the Node's member address (on the member
//!   subnet) and has port security; the port keeps its other groups. As occm, a Node that
//!   leaves keeps it until the Service goes.
//! - **Deletion** (occm's `ensureSecurityGroupDeleted`, when the Service goes, whatever
//!   `manage-security-groups` says, and at each ensure while it is off, so a
//!   reconfiguration leaves nothing): every group of the Service's exact name is taken
//!   off the ports that have it (their other groups stay, and occm's old tag of the
//!   group's ID on a port goes: `disassociateSecurityGroupForLB`), then deleted. A group
//!   of another name (the project's `default` one, an operator's) is never touched.
//!
//! Unlike occm: two groups of the Service's name (only two makers at once could leave
//! that) keep the oldest and delete the others where occm fails on every sync; the
//! group is deleted even when the load balancer is already gone (occm returns before,
//! which leaks the group of a deletion cut after the load balancer went); a rule gone
//! before its deletion does not end the reconcile early.

use serde_json::{Value, json};
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, Node, Protocol, Service};
use wasm_ccm_guest::{cloud_error, url};

use super::listeners::{member_address, selected, tags};
use super::settings::{Wanted, source_ranges};
use crate::OpenStack;
use crate::api;
use crate::instances::parse_provider_id;

/// The longest name and description Neutron takes (occm cuts the name there).
const MAX_TEXT: usize = 255;

/// occm's `getSecurityGroupName`: `lb-sg-<uid>-<namespace>-<name>`, at most 255 bytes.
pub(super) fn group_name(service: &Service) -> String {
    let meta = &service.metadata;
    cut(format!(
        "lb-sg-{}-{}-{}",
        meta.uid, meta.namespace, meta.name
    ))
}

/// occm's description of the group (cut to what Neutron takes).
fn description(service: &Service, cluster: &str) -> String {
    let meta = &service.metadata;
    cut(format!(
        "Security Group for {}/{} Service LoadBalancer in cluster {cluster}",
        meta.namespace, meta.name
    ))
}

/// `text` cut to at most [`MAX_TEXT`] bytes, at a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// An ingress rule occm wants: `protocol` on `port` from `remote` (occm's
/// `rules.CreateOpts`, direction ingress, one port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rule {
    pub(super) protocol: &'static str,
    pub(super) ethertype: &'static str,
    pub(super) remote: String,
    pub(super) port: i32,
}

impl Rule {
    /// The rule for `port` from `remote` (stored as Neutron stores it), of `remote`'s IP
    /// family.
    fn new(protocol: &'static str, remote: &str, port: i32) -> Self {
        let remote = network_of(remote);
        Rule {
            protocol,
            ethertype: if remote.contains(':') { "IPv6" } else { "IPv4" },
            remote,
            port,
        }
    }

    /// occm's `compareSecurityGroupRuleAndCreateOpts`: direction, protocol (in any
    /// case), ethertype, remote prefix and port range equal (a field Neutron leaves
    /// null is empty, or 0).
    fn matches(&self, existing: &Value) -> bool {
        let text = |key: &str| existing[key].as_str().unwrap_or_default();
        let port = |key: &str| existing[key].as_i64().unwrap_or(0);
        text("direction") == "ingress"
            && text("protocol").eq_ignore_ascii_case(self.protocol)
            && text("ethertype") == self.ethertype
            && text("remote_ip_prefix") == self.remote
            && port("port_range_min") == i64::from(self.port)
            && port("port_range_max") == i64::from(self.port)
    }

    /// The body creating it in `group`.
    fn body(&self, group: &str) -> Value {
        json!({"security_group_rule": {
            "direction": "ingress", "protocol": self.protocol, "ethertype": self.ethertype,
            "remote_ip_prefix": self.remote, "security_group_id": group,
            "port_range_min": self.port, "port_range_max": self.port}})
    }
}

/// Neutron's name of a Service port's protocol (Kubernetes says `TCP`, Neutron `tcp`).
fn protocol_name(protocol: &Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// The network of a CIDR as Neutron stores a rule's remote prefix (`10.0.0.5/24` is
/// `10.0.0.0/24`); what does not parse is left as it is (Neutron will refuse it).
fn network_of(cidr: &str) -> String {
    let Some((address, bits)) = cidr.trim().split_once('/') else {
        return cidr.trim().to_owned();
    };
    let (Ok(address), Ok(bits)) = (address.parse::<std::net::IpAddr>(), bits.parse::<u32>()) else {
        return cidr.trim().to_owned();
    };
    match address {
        std::net::IpAddr::V4(v4) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            format!("{}/{bits}", std::net::Ipv4Addr::from(u32::from(v4) & mask))
        }
        std::net::IpAddr::V6(v6) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            format!("{}/{bits}", std::net::Ipv6Addr::from(u128::from(v6) & mask))
        }
        _ => cidr.trim().to_owned(),
    }
}

/// The rules occm's `ensureAndUpdateOctaviaSecurityGroup` wants: with a health check
/// node port, TCP on it from the members' subnet `subnet_cidr`; then each node port
/// (none without: `allocateLoadBalancerNodePorts: false`) from each of `sources`. Each
/// rule once (a repeated source range would be Neutron's 409).
pub(super) fn wanted_rules(service: &Service, subnet_cidr: &str, sources: &[String]) -> Vec<Rule> {
    let mut rules = Vec::new();
    if service.health_check_node_port != 0 {
        rules.push(Rule::new(
            "tcp",
            subnet_cidr,
            service.health_check_node_port,
        ));
    }
    for port in service.ports.iter().filter(|p| p.node_port != 0) {
        for source in sources {
            rules.push(Rule::new(
                protocol_name(&port.protocol),
                source,
                port.node_port,
            ));
        }
    }
    let mut unique: Vec<Rule> = Vec::with_capacity(rules.len());
    for rule in rules {
        if !unique.contains(&rule) {
            unique.push(rule);
        }
    }
    unique
}

/// Where the node ports are opened from: the members' subnet `subnet_cidr`, or with the
/// OVN provider (which keeps the clients' source addresses) the Service's source ranges
/// (occm's `checkService` with `manage-security-groups`), everyone of its IP family
/// without any (occm's `GetLoadBalancerSourceRanges`).
pub(super) fn sources(service: &Service, subnet_cidr: &str, ovn: bool, ipv6: bool) -> Vec<String> {
    if !ovn {
        return vec![subnet_cidr.to_owned()];
    }
    // A bad range was refused before anything was made (`wanted`).
    let ranges = source_ranges(service).unwrap_or_default();
    if !ranges.is_empty() {
        return ranges;
    }
    vec![if ipv6 { "::/0" } else { "0.0.0.0/0" }.to_owned()]
}

/// occm's `getRulesToCreateAndDelete`: the wanted rules no existing one matches (to
/// make), and the existing rules no wanted one matches (to delete).
pub(super) fn changes<'a>(
    wanted: &'a [Rule],
    existing: &'a [Value],
) -> (Vec<&'a Rule>, Vec<&'a Value>) {
    let create = wanted
        .iter()
        .filter(|w| !existing.iter().any(|e| w.matches(e)))
        .collect();
    let delete = existing
        .iter()
        .filter(|e| !wanted.iter().any(|w| w.matches(e)))
        .collect();
    (create, delete)
}

/// A port's security groups.
fn groups_of(port: &Value) -> Vec<String> {
    port["security_groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_owned))
        .collect()
}

/// occm's `isPortMember`: the port holds `address`, on `subnet` when one is given.
fn is_port_member(port: &Value, address: &str, subnet: &str) -> bool {
    port["fixed_ips"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|ip| (subnet.is_empty() || ip["subnet_id"] == subnet) && ip["ip_address"] == address)
}

/// The port's groups with `group` added, when occm's `applyNodeSecurityGroupIDForLB`
/// adds it: the port has port security (a port without can have no group), lacks the
/// group, and holds the member `address` on `subnet`.
fn with_group(port: &Value, group: &str, address: &str, subnet: &str) -> Option<Vec<String>> {
    let mut groups = groups_of(port);
    let wanted = port["port_security_enabled"] == true
        && !groups.iter().any(|g| g == group)
        && is_port_member(port, address, subnet);
    wanted.then(|| {
        groups.push(group.to_owned());
        groups
    })
}

/// The port's groups without `group` (occm's `disassociateSecurityGroupForLB`).
fn without_group(port: &Value, group: &str) -> Vec<String> {
    groups_of(port).into_iter().filter(|g| g != group).collect()
}

/// `error` with occm's words for the step before it (a `retry-after` stays one).
fn context(error: CloudError, what: &str) -> CloudError {
    match error {
        CloudError::Other(message) => CloudError::Other(format!("{what}: {message}")),
        other => other,
    }
}

fn id_of(value: &Value) -> &str {
    value["id"].as_str().unwrap_or_default()
}

/// The selected Nodes' servers and member addresses, as occm's
/// `applyNodeSecurityGroupIDForLB` walks them: a Node whose provider ID names no
/// server is an error, as occm's; one without an address of the Service's family is
/// left out.
fn member_servers<'a>(
    nodes: &'a [Node],
    wanted: &Wanted,
) -> Result<Vec<(String, &'a str)>, CloudError> {
    let mut members = Vec::new();
    for node in nodes.iter().filter(|n| selected(n, &wanted.node_selector)) {
        let provider_id = node.provider_id.as_deref().unwrap_or_default();
        let server = parse_provider_id(provider_id)
            .map_err(|e| context(e, "error getting server ID from the node"))?
            .id;
        if let Some(address) = member_address(node, wanted.ipv6) {
            members.push((server, address));
        }
    }
    Ok(members)
}

impl OpenStack {
    /// The end of occm's `ensureOctaviaLoadBalancer` (`create`) and
    /// `updateOctaviaLoadBalancer`: with `manage-security-groups`, the Service's group,
    /// its rules and its Nodes' ports; without, an ensure deletes the group a former
    /// configuration made (an update does not, as occm).
    pub(super) fn reconcile_security_group(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
        wanted: &Wanted,
        lb: &Value,
        create: bool,
    ) -> Result<(), CloudError> {
        let meta = &service.metadata;
        if self.config.load_balancer.manage_security_groups {
            let what = if create {
                format!(
                    "failed when reconciling security groups for LB service {}/{}",
                    meta.namespace, meta.name
                )
            } else {
                format!(
                    "failed to update Security Group for loadbalancer service {}/{}",
                    meta.namespace, meta.name
                )
            };
            self.ensure_security_group(cluster, service, nodes, wanted, lb)
                .map_err(|e| context(e, &what))
        } else if create {
            self.ensure_security_group_deleted(service)
        } else {
            Ok(())
        }
    }

    /// occm's `ensureAndUpdateOctaviaSecurityGroup`: the group (found by name, else
    /// made), its rules, then the Nodes' ports.
    fn ensure_security_group(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
        wanted: &Wanted,
        lb: &Value,
    ) -> Result<(), CloudError> {
        if service.ports.is_empty() {
            return Err(cloud_error::other(
                "no ports provided to openstack load balancer",
            ));
        }
        let group = self.ensure_group(cluster, service)?;
        // occm's `lbMemberSubnetID`, else the load balancer's VIP subnet.
        let subnet = if wanted.member_subnet.is_empty() {
            lb["vip_subnet_id"].as_str().unwrap_or_default()
        } else {
            wanted.member_subnet.as_str()
        };
        let cidr = self.subnet_cidr(subnet)?;
        let ovn = self.config.load_balancer.lb_provider == "ovn";
        let from = sources(service, &cidr, ovn, wanted.ipv6);
        self.reconcile_rules(&group, &wanted_rules(service, &cidr, &from))?;
        self.attach_to_members(&group, nodes, wanted, subnet)
    }

    /// occm's `ensureSecurityGroupDeleted`: every group of the Service's name taken off
    /// its ports and deleted; none is fine.
    pub(super) fn ensure_security_group_deleted(
        &self,
        service: &Service,
    ) -> Result<(), CloudError> {
        for group in self.find_groups(&group_name(service))? {
            self.delete_group(id_of(&group))?;
        }
        Ok(())
    }

    /// The groups named exactly `name` (Neutron's `name` filter, checked here too).
    fn find_groups(&self, name: &str) -> Result<Vec<Value>, CloudError> {
        let listed = api::list(
            Request::get(&format!("{}/security-groups", self.neutron()?)).query("name", name),
            "security_groups",
            &format!("error occurred finding security group: {name}"),
        )?;
        Ok(listed.into_iter().filter(|g| g["name"] == name).collect())
    }

    /// The Service's group: the one of its name (the oldest, the others deleted), else
    /// a new one.
    fn ensure_group(&self, cluster: &str, service: &Service) -> Result<String, CloudError> {
        let name = group_name(service);
        let mut found = self.find_groups(&name)?;
        if found.is_empty() {
            return self.create_group(&name, &description(service, cluster), service);
        }
        found.sort_by(|a, b| {
            (a["created_at"].as_str(), id_of(a)).cmp(&(b["created_at"].as_str(), id_of(b)))
        });
        for extra in &found[1..] {
            wasm_ccm_guest::log::warn(
                "a second security group of the Service's name; deleting it",
                &[("group", id_of(extra)), ("name", &name)],
            );
            self.delete_group(id_of(extra))?;
        }
        Ok(id_of(&found[0]).to_owned())
    }

    /// occm's `groups.Create` with its name and description: the new group's ID.
    fn create_group(
        &self,
        name: &str,
        description: &str,
        service: &Service,
    ) -> Result<String, CloudError> {
        let what = format!(
            "failed to create Security Group for loadbalancer service {}/{}",
            service.metadata.namespace, service.metadata.name
        );
        let created = api::json(
            Request::post(&format!("{}/security-groups", self.neutron()?))
                .json(&json!({"security_group": {"name": name, "description": description}})),
            &what,
        )?;
        match id_of(&created["security_group"]) {
            "" => Err(cloud_error::other(format!("{what}: no ID in the answer"))),
            id => Ok(id.to_owned()),
        }
    }

    /// The CIDR of the members' subnet (occm's `subnets.Get`).
    fn subnet_cidr(&self, subnet: &str) -> Result<String, CloudError> {
        let url = format!(
            "{}/subnets/{}",
            self.neutron()?,
            url::encode_component(subnet)
        );
        let what = format!("failed to find subnet {subnet} from openstack");
        let body = api::json(Request::get(&url), &what)?;
        match body["subnet"]["cidr"].as_str() {
            Some(cidr) if !cidr.is_empty() => Ok(cidr.to_owned()),
            _ => Err(cloud_error::other(format!("{what}: no CIDR in the answer"))),
        }
    }

    /// The group's rules made `wanted`: the missing ones made, then the others
    /// deleted (occm's order).
    fn reconcile_rules(&self, group: &str, wanted: &[Rule]) -> Result<(), CloudError> {
        let existing: Vec<Value> = api::list(
            Request::get(&format!("{}/security-group-rules", self.neutron()?))
                .query("security_group_id", group),
            "security_group_rules",
            &format!("failed to find security group rules in {group}"),
        )?
        .into_iter()
        // Only this group's, whatever the filter did.
        .filter(|r| r["security_group_id"] == group)
        .collect();
        let (create, delete) = changes(wanted, &existing);
        for rule in create {
            self.create_rule(group, rule)?;
        }
        for rule in delete {
            self.delete_rule(group, id_of(rule))?;
        }
        Ok(())
    }

    /// occm's `ensureSecurityRule`: 409 (the rule is there already) is fine.
    fn create_rule(&self, group: &str, rule: &Rule) -> Result<(), CloudError> {
        let response = Request::post(&format!("{}/security-group-rules", self.neutron()?))
            .json(&rule.body(group))
            .header("accept", "application/json")
            .send()?;
        if response.status == 409 {
            wasm_ccm_guest::log::warn(
                "security group rule already found when trying to create it",
                &[("group", group), ("port", &rule.port.to_string())],
            );
            return Ok(());
        }
        cloud_error::check(
            response,
            &format!("failed to create rule for security group {group}"),
        )
        .map(drop)
    }

    /// Deletes a rule of `group`; one gone already is fine.
    fn delete_rule(&self, group: &str, rule: &str) -> Result<(), CloudError> {
        let url = format!(
            "{}/security-group-rules/{}",
            self.neutron()?,
            url::encode_component(rule)
        );
        let deleted = api::send_found(
            Request::delete(&url),
            &format!("failed to delete security group rule {rule}"),
        )?;
        if deleted.is_none() {
            wasm_ccm_guest::log::warn(
                "security group rule found missing when trying to delete it",
                &[("group", group), ("rule", rule)],
            );
        }
        Ok(())
    }

    /// occm's `applyNodeSecurityGroupIDForLB`: `group` added to the member ports of the
    /// selected Nodes' servers (their ports listed 100 servers a request).
    fn attach_to_members(
        &self,
        group: &str,
        nodes: &[Node],
        wanted: &Wanted,
        subnet: &str,
    ) -> Result<(), CloudError> {
        let members = member_servers(nodes, wanted)?;
        let ids: Vec<&str> = members.iter().map(|(server, _)| server.as_str()).collect();
        let ports = self.ports_of(&ids)?;
        for (server, address) in &members {
            for port in ports.get(server).into_iter().flatten() {
                if let Some(groups) = with_group(port, group, address, subnet) {
                    self.set_port_groups(port, &groups)?;
                }
            }
        }
        Ok(())
    }

    /// Writes a port's security groups.
    fn set_port_groups(&self, port: &Value, groups: &[String]) -> Result<(), CloudError> {
        let id = id_of(port);
        let url = format!("{}/ports/{}", self.neutron()?, url::encode_component(id));
        api::send(
            Request::put(&url).json(&json!({"port": {"security_groups": groups}})),
            &format!("failed to update security group for port {id}"),
        )
        .map(drop)
    }

    /// Takes `group` off its ports, then deletes it (gone already is fine).
    fn delete_group(&self, group: &str) -> Result<(), CloudError> {
        self.detach_from_ports(group)
            .map_err(|e| context(e, &format!("failed to disassociate security group {group}")))?;
        let url = format!(
            "{}/security-groups/{}",
            self.neutron()?,
            url::encode_component(group)
        );
        api::send_found(
            Request::delete(&url),
            &format!("failed to delete security group {group}"),
        )
        .map(drop)
    }

    /// occm's `disassociateSecurityGroupForLB`: each port in `group` keeps its other
    /// groups, and loses the tag of the group's ID occm once put on it.
    fn detach_from_ports(&self, group: &str) -> Result<(), CloudError> {
        let neutron = self.neutron()?;
        let ports = api::list(
            Request::get(&format!("{neutron}/ports")).query("security_groups", group),
            "ports",
            "list the ports in the security group",
        )?;
        for port in ports
            .iter()
            .filter(|p| groups_of(p).iter().any(|g| g == group))
        {
            self.set_port_groups(port, &without_group(port, group))?;
            if tags(port).iter().any(|t| t == group) {
                let url = format!(
                    "{neutron}/ports/{}/tags/{}",
                    url::encode_component(id_of(port)),
                    url::encode_component(group)
                );
                api::send_found(
                    Request::delete(&url),
                    &format!("failed to remove tag {group} of port {}", id_of(port)),
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;
    use wasm_ccm_guest::types::ServicePort;

    /// Service `default/web` (uid `1234-5678`) with `ports` as (protocol, node port).
    fn service(ports: Vec<(Protocol, i32)>) -> Service {
        let mut service = super::super::settings::tests::service(&[]);
        service.ports = ports
            .into_iter()
            .enumerate()
            .map(|(i, (protocol, node_port))| ServicePort {
                name: format!("p{i}"),
                protocol,
                port: 80 + i as i32,
                target_port: "8080".into(),
                node_port,
                app_protocol: None,
            })
            .collect();
        service
    }

    fn rule(protocol: &'static str, remote: &str, port: i32) -> Rule {
        Rule::new(protocol, remote, port)
    }

    /// A rule as Neutron answers it.
    fn neutron_rule(id: &str, protocol: Value, remote: Value, port: Value) -> Value {
        json!({"id": id, "security_group_id": "g1", "direction": "ingress",
               "ethertype": "IPv4", "protocol": protocol, "remote_ip_prefix": remote,
               "port_range_min": port, "port_range_max": port, "remote_group_id": null})
    }

    #[test]
    fn the_group_is_named_and_described_as_occm() {
        let service = service(Vec::new());
        assert_eq!(group_name(&service), "lb-sg-1234-5678-default-web");
        assert_eq!(
            description(&service, "kubernetes"),
            "Security Group for default/web Service LoadBalancer in cluster kubernetes"
        );
        let mut long = service.clone();
        long.metadata.name = "n".repeat(300);
        assert_eq!(group_name(&long).len(), 255);
        assert!(group_name(&long).starts_with("lb-sg-1234-5678-default-nnn"));
    }

    /// occm's rules: each node port from each source, in the port's protocol; the
    /// health check node port in TCP from the members' subnet; no rule without a node
    /// port; each rule once; the ethertype of the source.
    #[test]
    fn the_rules_are_occms() {
        let mut svc = service(vec![
            (Protocol::Tcp, 30080),
            (Protocol::Udp, 30053),
            (Protocol::Tcp, 0),
        ]);
        let subnet = "10.0.0.0/16".to_owned();
        assert_eq!(
            wanted_rules(&svc, &subnet, std::slice::from_ref(&subnet)),
            [
                rule("tcp", "10.0.0.0/16", 30080),
                rule("udp", "10.0.0.0/16", 30053)
            ]
        );
        svc.health_check_node_port = 32000;
        let sources = [
            "203.0.113.7/24".to_owned(),
            "203.0.113.0/24".to_owned(),
            "fd00::/64".to_owned(),
        ];
        let rules = wanted_rules(&svc, &subnet, &sources);
        assert_eq!(
            rules,
            [
                rule("tcp", "10.0.0.0/16", 32000),
                rule("tcp", "203.0.113.0/24", 30080),
                rule("tcp", "fd00::/64", 30080),
                rule("udp", "203.0.113.0/24", 30053),
                rule("udp", "fd00::/64", 30053),
            ]
        );
        assert_eq!(rules[2].ethertype, "IPv6");
        assert_eq!(rules[0].ethertype, "IPv4");
        assert_eq!(
            rules[1].body("g1"),
            json!({"security_group_rule": {"direction": "ingress", "protocol": "tcp",
                "ethertype": "IPv4", "remote_ip_prefix": "203.0.113.0/24",
                "security_group_id": "g1", "port_range_min": 30080, "port_range_max": 30080}})
        );
    }

    /// The members' subnet, unless OVN keeps the clients' addresses: then the source
    /// ranges, everyone of the Service's family without any.
    #[test]
    fn sources_are_the_subnet_or_with_ovn_the_source_ranges() {
        let mut svc = service(vec![(Protocol::Tcp, 30080)]);
        assert_eq!(sources(&svc, "10.0.0.0/16", false, false), ["10.0.0.0/16"]);
        assert_eq!(sources(&svc, "10.0.0.0/16", true, false), ["0.0.0.0/0"]);
        assert_eq!(sources(&svc, "fd00::/64", true, true), ["::/0"]);
        svc.load_balancer_source_ranges = vec!["192.0.2.0/24".into()];
        assert_eq!(sources(&svc, "10.0.0.0/16", true, false), ["192.0.2.0/24"]);
        assert_eq!(sources(&svc, "10.0.0.0/16", false, false), ["10.0.0.0/16"]);
    }

    /// With OVN, source ranges are the group's rules (occm's `checkService`): not
    /// ignored, so no Warning says they are; without the setting they are, with it.
    #[test]
    fn with_ovn_the_source_ranges_are_the_groups_and_not_ignored() {
        let ignored = |extra: &str| {
            let _ = wasm_ccm_guest::events::recorded();
            let text = format!("[Global]\nauth-url = https://k/v3\n[LoadBalancer]\n{extra}");
            let provider = OpenStack {
                config: crate::config::Config::parse(&text).unwrap(),
            };
            let mut svc = service(vec![(Protocol::Tcp, 30080)]);
            svc.load_balancer_source_ranges = vec!["192.0.2.0/24".into()];
            let wanted = provider.wanted("kubernetes", &svc).unwrap();
            assert!(wanted.allowed_cidrs.is_empty());
            wasm_ccm_guest::events::recorded()
                .iter()
                .any(|(_, reason, _)| reason == "LoadBalancerSourceRangesIgnored")
        };
        assert!(ignored("lb-provider = ovn\n"));
        assert!(!ignored(
            "lb-provider = ovn\nmanage-security-groups = true\n"
        ));
    }

    /// occm's `getRulesToCreateAndDelete`: a rule matching in any protocol case is kept;
    /// the others (Neutron's default egress rules among them) go; the missing are made.
    #[test]
    fn rules_are_compared_as_occm_compares_them() {
        let wanted = [
            rule("tcp", "10.0.0.0/16", 30080),
            rule("udp", "10.0.0.0/16", 30053),
        ];
        let kept = neutron_rule("r1", json!("TCP"), json!("10.0.0.0/16"), json!(30080));
        let other_port = neutron_rule("r2", json!("tcp"), json!("10.0.0.0/16"), json!(30081));
        let mut egress = neutron_rule("r3", Value::Null, Value::Null, Value::Null);
        egress["direction"] = json!("egress");
        let existing = [kept, other_port.clone(), egress.clone()];
        let (create, delete) = changes(&wanted, &existing);
        assert_eq!(create, [&wanted[1]]);
        assert_eq!(delete, [&other_port, &egress]);
        // Nothing to do when they are the same.
        let same = [
            neutron_rule("r1", json!("tcp"), json!("10.0.0.0/16"), json!(30080)),
            neutron_rule("r4", json!("udp"), json!("10.0.0.0/16"), json!(30053)),
        ];
        let (create, delete) = changes(&wanted, &same);
        assert!(create.is_empty() && delete.is_empty());
    }

    #[test]
    fn cidrs_are_compared_as_neutron_stores_them() {
        assert_eq!(network_of("10.0.0.5/24"), "10.0.0.0/24");
        assert_eq!(network_of("0.0.0.0/0"), "0.0.0.0/0");
        assert_eq!(network_of("fd00:1::5/64"), "fd00:1::/64");
        assert_eq!(network_of("::/0"), "::/0");
        assert_eq!(network_of("not a cidr"), "not a cidr");
    }

    /// occm's `applyNodeSecurityGroupIDForLB`: only a port with port security, holding
    /// the member address on the member subnet, without the group yet; its other groups
    /// stay. `disassociateSecurityGroupForLB` takes only the group away.
    #[test]
    fn the_group_goes_on_member_ports_beside_their_groups() {
        let port = json!({"id": "p1", "port_security_enabled": true,
            "security_groups": ["default"],
            "fixed_ips": [{"subnet_id": "s1", "ip_address": "10.0.0.11"}]});
        assert_eq!(
            with_group(&port, "g1", "10.0.0.11", "s1"),
            Some(vec!["default".to_owned(), "g1".to_owned()])
        );
        assert_eq!(
            with_group(&port, "g1", "10.0.0.11", ""),
            Some(vec!["default".to_owned(), "g1".to_owned()])
        );
        assert_eq!(with_group(&port, "g1", "10.0.0.12", "s1"), None);
        assert_eq!(with_group(&port, "g1", "10.0.0.11", "s2"), None);
        assert_eq!(with_group(&port, "default", "10.0.0.11", "s1"), None);
        let mut insecure = port.clone();
        insecure["port_security_enabled"] = json!(false);
        assert_eq!(with_group(&insecure, "g1", "10.0.0.11", "s1"), None);
        let mut carrying = port.clone();
        carrying["security_groups"] = json!(["default", "g1", "other"]);
        assert_eq!(without_group(&carrying, "g1"), ["default", "other"]);
    }

    /// The provider against `cloud`, whose catalog has a network endpoint.
    fn provider(cloud: &MockTransport, extra: &str) -> OpenStack {
        wasm_ccm_guest::cache::clear();
        let catalog = json!({"catalog": [{"type": "network", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://neutron"}]}]});
        cloud.on(
            "GET",
            "/v3/auth/catalog",
            Response::with_json(200, &catalog),
        );
        let text = format!("[Global]\nauth-url = https://k/v3\n[LoadBalancer]\n{extra}");
        OpenStack {
            config: crate::config::Config::parse(&text).unwrap(),
        }
    }

    /// The requests sent other than reads: `METHOD path`.
    fn writes(cloud: &MockTransport) -> Vec<String> {
        cloud
            .requests()
            .iter()
            .filter(|r| r.method().as_str() != "GET")
            .map(|r| {
                let path = r.url().unwrap().path_and_query;
                format!("{} {}", r.method().as_str(), path)
            })
            .collect()
    }

    /// A deletion takes only the group of the Service's exact name off its ports (their
    /// other groups and occm's old tag aside) and deletes it; a group whose name only
    /// starts the same is not touched.
    #[test]
    fn only_the_services_own_group_is_deleted() {
        let cloud = MockTransport::new();
        let provider = provider(&cloud, "");
        let groups = json!({"security_groups": [
            {"id": "g1", "name": "lb-sg-1234-5678-default-web"},
            {"id": "g2", "name": "lb-sg-1234-5678-default-web-2"}]});
        cloud.on(
            "GET",
            "/v2.0/security-groups",
            Response::with_json(200, &groups),
        );
        let ports = json!({"ports": [
            {"id": "p1", "security_groups": ["default", "g1"], "tags": ["g1"]},
            {"id": "p2", "security_groups": ["default"], "tags": []}]});
        cloud.on("GET", "/v2.0/ports", Response::with_json(200, &ports));
        cloud.on(
            "PUT",
            "/v2.0/ports/p1",
            Response::with_json(200, &json!({"port": {}})),
        );
        cloud.on("DELETE", "/v2.0/ports/p1/tags/g1", Response::new(204));
        cloud.on("DELETE", "/v2.0/security-groups/g1", Response::new(204));
        let _installed = cloud.install();
        provider
            .ensure_security_group_deleted(&service(Vec::new()))
            .unwrap();
        assert_eq!(
            writes(&cloud),
            [
                "PUT /v2.0/ports/p1",
                "DELETE /v2.0/ports/p1/tags/g1",
                "DELETE /v2.0/security-groups/g1"
            ]
        );
        let put = cloud
            .requests()
            .into_iter()
            .find(|r| r.method().as_str() == "PUT")
            .unwrap();
        let body: Value = serde_json::from_slice(put.body_bytes()).unwrap();
        assert_eq!(body, json!({"port": {"security_groups": ["default"]}}));
    }

    /// A sync after one that did everything (or whose answers were lost after the
    /// cloud acted) finds the group by name, its rules and the ports as wanted, and
    /// writes nothing.
    #[test]
    fn a_second_ensure_makes_nothing_twice() {
        let cloud = MockTransport::new();
        let provider = provider(&cloud, "manage-security-groups = true\nsubnet-id = s1\n");
        let groups =
            json!({"security_groups": [{"id": "g1", "name": "lb-sg-1234-5678-default-web"}]});
        cloud.on(
            "GET",
            "/v2.0/security-groups",
            Response::with_json(200, &groups),
        );
        let subnet = json!({"subnet": {"id": "s1", "cidr": "10.0.0.0/16"}});
        cloud.on("GET", "/v2.0/subnets/s1", Response::with_json(200, &subnet));
        let rules = json!({"security_group_rules": [
            neutron_rule("r1", json!("tcp"), json!("10.0.0.0/16"), json!(30080))]});
        cloud.on(
            "GET",
            "/v2.0/security-group-rules",
            Response::with_json(200, &rules),
        );
        let ports = json!({"ports": [{"id": "p1", "device_id": "srv-1",
            "port_security_enabled": true, "security_groups": ["default", "g1"],
            "fixed_ips": [{"subnet_id": "s1", "ip_address": "10.0.0.11"}]}]});
        cloud.on("GET", "/v2.0/ports", Response::with_json(200, &ports));
        let _installed = cloud.install();
        let svc = service(vec![(Protocol::Tcp, 30080)]);
        let wanted = Wanted {
            member_subnet: "s1".into(),
            ..Wanted::default()
        };
        let node = node("node-a", "openstack:///srv-1", "10.0.0.11");
        provider
            .reconcile_security_group("kubernetes", &svc, &[node], &wanted, &json!({}), true)
            .unwrap();
        assert!(writes(&cloud).is_empty(), "{:?}", writes(&cloud));
    }

    /// Without `manage-security-groups`, an ensure deletes a group a former
    /// configuration made; an update leaves it (occm's `UpdateLoadBalancer` does not
    /// look).
    #[test]
    fn without_the_setting_an_ensure_cleans_up_and_an_update_does_not_look() {
        let cloud = MockTransport::new();
        let provider = provider(&cloud, "");
        let none = json!({"security_groups": []});
        cloud.on(
            "GET",
            "/v2.0/security-groups",
            Response::with_json(200, &none),
        );
        let _installed = cloud.install();
        let svc = service(vec![(Protocol::Tcp, 30080)]);
        let wanted = Wanted::default();
        provider
            .reconcile_security_group("kubernetes", &svc, &[], &wanted, &json!({}), false)
            .unwrap();
        assert_eq!(cloud.count("GET", "/v2.0/security-groups"), 0);
        provider
            .reconcile_security_group("kubernetes", &svc, &[], &wanted, &json!({}), true)
            .unwrap();
        assert_eq!(cloud.count("GET", "/v2.0/security-groups"), 1);
    }

    fn node(name: &str, provider_id: &str, address: &str) -> Node {
        use wasm_ccm_guest::types::{NodeAddress, NodeAddressType};
        Node {
            provider_id: Some(provider_id.into()),
            addresses: vec![NodeAddress {
                address_type: NodeAddressType::InternalIp,
                address: address.into(),
            }],
            ..wasm_ccm_guest::testing::node(name)
        }
    }
}
