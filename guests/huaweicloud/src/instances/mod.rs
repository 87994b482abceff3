//! `instances-v2` and `instances-batch` with ECS, as upstream's `Instances`
//! (`pkg/cloudprovider/huaweicloud/instances.go`) with its `EcsClient`
//! (`wrapper/ecs.go`):
//!
//! - **Provider IDs** are `huaweicloud://<ecs-id>` (upstream's `providerIDRegexp`,
//!   `^huaweicloud://([^/]+)$`); a bare `<ecs-id>` (the older Huawei CCM's kubelet
//!   `--provider-id=${INSTANCE_ID}`, and what upstream's `InstanceMetadata` gives a Node
//!   it found by name) is read as upstream's `parseInstanceID` reads it, and a Node
//!   keeps the form it has. A new Node gets `huaweicloud://<ecs-id>`.
//! - **A Node with a provider ID** is its ECS by ID (`ShowServer`, a 404 or a `DELETED`
//!   server: none). **A Node without one** is looked up as upstream's `GetByNodeName`
//!   does: a name that is an IPv4 address is the ECS's private IP (`ip_eq`, as CCE names
//!   Nodes); any other name is the ECS's exact name among those ECS's fuzzy `name`
//!   filter lists; failing that, each of the Node's InternalIPs (`ip_eq`) stands for
//!   upstream's DNS lookup of the name (no DNS from the sandbox). Two ECSs answering
//!   one Node are an error (upstream takes the first), unless `[Vpc] id` tells them
//!   apart.
//! - **Exists** is false only when ECS says so: a 404, a `DELETED` server, or a listing
//!   that lacks it; an error is an error, never "gone". (Upstream's `InstanceExists`
//!   looks the Node up by name even when it has a provider ID; here the provider ID
//!   answers, as upstream's `InstanceExistsByProviderID`.) **Shut down** is `SHUTOFF`
//!   (upstream's `instanceShutoffStatus`).
//! - **Metadata** as upstream's `InstanceMetadata`: the flavor's name (its ID when it
//!   has no name) as the instance type; the addresses of [`node_addresses`] from the
//!   ECS and its interfaces (`ListServerInterfaces`); the zone is
//!   `OS-EXT-AZ:availability_zone`, the region `[Global] region`.
//!
//! A batch ([`batch`]) reads the Nodes with provider IDs in one ECS listing per 100
//! (`server_id=<id>,<id>,...`, exact, at most 100 a request as ECS advises), so the
//! lifecycle checks of a whole cluster cost `⌈nodes/100⌉` requests, whatever the
//! project holds; Nodes without one (joining Nodes) are looked up one by one. Metadata
//! adds one `os-interface` request per Node: ECS lists a server's interfaces (whose
//! port state and order upstream's addresses follow) only per server. Nothing is
//! cached: every answer is what ECS says now, and no lookup costs more than the
//! Nodes asked about (the OpenStack provider keeps Nova's servers to afford name
//! lookups in bulk; ECS's exact `server_id` filter needs no such thing).

mod addresses;
mod batch;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use wasm_ccm_guest::types::{
    BoolAnswer, CloudError, InstanceInfo, MetadataAnswer, Node, NodeAddressType,
};
use wasm_ccm_guest::{InstancesBatch, InstancesV2, cloud_error, url};

use crate::api::{self, ApiError, Service};
use crate::{HuaweiCloud, PROVIDER_NAME};

pub use addresses::{is_ipv4, node_addresses, same_ip};

/// upstream's `instanceShutoffStatus`.
pub const SHUTOFF: &str = "SHUTOFF";

/// A status meaning the ECS is gone.
const DELETED: &str = "DELETED";

