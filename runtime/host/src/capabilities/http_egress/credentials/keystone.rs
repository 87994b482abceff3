//! Keystone v3 tokens, obtained and kept by the host.
//!
//! The host logs in (`POST <authUrl>/auth/tokens`) with the rule's application
//! credential or password, read from its Secret file at each login; takes the token
//! from `X-Subject-Token` and the service catalog from the body; and adds the token as
//! `X-Auth-Token` to requests for the catalog's endpoints the rule allows. It logs in
//! again shortly before `expires_at`, and when an endpoint answers 401 to a token
//! Keystone no longer accepts (once per request: a second 401 goes to the provider).
//! A 401 is not taken on trust: the host asks Keystone whether its token is still
//! valid (`GET /auth/tokens`, at most once per [`VERIFY_INTERVAL`]) and logs in again
//! only when it is not, at most once per [`RELOGIN_FLOOR`], so a provider that makes
//! an endpoint answer 401 (an invalid `X-Service-Token`, which the guest may not set
//! anyway) cannot make the host log in over and over. One login runs at a time; a
//! failed one is held for a few seconds, so a wrong secret cannot cause a login storm,
//! while a token that is still valid keeps serving. The token and the secret never enter
//! the guest, the logs or the metrics; `X-Subject-Token` is removed from every
//! answer the provider gets.
//!
//! Sessions outlive policy reloads ([`Sessions`]): a hot swap that keeps the rule
//! keeps its token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::HeaderValue;
use serde::Deserialize;
use serde_json::{Value, json};

use super::login::{FAILURE_HOLD, read_capped, refresh_time, transport_reason};
use super::{Confinement, CredentialError};
use crate::metrics::{LoginLabels, ProviderLabel, ProviderMetrics};
use crate::policy::keystone::{
    IDENTITY_SERVICE, Identity, KeystoneCredential, KeystoneMethod, Within,
};

/// The header the token travels in.
pub const TOKEN_HEADER: &str = "x-auth-token";
/// The header Keystone returns a token in; removed from every answer to a provider.
pub const SUBJECT_TOKEN_HEADER: &str = "x-subject-token";

/// Headers Keystone's middleware (`keystonemiddleware.auth_token`) reads as
/// credentials, or sets for the service behind it once it has validated a token: a
/// guest setting one on a request the host adds a token to is refused (an invalid
/// `X-Service-Token` alone makes the service answer 401).
const CREDENTIAL_HEADERS: [&str; 16] = [
    TOKEN_HEADER,
    SUBJECT_TOKEN_HEADER,
    "x-service-token",
    "x-storage-token",
    "x-identity-status",
    "x-roles",
    "x-role",
    "x-service-catalog",
    "x-is-admin-project",
    "x-system-scope",
    "openstack-system-scope",
    "x-tenant",
    "x-tenant-id",
    "x-tenant-name",
    "x-user",
    "x-trust-id",
];
/// Prefixes of the identity headers the middleware sets (`X-User-Id`,
/// `X-Project-Domain-Name`, `X-Service-Roles`, ...), refused likewise.
const CREDENTIAL_HEADER_PREFIXES: [&str; 6] = [
    "x-auth-",
    "x-service-",
    "x-identity-",
    "x-user-",
    "x-project-",
    "x-domain-",
];

/// Whether a guest may not set `name` on a request that gets a Keystone token.
pub fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_HEADERS.contains(&name.as_str())
        || CREDENTIAL_HEADER_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// The method override a request to an OpenStack service carries, if any: `_method`
