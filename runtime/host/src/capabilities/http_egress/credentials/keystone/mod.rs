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

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::HeaderValue;
use serde_json::json;

mod catalog;
mod clouds;
mod guard;
mod request;

pub use guard::is_credential_header;

use super::build::{BuildContext, BuildKind, Logins};
use super::files::{Confinement, CredentialError};
use super::login::{FAILURE_HOLD, read_capped, refresh_time, transport_reason};
use super::{Applied, BoxFuture, CredentialKind, Outgoing, Route};
use crate::metrics::ProviderLabel;
use crate::policy::keystone::{KeystoneCredential, KeystoneMethod};
use catalog::Endpoint;
use request::{Login, TokenBody, error_message, login_body};

/// The header the token travels in.
pub const TOKEN_HEADER: &str = "x-auth-token";
/// The header Keystone returns a token in; removed from every answer to a provider.
pub const SUBJECT_TOKEN_HEADER: &str = "x-subject-token";

/// The `reason` labels of the requests Keystone rules refuse: to the identity API
/// (other than reading the catalog), and to a plain `http://` catalog endpoint without
/// the rule's `allowPlaintext`.
pub const DENIAL_REASONS: &[&str] = &[IDENTITY_REFUSED, PLAINTEXT_REFUSED];
/// A request to the identity API other than reading the catalog.
const IDENTITY_REFUSED: &str = "keystone_identity";
/// A plain `http://` catalog endpoint without the rule's `allowPlaintext`.
const PLAINTEXT_REFUSED: &str = "keystone_plaintext";

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
    /// The plain `http://` endpoints the rule would allow but for `allowPlaintext`.
    plaintext: Vec<url::Url>,
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

/// What the catalog says about a request's URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogMatch {
    /// An allowed endpoint: its URL (the metric label).
    Endpoint(String),
    /// Under an identity endpoint, or the rule's `authUrl`: refused.
    Identity,
    /// A plain `http://` endpoint of a service the rule allows, without its
    /// `allowPlaintext: true`: its URL.
    Plaintext(String),
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
    logins: Logins,
}

impl std::fmt::Debug for KeystoneSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeystoneSession")
            .field("auth_url", &self.credential.auth_url.as_str())
            .finish_non_exhaustive()
    }
}

impl BuildKind for KeystoneCredential {
    /// The rule's session: the one of the same rule under the previous policy (its
    /// token kept), else a new one.
    fn build(
        &self,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Arc<dyn CredentialKind>, CredentialError> {
        let (confinement, provider, logins) = (
            ctx.confinement().clone(),
            ctx.provider().clone(),
            ctx.logins(),
        );
        let session = ctx.session(self, || KeystoneSession {
            credential: self.clone(),
            confinement,
            current: RwLock::new(None),
            login: tokio::sync::Mutex::new(None),
            forced: Mutex::new(None),
            provider,
            logins,
        });
        Ok(session)
    }
}

impl CredentialKind for KeystoneSession {
    fn refuses_header(&self, name: &str) -> bool {
        is_credential_header(name)
    }

    /// Octavia's pecan reads `_method` from the query and form bodies.
    fn refuses_method_overrides(&self) -> bool {
        true
    }

    fn apply<'a>(
        &'a self,
        request: &'a mut Outgoing,
        client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<Applied, String>> {
        Box::pin(async move {
            let token = self.token(client).await.map_err(|e| e.to_string())?;
            request.headers.insert(TOKEN_HEADER, token.value.clone());
            Ok(Some(token as Arc<dyn std::any::Any + Send + Sync>))
        })
    }

    fn renews(&self) -> bool {
        true
    }

    /// The identity endpoint is not where the token goes: the catalog's endpoints are.
    fn by_destination(&self) -> bool {
        false
    }

    /// The catalog (answered by the host), the identity API (refused), a plain
    /// `http://` endpoint without `allowPlaintext` (refused by name), an endpoint of the
    /// last login's catalog (the token).
    fn route(&self, method: &http::Method, url: &url::Url) -> Route {
        match self.classify(url) {
            CatalogMatch::None => Route::Pass,
            CatalogMatch::Identity => {
                let catalog = self.credential.catalog_url();
                let is_catalog = url.query().is_none()
                    && format!("{}{}", url.origin().ascii_serialization(), url.path()) == catalog;
                if is_catalog && *method == http::Method::GET {
                    Route::Local
                } else {
                    Route::Refuse {
                        reason: IDENTITY_REFUSED,
                        message: format!(
                            "the identity API is the host's (it logs in for the provider); the \
                             provider reads the service catalog with GET {catalog}"
                        ),
                    }
                }
            }
            CatalogMatch::Plaintext(endpoint) => Route::Refuse {
                reason: PLAINTEXT_REFUSED,
                message: format!(
                    "{endpoint} is a plain http:// endpoint of the Keystone catalog: the host \
                     sends it the token only when the keystone rule says `allowPlaintext: true` \
                     (as occm does without asking)"
                ),
            },
            CatalogMatch::Endpoint(label) => Route::Credential { label },
        }
    }

