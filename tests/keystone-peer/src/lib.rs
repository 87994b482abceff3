//! Keystone, OpenStack's identity service, as a peer for the tests and the playground:
//! the real service (PyPI `keystone`, installed by `scripts/ensure-keystone.sh` into
//! the tools venv), set up offline on sqlite with fernet tokens and served by gunicorn
//! on 127.0.0.1, with an admin client for what the tests need: projects, users, roles,
//! application credentials, the service catalog, token validation and revocation.
//!
//! Setting up a database takes ~10 s, so it is done once per version into a template
//! under `target/tmp/` (`keystone-manage db_sync`, `fernet_setup`, `credential_setup`,
//! `bootstrap`); each [`Keystone`] copies the template and starts its own server (~3 s
//! to the first token).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The Keystone release `scripts/ensure-keystone.sh` installs.
pub const VERSION: &str = "30.0.0";
/// The bootstrap administrator's password.
pub const ADMIN_PASSWORD: &str = "keystone-peer-admin";
/// The region every endpoint is in.
pub const REGION: &str = "RegionOne";

/// A running Keystone, stopped (and its directory removed) on drop.
pub struct Keystone {
    child: tokio::process::Child,
    dir: PathBuf,
    /// The port on 127.0.0.1.
    pub port: u16,
    client: reqwest::Client,
    admin: tokio::sync::Mutex<Option<(String, Instant)>>,
    token_lifetime: Duration,
}

impl Drop for Keystone {
    fn drop(&mut self) {
        // SIGTERM: gunicorn's master stops its worker too (SIGKILL would orphan it).
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on the child we spawned; no memory is involved.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Keystone's settings for one server.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long tokens live (`[token] expiration`).
    pub token_lifetime: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            token_lifetime: Duration::from_secs(3600),
        }
    }
}

/// The tools venv holding `keystone-manage` and `gunicorn`: `$KEYSTONE_VENV`, else the
/// workspace's `target/tools-venv`.
pub fn venv() -> PathBuf {
    std::env::var_os("KEYSTONE_VENV")
        .map(Into::into)
        .unwrap_or_else(|| workspace_target().join("tools-venv"))
}

fn workspace_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

/// `keystone.conf` for a server whose files are in `dir`.
fn config(dir: &Path, settings: &Settings) -> String {
    let dir = dir.display();
    format!(
        "[DEFAULT]\nuse_stderr = true\n\
         [database]\nconnection = sqlite:///{dir}/keystone.db\n\
         [token]\nprovider = fernet\nexpiration = {lifetime}\n\
         [fernet_tokens]\nkey_repository = {dir}/fernet\n\
         [fernet_receipts]\nkey_repository = {dir}/fernet\n\
         [credential]\nkey_repository = {dir}/credential\n\
         [identity]\npassword_hash_rounds = 4\n\
         [cache]\nenabled = false\n",
        lifetime = settings.token_lifetime.as_secs().max(1),
    )
}

/// The WSGI module gunicorn serves: Keystone's application, with gunicorn's own
/// arguments cleared so oslo.config does not read them as its own.
const WSGI_MODULE: &str = "import sys\nsys.argv = sys.argv[:1]\nfrom keystone.wsgi.api import application  # noqa: E402,F401\n";

fn run(program: &Path, args: &[&str]) -> Result<(), String> {
    let output = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("running {}: {e}", program.display()))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{} {} failed: {}",
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join(" | ")
    ))
}