/// (any case) in the query, or in a body the service would read as a form (webob parses
/// a body without content type, a form or multipart for `request.params`, where pecan
/// looks for `_method`).
pub fn method_override(
    url: &url::Url,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Option<super::Denial> {
    let is_override = |(key, _): &(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)| {
        key.eq_ignore_ascii_case("_method")
    };
    if url.query_pairs().any(|pair| is_override(&pair)) {
        return Some(super::Denial::MethodOverride(
            "a `_method` query parameter".into(),
        ));
    }
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match content_type.as_str() {
        "multipart/form-data" => Some(super::Denial::MethodOverride(
            "a multipart body (read for `_method`)".into(),
        )),
        "" | "application/x-www-form-urlencoded"
            if url::form_urlencoded::parse(body).any(|pair| is_override(&pair)) =>
        {
            Some(super::Denial::MethodOverride(
                "a `_method` form field".into(),
            ))
        }
        _ => None,
    }
}

/// A 401 makes the host ask Keystone about its token at most this often.
pub const VERIFY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// Logins caused by a 401 (the token revoked) are at least this far apart.
pub const RELOGIN_FLOOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest a login may take.
const LOGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The largest token response read (a big cloud's catalog is some hundred KiB).
const MAX_TOKEN_RESPONSE_BYTES: usize = 4 << 20;

/// Why no token is available. Never contains a secret or a token.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeystoneError {
    /// The secret file could not be read.
    #[error("{0}")]
    File(String),
    /// Keystone refused the login, or could not be reached.
    #[error("Keystone login at {auth_url} failed: {reason}")]
    Login {
        /// The identity endpoint.
        auth_url: String,
        /// Keystone's status and message, or the transport error.
        reason: String,
    },
}

impl From<CredentialError> for KeystoneError {
    fn from(e: CredentialError) -> Self {
        KeystoneError::File(e.to_string())
    }
}

/// A token and what came with it.
pub struct Token {
    /// `X-Auth-Token`'s value (marked sensitive).
    pub value: HeaderValue,
    expires_at: SystemTime,
    refresh_at: SystemTime,
    /// The catalog endpoints the rule allows.
    endpoints: Vec<Endpoint>,
    /// Every identity endpoint of the catalog (never given the token by a match).
    identity: Vec<url::Url>,
    /// `GET <authUrl>/auth/catalog`'s answer.
    catalog_body: Bytes,
    /// When Keystone last said the token is valid, after an endpoint answered 401.
    verified: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("expires_at", &self.expires_at)
            .field("endpoints", &self.endpoints.len())
            .finish_non_exhaustive()
    }
}

/// An endpoint of the catalog the token goes to.
#[derive(Debug, Clone)]
struct Endpoint {
    /// The service type, e.g. `compute`.
    service: String,
    url: url::Url,
}

/// What the catalog says about a request's URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogMatch {
    /// An allowed endpoint: its URL (the metric label).
    Endpoint(String),
    /// Under an identity endpoint, or the rule's `authUrl`: refused.
    Identity,
    /// Not in the catalog (or not allowed by the rule).
    None,
}

/// One rule's login and its current token.
pub struct KeystoneSession {
    credential: KeystoneCredential,
    confinement: Arc<Confinement>,
    current: RwLock<Option<Arc<Token>>>,
    login: tokio::sync::Mutex<Option<(Instant, KeystoneError)>>,
    /// When a 401 last made the host log in.
    forced: Mutex<Option<Instant>>,
    provider: Arc<ProviderLabel>,
    metrics: Arc<ProviderMetrics>,
}

impl std::fmt::Debug for KeystoneSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeystoneSession")
            .field("auth_url", &self.credential.auth_url.as_str())
            .finish_non_exhaustive()
    }
}

/// A provider's Keystone sessions by rule, kept across policy reloads.
pub struct Sessions {
    by_rule: Mutex<HashMap<KeystoneCredential, Arc<KeystoneSession>>>,
    provider: Arc<ProviderLabel>,
    metrics: Arc<ProviderMetrics>,
}

impl Sessions {
    /// No sessions yet, for `provider`.
    pub fn new(provider: Arc<ProviderLabel>, metrics: Arc<ProviderMetrics>) -> Self {
        Self {
            by_rule: Mutex::new(HashMap::new()),
            provider,
            metrics,
        }
    }

    /// The session of `credential`: the existing one (and its token) if the rule did
    /// not change.
    pub fn session(
        &self,
        credential: &KeystoneCredential,
        confinement: &Arc<Confinement>,
    ) -> Arc<KeystoneSession> {
        let mut by_rule = self.by_rule.lock().unwrap_or_else(|p| p.into_inner());
        by_rule
            .entry(credential.clone())
            .or_insert_with(|| {
                Arc::new(KeystoneSession {
                    credential: credential.clone(),
                    confinement: confinement.clone(),
                    current: RwLock::new(None),
                    login: tokio::sync::Mutex::new(None),
                    forced: Mutex::new(None),
                    provider: self.provider.clone(),
                    metrics: self.metrics.clone(),
                })
            })
            .clone()
    }

