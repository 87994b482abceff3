//! [`convert`]: occm's `cloud.conf` to the provider's (without the `[Global]` keys the
//! host holds, [`occm_config::policy_keys`]), the policy's `keystone` rule and `tls`, and the
//! credentials Secret's files.

use std::path::Path;

use wasm_ccm_guest::gcfg;

use super::global::Global;
use super::login::login;
use super::policy::{policy_tail, provider_actions, request_timeout};
use super::{ImportError, Imported, quoted};
use occm_config::policy_keys;

/// Converts `text` (occm's `cloud.conf`, read from `path`, whose relative `ca-file`,
/// `cert-file` and `key-file` are read against `path`'s directory) for a credentials
/// Secret mounted at `credentials_dir`, as [`convert_with`] with the other settings'
/// defaults.
pub fn convert(text: &str, path: &Path, credentials_dir: &str) -> Result<Imported, ImportError> {
    convert_with(
        text,
        path,
        &Convert {
            credentials_dir,
            ..Convert::default()
        },
    )
}

/// How [`convert_with`] converts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Convert<'a> {
    /// Where the credentials Secret is mounted (the policy names the files there).
    pub credentials_dir: &'a str,
    /// With `use-clouds`: the clouds.yaml occm reads (else `[Global] clouds-file`, read
    /// against the `cloud.conf`'s directory).
    pub clouds_file: Option<&'a Path>,
    /// The token goes only to `https://` catalog endpoints (occm sends it to plain
    /// `http://` ones too, which the policy then says with `allowPlaintext: true`).
    pub https_endpoints_only: bool,
}

/// Converts `text` (occm's `cloud.conf`, read from `path`) as `options` say.
pub fn convert_with(
    text: &str,
    path: &Path,
    options: &Convert<'_>,
) -> Result<Imported, ImportError> {
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
    let credentials_dir = options.credentials_dir;
    let secret_path = |name: &str| format!("{}/{name}", credentials_dir.trim_end_matches('/'));
    let login = login(&global, path, options.clouds_file, &secret_path).map_err(invalid)?;
    let auth_url = login.auth_url.as_str();
    let url = url::Url::parse(auth_url)
        .map_err(|e| invalid(format!("[Global] auth-url `{auth_url}`: {e}")))?;
    let origin = url.origin().ascii_serialization();
    let mut rule = vec![format!("      authUrl: {}", quoted(auth_url))];
    rule.extend(login.rule);
    let mut secrets = login.secrets;
    let keystone_plaintext = url.scheme() == "http"
        && !matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    if keystone_plaintext && options.https_endpoints_only {
        return Err(invalid(format!(
            "--https-endpoints-only with the plain http:// auth-url `{auth_url}`: the token \
             would cross the network unencrypted at the login already"
        )));
    }
    let mut policy = format!(
        "# The OpenStack provider's policy (schema: docs/policy.md), converted\n\
         # from occm's cloud.conf by `wasm-ccm import-occm-config`. The host logs in to\n\
         # Keystone; the token goes only to the catalog's compute, network and\n\
         # load-balancer endpoints.\n\
         credentials:\n  - destination: {}\n",
        quoted(&origin)
    );
    if !options.https_endpoints_only {
        let why: &[&str] = if keystone_plaintext {
            &[
                "auth-url is plain http: the token crosses the network unencrypted, to the",
                "catalog's plain http:// endpoints too, as occm sends it.",
            ]
        } else {
            &[
                "As occm: the token also goes to the catalog's plain http:// endpoints, if any",
                "(unencrypted). Import with --https-endpoints-only to keep it on https.",
            ]
        };
        for line in why {
            policy.push_str(&format!("    # {line}\n"));
        }
        policy.push_str("    allowPlaintext: true\n");
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
    let read = |file: &Path| {
        std::fs::read(file).map_err(|source| ImportError::Io {
            path: file.to_owned(),
            source,
        })
    };
    let mut tls = Vec::new();
    let [ca, cert, key] = &login.tls;
    if let Some(ca) = ca {
        secrets.push(("ca.pem".to_owned(), read(ca)?));
        tls.push(format!("  caBundleFile: {}", secret_path("ca.pem")));
    }
    match (cert, key) {
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
        cloud_conf: with_global(&strip_moved(text), &login.provider_global),
        policy,
        secrets,
    })
}

/// `text` with `settings` added at the top of its (first) `[Global]` section, each
/// with a note that it came from clouds.yaml.
fn with_global(text: &str, settings: &[(&'static str, String)]) -> String {
    if settings.is_empty() {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut added = false;
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if !added && line.trim().eq_ignore_ascii_case("[global]") {
            out.push_str("# From the clouds.yaml entry occm read (use-clouds):\n");
            for (name, value) in settings {
                out.push_str(&format!("{name} = {}\n", quoted(value)));
            }
            added = true;
        }
    }
    out
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
