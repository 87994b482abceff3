//! `instances-v2` and `instances-batch` with Nova servers, as occm's `InstancesV2`:
//! a Node's server is found by its provider ID (`openstack:///<server-id>`, or occm's
//! regional form `openstack://<region>/<server-id>`), else by its name (a server whose
//! name is exactly the Node's); its addresses come from its Neutron ports and Nova's
//! address list as occm's `nodeAddresses` builds them; the instance type is the
//! flavor's name, the zone the server's availability zone; `SHUTOFF` is shut down;
//! a 404, a deleted server, or (without a provider ID) no server of the Node's name does
//! not exist, as the contract says (occm answers an error for the last); a provider ID
//! of another region is an error, as occm. A batch costs what the cluster holds, not
//! the project ([`cluster`]): the cluster's servers are kept in the shared cache and
//! brought up to date with one `changes-since` listing (none when one was made in the
//! last 20 s), Nodes they do not answer are found by name, about 300 a listing; their
//! ports are listed once per 100 servers. A batch of at most 8 Nodes with provider IDs
//! reads their servers by ID instead (the lifecycle checks of a few NotReady Nodes cost
//! a few requests). Trunk subports (the ports' `trunk_details`) cost two more listings
//! per 100 subports, made only when a port is a trunk's parent.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{BoolAnswer, CloudError, InstanceInfo, MetadataAnswer, Node};
use wasm_ccm_guest::{InstancesBatch, InstancesV2, cache, cloud_error, url};

use crate::OpenStack;
use crate::api::{self, COMPUTE_MICROVERSION, Endpoints};
use crate::labels;

mod addresses;
mod clock;
mod cluster;
mod subports;

pub use addresses::node_addresses;
pub use subports::{Subports, subport_ids};

/// The most server IDs in one ports listing (`device_id=...&device_id=...`: about
/// 4.6 KB of query, under the 8 KB request lines servers take).
const PORTS_PER_REQUEST: usize = 100;
/// A batch of at most this many Nodes, all with provider IDs, reads their servers one
/// by one instead of using the kept servers ([`cluster`]).
const FEW_NODES: usize = 8;
/// How long Nova's flavor list is kept in the shared cache.
const FLAVORS_TTL: Duration = Duration::from_secs(600);

/// What a provider ID names.
#[derive(Debug, PartialEq, Eq)]
pub struct ServerRef {
    /// The region of occm's regional form, if given.
    pub region: Option<String>,
    pub id: String,
}

/// Parses `openstack:///<id>` or `openstack://<region>/<id>`.
pub fn parse_provider_id(provider_id: &str) -> Result<ServerRef, CloudError> {
    let rest = provider_id.strip_prefix("openstack://").ok_or_else(|| {
        cloud_error::other(format!("provider ID `{provider_id}` is not openstack://"))
    })?;
    let (region, id) = rest.rsplit_once('/').ok_or_else(|| {
        cloud_error::other(format!("provider ID `{provider_id}` has no server ID"))
    })?;
    if id.is_empty() || id.contains('/') {
        return Err(cloud_error::other(format!(
            "provider ID `{provider_id}` has no server ID"
        )));
    }
    Ok(ServerRef {
        region: (!region.is_empty()).then(|| region.to_owned()),
        id: id.to_owned(),
    })
}

/// A server with its ports.
#[derive(Debug, Clone)]
pub struct Found {
    pub server: Value,
    pub ports: Vec<Value>,
    /// The subports of the trunks among `ports` (by port ID).
    pub subports: Subports,
}

/// Whether a server counts as gone (404 aside): `DELETED`. A `SOFT_DELETED` server
/// can still be restored and an `ERROR` one repaired: both exist, as occm's
/// `InstanceExists` says (it is not found only when Nova does not return it).
fn deleted(server: &Value) -> bool {
    server["status"].as_str() == Some("DELETED")
}

impl OpenStack {
    fn compute(&self, endpoints: &Endpoints) -> Result<String, CloudError> {
        api::endpoint(&endpoints.compute, "compute", &self.config)
    }

