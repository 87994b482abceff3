//! What an AWS host name says: the service and region it is the endpoint of, whether
//! it is one of STS's own.

/// The signing service and region an AWS endpoint's host name implies, e.g.
/// `ec2.eu-west-1.amazonaws.com` → (`ec2`, `eu-west-1`); `None` for other names.
pub fn signing_scope(host: &str) -> Option<(String, String)> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let stem = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))
        .or_else(|| host.strip_suffix(".api.aws"))?;
    let labels: Vec<&str> = stem.split('.').collect();
    let (service, region) = match labels.as_slice() {
        // Global endpoints: sts.amazonaws.com, iam.amazonaws.com.
        [service] => (*service, "us-east-1"),
        // VPC endpoints: vpce-0123-abcd.ec2.eu-west-1.vpce.amazonaws.com.
        [.., service, region, "vpce"] => (*service, *region),
        [.., service, region] => (*service, *region),
        [] => return None,
    };
    let service = service.strip_suffix("-fips").unwrap_or(service);
    if !is_scope_label(service) || !is_region(region) {
        return None;
    }
    Some((service.to_owned(), region.to_owned()))
}

/// Whether `label` has the shape of an AWS region: two letters, words, a number
/// (`eu-west-1`, `us-gov-west-1`, `cn-north-1`, `us-isob-east-1`), so a bucket's host
/// (`ec2.s3.amazonaws.com`: the bucket `ec2`) implies no service.
pub fn is_region(label: &str) -> bool {
    let parts: Vec<&str> = label.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty()
}

/// Whether `host` is one of AWS STS's own endpoints: `sts.amazonaws.com`,
/// `sts[-fips].<region>.amazonaws.com[.cn]`, `sts.<region>.api.aws`, or an STS VPC
/// endpoint (`vpce-....sts.<region>.vpce.amazonaws.com`) — not merely a name whose
/// first label is `sts` (`sts.s3.amazonaws.com` is an S3 bucket).
pub fn is_sts_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "sts.amazonaws.com" {
        return true;
    }
    let labels: Vec<&str> = host.split('.').collect();
    match labels.as_slice() {
        ["sts" | "sts-fips", region, "amazonaws", "com"]
        | ["sts" | "sts-fips", region, "amazonaws", "com", "cn"]
        | ["sts", region, "api", "aws"] => is_region(region),
        [vpce, "sts", region, "vpce", "amazonaws", "com"] => {
            vpce.starts_with("vpce-") && is_scope_label(vpce) && is_region(region)
        }
        _ => false,
    }
}

/// A service or region label: lowercase letters, digits, `-`.
pub(super) fn is_scope_label(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_from_aws_host_names() {
        let scope = |host: &str| signing_scope(host).map(|(s, r)| format!("{s}/{r}"));
        for (host, expected) in [
            ("ec2.eu-west-1.amazonaws.com", Some("ec2/eu-west-1")),
            ("EC2.EU-WEST-1.AMAZONAWS.COM.", Some("ec2/eu-west-1")),
            (
                "elasticloadbalancing.us-east-2.amazonaws.com",
                Some("elasticloadbalancing/us-east-2"),
            ),
            (
                "ec2-fips.us-gov-west-1.amazonaws.com",
                Some("ec2/us-gov-west-1"),
            ),
            ("ec2.cn-north-1.amazonaws.com.cn", Some("ec2/cn-north-1")),
            ("ec2.eu-west-1.api.aws", Some("ec2/eu-west-1")),
            ("sts.amazonaws.com", Some("sts/us-east-1")),
            (
                "vpce-0123-abcd.ec2.eu-west-1.vpce.amazonaws.com",
                Some("ec2/eu-west-1"),
            ),
            ("amazonaws.com", None),
            // Buckets: `ec2` and `sts` under S3's global name imply no service.
            ("ec2.s3.amazonaws.com", None),
            ("sts.s3.amazonaws.com", None),
            ("ec2.eu-west-1.amazonaws.com.evil.example", None),
            ("127.0.0.1", None),
            ("localhost", None),
        ] {
            assert_eq!(scope(host).as_deref(), expected, "{host}");
        }
    }

    #[test]
    fn only_sts_s_own_host_names_are_sts_endpoints() {
        for host in [
            "sts.amazonaws.com",
            "sts.eu-west-1.amazonaws.com",
            "sts-fips.us-gov-west-1.amazonaws.com",
            "sts.cn-north-1.amazonaws.com.cn",
            "sts.eu-west-1.api.aws",
            "vpce-0123-abcd.sts.eu-west-1.vpce.amazonaws.com",
        ] {
            assert!(is_sts_host(host), "{host}");
        }
        for host in [
            "sts.s3.amazonaws.com",
            "sts.s3-website.amazonaws.com",
            "sts.execute-api.amazonaws.com",
            "x.sts.eu-west-1.amazonaws.com",
            "sts.eu-west-1.amazonaws.com.evil.example",
            "ec2.eu-west-1.amazonaws.com",
        ] {
            assert!(!is_sts_host(host), "{host}");
        }
    }
}
