//! Credentials the host adds to outbound requests: a header read from Secret files
//! ([`header`]: bearer, basic, any named header), an AWS SigV4 signature (`aws`), or
//! a Keystone token the host logs in for ([`keystone`]). Each kind is a
//! [`CredentialKind`]: the broker asks every kind the same questions (what the guest
//! may not set, whether its destination honours method overrides, which action
//! `allowedActions` sees, how the credential is added, whether a 401 calls for a fresh
//! one, which requests it claims before the allowlist, what it answers itself), so a
//! rule about credentials is written once, in its kind, and the broker names no cloud.
//! What holds for every kind is written once here: method overrides
//! ([`method_override`]) are refused on every request whose rule has `allowedActions`,
//! before the actions are checked ([`check_request`]).
//!
//! Secret files are read only inside the credentials directory ([`files`]).
//!
//! # Adding a kind
//! 1. Its policy type in `policy/<kind>.rs`, implementing
//!    [`CredentialSpec`](crate::policy::CredentialSpec) (its fields, their checks, its
//!    files, its `allowedActions` grammar).
//! 2. Its broker module here, `<kind>/`: a [`CredentialKind`], and [`BuildKind`] on the
//!    policy type to make it ([`BuildContext`] gives the credentials directory, the
//!    provider's metrics, sessions kept across reloads and per-policy state).
//! 3. One line in the registry, `credential_kinds!` at the bottom of `policy/kinds.rs`;
//!    its response headers no provider may see in [`HIDDEN_RESPONSE_HEADERS`] and its
//!    denial labels in [`DENIAL_REASONS`], if it has any.

mod aws;
mod build;
mod files;
mod header;
mod huaweicloud;
pub mod keystone;
mod login;
mod method_overrides;

use std::any::Any;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method};

use super::Denial;
use crate::policy::actions::{ActionDenied, AllowedActions};
use crate::policy::{Credential, CredentialRule};
pub use aws::{AwsError, AwsSigner, SIGNING_HEADERS};
pub use build::{BuildContext, BuildKind, Logins, Sessions};
use files::Confinement;
pub use files::{CredentialError, confined_path, read_secret_file};
pub use header::HeaderCredential;
pub use keystone::{CatalogMatch, KeystoneError, KeystoneSession};
pub use method_overrides::{METHOD_OVERRIDE_HEADERS, method_override, override_header};

/// A future a [`CredentialKind`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a kind keeps of one use of its credential, for [`CredentialKind::renew`] (a
/// Keystone token: which one was sent).
pub type Applied = Option<Arc<dyn Any + Send + Sync>>;

/// A request about to leave the host: what a kind signs or adds a token to is exactly
/// what is sent.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The method.
    pub method: Method,
    /// The URL, as the destination was parsed.
    pub url: url::Url,
    /// The headers (no `Host`: the client sends the URL's).
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

/// One kind of credential the host adds to requests.
///
/// ```
/// use wasm_ccm_host::capabilities::http_egress::credentials::{
///     Applied, BoxFuture, CredentialKind, Outgoing,
/// };
///
/// /// A fixed API key in `X-Api-Key`.
/// #[derive(Debug)]
/// struct ApiKey(http::HeaderValue);
///
/// impl CredentialKind for ApiKey {
///     fn refuses_header(&self, name: &str) -> bool {
///         name == "x-api-key"
///     }
///
///     fn apply<'a>(
///         &'a self,
///         request: &'a mut Outgoing,
///         _client: &'a reqwest::Client,
///     ) -> BoxFuture<'a, Result<Applied, String>> {
///         request.headers.insert("x-api-key", self.0.clone());
///         Box::pin(async { Ok(None) })
///     }
/// }
///
/// let key = ApiKey(http::HeaderValue::from_static("k"));
/// assert!(key.refuses_header("x-api-key") && !key.refuses_header("accept"));
/// ```
pub trait CredentialKind: Send + Sync + std::fmt::Debug {
    /// Whether the guest may not set header `name` (lower case) on a request this kind
    /// completes: one the kind sets, or one the destination reads as a credential.
    fn refuses_header(&self, name: &str) -> bool;