/// A JSON `null` (as ECS gives for the fields of an ID it does not know) read as the
/// default.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// An ECS, as `cloudservers/detail` and `cloudservers/{id}` give it (`ServerDetail`),
/// with the fields the provider reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Server {
    #[serde(default, deserialize_with = "nullable")]
    pub id: String,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `ACTIVE`, `SHUTOFF`, ...; `None` in a `server_id` listing's entry for an ID ECS
    /// does not know.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub flavor: Flavor,
    #[serde(
        rename = "OS-EXT-AZ:availability_zone",
        default,
        deserialize_with = "nullable"
    )]
    pub availability_zone: String,
    #[serde(rename = "accessIPv4", default, deserialize_with = "nullable")]
    pub access_ipv4: String,
    /// The addresses by NIC key (the NIC's VPC ID), sorted by key.
    #[serde(default, deserialize_with = "nullable")]
    pub addresses: BTreeMap<String, Vec<ServerAddress>>,
}

impl Server {
    /// Whether ECS has this server: it has a status, and not `DELETED`.
    pub fn exists(&self) -> bool {
        self.status.as_deref().is_some_and(|s| s != DELETED)
    }

    /// Whether it is shut down (upstream: `SHUTOFF`).
    pub fn is_shut_down(&self) -> bool {
        self.status.as_deref() == Some(SHUTOFF)
    }

    /// Whether one of its addresses is `ip`.
    pub fn has_ip(&self, ip: &str) -> bool {
        self.addresses
            .values()
            .flatten()
            .any(|a| same_ip(&a.addr, ip))
    }

    /// Whether it has an address on the VPC `vpc` (a NIC key).
    fn in_vpc(&self, vpc: &str) -> bool {
        self.addresses.contains_key(vpc)
    }
}

/// A server's flavor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Flavor {
    #[serde(default, deserialize_with = "nullable")]
    pub id: String,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
}

/// One of a server's addresses (`ServerAddress`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
// `primary`: for the load balancer's `primary-nic` (upstream's `getPrimaryIP`).
#[allow(dead_code)]
pub struct ServerAddress {
    #[serde(default, deserialize_with = "nullable")]
    pub addr: String,
    /// `OS-EXT-IPS:type`: `fixed` or `floating`.
    #[serde(rename = "OS-EXT-IPS:type", default, deserialize_with = "nullable")]
    pub kind: String,
    /// Whether it is on the primary NIC (upstream's own `ServerAddress` model, read by
    /// `getPrimaryIP`).
    #[serde(default, deserialize_with = "nullable")]
    pub primary: bool,
}

/// One of a server's interfaces (`os-interface`'s `InterfaceAttachment`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
// `port_id`, `subnet_id`: for the load balancer's member subnet (upstream's
// `getNodeSubnetID`).
#[allow(dead_code)]
pub struct InterfaceAttachment {
    #[serde(default, deserialize_with = "nullable")]
    pub port_id: String,
    #[serde(default, deserialize_with = "nullable")]
    pub port_state: String,
    #[serde(default, deserialize_with = "nullable")]
    pub fixed_ips: Vec<FixedIp>,
}

/// One fixed IP of an interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[allow(dead_code)]
pub struct FixedIp {
    #[serde(default, deserialize_with = "nullable")]
    pub ip_address: String,
    #[serde(default, deserialize_with = "nullable")]
    pub subnet_id: String,
}

/// The ECS ID in a provider ID, as upstream's `parseInstanceID`: a bare ID is read as
/// `huaweicloud://<id>`, which must match `^huaweicloud://([^/]+)$`; the error is
/// upstream's.
pub fn parse_provider_id(provider_id: &str) -> Result<String, CloudError> {
    let full = if !provider_id.is_empty() && !provider_id.contains("://") {
        format!("{PROVIDER_NAME}://{provider_id}")
    } else {
        provider_id.to_owned()
    };
    match full.strip_prefix(&format!("{PROVIDER_NAME}://")) {
        Some(id) if !id.is_empty() && !id.contains('/') => Ok(id.to_owned()),
        _ => Err(cloud_error::other(format!(
            "ProviderID \"{provider_id}\" didn't match expected format \
             \"{PROVIDER_NAME}://InstanceID\""
        ))),
    }
}