    fn nova(url: &str) -> Request {
        Request::get(url).header("openstack-api-version", COMPUTE_MICROVERSION)
    }

    /// The server named by `node`: by provider ID, else by name. `Ok(None)` when there
    /// is none; `Err` for another region's provider ID is never asked here.
    fn find_server(&self, node: &Node) -> Result<Option<Value>, CloudError> {
        let endpoints = Endpoints::get(&self.config)?;
        let compute = self.compute(&endpoints)?;
        if let Some(provider_id) = node.provider_id.as_deref().filter(|p| !p.is_empty()) {
            let server = parse_provider_id(provider_id)?;
            let url = format!("{compute}/servers/{}", url::encode_component(&server.id));
            let response = Self::nova(&url)
                .header("accept", "application/json")
                .send()?;
            let Some(response) = cloud_error::check_found(response, "get server")? else {
                return Ok(None);
            };
            let body: Value = cloud_error::json(&response, "get server")?;
            return Ok(Some(body["server"].clone()).filter(|s| !deleted(s)));
        }
        let name = &node.metadata.name;
        let request = Self::nova(&format!("{compute}/servers/detail"))
            .query("name", &format!("^{}$", regex_escape(name)));
        let servers: Vec<Value> = api::list(request, "servers", "list servers by name")?
            .into_iter()
            .filter(|s| s["name"] == name.as_str() && !deleted(s))
            .collect();
        match servers.len() {
            // The contract: no such instance. (occm's getServerByName answers an error.)
            0 => Ok(None),
            1 => Ok(servers.into_iter().next()),
            n => Err(cloud_error::other(format!(
                "{n} servers are named `{name}`: set the Node's provider ID"
            ))),
        }
    }

    /// The ports of the servers `ids` (Neutron lists them by `device_id`).
    pub(crate) fn ports_of(
        &self,
        ids: &[&str],
    ) -> Result<BTreeMap<String, Vec<Value>>, CloudError> {
        let mut by_server: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        if ids.is_empty() {
            return Ok(by_server);
        }
        let endpoints = Endpoints::get(&self.config)?;
        let network = api::endpoint(&endpoints.network, "network", &self.config)?;
        for chunk in ids.chunks(PORTS_PER_REQUEST) {
            let mut request = Request::get(&format!("{network}/ports"));
            for id in chunk {
                request = request.query("device_id", id);
            }
            for port in api::list(request, "ports", "list the servers' ports")? {
                if let Some(device) = port["device_id"].as_str() {
                    by_server.entry(device.to_owned()).or_default().push(port);
                }
            }
        }
        Ok(by_server)
    }

    fn find(&self, node: &Node) -> Result<Option<Found>, CloudError> {
        let Some(server) = self.find_server(node)? else {
            return Ok(None);
        };
        let id = server["id"].as_str().unwrap_or_default().to_owned();
        let ports = self.ports_of(&[&id])?.remove(&id).unwrap_or_default();
        let subports = self.subports_of(&ports)?;
        Ok(Some(Found {
            server,
            ports,
            subports,
        }))
    }

    /// occm's error for a provider ID naming another region than the cloud config's.
    fn other_region(&self, node: &Node) -> Option<CloudError> {
        let provider_id = node.provider_id.as_deref()?;
        let region = parse_provider_id(provider_id).ok()?.region?;
        (region != self.config.region).then(|| {
            cloud_error::other(format!(
                "ProviderID \"{provider_id}\" didn't match supported region \"{}\"",
                self.config.region
            ))
        })
    }