    /// Whether method overrides are refused even when the rule has no
    /// `allowedActions`: the kind's destinations are known to honour them (Octavia's
    /// pecan behind Keystone). With `allowedActions` they are refused for every kind
    /// ([`check_request`]).
    fn refuses_method_overrides(&self) -> bool {
        false
    }

    /// Checks the request against its rule's `allowedActions`: by method and path,
    /// unless the kind reads actions another way (AWS).
    fn check_actions(
        &self,
        actions: &AllowedActions,
        request: &Outgoing,
    ) -> Result<(), ActionDenied> {
        actions.check_request(&request.method, &request.url)
    }

    /// Adds the credential to `request`; the error says why it is not available (it
    /// never holds a secret).
    fn apply<'a>(
        &'a self,
        request: &'a mut Outgoing,
        client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<Applied, String>>;

    /// Whether a 401 answer may call for [`Self::renew`] (the request is then kept
    /// for a second try).
    fn renews(&self) -> bool {
        false
    }

    /// After the destination answered 401 to `request`, sent with `applied`: the
    /// request with a fresher credential, to send once more; `None` lets the 401
    /// through to the provider.
    fn renew<'a>(
        &'a self,
        _applied: Applied,
        _request: Outgoing,
        _client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Option<Outgoing>> {
        Box::pin(async { None })
    }

    /// Sees the destination's answer to a request this kind completed (status, headers
    /// and body, as the guest gets them), to log what only the kind can explain: a
    /// signature refused because the host's clock is off.
    fn answered(&self, _status: http::StatusCode, _headers: &HeaderMap, _body: &[u8]) {}

    /// Whether [`Self::answered`] wants to see an answer of `status`: only then are its
    /// headers kept for it, so an answer the kind has nothing to say about costs nothing.
    fn observes(&self, _status: http::StatusCode) -> bool {
        false
    }

    /// Whether a request to the rule's destination gets this credential (the first
    /// rule whose destination matches, after the allowlist). `false`: only what
    /// [`Self::route`] claims does (Keystone: its catalog's endpoints, not the
    /// identity endpoint the rule names).
    fn by_destination(&self) -> bool {
        true
    }

    /// Claims a request before the allowlist is read: a credential for it, an answer
    /// the kind gives itself, or a refusal; [`Route::Pass`] leaves it to the allowlist.
    fn route(&self, _method: &Method, _url: &url::Url) -> Route {
        Route::Pass
    }

    /// Whether what [`Self::route`] claims is not known yet (before a first login): a
    /// request refused as not allowed is authorized again after [`Self::log_in`].
    fn awaits_login(&self) -> bool {
        false
    }

    /// Logs in, so that [`Self::route`] knows what it claims (failures are the kind's
    /// to log and hold).
    fn log_in<'a>(&'a self, _client: &'a reqwest::Client) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The answer to a request [`Self::route`] claimed as [`Route::Local`]: its content
    /// type and body, or why there is none (never a secret).
    fn local_answer<'a>(
        &'a self,
        _client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<(&'static str, Bytes), String>> {
        Box::pin(async { Err("this credential answers no request itself".to_owned()) })
    }
}

/// What a kind makes of a request before the allowlist ([`CredentialKind::route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Not the kind's: the allowlist decides.
    Pass,
    /// The kind's credential goes with it; `label` is the `host` metric label.
    Credential {
        /// What the request is counted under (e.g. the catalog endpoint).
        label: String,
    },
    /// The kind answers it itself ([`CredentialKind::local_answer`]).
    Local,
    /// Refused, with a metric label of the kind's ([`DENIAL_REASONS`]) and why.
    Refuse {
        /// The `reason` label of `wasm_ccm_egress_denied_total`.
        reason: &'static str,
        /// Why, for the log.
        message: String,
    },
}

/// Response headers no provider gets, whatever its policy: a kind's login answers
/// carry them (Keystone's `X-Subject-Token`).
pub const HIDDEN_RESPONSE_HEADERS: &[&str] = &[keystone::SUBJECT_TOKEN_HEADER];