/// The provider ID of the ECS `id`: `huaweicloud://<id>`.
pub fn provider_id(id: &str) -> String {
    wasm_ccm_guest::provider_id::format(PROVIDER_NAME, id)
}

/// The Node's provider ID, if it has one.
fn node_provider_id(node: &Node) -> Option<&str> {
    node.provider_id.as_deref().filter(|p| !p.is_empty())
}

/// The Node's InternalIPs, in order, each once.
fn internal_ips(node: &Node) -> Vec<&str> {
    let mut ips: Vec<&str> = Vec::new();
    for address in &node.addresses {
        if address.address_type == NodeAddressType::InternalIp
            && !ips.iter().any(|ip| same_ip(ip, &address.address))
        {
            ips.push(&address.address);
        }
    }
    ips
}

/// The instance type: the flavor's name, else its ID (upstream's `getInstanceFlavor`,
/// which answers the empty name where it means the ID), else upstream's error.
fn instance_type(server: &Server) -> Result<String, CloudError> {
    [&server.flavor.name, &server.flavor.id]
        .into_iter()
        .find(|s| !s.is_empty())
        .cloned()
        .ok_or_else(|| cloud_error::other("flavor name/id not found"))
}

impl HuaweiCloud {
    /// The ECS `id` (`GET /v1/{project_id}/cloudservers/{id}`, upstream's `EcsClient.Get`);
    /// `None` for a 404 or a `DELETED` server.
    pub fn server_by_id(&self, id: &str) -> Result<Option<Server>, ApiError> {
        #[derive(Deserialize)]
        struct Answer {
            server: Server,
        }
        let path = format!(
            "/v1/{{project_id}}/cloudservers/{}",
            url::encode_component(id)
        );
        let answer: Option<Answer> = self.client.get_found(Service::Ecs, &path)?;
        Ok(answer.map(|a| a.server).filter(Server::exists))
    }

    /// The ECSs a `cloudservers/detail` listing with `query` gives, every page.
    fn list_servers(&self, query: &[(&str, &str)]) -> Result<Vec<Server>, ApiError> {
        let path = api::with_query("/v1/{project_id}/cloudservers/detail", query);
        self.client.list_offset(Service::Ecs, &path, "servers")
    }

    /// The one server of `found` (none: `None`); several are narrowed to `[Vpc] id`'s,
    /// then an error naming `what` they share.
    fn one(&self, mut found: Vec<Server>, what: &str) -> Result<Option<Server>, CloudError> {
        found.dedup_by(|a, b| a.id == b.id);
        if found.len() > 1 && !self.config.vpc.id.is_empty() {
            found.retain(|s| s.in_vpc(&self.config.vpc.id));
        }
        match found.len() {
            0 | 1 => Ok(found.pop()),
            n => Err(cloud_error::other(format!(
                "{n} ECSs have {what}: set the Node's provider ID (huaweicloud://<ecs-id>)"
            ))),
        }
    }

    /// The ECS whose private IP is `ip` (IPv4: ECS's `ip_eq` filter, exact), as upstream's
    /// `GetByNodeIP`; `None` when ECS lists none with that address.
    pub fn server_by_ip(&self, ip: &str) -> Result<Option<Server>, CloudError> {
        if !is_ipv4(ip) {
            return Ok(None);
        }
        let found = self
            .list_servers(&[("ip_eq", ip)])?
            .into_iter()
            .filter(|s| s.exists() && s.has_ip(ip))
            .collect();
        self.one(found, &format!("the address {ip}"))
    }

    /// The ECS named exactly `name` among those ECS's fuzzy `name` filter lists (`.`
    /// there matches any character: the listing is a superset); `None` when none is.
    fn server_by_name(&self, name: &str) -> Result<Option<Server>, CloudError> {
        let found = self
            .list_servers(&[("name", name)])?
            .into_iter()
            .filter(|s| s.exists() && s.name == name)
            .collect();
        self.one(found, &format!("the name {name}"))
    }

