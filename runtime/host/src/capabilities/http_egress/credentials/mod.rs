//! Credentials the host adds to outbound requests, read from mounted Secret files: a
//! header (bearer, basic, any named header), an AWS SigV4 signature ([`aws`]), or a
//! Keystone token the host logs in for ([`keystone`]).
//!
//! With a credentials directory (`--credentials-dir`, the Secret's mount), every file
//! is read through its canonical path, which must lie inside that directory: a policy
//! ships next to a vendor's component, so it must not be able to name the
//! service-account token or any other file of the host, directly or through a symlink.

mod aws;
pub mod keystone;
mod login;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{HeaderName, HeaderValue};

use super::Denial;
use crate::policy::{Credential, CredentialRule};
pub use aws::{AwsError, AwsSigner, SIGNING_HEADERS};
pub use keystone::{CatalogMatch, KeystoneError, KeystoneSession, Sessions};

/// Why a credential could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The Secret file cannot be read.
    #[error("cannot read credential file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file's content cannot be used as a header value.
    #[error("credential file {path} does not hold a valid header value")]
    Invalid {
        /// The file.
        path: PathBuf,
    },
    /// The file (or what its symlinks lead to) is outside the credentials directory.
    #[error(
        "credential file {path} is outside the credentials directory {dir} (--credentials-dir); \
         mount the Secret there and name files inside it"
    )]
    OutsideDir {
        /// The file named by the policy.
        path: PathBuf,
        /// The credentials directory.
        dir: PathBuf,
    },
}

/// Produces headers for credential rules. Each use checks the files' metadata and
/// re-reads them when they changed, so a rotated Secret (kubelet swaps a symlink)
/// takes effect on the next request without re-reading files on every request.
#[derive(Debug)]
pub struct CredentialStore {
    rules: Vec<CredentialRule>,
    sources: Vec<Source>,
    confinement: Arc<Confinement>,
}

/// What a rule adds to a request.
#[derive(Debug, Clone)]
pub enum Injection {
    /// A header with a value read from Secret files.
    Header(HeaderName, HeaderValue),
    /// An AWS SigV4 signature, computed once the body is buffered.
    Aws(Arc<AwsSigner>),
    /// A Keystone token, for an endpoint of the session's catalog.
    Keystone(Arc<KeystoneSession>),
    /// No request at all: the host answers `GET <authUrl>/auth/catalog` itself.
    KeystoneCatalog(Arc<KeystoneSession>),
}

impl PartialEq for Injection {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Injection::Header(n1, v1), Injection::Header(n2, v2)) => n1 == n2 && v1 == v2,
            (Injection::Aws(a), Injection::Aws(b)) => Arc::ptr_eq(a, b),
            (Injection::Keystone(a), Injection::Keystone(b))
            | (Injection::KeystoneCatalog(a), Injection::KeystoneCatalog(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Injection {}

/// Headers asking a server to take a request for another method
/// (`X-HTTP-Method-Override: DELETE` on a `POST`): refused on every request the host
/// adds a credential to, since `allowedActions` and the cloud's own policy read the
/// method the request carries.
pub const METHOD_OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

impl Injection {
    /// The first header of `headers` the guest may not set on this request, and why:
    /// one the host sets for this credential or the destination reads as one
    /// ([`Denial::GuestCredentialHeader`]), or a method override
    /// ([`Denial::MethodOverride`]).
    pub fn refused_header(&self, headers: &http::HeaderMap) -> Option<Denial> {
        headers.keys().find_map(|name| {
            let name = name.as_str();
            if METHOD_OVERRIDE_HEADERS.contains(&name) {
                return Some(Denial::MethodOverride(format!("the `{name}` header")));
            }
            let owned = match self {
                Injection::Header(own, _) => own.as_str() == name,
                Injection::Aws(_) => SIGNING_HEADERS.contains(&name),
                Injection::Keystone(_) | Injection::KeystoneCatalog(_) => {
                    keystone::is_credential_header(name)
                }
            };
            owned.then(|| Denial::GuestCredentialHeader(name.to_owned()))
        })
    }

    /// Refuses what the destination would read as another request than the one the
    /// host checked, once the body is known: for a Keystone token, pecan's `_method`
    /// parameter (in the query or a form body), which OpenStack's services honour.
    pub fn refused_request(
        &self,
        url: &url::Url,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Option<Denial> {
        match self {
            Injection::Keystone(_) => keystone::method_override(url, headers, body),
            _ => None,
        }
    }
}

#[derive(Debug)]
enum Source {
    Header(Mutex<Option<Cached>>),
    Aws(Arc<AwsSigner>),
    Keystone(Arc<KeystoneSession>),
}

/// Reads Secret files, only inside the credentials directory when there is one.
#[derive(Debug)]
pub struct Confinement {
    /// The canonical credentials directory files must lie in, if confined.
    dir: Option<PathBuf>,
}

#[derive(Debug)]
struct Cached {
    stamps: Vec<FileStamp>,
    header: (HeaderName, HeaderValue),
}

/// What identifies a version of a file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl FileStamp {
    pub(super) fn of(path: &Path) -> Result<Self, CredentialError> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|source| CredentialError::Read {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode: meta.ino(),
        })
    }
}

