//! Every setting of occm's `cloud.conf`, with what this provider does with it. The
//! table in `guests/openstack/README.md` ("occm's settings") is this list, and the
//! tests below keep the two equal and check the cloud config parser against it.
//! occm's annotations are [`crate::load_balancer::SUPPORTED`].

/// What this provider does with an occm setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Read and served as occm serves it.
    Served,
    /// Refused: an error at start naming it.
    Refused,
    /// Held by the provider policy or the credentials Secret (the host logs in);
    /// `wasm-ccm import-occm-config` moves it there.
    Policy,
    /// Has no effect on a provider (logged when given).
    NotUsed,
}

impl Status {
    /// The word in the README table.
    pub fn word(self) -> &'static str {
        match self {
            Status::Served => "served",
            Status::Refused => "refused",
            Status::Policy => "policy",
            Status::NotUsed => "not used",
        }
    }
}

/// (section, occm's name, a value that exercises it, status).
pub const SETTINGS: [(&str, &str, &str, Status); 74] = [
    (
        "Global",
        "auth-url",
        "https://keystone.example.com/v3",
        Status::Served,
    ),
    ("Global", "region", "RegionOne", Status::Served),
    ("Global", "os-endpoint-type", "internal", Status::Served),
    ("Global", "regional-provider-ids", "true", Status::Served),
    ("Global", "username", "ccm", Status::Policy),
    ("Global", "user-id", "u1", Status::Policy),
    ("Global", "password", "secret", Status::Policy),
    ("Global", "tenant-id", "p1", Status::Policy),
    ("Global", "tenant-name", "k8s", Status::Policy),
    ("Global", "tenant-domain-id", "d1", Status::Policy),
    ("Global", "tenant-domain-name", "Default", Status::Policy),
    ("Global", "user-domain-id", "d1", Status::Policy),
    ("Global", "user-domain-name", "Default", Status::Policy),
    ("Global", "domain-id", "d1", Status::Policy),
    ("Global", "domain-name", "Default", Status::Policy),
    ("Global", "trust-id", "t1", Status::Policy),
    ("Global", "trustee-id", "t1", Status::Policy),
    ("Global", "trustee-password", "secret", Status::Policy),
    ("Global", "application-credential-id", "a1", Status::Policy),
    (
        "Global",
        "application-credential-name",
        "ccm",
        Status::Policy,
    ),
    (
        "Global",
        "application-credential-secret",
        "secret",
        Status::Policy,
    ),
    ("Global", "ca-file", "/etc/ca.pem", Status::Policy),
    ("Global", "cert-file", "/etc/client.crt", Status::Policy),
    ("Global", "key-file", "/etc/client.key", Status::Policy),
    ("Global", "tls-insecure", "false", Status::Policy),
    ("Global", "use-clouds", "false", Status::Policy),
    ("Global", "clouds-file", "/etc/clouds.yaml", Status::Policy),
    ("Global", "cloud", "openstack", Status::Policy),
    ("LoadBalancer", "enabled", "false", Status::Served),
    ("LoadBalancer", "lb-version", "v2", Status::Served),
    ("LoadBalancer", "subnet-id", "s1", Status::Served),
    ("LoadBalancer", "member-subnet-id", "s2", Status::Served),
    ("LoadBalancer", "network-id", "n1", Status::Served),
    ("LoadBalancer", "floating-network-id", "f1", Status::Served),
    ("LoadBalancer", "floating-subnet-id", "fs1", Status::Served),
    (
        "LoadBalancer",
        "floating-subnet",
        "public-*",
        Status::Served,
    ),
    ("LoadBalancer", "floating-subnet-tags", "lb", Status::Served),
    (
        "LoadBalancer",
        "lb-method",
        "LEAST_CONNECTIONS",
        Status::Served,
    ),
    ("LoadBalancer", "lb-provider", "amphora", Status::Served),
    ("LoadBalancer", "create-monitor", "true", Status::Served),
    ("LoadBalancer", "monitor-delay", "10s", Status::Served),
    ("LoadBalancer", "monitor-timeout", "5s", Status::Served),
    ("LoadBalancer", "monitor-max-retries", "2", Status::Served),
    (
        "LoadBalancer",
        "monitor-max-retries-down",
        "4",
        Status::Served,
    ),
    (
        "LoadBalancer",
        "manage-security-groups",
        "true",
        Status::Served,
    ),
    ("LoadBalancer", "internal-lb", "true", Status::Served),
    ("LoadBalancer", "node-selector", "pool=web", Status::Served),
    ("LoadBalancer", "cascade-delete", "false", Status::Served),
    ("LoadBalancer", "flavor-id", "fl1", Status::Served),
    ("LoadBalancer", "availability-zone", "az1", Status::Served),
    (
        "LoadBalancer",
        "enable-ingress-hostname",
        "true",
        Status::Served,
    ),
    (
        "LoadBalancer",
        "ingress-hostname-suffix",
        "example.net",
        Status::Served,
    ),
    ("LoadBalancer", "max-shared-lb", "3", Status::Served),
    (
        "LoadBalancer",
        "container-store",
        "external",
        Status::Served,
    ),
    (
        "LoadBalancer",
        "provider-requires-serial-api-calls",
        "true",
        Status::Served,
    ),
    (
        "LoadBalancer",
        "default-tls-container-ref",
        "https://barbican/v1/containers/c",
        Status::Served,
    ),
    (
        "LoadBalancerClass \"name\"",
        "floating-network-id",
        "f2",
        Status::Served,
    ),
    (
        "LoadBalancerClass \"name\"",
        "floating-subnet-id",
        "fs2",
        Status::Served,
    ),
    (
        "LoadBalancerClass \"name\"",
        "floating-subnet",
        "x",
        Status::Served,
    ),
    (
        "LoadBalancerClass \"name\"",
        "floating-subnet-tags",
        "x",
        Status::Served,
    ),
    (
        "LoadBalancerClass \"name\"",
        "network-id",
        "n2",
        Status::Served,
    ),
    (
        "LoadBalancerClass \"name\"",
        "subnet-id",
        "s3",
        Status::Served,
    ),
    (
        "LoadBalancerClass \"name\"",
        "member-subnet-id",
        "s4",
        Status::Served,
    ),
    (
        "Networking",
        "ipv6-support-disabled",
        "true",
        Status::Served,
    ),
    (
        "Networking",
        "public-network-name",
        "public",
        Status::Served,
    ),
    (
        "Networking",
        "internal-network-name",
        "private",
        Status::Served,
    ),
    (
        "Networking",
        "address-sort-order",
        "10.0.0.0/8",
        Status::Served,
    ),
    ("Route", "router-id", "r1", Status::Served),
    (
        "Metadata",
        "search-order",
        "configDrive,metadataService",
        Status::NotUsed,
    ),
    ("Metadata", "request-timeout", "30s", Status::Policy),
    ("BlockStorage", "bs-version", "v3", Status::NotUsed),
    (
        "BlockStorage",
        "trust-device-path",
        "false",
        Status::NotUsed,
    ),
    ("BlockStorage", "ignore-volume-az", "false", Status::NotUsed),
    (
        "BlockStorage",
        "node-volume-attach-limit",
        "256",
        Status::NotUsed,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// The cloud config holding just `key = value` in `section` (after a valid
    /// `[Global]`).
    fn with(section: &str, key: &str, value: &str) -> String {
        let global = "[Global]\nauth-url = https://keystone.example.com/v3\n";
        if section == "Global" {
            format!("{global}{key} = {value}\n")
        } else {
            format!("{global}[{section}]\n{key} = {value}\n")
        }
    }

    fn gcfg_name(key: &str) -> String {
        key.replace(['-', '_'], "").to_ascii_lowercase()
    }

    #[test]
    fn the_parser_does_what_the_table_says() {
        for (section, key, value, status) in SETTINGS {
            let text = with(section, key, value);
            let parsed = Config::parse(&text);
            match status {
                Status::Served => {
                    let config = parsed.unwrap_or_else(|e| panic!("{section} {key}: {e}"));
                    assert!(config.ignored.is_empty(), "{section} {key}: ignored");
                }
                Status::Refused => match parsed {
                    Err(e) => assert!(e.contains(key), "{section} {key}: {e}"),
                    Ok(_) => panic!("{section} {key}: not refused"),
                },
                // Secrets are refused, the rest of the login is the policy's.
                Status::Policy => match parsed {
                    Err(e) => assert!(e.contains("credentials directory"), "{key}: {e}"),
                    Ok(config) => assert!(
                        config.ignored.is_empty()
                            || config.ignored == [format!("metadata/{}", gcfg_name(key))],
                        "{section} {key}: {:?}",
                        config.ignored
                    ),
                },
                Status::NotUsed => {
                    parsed.unwrap_or_else(|e| panic!("{section} {key}: {e}"));
                }
            }
        }
    }

    /// The `[Global]` settings the policy holds are the host's keys
    /// (`occm_config::policy_keys`, which `wasm-ccm import-occm-config` moves out of
    /// `cloud.conf` too), each one the provider refuses or skips; the others are not.
    #[test]
    fn global_policy_settings_are_the_hosts_keys() {
        use occm_config::policy_keys::{InProvider, find};
        for (section, key, _, status) in SETTINGS {
            if section != "Global" {
                continue;
            }
            let held = find(&gcfg_name(key)).is_some_and(|k| k.provider != InProvider::NotKnown);
            assert_eq!(status == Status::Policy, held, "[Global] {key}");
        }
    }

    /// The README's table "occm's settings": `| [section] key | status |` rows.
    #[test]
    fn the_readme_table_is_this_list() {
        let readme = include_str!("../README.md");
        let start = readme
            .find("## occm's settings")
            .expect("README section \"occm's settings\"");
        let rows: Vec<(String, String)> = readme[start..]
            .lines()
            .skip_while(|l| !l.starts_with("| `["))
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
            })
            .collect();
        let expected: Vec<(String, String)> = SETTINGS
            .iter()
            .map(|(section, key, _, status)| {
                (format!("[{section}] {key}"), status.word().to_owned())
            })
            .collect();
        assert_eq!(rows, expected);
    }
}
