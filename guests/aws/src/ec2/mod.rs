//! The EC2 calls the provider makes, and what it reads from their answers.

mod security_groups;

pub use security_groups::{Rule, SecurityGroup, Source};

use crate::api::{Api, ApiError, Params};
use crate::xml::{self, Node};

/// The EC2 API version.
const VERSION: &str = "2016-11-15";

/// Instance states that count as alive (upstream's `aliveFilter`).
pub const ALIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

/// An instance, as far as the provider needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping`, `stopped`.
    pub state: String,
    pub private_dns_name: String,
    pub public_dns_name: String,
    pub public_ip: String,
    pub vpc_id: String,
    pub interfaces: Vec<Interface>,
    /// The IDs of its security groups.
    pub security_groups: Vec<String>,
    pub tags: Vec<(String, String)>,
}

/// A network interface of an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// `attachment.deviceIndex`; `None` when not attached.
    pub device_index: Option<u32>,
    /// `in-use` when attached.
    pub status: String,
    /// Private IPv4 addresses, in the API's order.
    pub private_ips: Vec<String>,
    pub ipv6: Vec<String>,
}

impl Instance {
    fn read(item: Node<'_, '_>) -> Self {
        let interfaces = xml::items(item, "networkInterfaceSet")
            .map(|nic| Interface {
                device_index: xml::text(nic, "attachment/deviceIndex").parse().ok(),
                status: xml::text(nic, "status"),
                private_ips: xml::items(nic, "privateIpAddressesSet")
                    .map(|a| xml::text(a, "privateIpAddress"))
                    .filter(|a| !a.is_empty())
                    .collect(),
                ipv6: xml::items(nic, "ipv6AddressesSet")
                    .map(|a| xml::text(a, "ipv6Address"))
                    .filter(|a| !a.is_empty())
                    .collect(),
            })
            .collect();
        Self {
            id: xml::text(item, "instanceId"),
            instance_type: xml::text(item, "instanceType"),
            zone: xml::text(item, "placement/availabilityZone"),
            state: xml::text(item, "instanceState/name"),
            private_dns_name: xml::text(item, "privateDnsName"),
            public_dns_name: xml::text(item, "dnsName"),
            public_ip: xml::text(item, "ipAddress"),
            vpc_id: xml::text(item, "vpcId"),
            interfaces,
            security_groups: xml::items(item, "groupSet")
                .map(|g| xml::text(g, "groupId"))
                .filter(|g| !g.is_empty())
                .collect(),
            tags: xml::tags(item, "tagSet"),
        }
    }
}

/// A subnet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    /// The IPv4 CIDR block.
    pub cidr: String,
    pub tags: Vec<(String, String)>,
}

/// A route table with its routes and subnet associations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTable {
    pub id: String,
    pub routes: Vec<Route>,
    /// Subnets explicitly associated.
    pub subnets: Vec<String>,
    /// Whether it is the VPC's main table.
    pub main: bool,
    pub tags: Vec<(String, String)>,
}

/// A route of a route table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// IPv4 destination; empty for IPv6-only routes.
    pub destination: String,
    pub instance_id: String,
    pub gateway_id: String,
    /// `active` or `blackhole`.
    pub state: String,
}

/// An availability zone.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Zone {
    pub name: String,
    /// E.g. `use1-az1`.
    pub id: String,
    /// `availability-zone`, `local-zone` or `wavelength-zone`.
    pub zone_type: String,
}

/// The EC2 client.
#[derive(Debug, Clone)]
pub struct Ec2 {
    api: Api,
}

impl Ec2 {
    pub fn new(endpoint: String) -> Self {
        Self {
            api: Api::new(endpoint, "ec2", VERSION),
        }
    }

    pub fn endpoint(&self) -> &str {
        self.api.endpoint()
    }