impl CredentialStore {
    /// A store for `rules`, reading files only inside `dir` when given; Keystone rules
    /// take their session from `sessions` (kept across policy reloads).
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
        let mut web_identities = aws::WebIdentities::new();
        let sources = rules
            .iter()
            .map(|rule| match &rule.credential {
                Credential::Aws(credential) => Source::Aws(Arc::new(AwsSigner::new(
                    credential,
                    &confinement,
                    &mut web_identities,
                ))),
                Credential::Keystone(credential) => {
                    Source::Keystone(sessions.session(credential, &confinement))
                }
                _ => Source::Header(Mutex::new(None)),
            })
            .collect();
        sessions.retain(
            &rules
                .iter()
                .filter_map(|rule| match &rule.credential {
                    Credential::Keystone(k) => Some(k),
                    _ => None,
                })
                .collect::<Vec<_>>(),
        );
        let store = Self {
            rules: rules.to_vec(),
            sources,
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

    /// The Keystone sessions, in rule order.
    pub fn keystone(&self) -> impl Iterator<Item = &Arc<KeystoneSession>> {
        self.sources.iter().filter_map(|source| match source {
            Source::Keystone(session) => Some(session),
            _ => None,
        })
    }

    /// Whether rule number `index` is a Keystone rule (whose destination, the identity
    /// endpoint, gets nothing injected by a match: see [`Self::keystone`]).
    pub fn is_keystone(&self, index: usize) -> bool {
        matches!(self.sources[index], Source::Keystone(_))
    }

    /// What rule number `index` adds to a request.
    pub fn injection(&self, index: usize) -> Result<Injection, CredentialError> {
        let cache = match &self.sources[index] {
            Source::Aws(signer) => return Ok(Injection::Aws(signer.clone())),
            Source::Keystone(session) => return Ok(Injection::Keystone(session.clone())),
            Source::Header(cache) => cache,
        };
        let (name, value) = self.header(index, cache)?;
        Ok(Injection::Header(name, value))
    }

    /// The header of rule number `index`, read again when its files changed.
    fn header(
        &self,
        index: usize,
        cache: &Mutex<Option<Cached>>,
    ) -> Result<(HeaderName, HeaderValue), CredentialError> {
        let files = self.rules[index].credential.files();
        let stamps = files
            .iter()
            .map(|f| FileStamp::of(f))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = cache.as_ref()
            && cached.stamps == stamps
        {
            return Ok(cached.header.clone());
        }
        let header = self.read(index)?;
        *cache = Some(Cached {
            stamps,
            header: header.clone(),
        });
        Ok(header)
    }

    fn read(&self, index: usize) -> Result<(HeaderName, HeaderValue), CredentialError> {
        let files = &self.confinement;
        match &self.rules[index].credential {
            Credential::Bearer { token_file } => {
                let token = files.read_trimmed(token_file)?;
                Ok((
                    http::header::AUTHORIZATION,
                    sensitive(format!("Bearer {token}"), token_file)?,
                ))
            }
            Credential::Basic {
                username_file,
                password_file,
            } => {
                let user = files.read_trimmed(username_file)?;
                let password = files.read_trimmed(password_file)?;
                let encoded = BASE64.encode(format!("{user}:{password}"));
                Ok((
                    http::header::AUTHORIZATION,
                    sensitive(format!("Basic {encoded}"), password_file)?,
                ))
            }
            Credential::Header { name, value_file } => {
                let value = files.read_trimmed(value_file)?;
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    CredentialError::Invalid {
                        path: value_file.clone(),
                    }
                })?;
                Ok((name, sensitive(value, value_file)?))
            }
            Credential::Aws(_) | Credential::Keystone(_) => {
                unreachable!("AWS and Keystone rules have no header read from files")
            }
        }
    }
}