/// Whether response header `name` (lower case) is removed from every answer.
pub fn hides_response_header(name: &str) -> bool {
    HIDDEN_RESPONSE_HEADERS.contains(&name)
}

/// The `reason` labels kinds refuse requests with ([`Route::Refuse`]).
pub const DENIAL_REASONS: &[&str] = keystone::DENIAL_REASONS;

/// What a rule adds to a request.
#[derive(Debug, Clone)]
pub enum Injection {
    /// A credential of one of the kinds.
    Credential(Arc<dyn CredentialKind>),
    /// No request at all: the kind answers it ([`CredentialKind::local_answer`]).
    Local(Arc<dyn CredentialKind>),
}

impl Injection {
    /// The kind.
    pub fn kind(&self) -> &Arc<dyn CredentialKind> {
        match self {
            Injection::Credential(kind) | Injection::Local(kind) => kind,
        }
    }
}

impl PartialEq for Injection {
    fn eq(&self, other: &Self) -> bool {
        let same = std::ptr::addr_eq(Arc::as_ptr(self.kind()), Arc::as_ptr(other.kind()));
        match (self, other) {
            (Injection::Credential(_), Injection::Credential(_))
            | (Injection::Local(_), Injection::Local(_)) => same,
            _ => false,
        }
    }
}

impl Eq for Injection {}

impl Injection {
    /// Why the guest may not set one of `headers` on this request, if it may not: a
    /// method override header ([`override_header`]: on every request the host adds a
    /// credential to, whatever its rule), or a header the kind refuses
    /// ([`Denial::GuestCredentialHeader`]).
    pub fn refused_header(&self, headers: &HeaderMap) -> Option<Denial> {
        override_header(headers).or_else(|| {
            headers.keys().find_map(|name| {
                let name = name.as_str();
                self.kind()
                    .refuses_header(name)
                    .then(|| Denial::GuestCredentialHeader(name.to_owned()))
            })
        })
    }
}

/// Checks `request` before `kind` adds its credential, under its rule's `actions`
/// (`allowedActions`, if any). Where the method decides what the credential may do (the
/// rule has `allowedActions`, or the kind's destinations honour overrides whatever the
/// rule says: [`CredentialKind::refuses_method_overrides`]), a method override in any
/// spelling ([`method_override`]) is refused: the server would run another method than
/// the one checked. Then the request must be one of the actions.
pub fn check_request(
    kind: &dyn CredentialKind,
    actions: Option<&AllowedActions>,
    request: &Outgoing,
) -> Result<(), Denial> {
    if (actions.is_some() || kind.refuses_method_overrides())
        && let Some(refused) = method_override(request)
    {
        return Err(refused);
    }
    if let Some(actions) = actions {
        kind.check_actions(actions, request)
            .map_err(|denied| Denial::Action(denied.0))?;
    }
    Ok(())
}

/// The kind of a built-in header rule (`bearerTokenFile`, `basic`, `header`).
pub fn header_kind(
    header: &Credential,
    ctx: &BuildContext<'_>,
) -> Result<Arc<dyn CredentialKind>, CredentialError> {
    HeaderCredential::new(header, ctx.confinement())
        .map(|kind| Arc::new(kind) as Arc<dyn CredentialKind>)
        .ok_or_else(|| CredentialError::Invalid {
            path: header.files()[0].to_owned(),
        })
}

/// The credentials of a policy's rules, by rule index.
#[derive(Debug)]
pub struct CredentialStore {
    rules: Vec<CredentialRule>,
    kinds: Vec<Arc<dyn CredentialKind>>,
    confinement: Arc<Confinement>,
}

impl CredentialStore {
    /// A store for `rules`, reading files only inside `dir` when given; kinds that keep
    /// a session (a login) take it from `sessions`, kept across policy reloads.
    pub fn new(
        rules: &[CredentialRule],
        dir: Option<&Path>,
        sessions: &Sessions,
    ) -> Result<Self, CredentialError> {
        // Without rules the directory is not needed (and need not exist).
        let dir = dir
            .filter(|_| !rules.is_empty())
            .map(|dir| {
                std::fs::canonicalize(dir).map_err(|source| CredentialError::Read {
                    path: dir.to_owned(),
                    source,
                })
            })
            .transpose()?;
        let confinement = Arc::new(Confinement { dir });
        sessions.begin();
        let mut ctx = BuildContext::new(&confinement, sessions);
        let kinds = rules
            .iter()
            .map(|rule| {
                ctx.kind = rule.credential.key();
                rule.credential.build(&mut ctx)
            })
            .collect::<Result<Vec<_>, _>>()?;
        sessions.sweep();
        let store = Self {
            rules: rules.to_vec(),
            kinds,
            confinement,
        };
        store.check()?;
        Ok(store)
    }