    /// Instances by ID, in one call. Unknown IDs are left out (EC2 refuses the whole
    /// call with `InvalidInstanceID.NotFound`; the IDs are then asked one by one).
    pub fn instances_by_id(&self, ids: &[String]) -> Result<Vec<Instance>, ApiError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Every page: EC2 may page an answer by IDs too (moto at 100 reservations);
        // upstream's DescribeInstances follows NextToken whatever it asked.
        match self.describe(&Params::new().list("InstanceId", ids)) {
            Err(e) if is_not_found(&e) && ids.len() > 1 => {
                let mut found = Vec::new();
                for id in ids {
                    found.extend(self.instances_by_id(std::slice::from_ref(id))?);
                }
                Ok(found)
            }
            Err(e) if is_not_found(&e) => Ok(Vec::new()),
            other => other,
        }
    }

    /// Instances matching EC2 filters, every page.
    pub fn instances_filtered(&self, params: Params) -> Result<Vec<Instance>, ApiError> {
        self.describe(&params.set("MaxResults", "1000"))
    }

    /// DescribeInstances, every page.
    fn describe(&self, params: &Params) -> Result<Vec<Instance>, ApiError> {
        let mut instances = Vec::new();
        let read = |root: Node<'_, '_>| {
            for reservation in xml::items(root, "reservationSet") {
                instances.extend(xml::items(reservation, "instancesSet").map(Instance::read));
            }
            Ok(())
        };
        self.api
            .pages("DescribeInstances", params, "NextToken", "nextToken", read)?;
        Ok(instances)
    }

    /// Subnets matching `params`' filters.
    pub fn subnets(&self, params: Params) -> Result<Vec<Subnet>, ApiError> {
        let mut subnets = Vec::new();
        self.api.pages(
            "DescribeSubnets",
            &params,
            "NextToken",
            "nextToken",
            |root| {
                subnets.extend(xml::items(root, "subnetSet").map(|s| Subnet {
                    id: xml::text(s, "subnetId"),
                    zone: xml::text(s, "availabilityZone"),
                    cidr: xml::text(s, "cidrBlock"),
                    tags: xml::tags(s, "tagSet"),
                }));
                Ok(())
            },
        )?;
        Ok(subnets)
    }

    /// Route tables matching `params`' filters.
    pub fn route_tables(&self, params: Params) -> Result<Vec<RouteTable>, ApiError> {
        let mut tables = Vec::new();
        self.api.pages(
            "DescribeRouteTables",
            &params,
            "NextToken",
            "nextToken",
            |root| {
                tables.extend(xml::items(root, "routeTableSet").map(|t| {
                    let associations: Vec<Node<'_, '_>> = xml::items(t, "associationSet").collect();
                    RouteTable {
                        id: xml::text(t, "routeTableId"),
                        routes: xml::items(t, "routeSet")
                            .map(|r| Route {
                                destination: xml::text(r, "destinationCidrBlock"),
                                instance_id: xml::text(r, "instanceId"),
                                gateway_id: xml::text(r, "gatewayId"),
                                state: xml::text(r, "state"),
                            })
                            .collect(),
                        subnets: associations
                            .iter()
                            .map(|a| xml::text(*a, "subnetId"))
                            .filter(|s| !s.is_empty())
                            .collect(),
                        main: associations.iter().any(|a| xml::text(*a, "main") == "true"),
                        tags: xml::tags(t, "tagSet"),
                    }
                }));
                Ok(())
            },
        )?;
        Ok(tables)
    }

    /// Every availability zone of the region.
    pub fn zones(&self) -> Result<Vec<Zone>, ApiError> {
        self.api
            .call_read("DescribeAvailabilityZones", &Params::new(), |root| {
                Ok(xml::items(root, "availabilityZoneInfo")
                    .map(|z| Zone {
                        name: xml::text(z, "zoneName"),
                        id: xml::text(z, "zoneId"),
                        zone_type: xml::text(z, "zoneType"),
                    })
                    .collect())
            })
    }

    /// The network nodes above `instance` (top layer first), `None` when EC2 lists no
    /// topology for it.
    pub fn instance_topology(&self, instance: &str) -> Result<Option<Vec<String>>, ApiError> {
        let mut nodes = None;
        self.api.pages(
            "DescribeInstanceTopology",
            &Params::new().list("InstanceId", &[instance]),
            "NextToken",
            "nextToken",
            |root| {
                if nodes.is_none()
                    && let Some(item) = xml::items(root, "instanceSet").next()
                {
                    nodes = Some(
                        xml::items(item, "networkNodeSet")
                            .filter_map(|n| n.text().map(|t| t.trim().to_owned()))
                            .filter(|t| !t.is_empty())
                            .collect(),
                    );
                }
                Ok(())
            },
        )?;
        Ok(nodes)
    }

    /// Routes `cidr` to `instance` in `table`.
    pub fn create_route(&self, table: &str, cidr: &str, instance: &str) -> Result<(), ApiError> {
        self.api
            .call(
                "CreateRoute",
                &Params::new()
                    .set("RouteTableId", table)
                    .set("DestinationCidrBlock", cidr)
                    .set("InstanceId", instance),
            )
            .map(drop)
    }

    /// Deletes the route for `cidr` from `table`.
    pub fn delete_route(&self, table: &str, cidr: &str) -> Result<(), ApiError> {
        self.api
            .call(
                "DeleteRoute",
                &Params::new()
                    .set("RouteTableId", table)
                    .set("DestinationCidrBlock", cidr),
            )
            .map(drop)
    }

    /// Turns the instance's source/destination check off, so it may receive traffic
    /// for its pod CIDR.
    pub fn disable_source_dest_check(&self, instance: &str) -> Result<(), ApiError> {
        self.api
            .call(
                "ModifyInstanceAttribute",
                &Params::new()
                    .set("InstanceId", instance)
                    .set("SourceDestCheck.Value", "false"),
            )
            .map(drop)
    }
}

