//! `wasm-ccm import-occm-config`: turns the `cloud.conf` of cloud-provider-openstack
//! (occm), which holds the Keystone secret, into what wasm-ccm needs:
//!
//! - `cloud-config/cloud.conf`: the same file without the secret and the identity
//!   settings (the provider reads the rest: `[LoadBalancer]`, `[Networking]`, ...);
//! - `providers/openstack.yaml`: the provider policy, whose `keystone` rule logs in as
//!   occm did (application credential, or user and password with the project);
//! - `credentials/…`: the secret (and the CA bundle and client certificate
//!   the file named), for the `wasm-ccm-credentials` Secret, mounted at
//!   `--credentials-dir` (the policy names the files there);
//! - `cluster-name.yaml`: occm's `--cluster-name` (a flag, not in `cloud.conf`: given
//!   with `--cluster-name`, read from occm's Deployment or DaemonSet with
//!   `--occm-deployment`, else occm's default `kubernetes`, with a note), as
//!   deploy/openstack's patch of the Deployment. It is part of every load balancer's
//!   name (`kube_service_<cluster>_<namespace>_<name>`): the provider refuses by name
//!   the load balancers occm made under another one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use wasm_ccm_guest::gcfg;

use super::occm_deployment::{self, Found, OCCM_DEFAULT};

/// `wasm-ccm import-occm-config`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// occm's cloud.conf.
    pub cloud_conf: PathBuf,
    /// The directory to write into.
    #[arg(long)]
    pub out: PathBuf,
    /// Where the credentials Secret is mounted (the policy names the files there).
    #[arg(long, default_value = "/etc/wasm-ccm/credentials")]
    pub credentials_dir: String,
    /// occm's --cluster-name (a flag, not in cloud.conf), for cluster-name.yaml.
    /// Without it or --occm-deployment: occm's default, `kubernetes` (with a note).
    #[arg(long, value_name = "NAME", conflicts_with = "occm_deployment")]
    pub cluster_name: Option<String>,
    /// occm's Deployment, DaemonSet or Pod as YAML or JSON (`kubectl -n kube-system get
    /// ds openstack-cloud-controller-manager -o yaml`), or a file of its flags: the
    /// --cluster-name occm runs with is read there (`$(CLUSTER_NAME)` from its env).
    #[arg(long, value_name = "FILE")]
    pub occm_deployment: Option<PathBuf>,
}

/// Runs `wasm-ccm import-occm-config`: the files written and the cluster name on
/// stdout (a note on stderr when it is occm's default), or the error on stderr.
pub fn main(args: Args) -> std::process::ExitCode {
    let imported = std::fs::read_to_string(&args.cloud_conf)
        .map_err(|source| ImportError::Io {
            path: args.cloud_conf.clone(),
            source,
        })
        .and_then(|text| convert(&text, &args.cloud_conf, &args.credentials_dir))
        .and_then(|imported| {
            let cluster = cluster_name(&args)?;
            let mut written = write(&imported, &args.out)?;
            written.push(write_cluster_name(&cluster, &args.out)?);
            Ok((written, cluster))
        });
    super::exit::exit_code(imported.map(|(written, cluster)| {
        for path in written {
            println!("wrote {}", path.display());
        }
        println!("cluster name \"{}\" ({})", cluster.name, cluster.source);
        if cluster.defaulted {
            eprintln!("note: {}", default_note(&cluster));
        }
    }))
}

/// occm's cluster name: `--cluster-name`, else the one `--occm-deployment`'s occm runs
/// with, else occm's default.
fn cluster_name(args: &Args) -> Result<Found, ImportError> {
    let found = match (&args.cluster_name, &args.occm_deployment) {
        (Some(name), _) => Found {
            name: name.clone(),
            source: "--cluster-name".into(),
            defaulted: false,
        },
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| ImportError::Io {
                path: path.clone(),
                source,
            })?;
            occm_deployment::cluster_name(&text).map_err(|reason| ImportError::Invalid {
                path: path.clone(),
                reason,
            })?
        }
        (None, None) => Found {
            name: OCCM_DEFAULT.into(),
            source: "occm's default: neither --cluster-name nor --occm-deployment given".into(),
            defaulted: true,
        },
    };
    if found.name.trim().is_empty() {
        return Err(ImportError::ClusterName(format!(
            "the cluster name ({}) is empty",
            found.source
        )));
    }
    Ok(found)
}

