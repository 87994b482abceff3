//! Network Load Balancer options from Service annotations, as cloud-provider-aws
//! applies them (`aws_loadbalancer.go`, `aws_validations.go`):
//!
//! - `eip-allocations` and `private-ipv4-addresses`: one per subnet, paired by
//!   position, given when the load balancer is created (subnets of an NLB cannot
//!   change; a later change of the annotations is ignored, as upstream).
//! - `cross-zone-load-balancing-enabled` and `access-log-enabled` with
//!   `access-log-s3-bucket-name` / `-prefix`: load balancer attributes, compared with
//!   the current ones after every ensure and update and set when they differ; without
//!   the annotations cross-zone load balancing and access logs are off.
//! - `target-group-attributes`: `preserve_client_ip.enabled` and
//!   `proxy_protocol_v2.enabled` on every target group of the Service, checked before
//!   anything is created; removing the annotation leaves the last values.

use crate::elbv2::{Attributes, SubnetMapping};

/// Target group attributes the annotation may set (upstream's list).
const TARGET_GROUP_ATTRIBUTES: [&str; 2] =
    ["preserve_client_ip.enabled", "proxy_protocol_v2.enabled"];

/// Go's `strconv.ParseBool`, which upstream parses its boolean annotations with.
pub(super) fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The subnets of a new load balancer with the Elastic IPs (`eip-allocations`) and
/// private addresses (`private-ipv4-addresses`) the Service names, by position.
pub fn subnet_mappings(
    eip_allocations: Option<&str>,
    private_addresses: Option<&str>,
    subnets: &[String],
) -> Result<Vec<SubnetMapping>, String> {
    let split =
        |value: Option<&str>| value.map(|v| v.split(',').map(str::to_owned).collect::<Vec<_>>());
    let (eips, addresses) = (split(eip_allocations), split(private_addresses));
    if let Some(eips) = &eips
        && eips.len() != subnets.len()
    {
        return Err(format!(
            "error creating load balancer: Must have same number of EIP AllocationIDs ({}) and \
             SubnetIDs ({})",
            eips.len(),
            subnets.len()
        ));
    }
    if let Some(addresses) = &addresses
        && addresses.len() != subnets.len()
    {
        return Err(format!(
            "error creating load balancer: Must have same number of Private IPv4Addresses ({}) \
             and SubnetIDs ({})",
            addresses.len(),
            subnets.len()
        ));
    }
    Ok(subnets
        .iter()
        .enumerate()
        .map(|(i, subnet)| SubnetMapping {
            subnet: subnet.clone(),
            allocation_id: eips.as_ref().map(|e| e[i].clone()),
            private_ipv4_address: addresses.as_ref().map(|a| a[i].clone()),
        })
        .collect())
}

/// The load balancer attributes the annotations ask for; `annotation` reads
/// `service.beta.kubernetes.io/aws-load-balancer-<suffix>`.
pub fn load_balancer_attributes<'a>(
    annotation: impl Fn(&str) -> Option<&'a str>,
) -> Result<Attributes, String> {
    let flag = |suffix: &str| {
        let value = annotation(suffix).unwrap_or("");
        if value.is_empty() {
            return Ok(false);
        }
        parse_bool(value).ok_or_else(|| {
            format!(
                "error parsing service annotation: \
                 service.beta.kubernetes.io/aws-load-balancer-{suffix}={value}"
            )
        })
    };
    let cross_zone = flag("cross-zone-load-balancing-enabled")?;
    let access_logs = flag("access-log-enabled")?;
    let mut attributes = vec![
        (
            "load_balancing.cross_zone.enabled".to_owned(),
            cross_zone.to_string(),
        ),
        ("access_logs.s3.enabled".to_owned(), access_logs.to_string()),
    ];
    // The API refuses an empty bucket: bucket and prefix are sent only with logs on.
    if access_logs {
        for (key, suffix) in [
            ("access_logs.s3.bucket", "access-log-s3-bucket-name"),
            ("access_logs.s3.prefix", "access-log-s3-bucket-prefix"),
        ] {
            attributes.push((key.to_owned(), annotation(suffix).unwrap_or("").to_owned()));
        }
    }
    Ok(attributes)
}

/// The attributes of `wanted` whose value in `current` differs (or is missing).
pub fn changed(wanted: &[(String, String)], current: &[(String, String)]) -> Attributes {
    wanted
        .iter()
        .filter(|(key, value)| !current.iter().any(|(k, v)| k == key && v == value))
        .cloned()
        .collect()
}