    /// The ECS of a Node without a provider ID, as upstream's `GetByNodeName`: by its
    /// name as an IPv4 address, else by its exact name, else by its InternalIPs (in
    /// place of upstream's DNS lookup of the name). `None`: ECS has none of them.
    pub fn lookup(&self, node: &Node) -> Result<Option<Server>, CloudError> {
        let name = node.metadata.name.as_str();
        let found = if is_ipv4(name) {
            self.server_by_ip(name)?
        } else {
            self.server_by_name(name)?
        };
        if found.is_some() {
            return Ok(found);
        }
        for ip in internal_ips(node) {
            if is_ipv4(name) && same_ip(ip, name) {
                continue;
            }
            if let Some(server) = self.server_by_ip(ip)? {
                return Ok(Some(server));
            }
        }
        Ok(None)
    }

    /// The Node's ECS: by its provider ID, else [`HuaweiCloud::lookup`]. `None`: ECS
    /// definitely has none.
    pub fn find_server(&self, node: &Node) -> Result<Option<Server>, CloudError> {
        match node_provider_id(node) {
            Some(provider_id) => {
                let id = parse_provider_id(provider_id)?;
                Ok(self.server_by_id(&id)?)
            }
            None => self.lookup(node),
        }
    }

    /// The interfaces of the ECS `id` (`GET .../cloudservers/{id}/os-interface`,
    /// upstream's `ListInterfaces`); `None` for a 404 (the server is gone).
    pub fn server_interfaces(
        &self,
        id: &str,
    ) -> Result<Option<Vec<InterfaceAttachment>>, ApiError> {
        #[derive(Deserialize)]
        struct Answer {
            #[serde(
                rename = "interfaceAttachments",
                default,
                deserialize_with = "nullable"
            )]
            interface_attachments: Vec<InterfaceAttachment>,
        }
        let path = format!(
            "/v1/{{project_id}}/cloudservers/{}/os-interface",
            url::encode_component(id)
        );
        let answer: Option<Answer> = self.client.get_found(Service::Ecs, &path)?;
        Ok(answer.map(|a| a.interface_attachments))
    }

    /// The metadata of `node`'s ECS `server` with its interfaces, as upstream's
    /// `InstanceMetadata`: the Node's own provider ID when it has one (bare or not),
    /// else `huaweicloud://<id>`.
    pub fn metadata(
        &self,
        node: &Node,
        server: &Server,
        interfaces: &[InterfaceAttachment],
    ) -> Result<InstanceInfo, CloudError> {
        let provider_id = match node_provider_id(node) {
            Some(own) => own.to_owned(),
            None => provider_id(&server.id),
        };
        Ok(InstanceInfo {
            provider_id,
            instance_type: instance_type(server)?,
            node_addresses: node_addresses(server, interfaces, &self.config.networking),
            zone: server.availability_zone.clone(),
            region: self.config.region.clone(),
            additional_labels: Vec::new(),
        })
    }

    /// The metadata of `node`'s found `server`: its interfaces read, then
    /// [`HuaweiCloud::metadata`]; the server gone meanwhile is `instance-not-found`.
    fn metadata_of(&self, node: &Node, server: &Server) -> Result<InstanceInfo, CloudError> {
        match self.server_interfaces(&server.id)? {
            Some(interfaces) => self.metadata(node, server, &interfaces),
            None => Err(CloudError::InstanceNotFound),
        }
    }
}

impl InstancesV2 for HuaweiCloud {
    fn instance_exists(&self, node: Node) -> Result<bool, CloudError> {
        Ok(self.find_server(&node)?.is_some())
    }