    /// The metadata of `node`'s found server. The provider ID keeps the form the Node
    /// has (occm's regional `openstack://<region>/<id>` or `openstack:///<id>`); a new
    /// Node gets the regional form with `[Global] regional-provider-ids`. The zone and
    /// the instance type are made label values as occm makes them ([`labels`]).
    pub fn metadata(&self, node: &Node, found: &Found) -> Result<InstanceInfo, CloudError> {
        let server = &found.server;
        let id = server["id"]
            .as_str()
            .ok_or_else(|| cloud_error::other("the server has no id"))?;
        let kept = node
            .provider_id
            .as_deref()
            .filter(|p| parse_provider_id(p).is_ok_and(|r| r.id == id));
        let provider_id = match kept {
            Some(kept) => kept.to_owned(),
            None if self.config.regional_provider_ids => {
                format!("openstack://{}/{id}", self.config.region)
            }
            None => format!("openstack:///{id}"),
        };
        Ok(InstanceInfo {
            provider_id,
            instance_type: self.instance_type(server)?,
            node_addresses: node_addresses(
                server,
                &found.ports,
                &found.subports,
                &self.config.networking,
            ),
            zone: labels::sanitize_label(
                server["OS-EXT-AZ:availability_zone"]
                    .as_str()
                    .unwrap_or_default(),
            ),
            region: self.config.region.clone(),
            additional_labels: Vec::new(),
        })
    }

    /// occm's `srvInstanceType`: the flavor's name when it is a label value, else the
    /// flavor's ID (found by name in Nova's flavor list; occm asks Nova for the flavor
    /// by that string, and errors when it is not an ID). Where no flavor of that name
    /// is listed (deleted since, or private), the name made a label value.
    fn instance_type(&self, server: &Value) -> Result<String, CloudError> {
        let flavor = &server["flavor"];
        let Some(name) = flavor["original_name"].as_str() else {
            // Before microversion 2.47 a server names its flavor by ID only.
            let id = flavor["id"].as_str().unwrap_or_default();
            return Ok(labels::sanitize_label(id));
        };
        if labels::is_valid_label_value(name) {
            return Ok(name.to_owned());
        }
        let id = self
            .flavors()?
            .into_iter()
            .find(|(_, n)| n == name)
            .map(|(id, _)| id)
            .filter(|id| labels::is_valid_label_value(id));
        Ok(id.unwrap_or_else(|| labels::sanitize_label(name)))
    }

    /// Nova's flavors `(id, name)`, kept in the shared cache for [`FLAVORS_TTL`].
    fn flavors(&self) -> Result<Vec<(String, String)>, CloudError> {
        let endpoints = Endpoints::get(&self.config)?;
        let compute = self.compute(&endpoints)?;
        let key = format!("flavors/{compute}");
        if let Some(flavors) = cache::get_json(&key) {
            return Ok(flavors);
        }
        let flavors: Vec<(String, String)> = api::list(
            Self::nova(&format!("{compute}/flavors")),
            "flavors",
            "list flavors",
        )?
        .iter()
        .filter_map(|f| Some((f["id"].as_str()?.to_owned(), f["name"].as_str()?.to_owned())))
        .collect();
        let _ = cache::set_json(&key, &flavors, FLAVORS_TTL);
        Ok(flavors)
    }

    /// The servers a batch needs: for a few Nodes that all have provider IDs, each read
    /// by its ID (the cost follows the batch); else the cluster's servers, kept and
    /// brought up to date ([`cluster`]: the cost follows the cluster, not the project).
    fn batch_servers(&self, nodes: &[Node]) -> Result<Vec<Found>, CloudError> {
        let few = nodes.len() <= FEW_NODES
            && nodes
                .iter()
                .all(|n| n.provider_id.as_deref().is_some_and(|p| !p.is_empty()));
        if !few {
            return self.cluster_servers(nodes);
        }
        let mut found = Vec::new();
        for node in nodes {
            if self.other_region(node).is_some() {
                continue;
            }
            match self.find_server(node) {
                Ok(Some(server)) => found.push(Found {
                    server,
                    ports: Vec::new(),
                    subports: Subports::new(),
                }),
                Ok(None) => {}
                // The cluster's servers answer each Node on its own (one bad provider
                // ID is that Node's error, not the batch's; a failed read is tried by
                // name).
                Err(_) => return self.cluster_servers(nodes),
            }
        }
        Ok(found)
    }