/// What is said when the cluster name is occm's default.
fn default_note(cluster: &Found) -> String {
    format!(
        "cluster-name.yaml says occm's default cluster name, \"{OCCM_DEFAULT}\" ({}). If occm \
         ran with another --cluster-name (CLUSTER_NAME in occm's manifests, cluster.name in \
         its chart), run again with --cluster-name NAME or --occm-deployment FILE: wasm-ccm \
         refuses by name the load balancers occm made under another cluster name.",
        cluster.source
    )
}

/// deploy/openstack's `cluster-name.yaml` for `cluster`: the Deployment's container
/// gets `CLUSTER_NAME`, which deployment-patch.yaml passes as
/// `--cluster-name=$(CLUSTER_NAME)` (each `$` doubled: kubelet expands the value).
fn cluster_name_patch(cluster: &Found) -> String {
    format!(
        "\
# The cluster's name, wasm-ccm's --cluster-name (deployment-patch.yaml passes
# --cluster-name=$(CLUSTER_NAME)): part of every load balancer's name and tags
# (kube_service_<cluster>_<namespace>_<name>). Coming from occm it must be occm's
# --cluster-name: a load balancer occm made under another one is refused by name.
# `wasm-ccm import-occm-config` writes this file; this name: {source}.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: wasm-ccm
  namespace: kube-system
spec:
  template:
    spec:
      containers:
        - name: wasm-ccm
          env:
            - name: CLUSTER_NAME
              value: {value}
",
        source = cluster.source.replace('\n', " "),
        value = quoted(&cluster.name.replace('$', "$$")),
    )
}

/// Writes `cluster-name.yaml` under `out`: its path.
fn write_cluster_name(cluster: &Found, out: &Path) -> Result<PathBuf, ImportError> {
    let path = out.join("cluster-name.yaml");
    let io = |source| ImportError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(out).map_err(io)?;
    std::fs::write(&path, cluster_name_patch(cluster)).map_err(io)?;
    Ok(path)
}

/// Why a `cloud.conf` cannot be converted.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The `cloud.conf` is not valid gcfg, or lacks or misuses a setting; or occm's
    /// Deployment (`--occm-deployment`) gives no cluster name.
    #[error("{path}: {reason}")]
    Invalid {
        /// The `cloud.conf`, or occm's Deployment.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The cluster name cannot be used.
    #[error("{0}")]
    ClusterName(String),
}

/// The converted files, as text (see [`write`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The provider's `cloud.conf`.
    pub cloud_conf: String,
    /// The provider policy.
    pub policy: String,
    /// Files for the credentials Secret: (name under `openstack/`, content).
    pub secrets: Vec<(String, Vec<u8>)>,
}

/// `[Global]` variables that move to the policy or the Secret (gcfg names: lowercase,
/// without `-` and `_`).
const MOVED: [&str; 30] = [
    "username",
    "userid",
    "password",
    "tenantid",
    "tenantname",
    "projectid",
    "projectname",
    "domainid",
    "domainname",
    "tenantdomainid",
    "tenantdomainname",
    "projectdomainid",
    "projectdomainname",
    "userdomainid",
    "userdomainname",
    "applicationcredentialid",
    "applicationcredentialname",
    "applicationcredentialsecret",
    "trustid",
    "trusteeid",
    "trusteepassword",
    "cafile",
    "certfile",
    "keyfile",
    "tlsinsecure",
    "useclouds",
    "cloudsfile",
    "cloud",
    "token",
    "authurlinternal",
];

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

