//! The cloud config (`--cloud-config`): gcfg, holding kube-vip-cloud-provider's
//! ConfigMap keys for the address pools ([`crate::pools`]). Empty is fine: the Nodes
//! need nothing.
//!
//! ```ini
//! ; The keys that name no namespace.
//! [Pools]
//! cidr-global = 192.168.0.200/29
//! allow-share-global = true
//! search-order = desc
//! skip-end-ips-in-cidr = true
//!
//! ; The keys of one namespace: cidr-kube-system, range-kube-system, ...
//! [Pools "kube-system"]
//! cidr = 10.0.0.0/29,fd00::/125
//! range = 10.0.1.10-10.0.1.20
//! allow-share = false
//! interface = eth1
//! ```
//!
//! `[Pools]` takes `cidr-global`, `range-global`, `allow-share-global`,
//! `interface-global`, `search-order` and `skip-end-ips-in-cidr`; `[Pools "<ns>"]`
//! takes `cidr`, `range`, `allow-share` and `interface`, which are kube-vip's
//! `<key>-<ns>` (`[Pools "global"]` is the `-global` keys). Namespaced keys cannot be
//! written `cidr-kube-system` in `[Pools]`: gcfg matches names without their dashes,
//! so the namespace would be lost. Pools are checked here, naming the line; anything
//! else (an unknown section or name, a key set twice) is an error too.
//!
//! K3s's own cloud config (JSON: `lbEnabled`, `nodeEnabled`, ...) configures its
//! klipper service load balancer, which this provider does not run: it is refused.

use std::collections::BTreeMap;

use wasm_ccm_guest::gcfg;

use crate::pools::{GLOBAL, Pool, PoolConfig};

/// What `initialize` read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The address pools the load-balancer export hands addresses out from.
    pub pools: PoolConfig,
}

/// What a value of a key must be.
#[derive(Clone, Copy)]
enum Kind {
    Pool,
    Boolean,
    Interface,
    SearchOrder,
}

/// The kube-vip key a variable of `[Pools]` is, by its gcfg name.
fn global_key(name: &str) -> Option<(String, Kind)> {
    let (key, kind) = match name {
        "cidrglobal" => ("cidr", Kind::Pool),
        "rangeglobal" => ("range", Kind::Pool),
        "allowshareglobal" => ("allow-share", Kind::Boolean),
        "interfaceglobal" => ("interface", Kind::Interface),
        "searchorder" => return Some(("search-order".into(), Kind::SearchOrder)),
        "skipendipsincidr" => return Some(("skip-end-ips-in-cidr".into(), Kind::Boolean)),
        _ => return None,
    };
    Some((format!("{key}-{GLOBAL}"), kind))
}

/// The kube-vip key a variable of `[Pools "<namespace>"]` is, by its gcfg name.
fn namespaced_key(name: &str, namespace: &str) -> Option<(String, Kind)> {
    let (key, kind) = match name {
        "cidr" => ("cidr", Kind::Pool),
        "range" => ("range", Kind::Pool),
        "allowshare" => ("allow-share", Kind::Boolean),
        "interface" => ("interface", Kind::Interface),
        _ => return None,
    };
    Some((format!("{key}-{namespace}"), kind))
}