    /// Forgets the sessions of rules no longer in `keep`.
    pub fn retain(&self, keep: &[&KeystoneCredential]) {
        let mut by_rule = self.by_rule.lock().unwrap_or_else(|p| p.into_inner());
        by_rule.retain(|rule, _| keep.contains(&rule));
    }
}

impl KeystoneSession {
    /// The rule.
    pub fn credential(&self) -> &KeystoneCredential {
        &self.credential
    }

    /// Whether the host has logged in yet (and so knows the catalog).
    pub fn has_catalog(&self) -> bool {
        self.current_token().is_some()
    }

    fn current_token(&self) -> Option<Arc<Token>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Where `url` falls in the last login's catalog.
    pub fn classify(&self, url: &url::Url) -> CatalogMatch {
        if under(&self.credential.auth_url, url) {
            return CatalogMatch::Identity;
        }
        let Some(token) = self.current_token() else {
            return CatalogMatch::None;
        };
        if token.identity.iter().any(|id| under(id, url)) {
            return CatalogMatch::Identity;
        }
        match token.endpoints.iter().find(|e| under(&e.url, url)) {
            Some(endpoint) => CatalogMatch::Endpoint(format!(
                "{} ({})",
                endpoint.url.as_str().trim_end_matches('/'),
                endpoint.service
            )),
            None => CatalogMatch::None,
        }
    }

    /// A valid token: the current one, or a new login's.
    pub async fn token(&self, client: &reqwest::Client) -> Result<Arc<Token>, KeystoneError> {
        if let Some(token) = self.current_token()
            && SystemTime::now() < token.refresh_at
        {
            return Ok(token);
        }
        self.login(client, None).await
    }