    fn instance_shutdown(&self, node: Node) -> Result<bool, CloudError> {
        match self.find_server(&node)? {
            Some(server) => Ok(server.is_shut_down()),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    fn instance_metadata(&self, node: Node) -> Result<InstanceInfo, CloudError> {
        match self.find_server(&node)? {
            Some(server) => self.metadata_of(&node, &server),
            None => Err(CloudError::InstanceNotFound),
        }
    }
}

impl InstancesBatch for HuaweiCloud {
    fn instances_exist(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(self
            .find_all(&nodes)?
            .into_iter()
            .map(|found| found.map(|server| server.is_some()))
            .collect())
    }

    fn instances_shutdown(&self, nodes: Vec<Node>) -> Result<Vec<BoolAnswer>, CloudError> {
        Ok(self
            .find_all(&nodes)?
            .into_iter()
            .map(|found| match found {
                Ok(Some(server)) => Ok(server.is_shut_down()),
                Ok(None) => Err(CloudError::InstanceNotFound),
                Err(e) => Err(e),
            })
            .collect())
    }

    fn instances_metadata(&self, nodes: Vec<Node>) -> Result<Vec<MetadataAnswer>, CloudError> {
        Ok(self
            .find_all(&nodes)?
            .into_iter()
            .zip(&nodes)
            .map(|(found, node)| match found {
                Ok(Some(server)) => self.metadata_of(node, &server),
                Ok(None) => Err(CloudError::InstanceNotFound),
                Err(e) => Err(e),
            })
            .collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;
    use wasm_ccm_guest::types::NodeAddress;

    /// The ECS listing's path in the tests' project.
    pub const DETAIL: &str = "/v1/p1/cloudservers/detail";

    /// A provider whose endpoints are `http://<service>.test`, project `p1`.
    pub fn provider(extra: &str) -> HuaweiCloud {
        HuaweiCloud::new(
            crate::config::Config::parse(&format!(
                "[Global]\nregion = ap-southeast-1\nproject-id = p1\n\
                 [Endpoints]\necs = http://ecs.test\nelb = http://elb.test\n\
                 vpc = http://vpc.test\n{extra}"
            ))
            .unwrap(),
        )
    }

    /// ECS `id` named `name` with a fixed address `ip` on `vpc-1`.
    pub fn server(id: &str, name: &str, status: &str, ip: &str) -> Value {
        json!({"id": id, "name": name, "status": status,
               "flavor": {"id": "s6.large.2", "name": "s6.large.2"},
               "OS-EXT-AZ:availability_zone": "ap-southeast-1a", "accessIPv4": "",
               "addresses": {"vpc-1": [{"addr": ip, "OS-EXT-IPS:type": "fixed",
                                        "version": "4", "primary": true}]}})
    }

    /// A listing of `servers`.
    pub fn listing(servers: Vec<Value>) -> Response {
        Response::with_json(200, &json!({"count": servers.len(), "servers": servers}))
    }

    /// The value of the query parameter `name` in `url`.
    pub fn param(url: &str, name: &str) -> Option<String> {
        url.split_once('?')?
            .1
            .split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.replace("%2C", ","))
    }

    /// Node `name` with `provider_id` and InternalIP `ip`.
    pub fn node(name: &str, provider_id: Option<&str>, ip: Option<&str>) -> Node {
        Node {
            provider_id: provider_id.map(str::to_owned),
            addresses: ip
                .map(|ip| NodeAddress {
                    address_type: NodeAddressType::InternalIp,
                    address: ip.into(),
                })
                .into_iter()
                .collect(),
            ..wasm_ccm_guest::testing::node(name)
        }
    }

    fn interfaces(ip: &str) -> Response {
        Response::with_json(
            200,
            &json!({"interfaceAttachments": [{"port_state": "ACTIVE", "port_id": "port-1",
                    "fixed_ips": [{"ip_address": ip, "subnet_id": "sub-1"}]}]}),
        )
    }

    #[test]
    fn provider_ids_as_upstream_parses_them() {
        assert_eq!(parse_provider_id("huaweicloud://abc-1").unwrap(), "abc-1");
        assert_eq!(parse_provider_id("abc-1").unwrap(), "abc-1");
        for bad in [
            "",
            "huaweicloud://",
            "huaweicloud:///abc",
            "huaweicloud://a/b",
            "openstack:///abc",
            "aws://abc",
        ] {
            let err = parse_provider_id(bad).unwrap_err();
            assert_eq!(
                err,
                CloudError::Other(format!(
                    "ProviderID \"{bad}\" didn't match expected format \
                     \"huaweicloud://InstanceID\""
                ))
            );
        }
        assert_eq!(provider_id("abc-1"), "huaweicloud://abc-1");
    }

    #[test]
    fn by_provider_id_a_404_is_gone_and_an_error_is_not() {
        let cloud = MockTransport::new();
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/s1",
            Response::with_json(
                200,
                &json!({"server": server("s1", "n1", "SHUTOFF", "10.0.0.1")}),
            ),
        );
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/gone",
            Response::with_json(404, &json!({"error": {"code": "Ecs.0114", "message": "x"}})),
        );
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/deleted",
            Response::with_json(
                200,
                &json!({"server": server("deleted", "n", "DELETED", "10.0.0.9")}),
            ),
        );
        cloud.on("GET", "/v1/p1/cloudservers/broken", Response::new(500));
        cloud.on("GET", "/v1/p1/cloudservers/busy", Response::new(429));
        let _installed = cloud.install();
        let provider = provider("");
        let with = |id: &str| node("n1", Some(&format!("huaweicloud://{id}")), None);
        assert_eq!(provider.instance_exists(with("s1")), Ok(true));
        assert_eq!(provider.instance_shutdown(with("s1")), Ok(true));
        assert_eq!(provider.instance_exists(with("gone")), Ok(false));
        assert_eq!(provider.instance_exists(with("deleted")), Ok(false));
        assert_eq!(
            provider.instance_shutdown(with("gone")),
            Err(CloudError::InstanceNotFound)
        );
        assert!(matches!(
            provider.instance_exists(with("broken")),
            Err(CloudError::Other(_))
        ));
        assert!(matches!(
            provider.instance_exists(with("busy")),
            Err(CloudError::RetryAfter(_))
        ));
        // A bare ID, as the older CCM's kubelets register.
        assert_eq!(
            provider.instance_exists(node("n1", Some("s1"), None)),
            Ok(true)
        );
        assert!(matches!(
            provider.instance_exists(node("n1", Some("huaweicloud:///s1"), None)),
            Err(CloudError::Other(_))
        ));
    }

