//! Provider answers checked before they reach the cluster.
//!
//! Upstream trusts its provider: a provider ID of another scheme, an address that is
//! not one or a label the API server rejects is written as it comes, or fails the
//! Node's update again at every retry. Here such an answer is refused at the seam
//! ([`super::Error::InvalidAnswer`], naming the field), so the controllers record a
//! Warning event `InvalidCloudAnswer` and `wasm_ccm_provider_answers_refused_total`,
//! and nothing of it is written.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, NodeAddress};

use super::{Error, InstanceMetadata};

fn refuse(field: &'static str, reason: String) -> Error {
    Error::InvalidAnswer { field, reason }
}

/// Metadata for initializing `node`: a provider ID of the provider's scheme, valid
/// addresses, label values and label keys.
pub fn instance_metadata(
    provider: &str,
    node: &Node,
    meta: &InstanceMetadata,
) -> Result<(), Error> {
    provider_id(provider, node, &meta.provider_id)?;
    addresses(&meta.addresses)?;
    for (field, value) in [
        ("instance-type", &meta.instance_type),
        ("zone", &meta.zone),
        ("region", &meta.region),
    ] {
        label_value(value).map_err(|reason| refuse(field, reason))?;
    }
    for (key, value) in &meta.additional_labels {
        qualified_name(key).map_err(|reason| refuse("additional-labels", reason))?;
        label_value(value)
            .map_err(|reason| refuse("additional-labels", format!("label {key}: {reason}")))?;
    }
    Ok(())
}

/// A provider ID the provider gave for `node`: `<provider>://...`, and the Node's own
/// when it has one (a provider ID never changes once set).
pub fn provider_id(provider: &str, node: &Node, id: &str) -> Result<(), Error> {
    let own = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    // Empty (the provider gave none), or the Node's own (whoever set it).
    if id.is_empty() || own == Some(id) {
        return Ok(());
    }
    let scheme = format!("{provider}://");
    if !id.starts_with(&scheme) || id.len() == scheme.len() || id.chars().any(char::is_control) {
        return Err(refuse(
            "provider-id",
            format!("{id:?} is not a provider ID of {provider} (`{scheme}...`)"),
        ));
    }
    if let Some(own) = own.filter(|own| !own.is_empty() && *own != id) {
        return Err(refuse(
            "provider-id",
            format!("{id:?} differs from the Node's provider ID {own:?}, which never changes"),
        ));
    }
    Ok(())
}

/// Node addresses: IPs for the IP types; for the others (names, which the API server
/// does not check either), no blanks, no control characters, at most 253 bytes.
pub fn addresses(addresses: &[NodeAddress]) -> Result<(), Error> {
    for a in addresses {
        let ok = match a.type_.as_str() {
            "InternalIP" | "ExternalIP" => a.address.parse::<IpAddr>().is_ok(),
            _ => {
                !a.address.is_empty()
                    && a.address.len() <= 253
                    && !a
                        .address
                        .chars()
                        .any(|c| c.is_whitespace() || c.is_control())
            }
        };
        if !ok {
            return Err(refuse(
                "addresses",
                format!("{:?} is not a valid {} address", a.address, a.type_),
            ));
        }
    }
    Ok(())
}

/// A load balancer status: ingress IPs that parse, hostnames that are DNS names (not
/// IPs), ports in range.
pub fn load_balancer_status(status: &LoadBalancerStatus) -> Result<(), Error> {
    for ingress in status.ingress.iter().flatten() {
        if let Some(ip) = &ingress.ip
            && ip.parse::<IpAddr>().is_err()
        {
            return Err(refuse(
                "load-balancer-status",
                format!("ingress IP {ip:?} is not an IP address"),
            ));
        }
        if let Some(hostname) = &ingress.hostname {
            if hostname.parse::<IpAddr>().is_ok() {
                return Err(refuse(
                    "load-balancer-status",
                    format!("ingress hostname {hostname:?} is an IP address"),
                ));
            }
            dns_name(hostname).map_err(|reason| refuse("load-balancer-status", reason))?;
        }
        for port in ingress.ports.iter().flatten() {
            if !(1..=65535).contains(&port.port) {
                return Err(refuse(
                    "load-balancer-status",
                    format!("ingress port {} is out of range", port.port),
                ));
            }
        }
    }
    Ok(())
}

/// A DNS-1123 subdomain: lowercase labels of letters, digits and `-`, at most 253.
fn dns_name(name: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("{name:?} is not a DNS name (RFC 1123 subdomain)"));
    }
    Ok(())
}