    /// The catalog's endpoints are known after the first login.
    fn awaits_login(&self) -> bool {
        !self.has_catalog()
    }

    fn log_in<'a>(&'a self, client: &'a reqwest::Client) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let _ = self.token(client).await;
        })
    }

    /// `GET <authUrl>/auth/catalog`: the last login's catalog.
    fn local_answer<'a>(
        &'a self,
        client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<(&'static str, Bytes), String>> {
        Box::pin(async move {
            let catalog = self.catalog(client).await.map_err(|e| e.to_string())?;
            Ok(("application/json", catalog))
        })
    }

    /// A token Keystone revoked (or that expired early): a new login's, when
    /// [`KeystoneSession::replace`] finds one.
    fn renew<'a>(
        &'a self,
        applied: Applied,
        mut request: Outgoing,
        client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Option<Outgoing>> {
        Box::pin(async move {
            let used = applied?.downcast::<Token>().ok()?;
            let token = self.replace(&used, client).await.ok()?;
            if Arc::ptr_eq(&token, &used) {
                return None;
            }
            request.headers.insert(TOKEN_HEADER, token.value.clone());
            Some(request)
        })
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
        if catalog::under(&self.credential.auth_url, url) {
            return CatalogMatch::Identity;
        }
        let Some(token) = self.current_token() else {
            return CatalogMatch::None;
        };
        if token.identity.iter().any(|id| catalog::under(id, url)) {
            return CatalogMatch::Identity;
        }
        if let Some(endpoint) = token.endpoints.iter().find(|e| catalog::under(&e.url, url)) {
            return CatalogMatch::Endpoint(format!(
                "{} ({})",
                endpoint.url.as_str().trim_end_matches('/'),
                endpoint.service
            ));
        }
        match token.plaintext.iter().find(|e| catalog::under(e, url)) {
            Some(endpoint) => {
                CatalogMatch::Plaintext(endpoint.as_str().trim_end_matches('/').to_owned())
            }
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
        self.logins.count(result.is_ok());
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
        let file = self.credential.files()[0];
        let text = self.confinement.read_trimmed(file)?;
        let (login, secret) =
            who_logs_in(&self.credential, file, text).map_err(KeystoneError::File)?;
        let body = login_body(&login, &secret);
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
        let catalog::Allowed {
            endpoints,
            identity,
            plaintext,
        } = catalog::allowed(&self.credential, &catalog, &self.provider);
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
            plaintext,
            catalog_body,
            verified: Mutex::new(None),
        })
    }
}

/// Who a rule logs in as, and the secret, from its file's `text`: the policy's written
/// identity with the file's secret, or a clouds.yaml entry.
fn who_logs_in(
    credential: &KeystoneCredential,
    file: &std::path::Path,
    text: String,
) -> Result<(Login, String), String> {
    match &credential.method {
        KeystoneMethod::ApplicationCredential { id, .. } => {
            Ok((Login::ApplicationCredential(id.clone()), text))
        }
        KeystoneMethod::Password { user, scope, .. } => Ok((
            Login::Password {
                user: user.clone(),
                scope: scope.clone(),
            },
            text,
        )),
        KeystoneMethod::CloudsYaml { cloud, .. } => {
            clouds::login(file, &text, cloud, &credential.auth_url)
        }
    }
}

/// Whether the entry `cloud` of a clouds.yaml (`text`, the file `path`) is one the host
/// logs in with under a rule whose `authUrl` is `auth_url` (as written in a policy;
/// `wasm-ccm import-occm-config` checks what it writes): why not, naming the file,
/// entry and field, never a value.
pub fn check_clouds_entry(
    path: &std::path::Path,
    text: &str,
    cloud: &str,
    auth_url: &str,
) -> Result<(), String> {
    let auth_url = crate::policy::keystone::auth_url(auth_url)
        .map_err(|e| format!("authUrl: {}", e.reason))?;
    clouds::login(path, text, cloud, &auth_url).map(|_| ())
}
