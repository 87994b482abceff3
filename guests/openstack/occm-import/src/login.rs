//! The policy's `keystone` rule for occm's login, and the credentials Secret's files:
//! an application credential, a password, a trust (`trust-id`, a Magnum cluster's),
//! or, with `use-clouds`, the entry of a clouds.yaml (kept whole in the Secret, read by
//! the host at each login). occm's `token` and `tls-insecure` are refused by name.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::global::Global;
use super::quoted;

/// The login, as the policy and the Secret hold it.
pub(crate) struct Login {
    /// `auth-url` as written (cloud.conf's, or the clouds.yaml entry's).
    pub(crate) auth_url: String,
    /// The rule's lines under `keystone:` after `authUrl`.
    pub(crate) rule: Vec<String>,
    /// The Secret's files: (name, content).
    pub(crate) secrets: Vec<(String, Vec<u8>)>,
    /// The TLS files occm would read (cloud.conf's, else the clouds.yaml entry's):
    /// `cacert`, client certificate, client key.
    pub(crate) tls: [Option<PathBuf>; 3],
    /// `[Global]` settings the provider reads that occm took from the clouds.yaml
    /// entry (`auth-url`, `region`, `os-endpoint-type`): added to the provider's file.
    pub(crate) provider_global: Vec<(&'static str, String)>,
}

/// The login of `global` (`cloud.conf` at `path`); `clouds_file` overrides `[Global]
/// clouds-file`; the rule names Secret files through `secret_path`.
pub(crate) fn login(
    global: &Global,
    path: &Path,
    clouds_file: Option<&Path>,
    secret_path: &dyn Fn(&str) -> String,
) -> Result<Login, String> {
    if global.get(&["token"]).is_some() {
        return Err(
            "[Global] token (a fixed Keystone token) is not served: it expires and \
                    cannot be renewed; use an application credential (application-credential-id \
                    and application-credential-secret)"
                .into(),
        );
    }
    if global.flag("tlsinsecure")? {
        return Err(
            "[Global] tls-insecure = true is not served: the host always verifies the \
                    cloud's certificate. Give the CA that signed it as [Global] ca-file: this \
                    import writes it to the credentials Secret and names it in the policy's \
                    tls.caBundleFile"
                .into(),
        );
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let conf_tls = |name: &str| global.get(&[name]).map(|file| base.join(file));
    let tls = [
        conf_tls("cafile"),
        conf_tls("certfile"),
        conf_tls("keyfile"),
    ];
    if global.flag("useclouds")? {
        return clouds(global, base, clouds_file, secret_path, tls);
    }
    let auth_url = global
        .get(&["authurl"])
        .ok_or("[Global] auth-url is required")?
        .to_owned();
    let mut rule = place(global);
    let mut secrets = Vec::new();
    if let Some(trust) = global.get(&["trustid"]) {
        // occm's NewOpenStackClient: the trustee's ID and password when given, else the
        // user's; the scope is the trust alone.
        if global.get(&["applicationcredentialsecret"]).is_some() {
            return Err(
                "[Global] trust-id with application-credential-secret: occm logs in to \
                        a trust with a password (trustee-password or password)"
                    .into(),
            );
        }
        let password = global
            .get(&["trusteepassword", "password"])
            .ok_or("[Global] trust-id needs the trustee's password (trustee-password)")?;
        match global.get(&["trusteeid"]) {
            Some(trustee) => rule.push(format!("      userId: {}", quoted(trustee))),
            None => rule.extend(user_lines(global)?),
        }
        rule.push(format!("      passwordFile: {}", secret_path("password")));
        rule.push(format!("      trustId: {}", quoted(trust)));
        secrets.push(("password".to_owned(), password.as_bytes().to_vec()));
    } else if let Some(secret) = global.get(&["applicationcredentialsecret"]) {
        match (
            global.get(&["applicationcredentialid"]),
            global.get(&["applicationcredentialname"]),
        ) {
            (Some(id), _) => rule.push(format!("      applicationCredentialId: {}", quoted(id))),
            (None, Some(name)) => {
                rule.push(format!("      applicationCredentialName: {}", quoted(name)));
                rule.extend(user_lines(global)?);
            }
            (None, None) => {
                return Err(
                    "application-credential-secret needs application-credential-id or -name".into(),
                );
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
        rule.extend(user_lines(global)?);
        rule.push(format!("      passwordFile: {}", secret_path("password")));
        rule.extend(project_lines(global)?);
        secrets.push(("password".to_owned(), password.as_bytes().to_vec()));
    } else {
        return Err(
            "no secret to log in with: neither application-credential-secret nor password".into(),
        );
    }
    Ok(Login {
        auth_url,
        rule,
        secrets,
        tls,
        provider_global: Vec::new(),
    })
}

/// `region` and `interface` lines from `cloud.conf`.
fn place(global: &Global) -> Vec<String> {
    let mut rule = Vec::new();
    if let Some(region) = global.get(&["region"]) {
        rule.push(format!("      region: {}", quoted(region)));
    }
    if let Some(interface) = global.get(&["osendpointtype", "interface", "endpointtype"])
        && interface != "public"
    {
        rule.push(format!("      interface: {}", quoted(interface)));
    }
    rule
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

/// The project lines of a password login's rule.
fn project_lines(global: &Global) -> Result<Vec<String>, String> {
    match (
        global.get(&["projectid", "tenantid"]),
        global.get(&["projectname", "tenantname"]),
    ) {
        (Some(id), _) => Ok(vec![format!("      projectId: {}", quoted(id))]),
        (None, Some(name)) => {
            let domain = match (
                global.get(&["projectdomainid", "tenantdomainid", "domainid"]),
                global.get(&["projectdomainname", "tenantdomainname", "domainname"]),
            ) {
                (Some(id), _) => format!("      projectDomainId: {}", quoted(id)),
                (None, Some(name)) => format!("      projectDomainName: {}", quoted(name)),
                (None, None) => {
                    return Err(
                        "tenant-name/project-name needs its domain (project-domain-name, \
                                project-domain-id or domain-name)"
                            .into(),
                    );
                }
            };
            Ok(vec![format!("      projectName: {}", quoted(name)), domain])
        }
        (None, None) => Err(
            "a password login needs the project (tenant-id/project-id or \
                             tenant-name/project-name)"
                .into(),
        ),
    }
}

/// `[Global]` keys of a login that occm would merge, field by field, with a clouds.yaml
/// entry: refused beside `use-clouds` (the host reads the login from one place).
const LOGIN_KEYS: [(&str, &str); 18] = [
    ("userid", "user-id"),
    ("username", "username"),
    ("password", "password"),
    ("tenantid", "tenant-id"),
    ("tenantname", "tenant-name"),
    ("projectid", "project-id"),
    ("projectname", "project-name"),
    ("domainid", "domain-id"),
    ("domainname", "domain-name"),
    ("tenantdomainid", "tenant-domain-id"),
    ("tenantdomainname", "tenant-domain-name"),
    ("projectdomainid", "project-domain-id"),
    ("projectdomainname", "project-domain-name"),
    ("userdomainid", "user-domain-id"),
    ("userdomainname", "user-domain-name"),
    ("applicationcredentialid", "application-credential-id"),
    ("applicationcredentialname", "application-credential-name"),
    (
        "applicationcredentialsecret",
        "application-credential-secret",
    ),
];

/// occm's `use-clouds`: the entry of the clouds.yaml (`clouds_file`, else `[Global]
/// clouds-file` against `base`), `[Global] cloud`'s or the file's only one, as occm's
/// `ReadClouds`: `cloud.conf`'s `auth-url`, `region`, interface and TLS files first.
fn clouds(
    global: &Global,
    base: &Path,
    clouds_file: Option<&Path>,
    secret_path: &dyn Fn(&str) -> String,
    conf_tls: [Option<PathBuf>; 3],
) -> Result<Login, String> {
    if let Some((_, key)) = LOGIN_KEYS.iter().find(|(k, _)| global.get(&[*k]).is_some()) {
        return Err(format!(
            "[Global] {key} beside use-clouds: occm merges cloud.conf's login and the \
             clouds.yaml entry's field by field; write the whole login in the clouds.yaml \
             entry (or leave out use-clouds)"
        ));
    }
    if global
        .get(&["trustid", "trusteeid", "trusteepassword"])
        .is_some()
    {
        return Err(
            "[Global] trust-id beside use-clouds: put trust_id in the clouds.yaml \
                    entry's auth"
                .into(),
        );
    }
    let file = match (clouds_file, global.get(&["cloudsfile"])) {
        (Some(file), _) => file.to_owned(),
        (None, Some(file)) => base.join(file),
        (None, None) => {
            return Err(
                "use-clouds: give the clouds.yaml occm reads with --clouds-file (occm \
                        takes [Global] clouds-file, else OS_CLIENT_CONFIG_FILE or \
                        /etc/openstack/clouds.yaml)"
                    .into(),
            );
        }
    };
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let parsed: Value = serde_saphyr::from_str(&text).map_err(|_| {
        format!(
            "{} is not a clouds.yaml (YAML with `clouds:`)",
            file.display()
        )
    })?;
    let entries = parsed["clouds"]
        .as_object()
        .ok_or_else(|| format!("{} has no `clouds:` map", file.display()))?;
    let cloud = match global.get(&["cloud"]) {
        Some(cloud) => cloud.to_owned(),
        None if entries.len() == 1 => entries.keys().next().cloned().unwrap_or_default(),
        None => {
            return Err(format!(
                "use-clouds: name the entry of {} with [Global] cloud (it has {}; occm's \
                 OS_CLOUD is not in cloud.conf)",
                file.display(),
                entries.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    };
    let entry = entries
        .get(&cloud)
        .ok_or_else(|| format!("{} has no entry `clouds.{cloud}`", file.display()))?;
    if entry.get("profile").is_some() || entry.get("cloud").is_some() {
        return Err(format!(
            "{}: clouds.{cloud} names a profile (clouds-public.yaml), which is not read: write \
             the whole entry",
            file.display()
        ));
    }
    let text_of = |value: &Value| match value {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let entry_url = text_of(&entry["auth"]["auth_url"]);
    let auth_url = global
        .get(&["authurl"])
        .map(str::to_owned)
        .or_else(|| entry_url.clone())
        .ok_or_else(|| {
            format!(
                "neither [Global] auth-url nor {}'s clouds.{cloud}.auth.auth_url is set",
                file.display()
            )
        })?;
    // The host logs in at the rule's authUrl only, with the entry's own auth_url.
    wasm_ccm_host::capabilities::http_egress::credentials::keystone::check_clouds_entry(
        &file, &text, &cloud, &auth_url,
    )
    .map_err(|reason| format!("{reason} ([Global] auth-url, if set, must be the entry's too)"))?;
    let mut rule = place(global);
    let mut provider_global = Vec::new();
    if global.get(&["authurl"]).is_none() {
        provider_global.push(("auth-url", auth_url.clone()));
    }
    if global.get(&["region"]).is_none()
        && let Some(region) = text_of(&entry["region_name"])
    {
        rule.push(format!("      region: {}", quoted(&region)));
        provider_global.push(("region", region));
    }
    if global
        .get(&["osendpointtype", "interface", "endpointtype"])
        .is_none()
        && let Some(interface) = text_of(&entry["interface"]).or(text_of(&entry["endpoint_type"]))
        && interface != "public"
    {
        rule.push(format!("      interface: {}", quoted(&interface)));
        provider_global.push(("os-endpoint-type", interface));
    }
    rule.push(format!("      cloudsFile: {}", secret_path("clouds.yaml")));
    rule.push(format!("      cloud: {}", quoted(&cloud)));
    // Only the entry used goes to the Secret.
    let mut only = serde_json::Map::new();
    only.insert(cloud.clone(), entry.clone());
    let kept = serde_saphyr::to_string(&serde_json::json!({ "clouds": only }))
        .map_err(|e| format!("writing clouds.yaml: {e}"))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let entry_file = |key: &str| text_of(&entry[key]).map(|f| dir.join(f));
    let [ca, cert, key] = conf_tls;
    Ok(Login {
        auth_url,
        rule,
        secrets: vec![("clouds.yaml".to_owned(), kept.into_bytes())],
        tls: [
            ca.or_else(|| entry_file("cacert")),
            cert.or_else(|| entry_file("cert")),
            key.or_else(|| entry_file("key")),
        ],
        provider_global,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Convert, convert, convert_with};
    use std::path::Path;
    use wasm_ccm_host::policy::{Credential, Policy, keystone::KeystoneMethod};

    fn keystone(policy: &str) -> wasm_ccm_host::policy::keystone::KeystoneCredential {
        let policy = Policy::parse(policy, Path::new("/etc/wasm-ccm/providers/openstack.yaml"))
            .unwrap_or_else(|e| panic!("{e}: {policy}"));
        let Credential::Keystone(keystone) = &policy.credentials[0].credential else {
            panic!("a keystone rule");
        };
        keystone.clone()
    }

    /// Magnum's cloud.conf: the trustee logs in to the trust; the trustee's
    /// `trustee-id`/`trustee-password` win over `user-id`/`password`, as in occm's
    /// `NewOpenStackClient`, and the project settings do not scope a trust's token.
    #[test]
    fn a_trust_is_the_trustee_s_password_scoped_to_the_trust() {
        let magnum = "[Global]\nauth-url=https://keystone.example.com:5000/v3\nuser-id=u1\n\
                      password=p1\ntrust-id=t1\nregion=RegionOne\n";
        let imported = convert(magnum, Path::new("/in/cloud.conf"), "/c").unwrap();
        assert_eq!(imported.secrets, [("password".to_string(), b"p1".to_vec())]);
        let rule = keystone(&imported.policy);
        let KeystoneMethod::Password { user, scope, .. } = &rule.method else {
            panic!("{:?}", rule.method);
        };
        assert_eq!(
            format!("{user:?} {scope:?}"),
            r#"Id("u1") Trust("t1")"#,
            "{}",
            imported.policy
        );
        assert!(!imported.cloud_conf.contains("trust-id"));
        let legacy = "[Global]\nauth-url=https://keystone.example.com:5000/v3\nuser-id=u1\n\
                      password=p1\ntrust-id=t1\ntrustee-id=t9\ntrustee-password=tp\n\
                      tenant-id=ignored\n";
        let imported = convert(legacy, Path::new("/in/cloud.conf"), "/c").unwrap();
        assert_eq!(imported.secrets, [("password".to_string(), b"tp".to_vec())]);
        assert!(
            imported.policy.contains("userId: \"t9\""),
            "{}",
            imported.policy
        );
        assert!(!imported.policy.contains("ignored"), "{}", imported.policy);
        keystone(&imported.policy);
    }

    /// `use-clouds`: the entry occm would read (named, or the file's only one) kept
    /// alone in the Secret, its auth_url, region and CA in the policy; a login also
    /// written in cloud.conf, another auth-url, or a missing file are refused by name.
    #[test]
    fn use_clouds_keeps_the_entry_in_the_secret() {
        let dir = std::env::temp_dir().join(format!("occm-import-clouds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), "CA").unwrap();
        std::fs::write(
            dir.join("clouds.yaml"),
            "clouds:\n  openstack:\n    region_name: RegionTwo\n    cacert: ca.pem\n    \
             auth:\n      auth_url: https://keystone.example.com:5000/v3\n      \
             application_credential_id: a1\n      application_credential_secret: s1\n  \
             other:\n    auth:\n      auth_url: https://x.example.com/v3\n      \
             user_id: u\n      password: other-secret\n      project_id: p\n",
        )
        .unwrap();
        let conf = dir.join("cloud.conf");
        let text = "[Global]\nuse-clouds = true\nclouds-file = clouds.yaml\ncloud = openstack\n";
        let imported = convert(text, &conf, "/c").unwrap();
        let names: Vec<&str> = imported.secrets.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["clouds.yaml", "ca.pem"]);
        let kept = String::from_utf8(imported.secrets[0].1.clone()).unwrap();
        assert!(
            kept.contains("s1") && !kept.contains("other-secret"),
            "{kept}"
        );
        let rule = keystone(&imported.policy);
        assert_eq!(rule.region.as_deref(), Some("RegionTwo"));
        assert_eq!(
            rule.auth_url.as_str(),
            "https://keystone.example.com:5000/v3"
        );
        assert!(
            matches!(&rule.method, KeystoneMethod::CloudsYaml { cloud, file }
                if cloud == "openstack" && file == Path::new("/c/clouds.yaml")),
            "{:?}",
            rule.method
        );
        assert!(
            imported.policy.contains("caBundleFile: /c/ca.pem"),
            "{}",
            imported.policy
        );
        // The provider reads the identity endpoint and region from its cloud.conf.
        assert!(
            imported.cloud_conf.contains(
                "[Global]\n# From the clouds.yaml entry occm read (use-clouds):\n\
                 auth-url = \"https://keystone.example.com:5000/v3\"\nregion = \"RegionTwo\"\n"
            ),
            "{}",
            imported.cloud_conf
        );
        // The same entry given with --clouds-file.
        let given = convert_with(
            "[Global]\nuse-clouds = true\ncloud = openstack\n",
            &conf,
            &Convert {
                credentials_dir: "/c",
                clouds_file: Some(&dir.join("clouds.yaml")),
                https_endpoints_only: false,
            },
        )
        .unwrap();
        assert_eq!(given.secrets, imported.secrets);
        for (extra, words) in [
            (
                "cloud = openstack\nusername = ccm\n",
                "[Global] username beside use-clouds",
            ),
            (
                "cloud = openstack\nauth-url = https://other.example.com/v3\n",
                "clouds.openstack.auth.auth_url",
            ),
            ("cloud = nope\n", "no entry `clouds.nope`"),
        ] {
            let text = format!("[Global]\nuse-clouds = true\nclouds-file = clouds.yaml\n{extra}");
            let err = convert(&text, &conf, "/c").unwrap_err().to_string();
            assert!(err.contains(words), "{extra}: {err}");
            assert!(
                !err.contains("other-secret") && !err.contains("s1\n"),
                "{err}"
            );
        }
        let err = convert("[Global]\nuse-clouds = true\n", &conf, "/c")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--clouds-file"), "{err}");
        // Two entries and no [Global] cloud: which one is for the operator to say.
        let err = convert(
            "[Global]\nuse-clouds = true\nclouds-file = clouds.yaml\n",
            &conf,
            "/c",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("[Global] cloud") && err.contains("openstack, other"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// occm sends the token to the catalog's plain http:// endpoints: so does the
    /// imported policy, saying so; `--https-endpoints-only` keeps it on https.
    #[test]
    fn the_policy_says_whether_plain_http_endpoints_get_the_token() {
        let conf = "[Global]\nauth-url = https://keystone.example.com:5000/v3\n\
                    application-credential-id = a1\napplication-credential-secret = s1\n";
        let path = Path::new("/in/cloud.conf");
        let occm = convert(conf, path, "/c").unwrap();
        assert!(keystone(&occm.policy).allow_plaintext, "{}", occm.policy);
        assert!(
            occm.policy.contains("--https-endpoints-only"),
            "{}",
            occm.policy
        );
        let https_only = Convert {
            credentials_dir: "/c",
            clouds_file: None,
            https_endpoints_only: true,
        };
        let kept = convert_with(conf, path, &https_only).unwrap();
        assert!(!keystone(&kept.policy).allow_plaintext, "{}", kept.policy);
        let plain = conf.replace("https://keystone", "http://keystone");
        let err = convert_with(&plain, path, &https_only)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--https-endpoints-only with the plain http://"),
            "{err}"
        );
    }

    #[test]
    fn tls_insecure_names_the_ca_setting_and_token_is_refused_by_name() {
        let path = Path::new("/in/cloud.conf");
        let err = convert(
            "[Global]\nauth-url = https://k/v3\ntls-insecure = true\n",
            path,
            "/c",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("[Global] ca-file") && err.contains("tls.caBundleFile"),
            "{err}"
        );
        let err = convert(
            "[Global]\nauth-url = https://k/v3\ntoken = gAAAA\n",
            path,
            "/c",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("[Global] token") && !err.contains("gAAAA"),
            "{err}"
        );
    }
}
