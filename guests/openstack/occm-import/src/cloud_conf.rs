//! [`convert`]: occm's `cloud.conf` to the provider's (without the `[Global]` keys the
//! host holds, [`occm_config::policy_keys`]), the policy's `keystone` rule and `tls`, and the
//! credentials Secret's files.

use std::path::Path;

use wasm_ccm_guest::gcfg;

use super::policy::{policy_tail, provider_actions, request_timeout};
use super::{ImportError, Imported, quoted};
use occm_config::policy_keys;

/// The `[Global]` values read.
#[derive(Default)]
struct Global {
    values: Vec<(String, String)>,
}

impl Global {
    fn get(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| {
            self.values
                .iter()
                .find(|(k, v)| k == n && !v.is_empty())
                .map(|(_, v)| v.as_str())
        })
    }
}

/// Converts `text` (occm's `cloud.conf`, read from `path`, whose relative `ca-file`,
/// `cert-file` and `key-file` are read against `path`'s directory) for a credentials
/// Secret mounted at `credentials_dir`.
pub fn convert(text: &str, path: &Path, credentials_dir: &str) -> Result<Imported, ImportError> {
    let invalid = |reason: String| ImportError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let entries = gcfg::parse(text).map_err(invalid)?;
    let mut global = Global::default();
    // occm's gcfg drops a `[Global "x"]` subsection ("can't store data", FatalOnly).
    for entry in &entries {
        if entry.section == "global" && entry.subsection.is_none() {
            global
                .values
                .push((entry.name.clone(), entry.value.clone()));
        }
    }
    // Booleans as gcfg reads them (`yes`, `on`, `1`, any case; a bare name is true).
    let flag = |name: &str| -> Result<bool, ImportError> {
        match global.values.iter().rev().find(|(k, _)| k == name) {
            None => Ok(false),
            Some((_, v)) => gcfg::boolean(v, 0, name).map_err(|_| {
                invalid(format!(
                    "[Global] {name} `{v}` is not a boolean (true or false)"
                ))
            }),
        }
    };
    if global.get(&["token"]).is_some() {
        return Err(invalid(
            "[Global] token (a fixed Keystone token) is not supported: it expires and cannot \
             be renewed; use an application credential (application-credential-id and \
             application-credential-secret)"
                .into(),
        ));
    }
    if flag("useclouds")? {
        return Err(invalid(
            "use-clouds reads clouds.yaml, which this converter does not: write the cloud's \
             settings in [Global] (auth-url, region, application-credential-id, ...)"
                .into(),
        ));
    }
    if flag("tlsinsecure")? {
        return Err(invalid(
            "tls-insecure = true is not supported: give the cloud's CA with ca-file".into(),
        ));
    }
    if global.get(&["trustid"]).is_some() {
        return Err(invalid(
            "trust-based logins (trust-id) are not supported: use an application credential".into(),
        ));
    }
    let auth_url = global
        .get(&["authurl"])
        .ok_or_else(|| invalid("[Global] auth-url is required".into()))?;
    let url = url::Url::parse(auth_url)
        .map_err(|e| invalid(format!("[Global] auth-url `{auth_url}`: {e}")))?;
    let origin = url.origin().ascii_serialization();
    let secret_path = |name: &str| format!("{}/{name}", credentials_dir.trim_end_matches('/'));
    let mut rule = vec![format!("      authUrl: {}", quoted(auth_url))];
    if let Some(region) = global.get(&["region"]) {
        rule.push(format!("      region: {}", quoted(region)));
    }
    if let Some(interface) = global.get(&["osendpointtype", "interface", "endpointtype"])
        && interface != "public"
    {
        rule.push(format!("      interface: {}", quoted(interface)));
    }
    let mut secrets = Vec::new();
    if let Some(secret) = global.get(&["applicationcredentialsecret"]) {
        match (
            global.get(&["applicationcredentialid"]),
            global.get(&["applicationcredentialname"]),
        ) {
            (Some(id), _) => rule.push(format!("      applicationCredentialId: {}", quoted(id))),
            (None, Some(name)) => {
                rule.push(format!("      applicationCredentialName: {}", quoted(name)));
                rule.extend(user_lines(&global).map_err(invalid)?);
            }
            (None, None) => {
                return Err(invalid(
                    "application-credential-secret needs application-credential-id or -name".into(),
                ));
            }
        }
        rule.push(format!(
            "      applicationCredentialSecretFile: {}",
            secret_path("application-credential-secret")
        ));
        secrets.push((
            "application-credential-secret".to_owned(),
            secret.as_bytes().to_vec(),
        ));
    } else if let Some(password) = global.get(&["password"]) {
        rule.extend(user_lines(&global).map_err(invalid)?);
        rule.push(format!("      passwordFile: {}", secret_path("password")));
        match (
            global.get(&["projectid", "tenantid"]),
            global.get(&["projectname", "tenantname"]),
        ) {
            (Some(id), _) => rule.push(format!("      projectId: {}", quoted(id))),
            (None, Some(name)) => {
                rule.push(format!("      projectName: {}", quoted(name)));
                match (
                    global.get(&["projectdomainid", "tenantdomainid", "domainid"]),
                    global.get(&["projectdomainname", "tenantdomainname", "domainname"]),
                ) {
                    (Some(id), _) => rule.push(format!("      projectDomainId: {}", quoted(id))),
                    (None, Some(name)) => {
                        rule.push(format!("      projectDomainName: {}", quoted(name)))
                    }
                    (None, None) => {
                        return Err(invalid(
                            "tenant-name/project-name needs its domain (project-domain-name, \
                             project-domain-id or domain-name)"
                                .into(),
                        ));
                    }
                }
            }
            (None, None) => {
                return Err(invalid(
                    "a password login needs the project (tenant-id/project-id or \
                     tenant-name/project-name)"
                        .into(),
                ));
            }
        }
        secrets.push(("password".to_owned(), password.as_bytes().to_vec()));
    } else {
        return Err(invalid(
            "no secret to log in with: neither application-credential-secret nor password".into(),
        ));
    }
    let plaintext = url.scheme() == "http"
        && !matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    let mut policy = format!(
        "# The OpenStack provider's policy (schema: docs/policy.md), converted\n\
         # from occm's cloud.conf by `wasm-ccm import-occm-config`. The host logs in to\n\
         # Keystone; the token goes only to the catalog's compute, network and\n\
         # load-balancer endpoints.\n\
         credentials:\n  - destination: {}\n",
        quoted(&origin)
    );
    if plaintext {
        policy.push_str(
            "    # auth-url is plain http: the token crosses the network unencrypted.\n    allowPlaintext: true\n",
        );
    }
    policy.push_str("    keystone:\n");
    for line in rule {
        policy.push_str(&line);
        policy.push('\n');
    }
    policy.push_str(
        "    # The only requests the token is sent with: what the provider calls.\n    allowedActions:\n",
    );
    for action in provider_actions() {
        policy.push_str(&format!("      - {action}\n"));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let read = |file: &str| {
        let file = base.join(file);
        std::fs::read(&file).map_err(|source| ImportError::Io { path: file, source })
    };
    let mut tls = Vec::new();
    if let Some(ca) = global.get(&["cafile"]) {
        secrets.push(("ca.pem".to_owned(), read(ca)?));
        tls.push(format!("  caBundleFile: {}", secret_path("ca.pem")));
    }
    match (global.get(&["certfile"]), global.get(&["keyfile"])) {
        (Some(cert), Some(key)) => {
            secrets.push(("client.crt".to_owned(), read(cert)?));
            secrets.push(("client.key".to_owned(), read(key)?));
            tls.push(format!(
                "  clientCertificateFile: {}",
                secret_path("client.crt")
            ));
            tls.push(format!("  clientKeyFile: {}", secret_path("client.key")));
        }
        (None, None) => {}
        _ => return Err(invalid("cert-file and key-file go together".into())),
    }
    // occm's `[Metadata] request-timeout` times every OpenStack request (`NewOpenStack`:
    // `provider.HTTPClient.Timeout`), 60 s (`defaultTimeOut`) when unset or zero: the
    // host's requestTimeout here.
    let request_timeout = request_timeout(&entries).map_err(invalid)?;
    policy.push_str(&policy_tail(request_timeout));
    if !tls.is_empty() {
        policy.push_str("tls:\n");
        for line in tls {
            policy.push_str(&line);
            policy.push('\n');
        }
    }
    Ok(Imported {
        cloud_conf: strip_moved(text),
        policy,
        secrets,
    })
}

/// The user lines of the rule: `userId`, or `userName` and its domain.
fn user_lines(global: &Global) -> Result<Vec<String>, String> {
    if let Some(id) = global.get(&["userid"]) {
        return Ok(vec![format!("      userId: {}", quoted(id))]);
    }
    let name = global
        .get(&["username"])
        .ok_or("the login needs the user (user-id, or username and its domain)")?;
    let domain = match (
        global.get(&["userdomainid", "domainid"]),
        global.get(&["userdomainname", "domainname"]),
    ) {
        (Some(id), _) => format!("      userDomainId: {}", quoted(id)),
        (None, Some(domain)) => format!("      userDomainName: {}", quoted(domain)),
        (None, None) => {
            return Err(
                "username needs its domain (user-domain-name, user-domain-id or domain-name)"
                    .into(),
            );
        }
    };
    Ok(vec![format!("      userName: {}", quoted(name)), domain])
}

/// `text` without the `[Global]` variables that moved, with a note where they went.
fn strip_moved(text: &str) -> String {
    let mut out = String::from(
        "# occm's cloud.conf for the wasm-ccm OpenStack provider: the Keystone login (user,\n\
         # project, secret) and the TLS files moved to the provider policy and the\n\
         # credentials Secret (`wasm-ccm import-occm-config`).\n",
    );
    let mut in_global = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(section) = trimmed.strip_prefix('[') {
            // `[Global]`, and `[Global "x"]` (which occm ignores): no secret is left in
            // the provider's file either way.
            in_global = section
                .split([' ', '\t', '"', ']'])
                .next()
                .is_some_and(|name| name.eq_ignore_ascii_case("global"));
        } else if in_global && let Some((name, _)) = trimmed.split_once('=') {
            let name: String = name
                .trim()
                .chars()
                .filter(|c| *c != '-' && *c != '_')
                .collect::<String>()
                .to_ascii_lowercase();
            if policy_keys::moved(&name) {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TEST_CLOUD_CONF as OCCM;

    #[test]
    fn a_password_login_moves_to_the_policy_and_the_secret() {
        let imported = convert(
            OCCM,
            Path::new("/in/cloud.conf"),
            "/etc/wasm-ccm/credentials",
        )
        .unwrap();
        assert!(!imported.cloud_conf.contains("hunter2"));
        assert!(!imported.cloud_conf.contains("username"));
        assert!(imported.cloud_conf.contains("subnet-id = s1"));
        assert!(imported.cloud_conf.contains("region = RegionOne"));
        assert!(!imported.policy.contains("hunter2"));
        assert_eq!(
            imported.secrets,
            [("password".to_string(), b"hunter2".to_vec())]
        );
        let policy = wasm_ccm_host::policy::Policy::parse(
            &imported.policy,
            Path::new("/etc/wasm-ccm/providers/openstack.yaml"),
        )
        .unwrap();
        let wasm_ccm_host::policy::Credential::Keystone(keystone) =
            &policy.credentials[0].credential
        else {
            panic!("a keystone rule");
        };
        assert_eq!(keystone.region.as_deref(), Some("RegionOne"));
        assert!(policy.credentials[0].allowed_actions.is_some());
        assert_eq!(
            keystone.files(),
            [Path::new("/etc/wasm-ccm/credentials/password")]
        );
    }

    /// What occm's gcfg reader drops (`gcfg.FatalOnly`) is not read here either: a
    /// `[Global "x"]` subsection's variables (its login variables are still taken out
    /// of the provider's file), an unknown section (left in the provider's file, which
    /// ignores it with a warning).
    #[test]
    fn what_occm_ignores_is_not_imported() {
        let text = format!(
            "{OCCM}[Global \"other\"]\ntls-insecure = true\nuser-domain-id = d9\n\
             password = other-secret\n[Nope]\nx = 1\n"
        );
        let imported = convert(&text, Path::new("/in/cloud.conf"), "/c").unwrap();
        assert_eq!(
            imported.secrets,
            [("password".to_string(), b"hunter2".to_vec())]
        );
        assert!(
            imported.policy.contains("userDomainName: \"Default\"")
                && !imported.policy.contains("d9"),
            "{}",
            imported.policy
        );
        assert!(
            !imported.cloud_conf.contains("other-secret")
                && !imported.cloud_conf.contains("tls-insecure"),
            "{}",
            imported.cloud_conf
        );
        assert!(imported.cloud_conf.contains("[Global \"other\"]\n"));
        assert!(imported.cloud_conf.contains("[Nope]\nx = 1\n"));
    }

    #[test]
    fn what_cannot_be_converted_is_named() {
        for (text, words) in [
            (
                "[Global]\nauth-url = https://k/v3\ntoken = gAAAA\n",
                "token",
            ),
            (
                "[Global]\nauth-url = https://k/v3\nuse-clouds = Yes\n",
                "use-clouds",
            ),
            (
                "[Global]\nauth-url = https://k/v3\ntls-insecure\n",
                "tls-insecure",
            ),
            ("[Global]\nregion = r\npassword = p\n", "auth-url"),
            ("[Global]\nauth-url = https://k/v3\n", "no secret"),
            (
                "[Global]\nauth-url = https://k/v3\npassword = p\nuser-id = u\n",
                "project",
            ),
            (
                "[Global]\nauth-url = https://k/v3\ntls-insecure = true\n",
                "tls-insecure",
            ),
            (
                "[Global]\nauth-url = https://k/v3\napplication-credential-secret = s\n",
                "-id or -name",
            ),
        ] {
            let err = convert(text, Path::new("/in/cloud.conf"), "/c")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(words) && err.contains("/in/cloud.conf"),
                "{text}: {err}"
            );
        }
    }
}
