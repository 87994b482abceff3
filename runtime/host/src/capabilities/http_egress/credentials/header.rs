//! The header kinds: `bearerTokenFile` (`Authorization: Bearer`), `basic`
//! (`Authorization: Basic`) and `header` (any named header), their values read from
//! Secret files. Each use checks the files' metadata and reads them again when they
//! changed, so a rotated Secret (kubelet swaps a symlink) takes effect on the next
//! request without reading the files for every request.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{HeaderName, HeaderValue};

use super::files::{Confinement, CredentialError, FileStamp, sensitive};
use super::{Applied, BoxFuture, CredentialKind, Outgoing};
use crate::policy::Credential;

/// A header credential of one rule.
#[derive(Debug)]
pub struct HeaderCredential {
    credential: Credential,
    /// The header it sets (lower case).
    name: HeaderName,
    confinement: Arc<Confinement>,
    cache: Mutex<Option<Cached>>,
}

#[derive(Debug)]
struct Cached {
    stamps: Vec<FileStamp>,
    value: HeaderValue,
}

impl HeaderCredential {
    /// The credential of a `bearerTokenFile`, `basic` or `header` rule; `None` for
    /// other kinds (and for a header name that is not one, which the policy refuses).
    pub fn new(credential: &Credential, confinement: &Arc<Confinement>) -> Option<Self> {
        let name = match credential {
            Credential::Bearer { .. } | Credential::Basic { .. } => http::header::AUTHORIZATION,
            Credential::Header { name, .. } => HeaderName::from_bytes(name.as_bytes()).ok()?,
            _ => return None,
        };
        Some(Self {
            credential: credential.clone(),
            name,
            confinement: confinement.clone(),
            cache: Mutex::new(None),
        })
    }

    /// The header and its value (marked sensitive), read again when its files changed.
    pub fn header(&self) -> Result<(HeaderName, HeaderValue), CredentialError> {
        let stamps = FileStamp::of_all(self.credential.files())?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = cache.as_ref()
            && cached.stamps == stamps
        {
            return Ok((self.name.clone(), cached.value.clone()));
        }
        let value = self.read()?;
        *cache = Some(Cached {
            stamps,
            value: value.clone(),
        });
        Ok((self.name.clone(), value))
    }

    fn read(&self) -> Result<HeaderValue, CredentialError> {
        let files = &self.confinement;
        match &self.credential {
            Credential::Bearer { token_file } => {
                let token = files.read_trimmed(token_file)?;
                sensitive(format!("Bearer {token}"), token_file)
            }
            Credential::Basic {
                username_file,
                password_file,
            } => {
                let user = files.read_trimmed(username_file)?;
                let password = files.read_trimmed(password_file)?;
                let encoded = BASE64.encode(format!("{user}:{password}"));
                sensitive(format!("Basic {encoded}"), password_file)
            }
            Credential::Header { value_file, .. } => {
                sensitive(files.read_trimmed(value_file)?, value_file)
            }
            _ => unreachable!("a header credential is made only for header kinds"),
        }
    }
}

impl CredentialKind for HeaderCredential {
    fn refuses_header(&self, name: &str) -> bool {
        self.name.as_str() == name
    }

    fn apply<'a>(
        &'a self,
        request: &'a mut Outgoing,
        _client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<Applied, String>> {
        let header = self.header().map_err(|e| e.to_string());
        Box::pin(async move {
            let (name, value) = header?;
            request.headers.insert(name, value);
            Ok(None)
        })
    }
}