/// The set-up database and keys every server starts from, made once per version.
fn template() -> Result<PathBuf, String> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let template = workspace_target().join(format!("tmp/keystone-{VERSION}-template"));
    if template.join("keystone.db").exists() {
        return Ok(template);
    }
    let manage = venv().join("bin/keystone-manage");
    if !manage.exists() {
        return Err(format!(
            "{} is missing: install Keystone with `source scripts/ensure-keystone.sh` (scripts/test.sh does), or set KEYSTONE_VENV",
            manage.display()
        ));
    }
    let work = workspace_target().join(format!("tmp/keystone-{VERSION}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    for sub in ["fernet", "credential"] {
        std::fs::create_dir_all(work.join(sub)).map_err(|e| e.to_string())?;
    }
    let conf = work.join("keystone.conf");
    std::fs::write(&conf, config(&work, &Settings::default())).map_err(|e| e.to_string())?;
    let conf = conf.to_str().expect("UTF-8 path");
    // The keys belong to whoever runs the tests (the default owner, `keystone`, need
    // not exist).
    let id = |flag: &str| {
        std::process::Command::new("id")
            .arg(flag)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .map_err(|e| format!("id {flag}: {e}"))
    };
    let (user, group) = (id("-un")?, id("-gn")?);
    run(&manage, &["--config-file", conf, "db_sync"])?;
    for setup in ["fernet_setup", "credential_setup"] {
        let owner = ["--keystone-user", &user, "--keystone-group", &group];
        run(
            &manage,
            &[&["--config-file", conf, setup][..], &owner].concat(),
        )?;
    }
    run(
        &manage,
        &[
            "--config-file",
            conf,
            "bootstrap",
            "--bootstrap-password",
            ADMIN_PASSWORD,
            "--bootstrap-region-id",
            REGION,
            // Set to the server's real address when each one starts.
            "--bootstrap-public-url",
            "http://127.0.0.1:1/v3",
        ],
    )?;
    std::fs::remove_file(work.join("keystone.conf")).map_err(|e| e.to_string())?;
    std::fs::rename(&work, &template).or_else(|e| {
        // Another process made it meanwhile.
        if template.join("keystone.db").exists() {
            let _ = std::fs::remove_dir_all(&work);
            Ok(())
        } else {
            Err(format!("moving the Keystone template into place: {e}"))
        }
    })?;
    Ok(template)
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn free_port() -> Result<u16, String> {
    loopback_port::reserve().map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

impl Keystone {
    /// Starts a Keystone with default settings; panics when it cannot (a test peer).
    pub async fn start() -> Self {
        Self::start_with(Settings::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a Keystone from the template on a free port of 127.0.0.1 and waits until
    /// it issues tokens.
    pub async fn start_with(settings: Settings) -> Result<Self, String> {
        let template = tokio::task::spawn_blocking(template)
            .await
            .map_err(|e| e.to_string())??;
        let port = free_port()?;
        let dir = workspace_target().join(format!(
            "tmp/keystone-{}-{port}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        copy_dir(&template, &dir).map_err(|e| format!("copying the Keystone template: {e}"))?;
        std::fs::write(dir.join("keystone.conf"), config(&dir, &settings))
            .map_err(|e| e.to_string())?;
        std::fs::write(dir.join("keystone_peer_wsgi.py"), WSGI_MODULE)
            .map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("keystone.log")).map_err(|e| e.to_string())?;
        let mut command = tokio::process::Command::new(venv().join("bin/gunicorn"));
        // If this process dies without dropping the Keystone (a playground killed),
        // gunicorn is told to stop all the same.
        // SAFETY: prctl(2) only, between fork and exec: async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = command
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(["--workers", "1", "--threads", "8", "--no-control-socket"])
            .args(["--graceful-timeout", "2"])
            .arg("--chdir")
            .arg(&dir)
            .arg("keystone_peer_wsgi:application")
            .env("PYTHONPATH", &dir)
            .env("OS_KEYSTONE_CONFIG_FILES", dir.join("keystone.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting gunicorn: {e}"))?;
        rustls_provider();
        let keystone = Self {
            child,
            dir,
            port,
            // No idle connections kept: gunicorn closes an idle one after 2 s, and a
            // request sent on it just then fails in transit.
            client: reqwest::Client::builder()
                .no_proxy()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap(),
            admin: tokio::sync::Mutex::new(None),
            token_lifetime: settings.token_lifetime,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while keystone.admin_token().await.is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "Keystone did not issue a token within 90 s; its log: {}",
                    keystone.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The bootstrap's identity endpoint, at this server's address.
        let endpoints = keystone.admin_get("/v3/endpoints?interface=public").await?;
        for endpoint in endpoints["endpoints"].as_array().into_iter().flatten() {
            let id = endpoint["id"].as_str().unwrap_or_default();
            keystone
                .admin(
                    reqwest::Method::PATCH,
                    &format!("/v3/endpoints/{id}"),
                    Some(json!({"endpoint": {"url": keystone.auth_url()}})),
                )
                .await?;
        }
        Ok(keystone)
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("keystone.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The identity API's v3 root, as `cloud.conf`'s `auth-url`.
    pub fn auth_url(&self) -> String {
        format!("{}/v3", self.url())
    }

    /// Logs in with `body` (`{"auth": ...}`): the token and the token body.
    pub async fn login(&self, body: Value) -> Result<(String, Value), String> {
        let response = self
            .client
            .post(format!("{}/auth/tokens", self.auth_url()))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let token = response
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body: Value = serde_json::from_str(&response.text().await.map_err(|e| e.to_string())?)
            .unwrap_or(Value::Null);
        match token {
            Some(token) if status.is_success() => Ok((token, body)),
            _ => Err(format!("login: HTTP {status}: {body}")),
        }
    }

    /// A project-scoped token of `user` (in the default domain) with `password`.
    pub async fn password_login(
        &self,
        user: &str,
        password: &str,
        project: &str,
    ) -> Result<String, String> {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}},
        }});
        Ok(self.login(body).await?.0)
    }

    /// The administrator's token, used for half its life counted from before the login
    /// was asked for (Keystone, loaded, may answer seconds later).
    pub async fn admin_token(&self) -> Result<String, String> {
        let mut admin = self.admin.lock().await;
        if let Some((token, asked)) = admin.as_ref()
            && asked.elapsed() < (self.token_lifetime / 2).min(Duration::from_secs(60))
        {
            return Ok(token.clone());
        }
        let asked = Instant::now();
        let token = self
            .password_login("admin", ADMIN_PASSWORD, "admin")
            .await?;
        *admin = Some((token.clone(), asked));
        Ok(token)
    }

    /// Forgets the administrator's token, which Keystone refused: the next
    /// [`Self::admin_token`] logs in again.
    async fn drop_admin_token(&self, refused: &str) {
        let mut admin = self.admin.lock().await;
        if admin.as_ref().is_some_and(|(token, _)| token == refused) {
            *admin = None;
        }
    }

    /// An admin API call; the answer's JSON (null for no content).
    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let token = self.admin_token().await?;
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.url()))
            .header("x-auth-token", token);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{method} {path}: HTTP {status}: {text}"));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn admin_get(&self, path: &str) -> Result<Value, String> {
        self.admin(reqwest::Method::GET, path, None).await
    }

    /// Creates a project in the default domain; its ID.
    pub async fn create_project(&self, name: &str) -> String {
        let body = json!({"project": {"name": name, "domain_id": "default"}});
        let created = self
            .admin(reqwest::Method::POST, "/v3/projects", Some(body))
            .await
            .unwrap();
        created["project"]["id"].as_str().unwrap().to_owned()
    }

    /// Creates a user in the default domain with the `member` role on `project`; its ID.
    pub async fn create_user(&self, name: &str, password: &str, project: &str) -> String {
        let body = json!({"user": {"name": name, "password": password, "domain_id": "default",
                                   "default_project_id": project}});
        let created = self
            .admin(reqwest::Method::POST, "/v3/users", Some(body))
            .await
            .unwrap();
        let user = created["user"]["id"].as_str().unwrap().to_owned();
        let roles = self.admin_get("/v3/roles?name=member").await.unwrap();
        let role = roles["roles"][0]["id"].as_str().unwrap();
        self.admin(
            reqwest::Method::PUT,
            &format!("/v3/projects/{project}/users/{user}/roles/{role}"),
            None,
        )
        .await
        .unwrap();
        user
    }

    /// Creates an application credential of `user` (as the user does, with a token of
    /// theirs): its ID and secret.
    pub async fn create_application_credential(
        &self,
        user: &str,
        user_id: &str,
        password: &str,
        project: &str,
        name: &str,
    ) -> (String, String) {
        let token = self.password_login(user, password, project).await.unwrap();
        let response = self
            .client
            .post(format!(
                "{}/users/{user_id}/application_credentials",
                self.auth_url()
            ))
            .header("x-auth-token", token)
            .header("content-type", "application/json")
            .body(json!({"application_credential": {"name": name}}).to_string())
            .send()
            .await
            .unwrap();
        let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        let credential = &body["application_credential"];
        (
            credential["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{body}"))
                .to_owned(),
            credential["secret"].as_str().unwrap().to_owned(),
        )
    }

    /// Creates a trust from `trustor` (logging in with its password, scoped to
    /// `project`, as Magnum does for a cluster) to `trustee_id`, delegating the
    /// `member` role on the project without impersonation: the trust's ID.
    pub async fn create_trust(
        &self,
        trustor: &str,
        trustor_id: &str,
        password: &str,
        project: &str,
        project_id: &str,
        trustee_id: &str,
    ) -> String {
        let token = self
            .password_login(trustor, password, project)
            .await
            .unwrap();
        let body = json!({"trust": {
            "trustor_user_id": trustor_id,
            "trustee_user_id": trustee_id,
            "project_id": project_id,
            "impersonation": false,
            "roles": [{"name": "member"}],
        }});
        let response = self
            .client
            .post(format!("{}/OS-TRUST/trusts", self.auth_url()))
            .header("x-auth-token", token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap_or_default();
        body["trust"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("creating a trust: HTTP {status}: {body}"))
            .to_owned()
    }

    /// What Keystone says of `token` (`GET /v3/auth/tokens`): its `token` object.
    pub async fn token_body(&self, token: &str) -> Result<Value, String> {
        match self.subject(token).await? {
            (status, text) if (200..300).contains(&status) => {
                let body: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
                Ok(body["token"].clone())
            }
            (status, text) => Err(format!("GET /v3/auth/tokens: HTTP {status}: {text}")),
        }
    }

    /// Deletes an application credential (tokens it issued stop validating).
    pub async fn delete_application_credential(&self, user_id: &str, id: &str) {
        self.admin(
            reqwest::Method::DELETE,
            &format!("/v3/users/{user_id}/application_credentials/{id}"),
            None,
        )
        .await
        .unwrap();
    }

    /// Registers a service of `kind` (e.g. `compute`) with an endpoint at `url` for
    /// `interface` in [`REGION`].
    pub async fn register_endpoint(&self, kind: &str, name: &str, interface: &str, url: &str) {
        let services = self
            .admin_get(&format!("/v3/services?type={kind}"))
            .await
            .unwrap();
        let service = match services["services"][0]["id"].as_str() {
            Some(id) => id.to_owned(),
            None => {
                let body = json!({"service": {"type": kind, "name": name}});
                let created = self
                    .admin(reqwest::Method::POST, "/v3/services", Some(body))
                    .await
                    .unwrap();
                created["service"]["id"].as_str().unwrap().to_owned()
            }
        };
        let body = json!({"endpoint": {"service_id": service, "interface": interface,
                                       "url": url, "region_id": REGION}});
        self.admin(reqwest::Method::POST, "/v3/endpoints", Some(body))
            .await
            .unwrap();
    }

    /// Whether Keystone accepts `token` (`GET /v3/auth/tokens`, as services validate).
    ///
    /// Keystone answers 404 for a subject token it does not know (or that expired or
    /// was revoked): `false`. A 401 refuses the administrator's token instead (it
    /// expired while a loaded machine delayed this request): that token is dropped and
    /// the validation asked again, once, with a new one.
    pub async fn validate(&self, token: &str) -> Result<bool, String> {
        Ok((200..300).contains(&self.subject(token).await?.0))
    }

    /// `GET /v3/auth/tokens` for `token` with the administrator's token: the status and
    /// body. A 401 refuses the administrator's token (it expired while a loaded machine
    /// delayed this request): that token is dropped and the request sent again, once,
    /// with a new one.
    async fn subject(&self, token: &str) -> Result<(u16, String), String> {
        for _ in 0..2 {
            let admin = self.admin_token().await?;
            let response = self
                .client
                .get(format!("{}/auth/tokens", self.auth_url()))
                .header("x-auth-token", &admin)
                .header("x-subject-token", token)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            match response.status().as_u16() {
                401 => self.drop_admin_token(&admin).await,
                status => return Ok((status, response.text().await.map_err(|e| e.to_string())?)),
            }
        }
        Err("Keystone refused two administrator tokens in a row".into())
    }

    /// Revokes `token` (`DELETE /v3/auth/tokens`).
    pub async fn revoke(&self, token: &str) {
        let admin = self.admin_token().await.unwrap();
        let response = self
            .client
            .delete(format!("{}/auth/tokens", self.auth_url()))
            .header("x-auth-token", admin)
            .header("x-subject-token", token)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
    }
}

/// reqwest is built without a default TLS provider (as the host's is).
fn rustls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