/// Whether EC2 said the instance does not exist (a malformed ID is an error, not
/// proof of absence).
pub fn is_not_found(error: &ApiError) -> bool {
    error.code() == "InvalidInstanceID.NotFound"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_read_from_describe_instances() {
        let text = r#"<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <reservationSet><item><instancesSet><item>
    <instanceId>i-0abc</instanceId><instanceType>m5.large</instanceType>
    <placement><availabilityZone>us-east-1a</availabilityZone></placement>
    <instanceState><code>16</code><name>running</name></instanceState>
    <privateDnsName>ip-10-0-0-4.ec2.internal</privateDnsName><dnsName>ec2-1-2-3-4.compute-1.amazonaws.com</dnsName>
    <ipAddress>1.2.3.4</ipAddress><vpcId>vpc-1</vpcId>
    <networkInterfaceSet>
      <item><status>in-use</status><attachment><deviceIndex>1</deviceIndex></attachment>
        <privateIpAddressesSet><item><privateIpAddress>10.0.1.9</privateIpAddress></item></privateIpAddressesSet></item>
      <item><status>in-use</status><attachment><deviceIndex>0</deviceIndex></attachment>
        <privateIpAddressesSet><item><privateIpAddress>10.0.0.4</privateIpAddress></item><item><privateIpAddress>10.0.0.5</privateIpAddress></item></privateIpAddressesSet>
        <ipv6AddressesSet><item><ipv6Address>2600::1</ipv6Address></item></ipv6AddressesSet></item>
    </networkInterfaceSet>
    <tagSet><item><key>kubernetes.io/cluster/c1</key><value>owned</value></item></tagSet>
  </item></instancesSet></item></reservationSet>
</DescribeInstancesResponse>"#;
        let doc = xml::parse(text).unwrap();
        let mut found = Vec::new();
        for r in xml::items(doc.root_element(), "reservationSet") {
            found.extend(xml::items(r, "instancesSet").map(Instance::read));
        }
        let i = &found[0];
        assert_eq!(i.id, "i-0abc");
        assert_eq!(i.zone, "us-east-1a");
        assert_eq!(i.state, "running");
        assert_eq!(i.public_ip, "1.2.3.4");
        assert_eq!(i.interfaces[1].device_index, Some(0));
        assert_eq!(i.interfaces[1].private_ips, ["10.0.0.4", "10.0.0.5"]);
        assert_eq!(i.interfaces[1].ipv6, ["2600::1"]);
        assert_eq!(
            i.tags,
            [("kubernetes.io/cluster/c1".into(), "owned".into())]
        );
    }
}