/// A namespace name (RFC 1123 label), as the API server takes it.
fn is_namespace(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

impl Config {
    /// Parses the cloud config bytes; the error names the line.
    pub fn parse(bytes: &[u8]) -> Result<Config, String> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| "the cloud config is not UTF-8 text".to_owned())?;
        if text.trim_start().starts_with('{') {
            return Err(
                "the cloud config is JSON, as K3s's own (lbEnabled, nodeEnabled, ...); \
                        this provider reads gcfg: [Pools] and [Pools \"<namespace>\"] \
                        sections of kube-vip-cloud-provider's keys"
                    .into(),
            );
        }
        let mut data: BTreeMap<String, (usize, String)> = BTreeMap::new();
        for entry in gcfg::parse(text)? {
            let line = entry.line;
            if entry.section != "pools" {
                return Err(format!(
                    "cloud config line {line}: unknown section [{}]; this provider reads \
                     [Pools] and [Pools \"<namespace>\"]",
                    entry.section
                ));
            }
            let (key, kind) = match &entry.subsection {
                None => global_key(&entry.name).ok_or_else(|| {
                    format!(
                        "cloud config line {line}: [Pools] has no variable `{}`; it takes \
                         cidr-global, range-global, allow-share-global, interface-global, \
                         search-order and skip-end-ips-in-cidr, and a namespace's keys go \
                         in [Pools \"<namespace>\"]",
                        entry.name
                    )
                })?,
                Some(namespace) if !is_namespace(namespace) => {
                    return Err(format!(
                        "cloud config line {line}: [Pools \"{namespace}\"]: not a namespace \
                         name (lowercase letters, digits and `-`)"
                    ));
                }
                Some(namespace) => namespaced_key(&entry.name, namespace).ok_or_else(|| {
                    format!(
                        "cloud config line {line}: [Pools \"{namespace}\"] has no variable \
                         `{}`; it takes cidr, range, allow-share and interface",
                        entry.name
                    )
                })?,
            };
            let value = match kind {
                Kind::Pool => {
                    Pool::parse(&entry.value)
                        .map_err(|e| format!("cloud config line {line}: {key}: {e}"))?;
                    entry.value
                }
                Kind::Boolean => gcfg::boolean(&entry.value, line, &key)?.to_string(),
                Kind::SearchOrder if matches!(entry.value.as_str(), "asc" | "desc") => entry.value,
                Kind::SearchOrder => {
                    return Err(format!(
                        "cloud config line {line}: search-order `{}` is neither asc nor desc",
                        entry.value
                    ));
                }
                Kind::Interface if entry.value.trim().is_empty() => {
                    return Err(format!("cloud config line {line}: {key} is empty"));
                }
                Kind::Interface => entry.value,
            };
            if let Some((first, _)) = data.insert(key.clone(), (line, value)) {
                return Err(format!(
                    "cloud config line {line}: {key} is set twice (first on line {first})"
                ));
            }
        }
        let pools =
            PoolConfig::from_config_map(data.iter().map(|(k, (_, v))| (k.as_str(), v.as_str())));
        Ok(Config { pools })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_become_kube_vips_keys() {
        let config = Config::parse(
            b"[Pools]\ncidr-global = 192.168.0.200/29\nallow-share-global = yes\n\
              search-order = desc\nskip-end-ips-in-cidr = true\ninterface-global = eth0\n\
              [Pools \"kube-system\"]\ncidr = 10.0.0.0/29, fd00::/125\n\
              range = 10.0.1.10-10.0.1.20\nallow-share = false\ninterface = eth1\n",
        )
        .unwrap();
        let want = PoolConfig::from_config_map([
            ("cidr-global", "192.168.0.200/29"),
            ("allow-share-global", "true"),
            ("search-order", "desc"),
            ("skip-end-ips-in-cidr", "true"),
            ("interface-global", "eth0"),
            ("cidr-kube-system", "10.0.0.0/29, fd00::/125"),
            ("range-kube-system", "10.0.1.10-10.0.1.20"),
            ("allow-share-kube-system", "false"),
            ("interface-kube-system", "eth1"),
        ]);
        assert_eq!(config.pools, want);
        assert!(config.pools.descending && config.pools.skip_end_ips_in_cidr);
        assert_eq!(config.pools.namespaces(), ["global", "kube-system"]);
        assert_eq!(config.pools.interface("kube-system"), Some("eth1"));
        assert_eq!(config.pools.interface("default"), Some("eth0"));
        // `[Pools "global"]` is the -global keys.
        let global = Config::parse(b"[Pools \"global\"]\nrange = 10.0.0.1-10.0.0.9\n").unwrap();
        assert_eq!(
            global.pools,
            PoolConfig::from_config_map([("range-global", "10.0.0.1-10.0.0.9")])
        );
    }

    #[test]
    fn empty_is_no_pool() {
        assert_eq!(Config::parse(b"").unwrap(), Config::default());
        assert_eq!(Config::parse(b"; nothing\n").unwrap(), Config::default());
    }

    #[test]
    fn mistakes_name_their_line() {
        let cases: [(&[u8], &str); 10] = [
            (
                b"[Pools \"default\"]\ncidr = 10.0.0.0/33\n",
                "line 2: cidr-default",
            ),
            (
                b"[Pools \"default\"]\nrange = 10.0.0.9-10.0.0.1\n",
                "ends before",
            ),
            (
                b"[Pools]\ncidr-default = 10.0.0.0/29\n",
                "[Pools \"<namespace>\"]",
            ),
            (
                b"[Pools \"Default\"]\ncidr = 10.0.0.0/29\n",
                "not a namespace",
            ),
            (
                b"[Pools \"default\"]\ncidrs = 10.0.0.0/29\n",
                "no variable `cidrs`",
            ),
            (b"[Global]\nzone = a\n", "unknown section [global]"),
            (b"[Pools]\nsearch-order = random\n", "neither asc nor desc"),
            (b"[Pools]\nskip-end-ips-in-cidr = maybe\n", "not a boolean"),
            (
                b"[Pools]\ncidr-global = 10.0.0.0/29\n[Pools \"global\"]\ncidr = 10.0.1.0/29\n",
                "line 4: cidr-global is set twice (first on line 2)",
            ),
            (b"{\"lbEnabled\": false}", "JSON"),
        ];
        for (text, want) in cases {
            let error = Config::parse(text).unwrap_err();
            assert!(error.contains(want), "{error} lacks {want}");
        }
    }
}