/// The target group attributes of the `target-group-attributes` annotation
/// (`key_values`: its pairs, as the other key/value annotations are read), checked
/// as upstream's `validateServiceAnnotationTargetGroupAttributes`; `udp`: the
/// Service has a UDP port.
pub fn target_group_attributes(
    key_values: Vec<(String, String)>,
    udp: bool,
) -> Result<Attributes, String> {
    let fail = |reason: String| format!("error validating target group attributes: {reason}");
    // A later duplicate wins, as upstream's map.
    let mut attributes: Attributes = Vec::new();
    for (key, value) in key_values {
        attributes.retain(|(k, _)| *k != key);
        attributes.push((key, value));
    }
    for (key, value) in &attributes {
        if !TARGET_GROUP_ATTRIBUTES.contains(&key.as_str()) {
            return Err(fail(format!(
                "the attribute {key:?} is not supported by the controller or is invalid"
            )));
        }
        if value.is_empty() {
            return Err(fail(format!("attribute value is empty for {key:?}")));
        }
        if value != "true" && value != "false" {
            return Err(fail(format!(
                "invalid attribute value for {key:?}: {value}"
            )));
        }
        if key == "preserve_client_ip.enabled" && value == "false" && udp {
            return Err(fail(
                "client IP preservation can't be disabled for UDP ports".into(),
            ));
        }
    }
    Ok(attributes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Attributes {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Upstream's `TestCreateSubnetMappings`, and the count errors of
    /// `ensureLoadBalancerv2`.
    #[test]
    fn subnet_mappings_pair_allocations_and_addresses_by_position() {
        let subnets = vec!["subnet-a".to_owned(), "subnet-b".to_owned()];
        let mapped = subnet_mappings(Some("eipalloc-1,eipalloc-2"), None, &subnets).unwrap();
        assert_eq!(mapped[1].allocation_id.as_deref(), Some("eipalloc-2"));
        assert_eq!(mapped[1].private_ipv4_address, None);
        let mapped = subnet_mappings(None, Some("10.0.0.5,10.0.1.5"), &subnets).unwrap();
        assert_eq!(mapped[0].private_ipv4_address.as_deref(), Some("10.0.0.5"));
        let mapped = subnet_mappings(None, None, &subnets).unwrap();
        assert!(mapped.iter().all(|m| m.allocation_id.is_none()));
        assert_eq!(mapped[0].subnet, "subnet-a");
        let err = subnet_mappings(Some("eipalloc-1"), None, &subnets).unwrap_err();
        assert!(
            err.ends_with("Must have same number of EIP AllocationIDs (1) and SubnetIDs (2)"),
            "{err}"
        );
        let err = subnet_mappings(None, Some(""), &subnets).unwrap_err();
        assert!(
            err.ends_with("Must have same number of Private IPv4Addresses (1) and SubnetIDs (2)"),
            "{err}"
        );
    }

    #[test]
    fn attributes_default_off_and_bucket_only_with_logs() {
        let none = load_balancer_attributes(|_| None).unwrap();
        assert_eq!(
            none,
            pairs(&[
                ("load_balancing.cross_zone.enabled", "false"),
                ("access_logs.s3.enabled", "false")
            ])
        );
        let on = load_balancer_attributes(|suffix| match suffix {
            "cross-zone-load-balancing-enabled" => Some("True"),
            "access-log-enabled" => Some("1"),
            "access-log-s3-bucket-name" => Some("logs"),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            on,
            pairs(&[
                ("load_balancing.cross_zone.enabled", "true"),
                ("access_logs.s3.enabled", "true"),
                ("access_logs.s3.bucket", "logs"),
                ("access_logs.s3.prefix", ""),
            ])
        );
        let err = load_balancer_attributes(|suffix| {
            (suffix == "cross-zone-load-balancing-enabled").then_some("yes")
        })
        .unwrap_err();
        assert_eq!(
            err,
            "error parsing service annotation: \
             service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled=yes"
        );
    }

    #[test]
    fn only_changed_attributes_are_sent() {
        let wanted = pairs(&[("a", "true"), ("b", "false"), ("c", "x")]);
        let current = pairs(&[("a", "true"), ("b", "true")]);
        assert_eq!(
            changed(&wanted, &current),
            pairs(&[("b", "false"), ("c", "x")])
        );
    }

    /// Upstream's `TestValidateServiceAnnotationTargetGroupAttributes`.
    #[test]
    fn target_group_attributes_are_validated_as_upstream() {
        let ok = |items: &[(&str, &str)], udp| target_group_attributes(pairs(items), udp);
        assert_eq!(
            ok(&[("preserve_client_ip.enabled", "true")], false).unwrap(),
            pairs(&[("preserve_client_ip.enabled", "true")])
        );
        assert_eq!(
            ok(
                &[
                    ("proxy_protocol_v2.enabled", "false"),
                    ("proxy_protocol_v2.enabled", "true")
                ],
                false
            )
            .unwrap(),
            pairs(&[("proxy_protocol_v2.enabled", "true")]),
            "a later duplicate wins"
        );
        assert!(ok(&[], true).unwrap().is_empty());
        for (items, udp, error) in [
            (
                vec![("deregistration_delay.timeout_seconds", "10")],
                false,
                "is not supported by the controller or is invalid",
            ),
            (
                vec![("preserve_client_ip.enabled", "")],
                false,
                "attribute value is empty for \"preserve_client_ip.enabled\"",
            ),
            (
                vec![("proxy_protocol_v2.enabled", "True")],
                false,
                "invalid attribute value for \"proxy_protocol_v2.enabled\": True",
            ),
            (
                vec![("preserve_client_ip.enabled", "false")],
                true,
                "client IP preservation can't be disabled for UDP ports",
            ),
        ] {
            let err = ok(&items, udp).unwrap_err();
            assert!(err.starts_with("error validating target group attributes: "));
            assert!(err.ends_with(error), "{err}");
        }
        assert!(ok(&[("preserve_client_ip.enabled", "false")], false).is_ok());
    }
}