    /// A token other than `rejected`, which an endpoint answered 401 to: the one
    /// another request logged in for meanwhile, or a new login's when Keystone says
    /// `rejected` is no longer valid. `rejected` itself (so the 401 goes to the
    /// provider) when Keystone still accepts it, when it was checked within
    /// [`VERIFY_INTERVAL`], or when a 401 caused a login within [`RELOGIN_FLOOR`].
    pub async fn replace(
        &self,
        rejected: &Arc<Token>,
        client: &reqwest::Client,
    ) -> Result<Arc<Token>, KeystoneError> {
        if let Some(token) = self.current_token()
            && !Arc::ptr_eq(&token, rejected)
        {
            return Ok(token);
        }
        let recently = |at: &Mutex<Option<Instant>>, within| {
            at.lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|at| at.elapsed() < within)
        };
        if recently(&rejected.verified, VERIFY_INTERVAL) || recently(&self.forced, RELOGIN_FLOOR) {
            return Ok(rejected.clone());
        }
        match self.still_valid(rejected, client).await {
            Some(true) | None => {
                *rejected.verified.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                tracing::debug!(provider = %self.provider, "an endpoint answered 401 to a token Keystone accepts; not logging in again");
                Ok(rejected.clone())
            }
            Some(false) => {
                *self.forced.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                self.login(client, Some(rejected)).await
            }
        }
    }

    /// Whether Keystone still accepts `token` (`GET <authUrl>/auth/tokens`, the token
    /// validating itself); `None` when Keystone could not say.
    async fn still_valid(&self, token: &Token, client: &reqwest::Client) -> Option<bool> {
        let answer = client
            .get(format!("{}/auth/tokens", self.credential.auth_url))
            .header(TOKEN_HEADER, token.value.clone())
            .header(SUBJECT_TOKEN_HEADER, token.value.clone())
            .header(http::header::ACCEPT, "application/json")
            .timeout(LOGIN_TIMEOUT)
            .send()
            .await
            .ok()?;
        match answer.status().as_u16() {
            200 => Some(true),
            401 | 404 => Some(false),
            _ => None,
        }
    }

    /// The catalog answer (`GET <authUrl>/auth/catalog`), logging in if needed.
    pub async fn catalog(&self, client: &reqwest::Client) -> Result<Bytes, KeystoneError> {
        Ok(self.token(client).await?.catalog_body.clone())
    }

    /// Logs in, one login at a time. With `rejected`, a token other than it is enough;
    /// without, a token not due for renewal.
    async fn login(
        &self,
        client: &reqwest::Client,
        rejected: Option<&Arc<Token>>,
    ) -> Result<Arc<Token>, KeystoneError> {
        let mut failed = self.login.lock().await;
        // Another request may have logged in while this one waited.
        if let Some(token) = self.current_token() {
            let fresh = match rejected {
                Some(rejected) => !Arc::ptr_eq(&token, rejected),
                None => SystemTime::now() < token.refresh_at,
            };
            if fresh {
                return Ok(token);
            }
        }
        let usable = || {
            self.current_token().filter(|t| {
                SystemTime::now() < t.expires_at && rejected.is_none_or(|r| !Arc::ptr_eq(t, r))
            })
        };
        if let Some((at, error)) = failed.as_ref()
            && at.elapsed() < FAILURE_HOLD
        {
            return usable().ok_or_else(|| error.clone());
        }
        let result = self.request_token(client).await;
        self.metrics
            .credential_logins
            .get_or_create(&LoginLabels {
                provider: self.provider.to_string(),
                kind: "keystone".into(),
                result: if result.is_ok() { "success" } else { "failure" }.into(),
            })
            .inc();
        match result {
            Ok(token) => {
                let token = Arc::new(token);
                tracing::info!(
                    provider = %self.provider,
                    auth_url = %self.credential.auth_url,
                    endpoints = token.endpoints.len(),
                    "logged in to Keystone"
                );
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
                *failed = None;
                Ok(token)
            }
            Err(error) => {
                *failed = Some((Instant::now(), error.clone()));
                if rejected.is_some() {
                    // The endpoint refused it: no use sending it again.
                    self.current
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .take_if(|t| rejected.is_some_and(|r| Arc::ptr_eq(t, r)));
                }
                if let Some(token) = usable() {
                    tracing::warn!(provider = %self.provider, %error, "renewing the Keystone token failed; using the current one until it expires");
                    return Ok(token);
                }
                tracing::warn!(provider = %self.provider, %error, "Keystone login failed");
                Err(error)
            }
        }
    }

    /// One `POST <authUrl>/auth/tokens`.
    async fn request_token(&self, client: &reqwest::Client) -> Result<Token, KeystoneError> {
        let secret = self.confinement.read_trimmed(self.credential.files()[0])?;
        let body = login_body(&self.credential.method, &secret);
        let fail = |reason: String| KeystoneError::Login {
            auth_url: self.credential.auth_url.to_string(),
            reason,
        };
        let requested = SystemTime::now();
        let response = client
            .post(format!("{}/auth/tokens", self.credential.auth_url))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(body.to_string())
            .timeout(LOGIN_TIMEOUT)
            .send()
            .await
            .map_err(|e| fail(transport_reason(&e)))?;
        let status = response.status();
        let subject = response.headers().get(SUBJECT_TOKEN_HEADER).cloned();
        let body = read_capped(response, MAX_TOKEN_RESPONSE_BYTES)
            .await
            .map_err(&fail)?;
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}: {}", error_message(&body))));
        }
        let mut value = subject
            .filter(|v| !v.is_empty())
            .ok_or_else(|| fail("the answer has no X-Subject-Token".into()))?;
        value.set_sensitive(true);
        let parsed: TokenBody = serde_json::from_slice(&body)
            .map_err(|e| fail(format!("the answer is not a Keystone v3 token: {e}")))?;
        let expires_at = aws_smithy_types::DateTime::from_str(
            &parsed.token.expires_at,
            aws_smithy_types::date_time::Format::DateTime,
        )
        .ok()
        .and_then(|t| SystemTime::try_from(t).ok())
        .ok_or_else(|| {
            fail(format!(
                "expires_at `{}` is not a date-time",
                parsed.token.expires_at
            ))
        })?;
        let catalog = parsed.token.catalog.unwrap_or_default();
        let (endpoints, identity) = self.allowed(&catalog);
        let catalog_body = json!({
            "catalog": catalog,
            "links": {"self": self.credential.catalog_url(), "previous": null, "next": null},
        })
        .to_string()
        .into();
        Ok(Token {
            value,
            expires_at,
            refresh_at: refresh_time(requested, expires_at),
            endpoints,
            identity,
            catalog_body,
            verified: Mutex::new(None),
        })
    }

    /// The catalog's endpoints the rule allows, and every identity endpoint.
    fn allowed(&self, catalog: &[Value]) -> (Vec<Endpoint>, Vec<url::Url>) {
        let rule = &self.credential;
        let mut endpoints = Vec::new();
        let mut identity = Vec::new();
        for service in catalog {
            let kind = service["type"].as_str().unwrap_or_default();
            for endpoint in service["endpoints"].as_array().into_iter().flatten() {
                let Some(url) = endpoint["url"]
                    .as_str()
                    .and_then(|u| url::Url::parse(u).ok())
                else {
                    continue;
                };
                if kind == IDENTITY_SERVICE {
                    identity.push(url);
                    continue;
                }
                let region = endpoint["region_id"]
                    .as_str()
                    .or_else(|| endpoint["region"].as_str());
                let wanted = rule.services.iter().any(|s| s == kind)
                    && endpoint["interface"].as_str() == Some(rule.interface.as_str())
                    && rule.region.as_deref().is_none_or(|r| region == Some(r));
                if !wanted || !matches!(url.scheme(), "http" | "https") {
                    continue;
                }
                // A name beginning `127.` is a name, not this host's loopback.
                let loopback = match url.host() {
                    Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
                    Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                    Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                    None => false,
                };
                if url.scheme() == "http" && !loopback && !rule.allow_plaintext {
                    tracing::warn!(
                        provider = %self.provider,
                        endpoint = %url,
                        service = kind,
                        "a plain http:// catalog endpoint does not get the Keystone token without the rule's allowPlaintext: true"
                    );
                    continue;
                }
                endpoints.push(Endpoint {
                    service: kind.to_owned(),
                    url,
                });
            }
        }
        (endpoints, identity)
    }
}