    #[test]
    fn metadata_as_upstream() {
        let cloud = MockTransport::new();
        let mut detail = server("s1", "node-1", "ACTIVE", "192.168.0.5");
        detail["addresses"]["vpc-1"]
            .as_array_mut()
            .unwrap()
            .push(json!({"addr": "203.0.113.5", "OS-EXT-IPS:type": "floating"}));
        detail["flavor"] = json!({"id": "c7.large.2", "name": ""});
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/s1",
            Response::with_json(200, &json!({"server": detail})),
        );
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/s1/os-interface",
            interfaces("192.168.0.5"),
        );
        let _installed = cloud.install();
        let provider = provider("");
        let info = provider
            .instance_metadata(node("node-1", Some("s1"), None))
            .unwrap();
        assert_eq!(
            info,
            InstanceInfo {
                // The Node's own (bare) provider ID is kept.
                provider_id: "s1".into(),
                instance_type: "c7.large.2".into(),
                node_addresses: vec![
                    NodeAddress {
                        address_type: NodeAddressType::InternalIp,
                        address: "192.168.0.5".into()
                    },
                    NodeAddress {
                        address_type: NodeAddressType::ExternalIp,
                        address: "203.0.113.5".into()
                    },
                ],
                zone: "ap-southeast-1a".into(),
                region: "ap-southeast-1".into(),
                additional_labels: Vec::new(),
            }
        );
        // The interfaces gone meanwhile: the instance is.
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/s1/os-interface",
            Response::new(404),
        );
        assert_eq!(
            provider.instance_metadata(node("node-1", Some("huaweicloud://s1"), None)),
            Err(CloudError::InstanceNotFound)
        );
        let mut flavorless = server("s2", "n", "ACTIVE", "10.0.0.2");
        flavorless["flavor"] = Value::Null;
        let flavorless: Server = serde_json::from_value(flavorless).unwrap();
        assert_eq!(
            instance_type(&flavorless),
            Err(CloudError::Other("flavor name/id not found".into()))
        );
    }

    /// A Node without a provider ID: its exact name among ECS's fuzzy matches, else its
    /// InternalIP; a new Node gets `huaweicloud://<id>`.
    #[test]
    fn without_a_provider_id_by_name_then_by_internal_ip() {
        let cloud = MockTransport::new();
        cloud.on_with("GET", DETAIL, |request| {
            let url = request.url_text();
            if let Some(name) = param(url, "name") {
                // Fuzzy: `node-1` also lists `node-10`.
                let servers = match name.as_str() {
                    "node-1" => vec![
                        server("s10", "node-10", "ACTIVE", "10.0.0.10"),
                        server("s1", "node-1", "ACTIVE", "10.0.0.1"),
                    ],
                    _ => vec![server("s10", "node-10", "ACTIVE", "10.0.0.10")],
                };
                return Ok(listing(servers));
            }
            let servers = match param(url, "ip_eq").as_deref() {
                Some("10.0.0.2") => vec![server("s2", "vm-renamed", "ACTIVE", "10.0.0.2")],
                Some("10.0.0.3") => vec![server("s3", "ip-named", "SHUTOFF", "10.0.0.3")],
                _ => vec![],
            };
            Ok(listing(servers))
        });
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/s1/os-interface",
            interfaces("10.0.0.1"),
        );
        let _installed = cloud.install();
        let provider = provider("");
        let info = provider
            .instance_metadata(node("node-1", None, Some("10.0.0.1")))
            .unwrap();
        assert_eq!(info.provider_id, "huaweicloud://s1");
        // No ECS of the name: the InternalIP's.
        assert_eq!(
            provider.instance_exists(node("node-2", None, Some("10.0.0.2"))),
            Ok(true)
        );
        // A Node named by its IP (CCE): by that IP.
        assert_eq!(
            provider.instance_shutdown(node("10.0.0.3", None, None)),
            Ok(true)
        );
        // Neither: definitely none.
        assert_eq!(
            provider.instance_exists(node("node-9", None, Some("10.0.0.9"))),
            Ok(false)
        );
        let names: Vec<String> = cloud
            .requests()
            .iter()
            .filter_map(|r| param(r.url_text(), "name"))
            .collect();
        assert_eq!(names, ["node-1", "node-2", "node-9"]);
    }

    /// Two ECSs with one Node's address: an error, unless `[Vpc] id` tells them apart.
    #[test]
    fn ambiguous_answers_are_errors_unless_the_vpc_tells() {
        let cloud = MockTransport::new();
        cloud.on_with("GET", DETAIL, |request| {
            if param(request.url_text(), "name").is_some() {
                return Ok(listing(vec![]));
            }
            let mut other = server("s-other", "x", "ACTIVE", "10.0.0.1");
            other["addresses"] =
                json!({"vpc-2": [{"addr": "10.0.0.1", "OS-EXT-IPS:type": "fixed"}]});
            Ok(listing(vec![
                server("s1", "y", "ACTIVE", "10.0.0.1"),
                other,
            ]))
        });
        let _installed = cloud.install();
        let err = provider("")
            .instance_exists(node("node-1", None, Some("10.0.0.1")))
            .unwrap_err();
        assert!(
            matches!(&err, CloudError::Other(m) if m.contains("2 ECSs have the address 10.0.0.1")),
            "{err:?}"
        );
        let provider = provider("[Vpc]\nid = vpc-1\n");
        assert_eq!(
            provider
                .find_server(&node("node-1", None, Some("10.0.0.1")))
                .unwrap()
                .map(|s| s.id),
            Some("s1".into())
        );
    }
}
