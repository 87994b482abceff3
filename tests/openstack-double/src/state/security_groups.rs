//! Neutron's security groups and their rules, as the project holds them: the
//! project's `default` group (every server's port is in it, as Nova asks Neutron), and
//! the groups a client makes. A new group gets Neutron's two egress rules (any IPv4,
//! any IPv6); rules are unique in a group (Neutron answers 409 to a duplicate).

use std::time::SystemTime;

use super::State;

/// A Neutron security group.
#[derive(Debug, Clone)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub description: String,
    /// When it was made (`created_at`).
    pub created: SystemTime,
    /// Neutron's `revision_number`: one more on every change of its rules.
    pub revision_number: u64,
}

/// A rule of a security group (what Neutron compares to find a duplicate: all of it
/// but the ID and the description).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroupRule {
    pub id: String,
    pub security_group_id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    /// `tcp`, `udp`, `sctp`, `icmp`, a number, or none (any).
    pub protocol: Option<String>,
    pub port_range_min: Option<u32>,
    pub port_range_max: Option<u32>,
    /// A network address with its prefix length (Neutron stores the network of a
    /// prefix given with host bits: `10.0.0.5/24` is `10.0.0.0/24`).
    pub remote_ip_prefix: Option<String>,
    pub remote_group_id: Option<String>,
}

impl SecurityGroupRule {
    /// Whether `other` is the same rule (Neutron's duplicate check).
    pub fn same_as(&self, other: &SecurityGroupRule) -> bool {
        self.security_group_id == other.security_group_id
            && self.direction == other.direction
            && self.ethertype == other.ethertype
            && self.protocol == other.protocol
            && self.port_range_min == other.port_range_min
            && self.port_range_max == other.port_range_max
            && self.remote_ip_prefix == other.remote_ip_prefix
            && self.remote_group_id == other.remote_group_id
    }
}

impl State {
    /// Makes a security group with Neutron's default egress rules (any IPv4, any
    /// IPv6): the group.
    pub fn add_security_group(&mut self, name: &str, description: &str) -> SecurityGroup {
        let id = self.id();
        let group = SecurityGroup {
            id: id.clone(),
            name: name.to_owned(),
            description: description.to_owned(),
            created: SystemTime::now(),
            revision_number: 1,
        };
        self.security_groups.insert(id.clone(), group.clone());
        for ethertype in ["IPv4", "IPv6"] {
            self.insert_rule(SecurityGroupRule {
                id: String::new(),
                security_group_id: id.clone(),
                direction: "egress".into(),
                ethertype: ethertype.into(),
                protocol: None,
                port_range_min: None,
                port_range_max: None,
                remote_ip_prefix: None,
                remote_group_id: None,
            });
        }
        group
    }

    /// Makes the project's `default` group as Neutron does: its egress rules, and
    /// ingress from its own members (IPv4 and IPv6). Its ID.
    pub(super) fn add_default_security_group(&mut self) -> String {
        let id = self
            .add_security_group("default", "Default security group")
            .id;
        for ethertype in ["IPv4", "IPv6"] {
            self.insert_rule(SecurityGroupRule {
                id: String::new(),
                security_group_id: id.clone(),
                direction: "ingress".into(),
                ethertype: ethertype.into(),
                protocol: None,
                port_range_min: None,
                port_range_max: None,
                remote_ip_prefix: None,
                remote_group_id: Some(id.clone()),
            });
        }
        id
    }

    /// The ID of the project's `default` group (there is one).
    pub fn default_security_group(&self) -> String {
        self.security_groups
            .values()
            .find(|g| g.name == "default")
            .map(|g| g.id.clone())
            .expect("the default security group")
    }

    /// Adds `rule` under a new ID (no duplicate check: see
    /// [`State::duplicate_rule`]): its ID.
    pub fn insert_rule(&mut self, mut rule: SecurityGroupRule) -> String {
        rule.id = self.id();
        let id = rule.id.clone();
        if let Some(group) = self.security_groups.get_mut(&rule.security_group_id) {
            group.revision_number += 1;
        }
        self.security_group_rules.insert(id.clone(), rule);
        id
    }

    /// The ID of a rule that is the same as `rule`, if there is one.
    pub fn duplicate_rule(&self, rule: &SecurityGroupRule) -> Option<String> {
        self.security_group_rules
            .values()
            .find(|r| r.same_as(rule))
            .map(|r| r.id.clone())
    }

    /// The rules of the group `group`.
    pub fn rules_of(&self, group: &str) -> Vec<SecurityGroupRule> {
        self.security_group_rules
            .values()
            .filter(|r| r.security_group_id == group)
            .cloned()
            .collect()
    }

    /// The groups named `name`.
    pub fn security_groups_named(&self, name: &str) -> Vec<SecurityGroup> {
        self.security_groups
            .values()
            .filter(|g| g.name == name)
            .cloned()
            .collect()
    }

    /// The IDs of the ports in the group `group`.
    pub fn ports_in_group(&self, group: &str) -> Vec<String> {
        self.ports
            .values()
            .filter(|p| p.security_groups.iter().any(|g| g == group))
            .map(|p| p.id.clone())
            .collect()
    }

    /// Deletes the group `group` and its rules (the caller checked that no port is in
    /// it).
    pub(crate) fn remove_security_group(&mut self, group: &str) {
        self.security_groups.remove(group);
        self.security_group_rules
            .retain(|_, r| r.security_group_id != group);
        // Rules of other groups naming it as their remote group go too, as in Neutron.
        self.security_group_rules
            .retain(|_, r| r.remote_group_id.as_deref() != Some(group));
    }
}