/// A label value: empty, or at most 63 letters, digits, `-`, `_`, `.`, starting and
/// ending with a letter or digit.
fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    let inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let bytes = value.as_bytes();
    if value.len() > 63
        || !bytes.iter().all(|b| inner(*b))
        || !bytes[0].is_ascii_alphanumeric()
        || !bytes[bytes.len() - 1].is_ascii_alphanumeric()
    {
        return Err(format!("{value:?} is not a valid label value"));
    }
    Ok(())
}

/// A label key: `[prefix/]name`, the prefix a DNS name, the name a non-empty label
/// value.
fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        dns_name(prefix).map_err(|_| format!("{key:?} is not a valid label key"))?;
    }
    if name.is_empty() || label_value(name).is_err() {
        return Err(format!("{key:?} is not a valid label key"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, PortStatus};

    fn addr(t: &str, a: &str) -> NodeAddress {
        NodeAddress {
            type_: t.into(),
            address: a.into(),
        }
    }

    fn meta(tweak: impl FnOnce(&mut InstanceMetadata)) -> InstanceMetadata {
        let mut m = InstanceMetadata {
            provider_id: "sim://i-1".into(),
            instance_type: "sim.small".into(),
            addresses: vec![addr("InternalIP", "10.0.0.1"), addr("Hostname", "node-1")],
            zone: "zone-a".into(),
            region: "region-1".into(),
            additional_labels: vec![("example.com/rack".into(), "r1".into())],
        };
        tweak(&mut m);
        m
    }

    #[test]
    fn metadata_is_checked_field_by_field() {
        let node = Node::default();
        let check = |m: InstanceMetadata| instance_metadata("sim", &node, &m);
        assert!(check(meta(|_| {})).is_ok());
        let field = |m: InstanceMetadata| match check(m) {
            Err(Error::InvalidAnswer { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(meta(|m| m.provider_id = "aws:///i-1".into())),
            "provider-id"
        );
        assert_eq!(
            field(meta(|m| m.provider_id = "sim://".into())),
            "provider-id"
        );
        assert_eq!(
            field(meta(
                |m| m.addresses = vec![addr("InternalIP", "10.0.0.300")]
            )),
            "addresses"
        );
        assert_eq!(
            field(meta(|m| m.addresses = vec![addr("Hostname", "Not A Name")])),
            "addresses"
        );
        assert_eq!(field(meta(|m| m.zone = "zone a".into())), "zone");
        assert_eq!(
            field(meta(|m| m.instance_type = "x".repeat(64))),
            "instance-type"
        );
        assert_eq!(
            field(meta(
                |m| m.additional_labels = vec![("bad key!".into(), "v".into())]
            )),
            "additional-labels"
        );
        assert_eq!(
            field(meta(
                |m| m.additional_labels = vec![("k".into(), "-v".into())]
            )),
            "additional-labels"
        );
        assert!(
            check(meta(|m| m
                .addresses
                .push(addr("ExternalIP", "2001:db8::1"))))
            .is_ok()
        );
    }

    #[test]
    fn a_provider_id_never_changes() {
        let mut node = Node::default();
        node.spec.get_or_insert_default().provider_id = Some("sim://i-1".into());
        assert!(provider_id("sim", &node, "sim://i-1").is_ok());
        assert!(provider_id("sim", &node, "sim://i-2").is_err());
    }

    #[test]
    fn load_balancer_statuses() {
        let status = |ip: Option<&str>, hostname: Option<&str>, port: i32| LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: ip.map(Into::into),
                hostname: hostname.map(Into::into),
                ports: Some(vec![PortStatus {
                    port,
                    protocol: "TCP".into(),
                    ..PortStatus::default()
                }]),
                ..LoadBalancerIngress::default()
            }]),
        };
        assert!(load_balancer_status(&status(Some("203.0.113.1"), None, 80)).is_ok());
        assert!(load_balancer_status(&status(None, Some("lb-1.elb.example.com"), 443)).is_ok());
        assert!(load_balancer_status(&status(Some("203.0.113.999"), None, 80)).is_err());
        assert!(load_balancer_status(&status(None, Some("203.0.113.1"), 80)).is_err());
        assert!(load_balancer_status(&status(None, Some("bad_host"), 80)).is_err());
        assert!(load_balancer_status(&status(Some("203.0.113.1"), None, 0)).is_err());
        assert!(load_balancer_status(&LoadBalancerStatus::default()).is_ok());
    }
}