/// The content of the Secret file `file`, read only when it lies inside `dir` (the
/// credentials directory) when there is one: for files outside credential rules, such
/// as the TLS client key.
pub fn read_secret_file(dir: Option<&Path>, file: &Path) -> Result<String, CredentialError> {
    let dir = dir
        .map(|dir| {
            std::fs::canonicalize(dir).map_err(|source| CredentialError::Read {
                path: dir.to_owned(),
                source,
            })
        })
        .transpose()?;
    Confinement { dir }.read_trimmed(file)
}

/// The path to read `file` through: its canonical path, checked to lie inside `dir`
/// (the credentials directory) when there is one: for files outside credential rules
/// that are secret or decide whom the host trusts, such as the policy's CA bundle.
pub fn confined_path(dir: Option<&Path>, file: &Path) -> Result<PathBuf, CredentialError> {
    let dir = dir
        .map(|dir| {
            std::fs::canonicalize(dir).map_err(|source| CredentialError::Read {
                path: dir.to_owned(),
                source,
            })
        })
        .transpose()?;
    Confinement { dir }.confined(file)
}

impl Confinement {
    /// The path to read `file` through: its canonical path, checked to lie inside the
    /// credentials directory when there is one.
    fn confined(&self, file: &Path) -> Result<PathBuf, CredentialError> {
        let Some(dir) = &self.dir else {
            return Ok(file.to_owned());
        };
        let real = std::fs::canonicalize(file).map_err(|source| CredentialError::Read {
            path: file.to_owned(),
            source,
        })?;
        if !real.starts_with(dir) {
            return Err(CredentialError::OutsideDir {
                path: file.to_owned(),
                dir: dir.clone(),
            });
        }
        Ok(real)
    }

    /// The trimmed content of `file`, read through its confined path.
    pub fn read_trimmed(&self, file: &Path) -> Result<String, CredentialError> {
        read_trimmed(&self.confined(file)?)
    }
}

fn read_trimmed(path: &Path) -> Result<String, CredentialError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| CredentialError::Read {
            path: path.to_owned(),
            source,
        })
}

fn sensitive(value: String, path: &Path) -> Result<HeaderValue, CredentialError> {
    let mut value = HeaderValue::try_from(value).map_err(|_| CredentialError::Invalid {
        path: path.to_owned(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::allowlist::HostPattern;

    fn sessions() -> Sessions {
        Sessions::new(
            crate::metrics::ProviderLabel::new("test"),
            crate::metrics::Metrics::new().provider().clone(),
        )
    }

    fn first_header(store: &CredentialStore) -> Result<(HeaderName, HeaderValue), CredentialError> {
        match store.injection(0)? {
            Injection::Header(name, value) => Ok((name, value)),
            _ => panic!("not a header rule"),
        }
    }

    #[test]
    fn basic_credentials_are_base64_of_user_colon_password() {
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
        let (name, value) = first_header(&store).unwrap();
        assert_eq!(name, http::header::AUTHORIZATION);
        // RFC 4648 test vector: "user:pa55".
        assert_eq!(value, "Basic dXNlcjpwYTU1");
        assert!(value.is_sensitive());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn reads_rotated_files_on_each_use() {
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
        assert_eq!(first_header(&store).unwrap().1, "Bearer one");
        // Rotation the way kubelet does it: a new file renamed over the old one.
        let next = dir.join("token.new");
        std::fs::write(&next, "two").unwrap();
        std::fs::rename(&next, &token).unwrap();
        assert_eq!(first_header(&store).unwrap().1, "Bearer two");
        std::fs::remove_file(&token).unwrap();
        assert!(matches!(
            first_header(&store),
            Err(CredentialError::Read { .. })
        ));
        std::fs::remove_dir_all(dir).ok();
    }

    #[cfg(unix)]
    #[test]
    fn files_outside_the_credentials_directory_are_refused() {
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
        assert_eq!(first_header(&store).unwrap().1, "Bearer cloud");
        std::fs::remove_file(secrets.join("token")).unwrap();
        symlink(root.join("sa-token"), secrets.join("token")).unwrap();
        assert!(matches!(
            first_header(&store),
            Err(CredentialError::OutsideDir { .. })
        ));
        std::fs::remove_dir_all(root).ok();
    }
}