    /// Every server of the project (one paged listing), for a batch whose Nodes'
    /// provider IDs name many servers that are named otherwise ([`cluster`]).
    fn all_servers(&self) -> Result<Vec<Found>, CloudError> {
        let endpoints = Endpoints::get(&self.config)?;
        let compute = self.compute(&endpoints)?;
        let servers: Vec<Value> = api::list(
            Self::nova(&format!("{compute}/servers/detail")).query("limit", "1000"),
            "servers",
            "list servers",
        )?
        .into_iter()
        .filter(|s| !deleted(s))
        .collect();
        Ok(servers
            .into_iter()
            .map(|server| Found {
                server,
                ports: Vec::new(),
                subports: Subports::new(),
            })
            .collect())
    }

    /// `node`'s server among `all`, as [`OpenStack::find_server`] finds it: by provider
    /// ID, else by name (`None`: there is no such server).
    fn locate<'a>(&self, node: &Node, all: &'a [Found]) -> Result<Option<&'a Found>, CloudError> {
        if let Some(e) = self.other_region(node) {
            return Err(e);
        }
        if let Some(provider_id) = node.provider_id.as_deref().filter(|p| !p.is_empty()) {
            let server = parse_provider_id(provider_id)?;
            return Ok(all.iter().find(|f| f.server["id"] == server.id.as_str()));
        }
        let name = &node.metadata.name;
        let named: Vec<&Found> = all
            .iter()
            .filter(|f| f.server["name"] == name.as_str())
            .collect();
        match named.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            more => Err(cloud_error::other(format!(
                "{} servers are named `{name}`: set the Node's provider ID",
                more.len()
            ))),
        }
    }

    /// Each node's server among `all` ([`OpenStack::locate`]), with its ports.
    fn match_nodes(
        &self,
        nodes: &[Node],
        mut all: Vec<Found>,
    ) -> Vec<Result<Option<Found>, CloudError>> {
        let located: Vec<Result<Option<String>, CloudError>> = nodes
            .iter()
            .map(|node| {
                self.locate(node, &all)
                    .map(|f| f.and_then(|f| f.server["id"].as_str().map(str::to_owned)))
            })
            .collect();
        let ids: Vec<&str> = located
            .iter()
            .filter_map(|l| l.as_ref().ok().and_then(|id| id.as_deref()))
            .collect();
        let mut ports = match self.ports_of(&ids) {
            Ok(ports) => ports,
            Err(e) => return nodes.iter().map(|_| Err(e.clone())).collect(),
        };
        // Every located server's subports at once (no request without a trunk).
        let subports = match self.subports_of(ports.values().flatten()) {
            Ok(subports) => subports,
            Err(e) => return nodes.iter().map(|_| Err(e.clone())).collect(),
        };
        for found in &mut all {
            if let Some(list) = found.server["id"].as_str().and_then(|id| ports.remove(id)) {
                found.subports = subport_ids(&list)
                    .into_iter()
                    .filter_map(|id| subports.get(id).map(|s| (id.to_owned(), s.clone())))
                    .collect();
                found.ports = list;
            }
        }
        located
            .into_iter()
            .map(|l| {
                l.map(|id| {
                    id.and_then(|id| all.iter().find(|f| f.server["id"] == id.as_str()).cloned())
                })
            })
            .collect()
    }
}