    /// Checks every file the rules name is (or, not yet written, would be) inside the
    /// credentials directory.
    fn check(&self) -> Result<(), CredentialError> {
        for rule in &self.rules {
            for file in rule.credential.files() {
                match std::fs::symlink_metadata(file) {
                    Ok(_) => {
                        self.confinement.confined(file)?;
                    }
                    Err(_) => {
                        // Not there yet: its directory must be inside.
                        let parent = file.parent().unwrap_or(Path::new("/"));
                        if let Some(dir) = &self.confinement.dir {
                            let inside =
                                std::fs::canonicalize(parent).is_ok_and(|p| p.starts_with(dir));
                            if !inside {
                                return Err(CredentialError::OutsideDir {
                                    path: file.to_owned(),
                                    dir: dir.clone(),
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Every rule's kind, with the rule's index, in rule order.
    pub fn kinds(&self) -> impl Iterator<Item = (usize, &Arc<dyn CredentialKind>)> {
        self.kinds.iter().enumerate()
    }

    /// Rule number `index`'s kind.
    pub fn kind(&self, index: usize) -> &Arc<dyn CredentialKind> {
        &self.kinds[index]
    }

    /// What rule number `index` adds to a request.
    pub fn injection(&self, index: usize) -> Injection {
        Injection::Credential(self.kinds[index].clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::policy::allowlist::HostPattern;
    use http::HeaderValue;
    use std::path::PathBuf;

    fn sessions() -> Sessions {
        Sessions::new(
            crate::metrics::ProviderLabel::new("test"),
            crate::metrics::Metrics::new().provider().clone(),
        )
    }

    /// A form body's content type.
    pub(super) const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
    /// A JSON body's content type.
    pub(super) const JSON: (&str, &str) = ("content-type", "application/json");

    /// A request as the broker is about to send it: `method` to `path` on
    /// `https://api.example.com`, with `headers` (appended in order) and `body`.
    pub(super) fn outgoing(
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Outgoing {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        Outgoing {
            method,
            url: format!("https://api.example.com{path}").parse().unwrap(),
            headers: map,
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    /// A method override in the query or the body, on a request the rule's
    /// `allowedActions` allow by its method, is refused for every kind whose rule has
    /// them (before the actions are checked); without `allowedActions` the method
    /// decides nothing and the same requests pass, except to Keystone, whose pecan
    /// honours `_method` whatever the rule says. Override headers are refused on every
    /// request the host adds a credential to.
    /// A kind's session (a Keystone login and its token) outlives a policy reload that
    /// keeps its rule; a changed rule gets a new one, and a rule's session is dropped
    /// once a policy without it is built.
    #[test]
    fn sessions_outlive_a_reload_that_keeps_their_rule() {
        let rule = |credential: &str| {
            format!(
                "credentials:\n  - destination: 'https://keystone.example.com:5000'\n    \
                 keystone: {{authUrl: 'https://keystone.example.com:5000/v3', \
                 applicationCredentialId: {credential}, applicationCredentialSecretFile: s}}\n"
            )
        };
        let store = |text: &str, sessions: &Sessions| {
            let policy = Policy::parse(text, Path::new("/p/p.yaml")).unwrap();
            CredentialStore::new(&policy.credentials, None, sessions).unwrap()
        };
        let same = |a: &CredentialStore, b: &CredentialStore| {
            std::ptr::addr_eq(Arc::as_ptr(a.kind(0)), Arc::as_ptr(b.kind(0)))
        };
        let sessions = sessions();
        let first = store(&rule("a1"), &sessions);
        let reloaded = store(&rule("a1"), &sessions);
        assert!(same(&first, &reloaded), "the same rule keeps its session");
        let changed = store(&rule("a2"), &sessions);
        assert!(!same(&first, &changed), "a changed rule logs in anew");
        // Neither rule is in this policy: both sessions go, so a1 comes back new.
        store("credentials: []\n", &sessions);
        let again = store(&rule("a1"), &sessions);
        assert!(!same(&first, &again), "a dropped session is not reused");
    }

    #[test]
    fn method_overrides_are_refused_for_every_kind_with_allowed_actions() {
        let rules = [
            "destination: 'https://bearer.example.com', bearerTokenFile: token",
            "destination: 'https://basic.example.com', basic: {usernameFile: u, passwordFile: p}",
            "destination: 'https://header.example.com', header: {name: X-Api-Key, valueFile: k}",
            "destination: 'https://keystone.example.com:5000', keystone: {authUrl: \
             'https://keystone.example.com:5000/v3', applicationCredentialId: a1, \
             applicationCredentialSecretFile: s}",
        ];
        let kinds = ["bearer", "basic", "header", "keystone"];
        let in_query_or_body = [
            outgoing(Method::GET, "/things/t1?_method=DELETE", &[], ""),
            outgoing(Method::GET, "/things/t1?_Method=DELETE", &[], ""),
            outgoing(Method::GET, "/things/t1?%5Fmethod=DELETE", &[], ""),
            outgoing(Method::POST, "/things", &[FORM], "name=x&_method=DELETE"),
            outgoing(Method::POST, "/things", &[], "_method=DELETE"),
            outgoing(Method::POST, "/things", &[JSON], r#"{"_method": "DELETE"}"#),
        ];
        let in_headers = METHOD_OVERRIDE_HEADERS
            .map(|name| outgoing(Method::POST, "/things", &[(name, "DELETE")], ""));
        let plain = [
            outgoing(Method::GET, "/things/t1?fields=id", &[], ""),
            outgoing(Method::POST, "/things", &[FORM], "name=x"),
        ];
        let with = ", allowedActions: ['GET /things/*', 'POST /things']";
        for (actions, has_actions) in [(with, true), ("", false)] {
            let text: String = rules
                .iter()
                .map(|rule| format!("  - {{{rule}{actions}}}\n"))
                .collect();
            let policy =
                Policy::parse(&format!("credentials:\n{text}"), Path::new("/p/p.yaml")).unwrap();
            let store = CredentialStore::new(&policy.credentials, None, &sessions()).unwrap();
            for (index, name) in kinds.iter().enumerate() {
                let Injection::Credential(kind) = store.injection(index) else {
                    panic!("{name}: not a credential")
                };
                let actions = policy.credentials[index].allowed_actions.as_ref();
                assert_eq!(actions.is_some(), has_actions, "{name}");
                let reason = |request: &Outgoing| {
                    check_request(&*kind, actions, request)
                        .err()
                        .map(|denial| denial.reason())
                };
                for request in &plain {
                    assert_eq!(reason(request), None, "{name}: {request:?}");
                }
                let refused = has_actions || *name == "keystone";
                for request in &in_query_or_body {
                    assert_eq!(
                        reason(request),
                        refused.then_some("method_override"),
                        "{name}, allowedActions {has_actions}: {request:?}"
                    );
                }
                let injection = Injection::Credential(kind.clone());
                for request in &in_headers {
                    let early = injection.refused_header(&request.headers);
                    assert_eq!(
                        early.map(|denial| denial.reason()),
                        Some("method_override"),
                        "{name}: {request:?}"
                    );
                    if refused {
                        assert_eq!(reason(request), Some("method_override"), "{name}");
                    }
                }
            }
        }
    }

    /// The header rule number 0 adds to a request.
    async fn first_header(store: &CredentialStore) -> Result<(String, HeaderValue), String> {
        let Injection::Credential(kind) = store.injection(0) else {
            panic!("not a credential rule")
        };
        let mut request = Outgoing {
            method: Method::GET,
            url: "http://x/".parse().unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        kind.apply(&mut request, &reqwest::Client::new()).await?;
        let (name, value) = request.headers.iter().next().expect("a header added");
        Ok((name.to_string(), value.clone()))
    }

    #[tokio::test]
    async fn basic_credentials_are_base64_of_user_colon_password() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-basic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("user"), "user\n").unwrap();
        std::fs::write(dir.join("password"), "pa55").unwrap();
        let store = CredentialStore::new(
            &[CredentialRule {
                allowed_actions: None,
                destination: HostPattern::parse("http://x").unwrap(),
                credential: Credential::Basic {
                    username_file: dir.join("user"),
                    password_file: dir.join("password"),
                },
            }],
            Some(&dir),
            &sessions(),
        )
        .unwrap();
        let (name, value) = first_header(&store).await.unwrap();
        assert_eq!(name, "authorization");
        // RFC 4648 test vector: "user:pa55".
        assert_eq!(value, "Basic dXNlcjpwYTU1");
        assert!(value.is_sensitive());
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn reads_rotated_files_on_each_use() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "one\n").unwrap();
        let store = CredentialStore::new(
            &[CredentialRule {
                allowed_actions: None,
                destination: HostPattern::parse("http://x").unwrap(),
                credential: Credential::Bearer {
                    token_file: token.clone(),
                },
            }],
            None,
            &sessions(),
        )
        .unwrap();
        assert_eq!(first_header(&store).await.unwrap().1, "Bearer one");
        // Rotation the way kubelet does it: a new file renamed over the old one.
        let next = dir.join("token.new");
        std::fs::write(&next, "two").unwrap();
        std::fs::rename(&next, &token).unwrap();
        assert_eq!(first_header(&store).await.unwrap().1, "Bearer two");
        std::fs::remove_file(&token).unwrap();
        let missing = first_header(&store).await.unwrap_err();
        assert!(missing.contains("cannot read credential file"), "{missing}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn files_outside_the_credentials_directory_are_refused() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("wasm-ccm-confine-{}", std::process::id()));
        let secrets = root.join("credentials");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::write(root.join("sa-token"), "service-account").unwrap();
        std::fs::write(secrets.join("token"), "cloud").unwrap();
        symlink(root.join("sa-token"), secrets.join("escape")).unwrap();
        // kubelet's layout: token -> ..data/token, ..data -> ..2026_01_01.
        std::fs::create_dir_all(secrets.join("..2026_01_01")).unwrap();
        std::fs::write(secrets.join("..2026_01_01/rotated"), "v1").unwrap();
        symlink("..2026_01_01", secrets.join("..data")).unwrap();
        symlink("..data/rotated", secrets.join("rotated")).unwrap();
        let rule = |file: PathBuf| CredentialRule {
            allowed_actions: None,
            destination: HostPattern::parse("https://x.example.com").unwrap(),
            credential: Credential::Bearer { token_file: file },
        };
        for inside in ["token", "rotated", "not-yet-written"] {
            CredentialStore::new(&[rule(secrets.join(inside))], Some(&secrets), &sessions())
                .unwrap_or_else(|e| panic!("{inside}: {e}"));
        }
        for outside in [
            root.join("sa-token"),
            secrets.join("escape"),
            secrets.join("../sa-token"),
            PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        ] {
            let err = CredentialStore::new(&[rule(outside.clone())], Some(&secrets), &sessions())
                .unwrap_err();
            assert!(
                matches!(err, CredentialError::OutsideDir { .. }),
                "{}: {err}",
                outside.display()
            );
        }
        // A symlink swapped to point outside after loading is refused when read.
        let store =
            CredentialStore::new(&[rule(secrets.join("token"))], Some(&secrets), &sessions())
                .unwrap();
        assert_eq!(first_header(&store).await.unwrap().1, "Bearer cloud");
        std::fs::remove_file(secrets.join("token")).unwrap();
        symlink(root.join("sa-token"), secrets.join("token")).unwrap();
        let outside = first_header(&store).await.unwrap_err();
        assert!(
            outside.contains("outside the credentials directory"),
            "{outside}"
        );
        std::fs::remove_dir_all(root).ok();
    }
}