/// Whether `url` lies under `base`: same origin, and `base`'s path is a prefix of its
/// path at a segment boundary, both paths read as a server reads them
/// ([`normalized_path`]: `//identity/v3` and `/%69dentity/v3` are under `/identity`).
fn under(base: &url::Url, url: &url::Url) -> bool {
    if base.scheme() != url.scheme()
        || base.host_str().map(str::to_ascii_lowercase)
            != url.host_str().map(str::to_ascii_lowercase)
        || base.port_or_known_default() != url.port_or_known_default()
    {
        return false;
    }
    let prefix = normalized_path(base.path());
    let path = normalized_path(url.path());
    prefix == "/"
        || path == prefix
        || path
            .strip_prefix(&prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A URL path as a web server routes it: percent-decoded, empty and `.` segments
/// dropped, `..` segments resolved; always starting with `/`, never ending with one
/// (but `/` itself).
fn normalized_path(path: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split(['/', '\\']) {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    format!("/{}", segments.join("/"))
}

#[derive(Deserialize)]
struct TokenBody {
    token: TokenFields,
}

#[derive(Deserialize)]
struct TokenFields {
    expires_at: String,
    catalog: Option<Vec<Value>>,
}

/// Keystone's `{"error": {"message": ...}}`, or the start of the body.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    message.chars().filter(|c| !c.is_control()).collect()
}

/// `{"id": ...}` or `{"name": ..., "domain"|"user": ...}`.
fn reference(identity: &Identity) -> Value {
    match identity {
        Identity::Id(id) => json!({ "id": id }),
        Identity::Named { name, within } => match within.as_ref() {
            Within::DomainId(id) => json!({ "name": name, "domain": { "id": id } }),
            Within::DomainName(domain) => json!({ "name": name, "domain": { "name": domain } }),
            Within::User(user) => json!({ "name": name, "user": reference(user) }),
        },
    }
}

/// The `POST /v3/auth/tokens` body.
fn login_body(method: &KeystoneMethod, secret: &str) -> Value {
    match method {
        KeystoneMethod::ApplicationCredential { id, .. } => {
            let mut credential = reference(id);
            credential["secret"] = json!(secret);
            json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": credential,
            }}})
        }
        KeystoneMethod::Password { user, project, .. } => {
            let mut user = reference(user);
            user["password"] = json!(secret);
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": user}},
                "scope": {"project": reference(project)},
            }})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn under_is_same_origin_and_a_path_prefix_at_a_segment() {
        let base = url("https://nova.example.com:8774/v2.1");
        assert!(under(&base, &url("https://nova.example.com:8774/v2.1")));
        assert!(under(
            &base,
            &url("https://NOVA.example.com:8774/v2.1/servers?x=1")
        ));
        assert!(!under(
            &base,
            &url("https://nova.example.com:8774/v2.10/servers")
        ));
        assert!(!under(&base, &url("https://nova.example.com:8774/")));
        assert!(!under(&base, &url("http://nova.example.com:8774/v2.1")));
        assert!(!under(&base, &url("https://nova.example.com:8775/v2.1")));
        let root = url("https://neutron.example.com:9696/");
        assert!(under(
            &root,
            &url("https://neutron.example.com:9696/v2.0/ports")
        ));
        assert!(under(&url("https://h"), &url("https://h:443/x")));
        // Paths as the server reads them: doubled slashes, encodings, dot segments.
        let identity = url("https://cloud.example.com/identity/v3");
        for path in [
            "//identity/v3/users",
            "/%69dentity/v3/users",
            "/compute/../identity/v3/credentials",
            "/identity//v3/users",
            "/identity%2Fv3/users",
            "/./identity/v3",
        ] {
            let request = url(&format!("https://cloud.example.com{path}"));
            assert!(under(&identity, &request), "{path}");
        }
        assert!(!under(
            &identity,
            &url("https://cloud.example.com/identityx/v3")
        ));
    }

    #[test]
    fn login_bodies_name_the_credential_as_keystone_expects() {
        let app = KeystoneMethod::ApplicationCredential {
            id: Identity::Named {
                name: "ccm".into(),
                within: Box::new(Within::User(Identity::Named {
                    name: "k8s".into(),
                    within: Box::new(Within::DomainName("Default".into())),
                })),
            },
            secret_file: "s".into(),
        };
        assert_eq!(
            login_body(&app, "shh"),
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"name": "ccm", "secret": "shh",
                    "user": {"name": "k8s", "domain": {"name": "Default"}}}}}})
        );
        let password = KeystoneMethod::Password {
            user: Identity::Id("u1".into()),
            password_file: "p".into(),
            project: Identity::Named {
                name: "k8s".into(),
                within: Box::new(Within::DomainId("default".into())),
            },
        };
        assert_eq!(
            login_body(&password, "pw"),
            json!({"auth": {"identity": {"methods": ["password"],
                "password": {"user": {"id": "u1", "password": "pw"}}},
                "scope": {"project": {"name": "k8s", "domain": {"id": "default"}}}}})
        );
    }

    #[test]
    fn error_messages_come_from_keystone_s_error_body() {
        let body = br#"{"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}"#;
        assert_eq!(
            error_message(body),
            "The request you have made requires authentication."
        );
        assert_eq!(error_message(b"<html>\nbad gateway"), "<html>bad gateway");
    }

    #[test]
    fn keystone_credential_headers_are_the_middleware_s() {
        for name in [
            "X-Service-Token",
            "x-auth-token",
            "X-Storage-Token",
            "X-Subject-Token",
            "X-Identity-Status",
            "X-Roles",
            "X-User-Id",
            "X-Project-Domain-Name",
            "X-Service-Roles",
            "OpenStack-System-Scope",
        ] {
            assert!(is_credential_header(name), "{name}");
        }
        for name in [
            "content-type",
            "openstack-api-version",
            "x-openstack-request-id",
        ] {
            assert!(!is_credential_header(name), "{name}");
        }
    }

    #[test]
    fn pecan_s_method_override_is_found_wherever_pecan_reads_it() {
        let form = |ct: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(ct) = ct {
                headers.insert(http::header::CONTENT_TYPE, ct.parse().unwrap());
            }
            headers
        };
        let plain = url("https://octavia.example.com/v2/lbaas/loadbalancers/lb1");
        for query in ["?_method=put", "?_METHOD=post", "?x=1&%5Fmethod=put"] {
            let u = url(&format!("{plain}{query}"));
            assert!(method_override(&u, &form(None), b"").is_some(), "{query}");
        }
        assert!(method_override(&plain, &form(None), b"_method=put").is_some());
        assert!(
            method_override(
                &plain,
                &form(Some("application/x-www-form-urlencoded")),
                b"a=1&_Method=delete"
            )
            .is_some()
        );
        assert!(
            method_override(&plain, &form(Some("multipart/form-data; boundary=b")), b"").is_some()
        );
        // JSON bodies are not forms; an ordinary request passes.
        assert!(
            method_override(
                &plain,
                &form(Some("application/json")),
                br#"{"_method": "put"}"#
            )
            .is_none()
        );
        assert!(method_override(&url(&format!("{plain}?fields=id")), &form(None), b"").is_none());
    }
}