/// Nova's `name` filter is a regular expression: the Node's name matched literally.
fn regex_escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl InstancesV2 for OpenStack {
    fn instance_exists(&self, node: Node) -> Result<bool, CloudError> {
        if let Some(e) = self.other_region(&node) {
            return Err(e);
        }
        Ok(self.find_server(&node)?.is_some())
    }

    fn instance_shutdown(&self, node: Node) -> Result<bool, CloudError> {
        if let Some(e) = self.other_region(&node) {
            return Err(e);
        }
        match self.find_server(&node)? {
            Some(server) => Ok(server["status"] == "SHUTOFF"),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    fn instance_metadata(&self, node: Node) -> Result<InstanceInfo, CloudError> {
        if let Some(e) = self.other_region(&node) {
            return Err(e);
        }
        match self.find(&node)? {
            Some(found) => self.metadata(&node, &found),
            None => Err(CloudError::InstanceNotFound),
        }
    }
}

impl InstancesBatch for OpenStack {
    fn instances_exist(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        let all = self.batch_servers(&nodes)?;
        Ok(nodes
            .iter()
            .map(|node| match self.locate(node, &all) {
                Ok(found) => BoolAnswer::Ok(found.is_some()),
                Err(e) => BoolAnswer::Err(e),
            })
            .collect())
    }

    fn instances_shutdown(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        let all = self.batch_servers(&nodes)?;
        Ok(nodes
            .iter()
            .map(|node| match self.locate(node, &all) {
                Ok(Some(found)) => BoolAnswer::Ok(found.server["status"] == "SHUTOFF"),
                Ok(None) => BoolAnswer::Err(CloudError::InstanceNotFound),
                Err(e) => BoolAnswer::Err(e),
            })
            .collect())
    }

    fn instances_metadata(&self, nodes: Vec<Node>) -> Result<Vec<MetadataAnswer>, CloudError> {
        let all = self.batch_servers(&nodes)?;
        Ok(self
            .match_nodes(&nodes, all)
            .into_iter()
            .zip(&nodes)
            .map(|(found, node)| match found {
                Ok(Some(found)) => match self.metadata(node, &found) {
                    Ok(info) => MetadataAnswer::Ok(info),
                    Err(e) => MetadataAnswer::Err(e),
                },
                Ok(None) => MetadataAnswer::Err(CloudError::InstanceNotFound),
                Err(e) => MetadataAnswer::Err(e),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::subports::Subport;
    use super::*;
    use crate::config::NetworkingConfig;
    use serde_json::json;
    use wasm_ccm_guest::types::{NodeAddress, NodeAddressType};

    #[test]
    fn provider_ids_in_both_forms() {
        assert_eq!(
            parse_provider_id("openstack:///abc").unwrap(),
            ServerRef {
                region: None,
                id: "abc".into()
            }
        );
        assert_eq!(
            parse_provider_id("openstack://RegionOne/abc").unwrap(),
            ServerRef {
                region: Some("RegionOne".into()),
                id: "abc".into()
            }
        );
        for bad in [
            "aws:///i-1",
            "openstack://",
            "openstack:///",
            "openstack:///a/b/",
        ] {
            assert!(parse_provider_id(bad).is_err(), "{bad}");
        }
    }

    fn addr(t: NodeAddressType, a: &str) -> NodeAddress {
        NodeAddress {
            address_type: t,
            address: a.into(),
        }
    }

    #[test]
    fn addresses_as_occm_builds_them() {
        use NodeAddressType::{ExternalIp, InternalIp};
        let server = json!({"addresses": {
            "private": [{"addr": "10.0.0.5", "OS-EXT-IPS:type": "fixed"},
                        {"addr": "203.0.113.9", "OS-EXT-IPS:type": "floating"},
                        {"addr": "fd00::5", "OS-EXT-IPS:type": "fixed"}],
            "ext": [{"addr": "198.51.100.7", "OS-EXT-IPS:type": "fixed"}],
            "storage": [{"addr": "192.168.1.5", "OS-EXT-IPS:type": "fixed"}]}});
        let ports = [
            json!({"status": "ACTIVE", "fixed_ips": [{"ip_address": "10.0.0.5"}]}),
            json!({"status": "DOWN", "fixed_ips": [{"ip_address": "192.168.1.5"}]}),
        ];
        let plain = node_addresses(
            &server,
            &ports,
            &Subports::new(),
            &NetworkingConfig::default(),
        );
        assert_eq!(
            plain,
            vec![
                addr(InternalIp, "10.0.0.5"),
                addr(InternalIp, "198.51.100.7"),
                addr(ExternalIp, "203.0.113.9"),
                addr(InternalIp, "fd00::5"),
                addr(InternalIp, "192.168.1.5"),
            ]
        );
        let networking = NetworkingConfig {
            public_network_names: vec!["ext".into()],
            internal_network_names: vec!["private".into()],
            ipv6_support_disabled: true,
            address_sort_order: vec!["203.0.113.0/24".into()],
        };
        assert_eq!(
            node_addresses(&server, &ports, &Subports::new(), &networking),
            vec![
                addr(ExternalIp, "203.0.113.9"),
                addr(InternalIp, "10.0.0.5"),
                addr(ExternalIp, "198.51.100.7"),
            ]
        );
    }

    #[test]
    fn the_metadata_hostname_and_sorting_within_a_cidr_as_occm() {
        use NodeAddressType::{Hostname, InternalIp};
        let server = json!({"metadata": {"hostname": "node-a.example"}, "addresses": {
            "private": [{"addr": "10.0.0.9", "OS-EXT-IPS:type": "fixed"},
                        {"addr": "10.0.0.10", "OS-EXT-IPS:type": "fixed"},
                        {"addr": "192.168.0.4", "OS-EXT-IPS:type": "fixed"}]}});
        let networking = NetworkingConfig {
            address_sort_order: vec!["192.168.0.0/16".into(), "10.0.0.0/8".into()],
            ..NetworkingConfig::default()
        };
        assert_eq!(
            node_addresses(&server, &[], &Subports::new(), &networking),
            vec![
                addr(InternalIp, "192.168.0.4"),
                addr(InternalIp, "10.0.0.9"),
                addr(InternalIp, "10.0.0.10"),
                addr(Hostname, "node-a.example"),
            ]
        );
    }

    /// occm's subport loop: each subport's fixed IPs join Nova's addresses of its
    /// network's name (after them), whatever the parent port's status; then the
    /// networks are read in name order with `internal-network-name` and
    /// `public-network-name` as for Nova's.
    #[test]
    fn trunk_subports_join_their_networks_as_occm() {
        use NodeAddressType::{ExternalIp, InternalIp};
        let server = json!({"addresses": {
            "private": [{"addr": "10.0.0.5", "OS-EXT-IPS:type": "fixed"}],
            "subnet-net": [{"addr": "10.20.0.9", "OS-EXT-IPS:type": "fixed"}]}});
        let ports = [
            json!({"status": "ACTIVE", "fixed_ips": [{"ip_address": "10.0.0.5"}],
                   "trunk_details": {"trunk_id": "t1", "sub_ports": [
                       {"port_id": "sp-b", "segmentation_type": "vlan", "segmentation_id": 101},
                       {"port_id": "sp-a", "segmentation_type": "vlan", "segmentation_id": 102},
                       {"port_id": "sp-gone", "segmentation_type": "vlan", "segmentation_id": 103}]}}),
            json!({"status": "DOWN", "fixed_ips": [],
                   "trunk_details": {"trunk_id": "t2", "sub_ports": [
                       {"port_id": "sp-c", "segmentation_type": "vlan", "segmentation_id": 104}]}}),
        ];
        let subport = |network: &str, addresses: &[&str]| Subport {
            network: network.into(),
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
        };
        let subports: Subports = [
            (
                "sp-b".to_string(),
                subport("subnet-net", &["10.20.0.5", "fd20::5"]),
            ),
            ("sp-a".to_string(), subport("storage", &["10.30.0.5"])),
            ("sp-c".to_string(), subport("a-net", &["10.40.0.5"])),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            node_addresses(&server, &ports, &subports, &NetworkingConfig::default()),
            vec![
                addr(InternalIp, "10.0.0.5"),
                addr(InternalIp, "10.40.0.5"),
                addr(InternalIp, "10.30.0.5"),
                addr(InternalIp, "10.20.0.9"),
                addr(InternalIp, "10.20.0.5"),
                addr(InternalIp, "fd20::5"),
            ]
        );
        let networking = NetworkingConfig {
            internal_network_names: vec!["subnet-net".into()],
            public_network_names: vec!["storage".into()],
            ipv6_support_disabled: true,
            ..NetworkingConfig::default()
        };
        assert_eq!(
            node_addresses(&server, &ports, &subports, &networking),
            vec![
                addr(ExternalIp, "10.30.0.5"),
                addr(InternalIp, "10.20.0.9"),
                addr(InternalIp, "10.20.0.5"),
            ]
        );
        assert_eq!(subport_ids(&ports), ["sp-b", "sp-a", "sp-gone", "sp-c"]);
    }

    #[test]
    fn names_are_matched_literally_by_nova() {
        assert_eq!(regex_escape("node-1.example"), "node-1\\.example");
    }
}