/// YAML for a scalar (quoted: IDs may look like numbers).
fn quoted(value: &str) -> String {
    serde_json::Value::String(value.to_owned()).to_string()
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
    let request_timeout = match entries
        .iter()
        .rev()
        .find(|e| e.section == "metadata" && e.subsection.is_none() && e.name == "requesttimeout")
    {
        Some(timeout) => {
            let duration = wasm_ccm_host::policy::parse_duration(&timeout.value).map_err(|e| {
                invalid(format!(
                    "[Metadata] request-timeout `{}`: {e}",
                    timeout.value
                ))
            })?;
            if duration.is_zero() {
                OCCM_REQUEST_TIMEOUT
            } else {
                duration
            }
        }
        None => OCCM_REQUEST_TIMEOUT,
    };
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
            if MOVED.contains(&name.as_str()) {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// occm's timeout of one OpenStack request when `[Metadata] request-timeout` is unset
/// (`defaultTimeOut` in `pkg/openstack/openstack.go`).
const OCCM_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// deploy/openstack's `callTimeout`, the least an imported policy gets.
const DEPLOY_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The policy after the credential rule: deploy/openstack's limits but occm's request
/// timeout (and a call long enough for two such requests: the host starts a request
/// only while its whole timeout fits in the call), and the annotations the provider
/// records on its Services (occm's).
fn policy_tail(request_timeout: Duration) -> String {
    let call_timeout = (request_timeout * 2).max(DEPLOY_CALL_TIMEOUT);
    format!(
        "\
limits:
  # Octavia provisions asynchronously: a call waits for it up to this long, then the
  # controller calls again. A request starts only while its whole requestTimeout is
  # left in the call.
  callTimeout: {call}s
  # One request, as occm times it ([Metadata] request-timeout, else 60s).
  requestTimeout: {request}ms
  poolSize: 4
# The provider records its load balancer on the Service, as occm does
# (loadbalancer.openstack.org/load-balancer-id and load-balancer-address).
serviceAnnotations:
  - loadbalancer.openstack.org/
",
        call = call_timeout.as_secs_f64().ceil() as u64,
        request = request_timeout.as_millis(),
    )
}

/// The provider's requests (`guests/openstack/allowed-actions.txt`), the
/// `allowedActions` of its Keystone rule.
pub fn provider_actions() -> impl Iterator<Item = &'static str> {
    include_str!("../../../../guests/openstack/allowed-actions.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Writes `imported` under `out`: `cloud-config/cloud.conf`, `providers/openstack.yaml`
/// and `credentials/*` (owner-only: each file a key of the credentials Secret, made with
/// `kubectl create secret generic wasm-ccm-credentials --from-file=DIR/credentials/`).
/// The paths written.
pub fn write(imported: &Imported, out: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ImportError::Io { path, source }
    };
    let mut written = Vec::new();
    let mut put = |relative: &str, content: &[u8], secret: bool| -> Result<(), ImportError> {
        let path = out.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, content).map_err(io(&path))?;
        if secret {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(io(&path))?;
        }
        written.push(path);
        Ok(())
    };
    put(
        "cloud-config/cloud.conf",
        imported.cloud_conf.as_bytes(),
        false,
    )?;
    put(
        "providers/openstack.yaml",
        imported.policy.as_bytes(),
        false,
    )?;
    for (name, content) in &imported.secrets {
        put(&format!("credentials/{name}"), content, true)?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OCCM: &str = "[Global]\nauth-url = https://keystone.example.com:5000/v3\n\
        region = RegionOne\nusername = ccm\npassword = \"hunter2\"\n\
        tenant-name = k8s\ndomain-name = Default\n\
        [LoadBalancer]\nsubnet-id = s1\nfloating-network-id = f1\n";

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

    /// The imported policy runs the provider as deploy/openstack's does: the same
    /// limits, the same requests, the same annotations.
    #[test]
    fn the_imported_policy_matches_deploy_openstacks() {
        let imported = convert(
            OCCM,
            Path::new("/in/cloud.conf"),
            "/etc/wasm-ccm/credentials",
        )
        .unwrap();
        let path = Path::new("/etc/wasm-ccm/providers/openstack.yaml");
        let ours = wasm_ccm_host::policy::Policy::parse(&imported.policy, path).unwrap();
        let deploy = wasm_ccm_host::policy::Policy::parse(
            include_str!("../../../../deploy/openstack/providers/openstack.yaml"),
            path,
        )
        .unwrap();
        // The same, but for occm's request timeout (see the test below) and a call
        // long enough for two such requests.
        assert_eq!(
            wasm_ccm_host::policy::InstanceLimits {
                call_timeout: deploy.instance_limits.call_timeout,
                ..ours.instance_limits.clone()
            },
            deploy.instance_limits
        );
        assert_eq!(ours.instance_limits.call_timeout, Duration::from_secs(120));
        assert_eq!(
            wasm_ccm_host::policy::EgressLimits {
                request_timeout: deploy.egress_limits.request_timeout,
                ..ours.egress_limits.clone()
            },
            deploy.egress_limits
        );
        assert_eq!(ours.service_annotations, deploy.service_annotations);
        assert_eq!(
            ours.credentials[0].allowed_actions,
            deploy.credentials[0].allowed_actions
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

    /// occm times each request 60 s when `[Metadata] request-timeout` is unset or zero
    /// (`NewOpenStack`: `defaultTimeOut`, `provider.HTTPClient.Timeout`).
    #[test]
    fn the_request_timeout_is_occms_60s_by_default() {
        for text in [
            OCCM.to_owned(),
            format!("{OCCM}[Metadata]\nrequest-timeout = 0s\n"),
            format!("{OCCM}[Metadata]\nsearch-order = configDrive\n"),
        ] {
            let imported = convert(&text, Path::new("/in/cloud.conf"), "/c").unwrap();
            let policy =
                wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml"))
                    .unwrap();
            assert_eq!(
                policy.egress_limits.request_timeout,
                std::time::Duration::from_secs(60),
                "{text}"
            );
        }
    }

    /// The route fallback without Neutron's `extraroute-atomic` writes the router's
    /// whole route list back (`PUT <network>/v2.0/routers/<id>`, guests/openstack's
    /// routes.rs): the imported policy lets it, as deploy/openstack's does.
    #[test]
    fn the_imported_policy_allows_the_whole_router_update() {
        let imported = convert(OCCM, Path::new("/in/cloud.conf"), "/c").unwrap();
        let policy =
            wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml")).unwrap();
        let actions = policy.credentials[0].allowed_actions.as_ref().unwrap();
        let check = |method: http::Method, url: &str| {
            actions
                .check_request(&method, &url::Url::parse(url).unwrap())
                .is_ok()
        };
        let router = "https://neutron.example.com:9696/v2.0/routers/8d7e0a61";
        assert!(check(http::Method::PUT, router));
        assert!(check(http::Method::GET, router));
        assert!(check(
            http::Method::PUT,
            &format!("{router}/add_extraroutes")
        ));
        assert!(check(
            http::Method::PUT,
            &format!("{router}/remove_extraroutes")
        ));
        // Still only what the provider does: no router deleted, no interface added.
        assert!(!check(http::Method::DELETE, router));
        assert!(!check(
            http::Method::PUT,
            &format!("{router}/add_router_interface")
        ));
    }

    #[test]
    fn metadata_request_timeout_becomes_the_policys() {
        let text = format!("{OCCM}[Metadata]\nrequest-timeout = 45s\n");
        let imported = convert(&text, Path::new("/in/cloud.conf"), "/c").unwrap();
        let policy =
            wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml")).unwrap();
        assert_eq!(
            policy.egress_limits.request_timeout,
            std::time::Duration::from_secs(45)
        );
        assert_eq!(policy.instance_limits.call_timeout, Duration::from_secs(90));
        // A short request timeout keeps deploy/openstack's call.
        let text = format!("{OCCM}[Metadata]\nrequest-timeout = 1500ms\n");
        let imported = convert(&text, Path::new("/in/cloud.conf"), "/c").unwrap();
        let policy =
            wasm_ccm_host::policy::Policy::parse(&imported.policy, Path::new("/p/o.yaml")).unwrap();
        assert_eq!(
            policy.egress_limits.request_timeout,
            Duration::from_millis(1500)
        );
        assert_eq!(policy.instance_limits.call_timeout, Duration::from_secs(60));
        let err = convert(
            &format!("{OCCM}[Metadata]\nrequest-timeout = soon\n"),
            Path::new("/in/cloud.conf"),
            "/c",
        )
        .unwrap_err();
        assert!(err.to_string().contains("request-timeout"), "{err}");
    }

    /// `import-occm-config`'s arguments as a command line gives them.
    fn args(extra: &[&str]) -> Result<Args, clap::Error> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            args: Args,
        }
        let mut words = vec!["import-occm-config", "/in/cloud.conf", "--out", "/out"];
        words.extend_from_slice(extra);
        Command::try_parse_from(words).map(|c| c.args)
    }

    /// The value a cluster-name.yaml gives `CLUSTER_NAME` in the Deployment's container.
    fn cluster_name_in(patch: &str) -> serde_json::Value {
        let patch: serde_json::Value = serde_saphyr::from_str(patch).unwrap();
        assert_eq!(patch["kind"], "Deployment");
        assert_eq!(patch["metadata"]["name"], "wasm-ccm");
        let container = &patch["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], "wasm-ccm");
        assert_eq!(container["env"][0]["name"], "CLUSTER_NAME");
        container["env"][0]["value"].clone()
    }

    /// `--cluster-name`: occm's name in cluster-name.yaml (a `$` doubled: kubelet
    /// expands the value); with `--occm-deployment` too, refused; with neither, occm's
    /// default and a note saying how to give another; an empty one, refused.
    #[test]
    fn the_cluster_name_is_given_or_occms_default() {
        let found = cluster_name(&args(&["--cluster-name", "prod"]).unwrap()).unwrap();
        assert_eq!(found.name, "prod");
        assert!(!found.defaulted);
        assert_eq!(cluster_name_in(&cluster_name_patch(&found)), "prod");
        let dollar = Found {
            name: "a$(b)".into(),
            ..found
        };
        assert_eq!(cluster_name_in(&cluster_name_patch(&dollar)), "a$$(b)");
        assert!(args(&["--cluster-name", "prod", "--occm-deployment", "/d.yaml"]).is_err());
        let default = cluster_name(&args(&[]).unwrap()).unwrap();
        assert_eq!(default.name, "kubernetes");
        assert!(default.defaulted);
        let note = default_note(&default);
        assert!(
            note.contains("--cluster-name NAME") && note.contains("--occm-deployment FILE"),
            "{note}"
        );
        assert!(matches!(
            cluster_name(&args(&["--cluster-name", " "]).unwrap()),
            Err(ImportError::ClusterName(_))
        ));
    }

    /// `--occm-deployment`: the name occm's DaemonSet runs with (`$(CLUSTER_NAME)` from
    /// its env), written where deploy/openstack reads it; a file without occm is named
    /// in the error.
    #[test]
    fn the_cluster_name_is_read_from_occms_daemonset() {
        let dir = std::env::temp_dir().join(format!("occm-deployment-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let daemonset = dir.join("occm.yaml");
        std::fs::write(
            &daemonset,
            r#"kind: DaemonSet
metadata: {name: occm, namespace: kube-system}
spec:
  template:
    spec:
      containers:
        - name: occm
          image: registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0
          args: ["/bin/openstack-cloud-controller-manager", "--cluster-name=$(CLUSTER_NAME)"]
          env: [{name: CLUSTER_NAME, value: prod}]
"#,
        )
        .unwrap();
        let given = args(&["--occm-deployment", daemonset.to_str().unwrap()]).unwrap();
        let found = cluster_name(&given).unwrap();
        assert_eq!(found.name, "prod");
        assert!(!found.defaulted);
        assert!(
            found.source.contains("DaemonSet kube-system/occm"),
            "{}",
            found.source
        );
        let out = dir.join("out");
        let written = write_cluster_name(&found, &out).unwrap();
        assert_eq!(written, out.join("cluster-name.yaml"));
        let text = std::fs::read_to_string(&written).unwrap();
        assert_eq!(cluster_name_in(&text), "prod");
        std::fs::write(&daemonset, "kind: ConfigMap\n").unwrap();
        let err = cluster_name(&given).unwrap_err().to_string();
        assert!(
            err.contains("occm.yaml") && err.contains("--cluster-name"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// deploy/openstack's cluster-name.yaml is what the import writes for occm's
    /// default, and its Deployment passes it as `--cluster-name`.
    #[test]
    fn deploy_openstacks_cluster_name_is_the_imports_default() {
        let deploy: serde_json::Value = serde_saphyr::from_str(include_str!(
            "../../../../deploy/openstack/cluster-name.yaml"
        ))
        .unwrap();
        let default = cluster_name(&args(&[]).unwrap()).unwrap();
        let imported: serde_json::Value =
            serde_saphyr::from_str(&cluster_name_patch(&default)).unwrap();
        assert_eq!(deploy, imported);
        let patch = include_str!("../../../../deploy/openstack/deployment-patch.yaml");
        assert!(
            patch.contains("- --cluster-name=$(CLUSTER_NAME)\n"),
            "{patch}"
        );
        let kustomization = include_str!("../../../../deploy/openstack/kustomization.yaml");
        assert!(kustomization.contains("- path: cluster-name.yaml\n"));
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
